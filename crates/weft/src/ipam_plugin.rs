//! The IPAM plugin in full: what the weft binary does under the name `weft-ipam`. The installed
//! `weft-ipam` (crates/ipam-client) hands delegated calls to the node agent, which serves them
//! with the same code (`agent::ipam`), and runs this for every other call. It opens the cluster
//! store itself — the one the config names (the Kubernetes API for `ipam.kubernetes.kubeconfig`,
//! whereabouts' key, else the embedded store in `ipam.stateDir`), else the node agent's store
//! (announced to its delegates: on Kubernetes the API server), else the embedded store in
//! `$WEFT_STATE_DIR` or /var/lib/weft — and lets `weft_ipam` allocate, release, check, report
//! status and collect garbage.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use weft_cni::plugin::{Plugin, PluginRequest};
use weft_cni::{CniError, CniResult, codes};
use weft_store::Store;

use crate::cluster::StoreTarget;

struct IpamPlugin;

/// Run the IPAM plugin as the current process.
pub fn run() -> ExitCode {
    weft_cni::plugin::run(&IpamPlugin)
}

/// The store a weft-ipam call uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IpamStore {
    /// The embedded store in this state directory (`<dir>/store.db`).
    Embedded(PathBuf),
    /// A Kubernetes API server: from a kubeconfig, or the in-cluster config (`None`).
    Kubernetes(Option<PathBuf>),
}

impl IpamStore {
    /// How it is named when compared with the node agent's store (`cluster::store_identity`).
    pub fn identity(&self) -> Option<String> {
        match self {
            Self::Embedded(state) => crate::cluster::store_identity(&StoreTarget::Embedded, state),
            Self::Kubernetes(kubeconfig) => {
                crate::cluster::store_identity(&StoreTarget::Kubernetes(kubeconfig.clone()), Path::new(""))
            }
        }
    }

    /// The store a `cluster::store_identity` names (what the node agent announces to its
    /// delegates in [`crate::protocol::IPAM_DEFAULT_STORE_ENV`]).
    pub fn from_identity(identity: &str) -> Option<Self> {
        if identity == "in-cluster" {
            return Some(Self::Kubernetes(None));
        }
        if let Some(kubeconfig) = identity.strip_prefix("kubeconfig:") {
            return Some(Self::Kubernetes(Some(kubeconfig.into())));
        }
        let store_file = Path::new(identity.strip_prefix("sqlite:")?);
        Some(Self::Embedded(store_file.parent()?.to_path_buf()))
    }
}

/// The store a call's `ipam` section names: `kubernetes.kubeconfig` (whereabouts' key), else
/// `stateDir`; `None` when it names none (the node's default store is meant).
pub fn named_store(ipam: Option<&serde_json::Map<String, serde_json::Value>>) -> Option<IpamStore> {
    let ipam = ipam?;
    let text =
        |value: Option<&serde_json::Value>| value?.as_str().filter(|s| !s.is_empty()).map(PathBuf::from);
    if let Some(kubeconfig) = text(ipam.get("kubernetes").and_then(|k| k.get("kubeconfig"))) {
        return Some(IpamStore::Kubernetes(Some(kubeconfig)));
    }
    text(ipam.get("stateDir")).map(IpamStore::Embedded)
}

/// The node's default store, for a call that names none: the one the node agent announced to
/// its delegates (`announced`, a store identity: on Kubernetes the API server, so addresses
/// stay unique across nodes), else the embedded store in `state_dir_env` or /var/lib/weft.
pub fn default_store(announced: Option<&str>, state_dir_env: Option<PathBuf>) -> IpamStore {
    announced.and_then(IpamStore::from_identity).unwrap_or_else(|| {
        IpamStore::Embedded(state_dir_env.unwrap_or_else(|| PathBuf::from("/var/lib/weft")))
    })
}

/// The store this process uses for `request`.
fn store_for(request: &PluginRequest) -> IpamStore {
    named_store(request.config.ipam()).unwrap_or_else(|| {
        default_store(
            std::env::var(crate::protocol::IPAM_DEFAULT_STORE_ENV)
                .ok()
                .as_deref(),
            std::env::var_os("WEFT_STATE_DIR").map(PathBuf::from),
        )
    })
}

