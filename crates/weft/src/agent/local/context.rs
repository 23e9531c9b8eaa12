//! What the in-agent roles of the local cluster see of the agent: the store, this node, and
//! the directories they work in. Narrower than [`crate::agent::Agent`] (no CNI, IPAM, metrics
//! or journal), so a role cannot reach what it has no business with, and it has no import
//! back into the agent (the agent builds it).

use std::path::PathBuf;
use std::sync::Arc;

use weft_store::Store;

/// The agent as the kubelet, sandbox, launcher, guest and migration roles see it.
pub struct AgentContext {
    /// Name of this node.
    pub node: String,
    /// The cluster store.
    pub store: Arc<dyn Store>,
    /// State directory (logs, pids, guest images, the topology).
    pub state_dir: PathBuf,
    /// Directory of CNI configs (the generated `00-weft.conflist` pod sandboxes run).
    pub conf_dir: PathBuf,
    /// Directories searched for CNI plugins, in order.
    pub cni_bin_dirs: Vec<PathBuf>,
    /// This node's per-pod files (serial log, domain XML, launcher record): see
    /// [`crate::agent::local::pods::pod_dir`].
    pub pods_dir: PathBuf,
    /// Wire everything but boot no guests (`weft up --no-guests`).
    pub no_guests: bool,
}

/// The node's pods directory: `pods` next to the agent's cache directory (both in the node's
/// directory of the local cluster).
pub fn pods_dir(cache_dir: &std::path::Path) -> PathBuf {
    cache_dir.parent().unwrap_or(cache_dir).join("pods")
}
