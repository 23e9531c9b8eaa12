//! `weft-ipam`: the IPAM plugin. Run by a delegate of the node agent, it hands the request to the
//! agent when the agent serves the store its config names (`/ipam`, see `agent::ipam`).
//! Otherwise it opens the cluster store itself — the Kubernetes API when the config names a
//! kubeconfig (`ipam.kubernetes.kubeconfig`, whereabouts' key), else the embedded store
//! (`ipam.stateDir`, else `$WEFT_STATE_DIR`, else /var/lib/weft) — and lets `weft_ipam`
//! allocate, release, check, report status and collect garbage.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use weft_cni::plugin::{Plugin, PluginRequest};
use weft_cni::{CniError, CniResult, codes};
use weft_store::Store;

struct IpamPlugin;

/// Run the IPAM plugin as the current process.
pub fn run() -> ExitCode {
    weft_cni::plugin::run(&IpamPlugin)
}

fn state_dir(request: &PluginRequest) -> PathBuf {
    request
        .config
        .ipam()
        .and_then(|ipam| ipam.get("stateDir"))
        .and_then(|v| v.as_str())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("WEFT_STATE_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/lib/weft"))
}

fn open_store(request: &PluginRequest) -> Result<Arc<dyn Store>, CniError> {
    let path = state_dir(request).join(crate::cluster::STORE_FILE);
    // A plugin process makes a handful of calls and exits: one connection, no extra threads.
    let options = weft_store::SqliteOptions {
        single_connection: true,
        ..weft_store::SqliteOptions::default()
    };
    weft_store::SqliteStore::open_with(&path, options)
        .map(|s| Arc::new(s) as Arc<dyn Store>)
        .map_err(|e| {
            CniError::new(
                codes::TRY_AGAIN_LATER,
                format!("weft-ipam: cannot open store {}", path.display()),
            )
            .with_details(e.to_string())
        })
}

/// Run `future` on a current-thread runtime; `with_io` for the Kubernetes client (the embedded
/// store only needs timers, and each process start pays for what the runtime sets up).
fn block_on<T>(with_io: bool, future: impl std::future::Future<Output = T>) -> Result<T, CniError> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    if with_io {
        builder.enable_all();
    } else {
        builder.enable_time();
    }
    let runtime = builder.build().map_err(|e| {
        CniError::new(codes::IO_FAILURE, "weft-ipam: cannot start the async runtime")
            .with_details(e.to_string())
    })?;
    Ok(runtime.block_on(future))
}

fn kubeconfig(request: &PluginRequest) -> Option<PathBuf> {
    let ipam = request.config.ipam()?;
    ipam.get("kubernetes")?
        .get("kubeconfig")?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
}

/// The agent socket to hand this request to: set by the agent for its delegates, and only when
/// the agent serves the very store this request's config names.
fn agent_socket(request: &PluginRequest) -> Option<PathBuf> {
    let target = match kubeconfig(request) {
        Some(path) => crate::cluster::StoreTarget::Kubernetes(Some(path)),
        None => crate::cluster::StoreTarget::Embedded,
    };
    choose_agent(
        std::env::var_os(crate::protocol::IPAM_SOCKET_ENV).map(PathBuf::from),
        std::env::var(crate::protocol::IPAM_STORE_ENV).ok(),
        crate::cluster::store_identity(&target, &state_dir(request)),
    )
}

/// The agent's socket when the agent announced one and serves `ours`, the store this request
/// names (`None` when it cannot be named: then no agent serves it).
fn choose_agent(
    socket: Option<PathBuf>,
    agents_store: Option<String>,
    ours: Option<String>,
) -> Option<PathBuf> {
    let (socket, agents_store, ours) = (socket?, agents_store?, ours?);
    (agents_store == ours).then_some(socket)
}