fn open_embedded(state: &Path) -> Result<Arc<dyn Store>, CniError> {
    let path = state.join(crate::cluster::STORE_FILE);
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

async fn open_kubernetes(kubeconfig: Option<PathBuf>) -> Result<Arc<dyn Store>, CniError> {
    let (store, what) = match &kubeconfig {
        Some(path) => (
            weft_store::KubeStore::from_kubeconfig(path, &crate::cluster::Component::Ipam.identity()).await,
            format!("kubeconfig {}", path.display()),
        ),
        None => (
            weft_store::KubeStore::try_default(&crate::cluster::Component::Ipam.identity()).await,
            "in-cluster Kubernetes config".to_string(),
        ),
    };
    store.map(|s| Arc::new(s) as Arc<dyn Store>).map_err(|e| {
        CniError::new(codes::TRY_AGAIN_LATER, format!("weft-ipam: {what}")).with_details(e.to_string())
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

impl IpamPlugin {
    fn call(&self, request: &PluginRequest) -> Result<Option<CniResult>, CniError> {
        let node = std::env::var("WEFT_NODE_NAME").unwrap_or_default();
        let ipam_request = weft_ipam::IpamRequest::from_plugin_request(request, node);
        match store_for(request) {
            IpamStore::Kubernetes(kubeconfig) => block_on(true, async move {
                let store = open_kubernetes(kubeconfig).await?;
                weft_ipam::plugin::handle(ipam_request, store).await
            })?,
            IpamStore::Embedded(state) => {
                let store = open_embedded(&state)?;
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
    use serde_json::json;

    fn ipam(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_call_names_its_store_by_kubeconfig_then_state_dir() {
        let both = ipam(json!({"type": "weft-ipam", "stateDir": "/s", "kubernetes": {"kubeconfig": "/k"}}));
        assert_eq!(
            named_store(Some(&both)),
            Some(IpamStore::Kubernetes(Some("/k".into())))
        );
        let state = ipam(json!({"type": "weft-ipam", "stateDir": "/s", "kubernetes": {"kubeconfig": ""}}));
        assert_eq!(named_store(Some(&state)), Some(IpamStore::Embedded("/s".into())));
        assert_eq!(
            named_store(Some(&ipam(json!({"type": "weft-ipam", "stateDir": ""})))),
            None
        );
        assert_eq!(named_store(Some(&ipam(json!({"type": "weft-ipam"})))), None);
        assert_eq!(named_store(None), None);
    }

    #[test]
    fn the_default_store_is_the_one_the_agent_announced() {
        assert_eq!(
            default_store(Some("in-cluster"), None),
            IpamStore::Kubernetes(None)
        );
        assert_eq!(
            default_store(Some("kubeconfig:/etc/weft/kubeconfig"), Some("/x".into())),
            IpamStore::Kubernetes(Some("/etc/weft/kubeconfig".into()))
        );
        assert_eq!(
            default_store(Some("sqlite:/var/lib/weft-node/store.db"), None),
            IpamStore::Embedded("/var/lib/weft-node".into())
        );
        assert_eq!(
            default_store(Some("garbage"), Some("/x".into())),
            IpamStore::Embedded("/x".into())
        );
        assert_eq!(
            default_store(None, None),
            IpamStore::Embedded("/var/lib/weft".into())
        );
    }

    #[test]
    fn identities_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(crate::cluster::STORE_FILE), b"").unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, b"").unwrap();
        let state = std::fs::canonicalize(dir.path()).unwrap();
        for store in [
            IpamStore::Embedded(state.clone()),
            IpamStore::Kubernetes(Some(state.join("kubeconfig"))),
            IpamStore::Kubernetes(None),
        ] {
            let identity = store.identity().expect("an existing store has an identity");
            assert_eq!(IpamStore::from_identity(&identity), Some(store));
        }
        assert_eq!(IpamStore::Embedded(state.join("missing")).identity(), None);
    }
}
