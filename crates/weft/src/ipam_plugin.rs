//! The IPAM plugin in full: what the weft binary does under the name `weft-ipam`. The installed
//! `weft-ipam` (crates/ipam-client) hands delegated calls to the node agent, which serves them
//! with the same code (`agent::ipam`), and runs this for every other call. It opens the cluster
//! store itself — the Kubernetes API when the config names a
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

/// How the store this request names is identified (`cluster::store_identity`): the node agent
/// serves a call only when it names the agent's own store.
pub fn store_identity(request: &PluginRequest) -> Option<String> {
    let target = match kubeconfig(request) {
        Some(path) => crate::cluster::StoreTarget::Kubernetes(Some(path)),
        None => crate::cluster::StoreTarget::Embedded,
    };
    crate::cluster::store_identity(&target, &state_dir(request))
}

impl IpamPlugin {
    fn call(&self, request: &PluginRequest) -> Result<Option<CniResult>, CniError> {
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
