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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        agent: crate::agent::AgentArgs,
    }

    #[test]
    fn pods_sit_next_to_the_cache_dir() {
        assert_eq!(
            pods_dir(Path::new("/state/node1/cache")),
            Path::new("/state/node1/pods")
        );
        // A cache dir with no parent keeps its pods inside.
        assert_eq!(pods_dir(Path::new("/")), Path::new("/pods"));
    }

    #[test]
    fn no_guests_is_an_option_of_the_local_agent_only() {
        let local = Cli::try_parse_from(["weft", "--node", "n1", "--local", "--no-guests"]).unwrap();
        assert!(local.agent.local && local.agent.no_guests);
        let plain = Cli::try_parse_from(["weft", "--node", "n1", "--local"]).unwrap();
        assert!(!plain.agent.no_guests, "guests boot unless told otherwise");
        let refused = Cli::try_parse_from(["weft", "--node", "n1", "--no-guests"])
            .err()
            .expect("--no-guests without --local is refused");
        assert!(refused.to_string().contains("--local"), "{refused}");
    }
}
