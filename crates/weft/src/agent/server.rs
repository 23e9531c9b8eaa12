//! The agent's HTTP API on its root-only Unix socket: `/cni`, `/delegate`, `/ipam`, `/healthz`,
//! `/readyz`, `/metrics`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::Context;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use weft_cni::CniError;

use super::Agent;
use super::ipam::IpamAnswer;
use crate::protocol::{CniRequest, CniResponse};

/// Shared server state.
pub struct ServerState {
    /// The agent.
    pub agent: Arc<Agent>,
    /// False once shutdown began.
    pub ready: AtomicBool,
}

fn cni_error(err: CniError) -> Response {
    (StatusCode::BAD_REQUEST, Json(err)).into_response()
}

/// Which endpoint a request came to.
#[derive(Clone, Copy)]
enum Endpoint {
    Cni,
    Delegate,
}

/// Run one request, record its metrics (verbs of `/delegate` are prefixed), answer it.
async fn answer(state: &ServerState, request: CniRequest, endpoint: Endpoint) -> Response {
    let verb = request.var("CNI_COMMAND").to_string();
    let started = Instant::now();
    let (verb, outcome) = match endpoint {
        Endpoint::Cni => (verb, state.agent.handle_cni(request).await),
        Endpoint::Delegate => (
            format!("delegate-{verb}"),
            state.agent.handle_delegate(request).await,
        ),
    };
    state
        .agent
        .metrics
        .observe(&verb, outcome.is_ok(), started.elapsed().as_secs_f64());
    match outcome {
        Ok(result) => Json(CniResponse { result }).into_response(),
        Err(err) => cni_error(err),
    }
}

async fn cni(State(state): State<Arc<ServerState>>, Json(request): Json<CniRequest>) -> Response {
    answer(&state, request, Endpoint::Cni).await
}

async fn delegate(State(state): State<Arc<ServerState>>, Json(request): Json<CniRequest>) -> Response {
    answer(&state, request, Endpoint::Delegate).await
}

/// `/ipam`: 200 with what the plugin prints, 400 with its CNI error, 421 when the call's
/// store is not the agent's (`weft_ipam_client::wire::read_answer` reads these).
async fn ipam(State(state): State<Arc<ServerState>>, body: axum::body::Bytes) -> Response {
    let started = Instant::now();
    let (verb, answer) = state.agent.handle_ipam(&body).await;
    let elapsed = started.elapsed().as_secs_f64();
    let json = [(axum::http::header::CONTENT_TYPE, "application/json")];
    match answer {
        IpamAnswer::Answered(outcome) => {
            let ok = outcome.exit_code == 0;
            state.agent.metrics.observe(&format!("ipam-{verb}"), ok, elapsed);
            let status = if ok {
                StatusCode::OK
            } else {
                StatusCode::BAD_REQUEST
            };
            (status, json, outcome.stdout).into_response()
        }
        IpamAnswer::NotServed => StatusCode::MISDIRECTED_REQUEST.into_response(),
    }
}

async fn readyz(State(state): State<Arc<ServerState>>) -> StatusCode {
    if state.ready.load(Ordering::Relaxed) {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

async fn metrics(State(state): State<Arc<ServerState>>) -> String {
    state.agent.metrics.encode()
}

/// The router.
pub fn router(state: Arc<ServerState>) -> axum::Router {
    axum::Router::new()
        .route(crate::protocol::CNI_PATH, post(cni))
        .route(crate::protocol::DELEGATE_PATH, post(delegate))
        .route(weft_ipam_client::wire::PATH, post(ipam))
        .route(
            "/healthz",
            get(|| async { StatusCode::OK }).post(|| async { StatusCode::OK }),
        )
        .route("/readyz", get(readyz).post(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// The read-only endpoints for a TCP listener (no CNI verbs over TCP).
pub fn metrics_router(state: Arc<ServerState>) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { StatusCode::OK }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Bind the socket (directory 0700, socket 0600: root only) and serve until `shutdown` resolves.
pub async fn serve(
    socket: &Path,
    state: Arc<ServerState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let dir = socket.parent().context("socket path has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let _ = std::fs::remove_file(socket);
    let listener =
        tokio::net::UnixListener::bind(socket).with_context(|| format!("bind {}", socket.display()))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    tracing::info!(socket = %socket.display(), "agent listening");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}
