//! The agent's HTTP API on its root-only Unix socket: `/cni-call`, `/cni`, `/delegate`, `/ipam`, `/healthz`,
//! `/readyz`, `/metrics`; and the read-only endpoints over TCP. Both are served by one accept
//! loop that caps connections, times out slow request heads and bodies, and limits body size,
//! answering each refusal with a CNI error the shim hands to the runtime.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use weft_cni::{CniError, codes};

use super::Agent;
use super::ipam::IpamAnswer;
use super::limits::{self, Limits};
use super::metrics::Endpoint;
use crate::protocol::{CniRequest, CniResponse};

/// How long in-flight requests may finish after SIGTERM before the agent exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// How often refused connections are logged (with their count).
const BUSY_LOG_EVERY: Duration = Duration::from_secs(10);

/// Shared server state.
pub struct ServerState {
    /// The agent.
    pub agent: Arc<Agent>,
    /// False once shutdown began.
    pub ready: AtomicBool,
    /// The server's limits.
    pub limits: Limits,
}

fn cni_error(err: CniError) -> Response {
    cni_error_with(StatusCode::BAD_REQUEST, err)
}

fn cni_error_with(status: StatusCode, err: CniError) -> Response {
    (status, Json(err)).into_response()
}

/// A refusal before the request was read: the status and the CNI error (no version yet).
type Refusal = (StatusCode, CniError);

/// The refusal as a `/cni` or `/delegate` answer (the weft binary's shim writes the error in
/// the config's version).
fn refused(refusal: Refusal) -> Response {
    cni_error_with(refusal.0, refusal.1)
}

/// The refusal as a `/cni-call` or `/ipam` answer: a static client prints a 400's body as it
/// is, so that error is complete (the config was not read: the newest version); other statuses
/// go to the weft binary, which writes them in the config's version.
fn refused_raw((status, mut error): Refusal) -> Response {
    if status == StatusCode::BAD_REQUEST && error.cni_version.is_empty() {
        error.cni_version = weft_cni::CniVersion::LATEST.to_string();
    }
    cni_error_with(status, error)
}