/// Let the agent answer; `None` when no agent answered (the plugin then does the work itself:
/// every verb is idempotent, so a request the agent handled before dying is safe to redo).
fn through_agent(
    socket: &std::path::Path,
    request: &PluginRequest,
) -> Option<Result<Option<CniResult>, CniError>> {
    let env = std::env::vars().filter(|(k, _)| k.starts_with("CNI_")).collect();
    let body = crate::protocol::CniRequest::new(env, &request.config.to_bytes());
    match crate::shim::call_agent(socket, crate::protocol::IPAM_PATH, &body) {
        Ok(None) => Some(Ok(None)),
        Ok(Some(value)) => Some(weft_cni::result_from_value(value).map(Some).map_err(|e| {
            CniError::new(
                codes::DECODING_FAILURE,
                "weft agent returned an invalid IPAM result",
            )
            .with_details(e.to_string())
        })),
        Err(crate::shim::AgentCall::Failed(error)) => Some(Err(error)),
        Err(crate::shim::AgentCall::Unreachable(_)) => None,
    }
}

impl IpamPlugin {
    fn call(&self, request: &PluginRequest) -> Result<Option<CniResult>, CniError> {
        if let Some(answer) = agent_socket(request).and_then(|socket| through_agent(&socket, request)) {
            return answer;
        }
        let node = std::env::var("WEFT_NODE_NAME").unwrap_or_default();
        let ipam_request = weft_ipam::IpamRequest::from_plugin_request(request, node);
        match kubeconfig(request) {
            Some(path) => block_on(true, async move {
                let store = weft_store::KubeStore::from_kubeconfig(&path).await.map_err(|e| {
                    CniError::new(
                        codes::TRY_AGAIN_LATER,
                        format!("weft-ipam: kubeconfig {}", path.display()),
                    )
                    .with_details(e.to_string())
                })?;
                weft_ipam::plugin::handle(ipam_request, Arc::new(store)).await
            })?,
            None => {
                let store = open_store(request)?;
                block_on(false, weft_ipam::plugin::handle(ipam_request, store))?
            }
        }
    }
}

impl Plugin for IpamPlugin {
    fn add(&self, request: &PluginRequest) -> Result<CniResult, CniError> {
        self.call(request)?
            .ok_or_else(|| CniError::new(codes::IO_FAILURE, "weft-ipam: ADD produced no result"))
    }
    fn del(&self, request: &PluginRequest) -> Result<(), CniError> {
        self.call(request).map(|_| ())
    }
    fn check(&self, request: &PluginRequest) -> Result<(), CniError> {
        self.call(request).map(|_| ())
    }
    fn status(&self, request: &PluginRequest) -> Result<(), CniError> {
        self.call(request).map(|_| ())
    }
    fn gc(&self, request: &PluginRequest) -> Result<(), CniError> {
        self.call(request).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_go_to_an_agent_only_when_it_serves_their_store() {
        let socket = || Some(PathBuf::from("/run/weft/weft.sock"));
        let store = |s: &str| Some(s.to_string());
        assert_eq!(
            choose_agent(
                socket(),
                store("sqlite:/var/lib/weft/store.db"),
                store("sqlite:/var/lib/weft/store.db")
            ),
            socket()
        );
        assert_eq!(
            choose_agent(
                socket(),
                store("sqlite:/var/lib/weft/store.db"),
                store("sqlite:/tmp/other/store.db")
            ),
            None,
            "another store"
        );
        assert_eq!(
            choose_agent(
                socket(),
                store("in-cluster"),
                store("kubeconfig:/etc/cni/net.d/weft.kubeconfig")
            ),
            None
        );
        assert_eq!(
            choose_agent(socket(), None, store("in-cluster")),
            None,
            "no store announced"
        );
        assert_eq!(
            choose_agent(None, store("in-cluster"), store("in-cluster")),
            None,
            "no socket"
        );
        assert_eq!(
            choose_agent(socket(), store("sqlite:/x/store.db"), None),
            None,
            "our store cannot be named (no such file yet)"
        );
    }
}