/// The request body, within the size limit and the read timeout; or why not.
async fn read_body(
    limits: Limits,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<axum::body::Bytes, Refusal> {
    let announced = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    limits::check_body_size(announced, limits.max_body).map_err(|e| (StatusCode::PAYLOAD_TOO_LARGE, e))?;
    match tokio::time::timeout(limits.read_timeout, axum::body::to_bytes(body, limits.max_body)).await {
        Err(_) => Err((
            StatusCode::REQUEST_TIMEOUT,
            limits::body_timeout(limits.read_timeout),
        )),
        // Over the limit (a chunked body announces no length) or cut off by the client.
        Ok(Err(e)) => Err((
            StatusCode::BAD_REQUEST,
            CniError::new(
                codes::IO_FAILURE,
                format!("cannot read the request body (limit {} bytes)", limits.max_body),
            )
            .with_details(e.to_string()),
        )),
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

/// Run a CNI call (a weft-ipam one too) to its end even when its caller goes away. A runtime
/// that gives up (its timeout, a killed shim) closes the connection, and the server then drops
/// the handler: a call cut at an await would leave its delegates running on a blocking thread
/// with no record of what they attach, and its sandbox's lock let go under them. Run to the
/// end, the call records what it attached and keeps the lock; the runtime's DEL waits for it
/// (`records::Sandboxes`) and tears all of it down.
async fn to_the_end<T: Send + 'static>(call: impl Future<Output = T> + Send + 'static) -> T {
    match tokio::spawn(call).await {
        Ok(value) => value,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("CNI call task ended without an answer: {e}"),
    }
}

/// Read and decode a `/cni` or `/delegate` request, run it, record its metrics, answer it.
async fn answer(
    state: &ServerState,
    headers: &HeaderMap,
    body: axum::body::Body,
    endpoint: Endpoint,
) -> Response {
    let bytes = match read_body(state.limits, headers, body).await {
        Ok(bytes) => bytes,
        Err(refusal) => return refused(refusal),
    };
    let request: CniRequest = match serde_json::from_slice(&bytes) {
        Ok(request) => request,
        Err(e) => {
            return cni_error(
                CniError::new(
                    codes::DECODING_FAILURE,
                    "request to the weft agent is not valid JSON",
                )
                .with_details(e.to_string()),
            );
        }
    };
    let verb = request.var("CNI_COMMAND").to_string();
    let started = Instant::now();
    let agent = state.agent.clone();
    let outcome = to_the_end(async move {
        match endpoint {
            Endpoint::Delegate => agent.handle_delegate(request).await,
            _ => agent.handle_cni(request).await,
        }
    })
    .await;
    state
        .agent
        .metrics
        .observe(endpoint, &verb, outcome.is_ok(), started.elapsed().as_secs_f64());
    match outcome {
        Ok(result) => Json(CniResponse { result }).into_response(),
        Err(err) => cni_error(err),
    }
}

async fn cni(State(state): State<Arc<ServerState>>, headers: HeaderMap, body: axum::body::Body) -> Response {
    answer(&state, &headers, body, Endpoint::Cni).await
}

async fn delegate(
    State(state): State<Arc<ServerState>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    answer(&state, &headers, body, Endpoint::Delegate).await
}

/// `/cni-call`: the static shim's call (`weft_plugin_client::wire`); 200 with what the shim
/// prints, 400 with its CNI error (complete: the shim prints it as it is).
async fn cni_call(
    State(state): State<Arc<ServerState>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let body = match read_body(state.limits, &headers, body).await {
        Ok(bytes) => bytes,
        Err(refusal) => return refused_raw(refusal),
    };
    let started = Instant::now();
    let agent = state.agent.clone();
    let (verb, outcome) = to_the_end(async move { agent.handle_cni_call(&body).await }).await;
    let ok = outcome.exit_code == 0;
    state
        .agent
        .metrics
        .observe(Endpoint::Cni, &verb, ok, started.elapsed().as_secs_f64());
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    };
    let json = [(axum::http::header::CONTENT_TYPE, "application/json")];
    (status, json, outcome.stdout).into_response()
}

/// `/ipam`: 200 with what the plugin prints, 400 with its CNI error, 421 when the call's
/// store is not the agent's (`weft_plugin_client::wire::read_answer` reads these).
async fn ipam(State(state): State<Arc<ServerState>>, headers: HeaderMap, body: axum::body::Body) -> Response {
    let body = match read_body(state.limits, &headers, body).await {
        Ok(bytes) => bytes,
        Err(refusal) => return refused_raw(refusal),
    };
    let started = Instant::now();
    let agent = state.agent.clone();
    let (verb, answer) = to_the_end(async move { agent.handle_ipam(&body).await }).await;
    let elapsed = started.elapsed().as_secs_f64();
    let json = [(axum::http::header::CONTENT_TYPE, "application/json")];
    match answer {
        IpamAnswer::Answered(outcome) => {
            let ok = outcome.exit_code == 0;
            state.agent.metrics.observe(Endpoint::Ipam, &verb, ok, elapsed);
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
        .route(weft_plugin_client::wire::CNI_CALL_PATH, post(cni_call))
        .route(crate::protocol::DELEGATE_PATH, post(delegate))
        .route(weft_plugin_client::wire::PATH, post(ipam))
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

/// Bind the socket (see `socket::prepare`: a directory weft creates is 0700, an existing one
/// must be root's and not writable by others; only a stale socket is replaced), make it 0600
/// (root only), serve until `stop` turns true, then remove it.
pub async fn serve(
    socket: &Path,
    state: Arc<ServerState>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    super::socket::prepare(socket)?;
    let listener =
        tokio::net::UnixListener::bind(socket).with_context(|| format!("bind {}", socket.display()))?;
    let bound = super::socket::BoundSocket::new(socket)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod {}", socket.display()))?;
    tracing::info!(socket = %socket.display(), "agent listening");
    let limits = state.limits;
    let ready = state.clone();
    let mut stopping = stop.clone();
    // /readyz fails as soon as shutdown begins.
    tokio::spawn(async move {
        let _ = stopping.wait_for(|s| *s).await;
        ready.ready.store(false, Ordering::Relaxed);
    });
    serve_loop(listener, router(state), limits, stop).await;
    bound.remove();
    tracing::info!(socket = %socket.display(), "agent stopped, socket removed");
    Ok(())
}

/// Serve the read-only endpoints over TCP until `stop` turns true.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    state: Arc<ServerState>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let limits = state.limits;
    serve_loop(listener, metrics_router(state), limits, stop).await;
}

/// A listener of the accept loop.
trait Accept: Send + 'static {
    /// A connection.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection.
    fn next(&self) -> impl Future<Output = std::io::Result<Self::Io>> + Send;
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn next(&self) -> std::io::Result<Self::Io> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn next(&self) -> std::io::Result<Self::Io> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

/// Accept connections until `stop`: up to `limits.max_connections` are served at once (one
/// request each, its head within the read timeout); the ones over the cap are answered "busy"
/// and closed at once, so idle connections cannot starve CNI requests or exhaust descriptors.
/// On stop, in-flight requests get [`SHUTDOWN_GRACE`] to finish.
async fn serve_loop<L: Accept>(
    listener: L,
    router: axum::Router,
    limits: Limits,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let (close_tx, close_rx) = tokio::sync::watch::channel(());
    let mut tasks = tokio::task::JoinSet::new();
    let (mut refused, mut last_busy_log) = (0u64, None);
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            accepted = listener.next() => accepted,
        };
        let io = match accepted {
            Ok(io) => io,
            Err(e) => {
                // Out of descriptors or a transient error: back off briefly, keep serving.
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let (router, close) = (router.clone(), close_rx.clone());
                tasks.spawn(async move {
                    serve_connection(io, router, limits, close).await;
                    drop(permit);
                });
            }
            Err(_) => {
                // Logged at most every BUSY_LOG_EVERY with a count: a flood must not flood logs.
                refused += 1;
                if last_busy_log.is_none_or(|at: Instant| at.elapsed() >= BUSY_LOG_EVERY) {
                    tracing::warn!(
                        limit = limits.max_connections,
                        refused,
                        "connections refused: agent busy"
                    );
                    refused = 0;
                    last_busy_log = Some(Instant::now());
                }
                tasks.spawn(reject_busy(io, limits.max_connections));
            }
        }
    }
    drop(close_rx);
    drop(close_tx);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("in-flight requests still running after {SHUTDOWN_GRACE:?}: stopping anyway");
    }
}

/// Serve one connection (one request) until done, or until `close` says the agent stops.
async fn serve_connection<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: I,
    router: axum::Router,
    limits: Limits,
    mut close: tokio::sync::watch::Receiver<()>,
) {
    let service = hyper_util::service::TowerToHyperService::new(router);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.read_timeout)
        .keep_alive(false);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!("connection: {e}");
            }
            return;
        }
        _ = close.changed() => conn.as_mut().graceful_shutdown(),
    }
    if let Err(e) = conn.await {
        tracing::debug!("connection: {e}");
    }
}

/// Answer a connection over the cap with HTTP 503 and the "busy" CNI error, then close it.
async fn reject_busy<I: AsyncWrite + Unpin>(mut io: I, max_connections: usize) {
    let body = serde_json::to_vec(&limits::busy_error(max_connections)).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        io.write_all(head.as_bytes()).await?;
        io.write_all(&body).await?;
        io.shutdown().await
    })
    .await;
}
