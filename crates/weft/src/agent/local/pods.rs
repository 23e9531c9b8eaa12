//! Where a node keeps its per-pod files (serial log, domain XML): a leaf the kubelet and the
//! launcher both use.

use std::path::{Path, PathBuf};

use crate::agent::local::context::AgentContext;

/// Per-pod files (serial log, domain XML) of this node.
pub fn pod_dir(agent: &AgentContext, namespace: &str, name: &str) -> PathBuf {
    pod_dir_in(&agent.pods_dir, namespace, name)
}

/// Per-pod files of the node whose pods directory is `pods_dir` (e.g. a migration source's).
pub fn pod_dir_in(pods_dir: &Path, namespace: &str, name: &str) -> PathBuf {
    pods_dir.join(format!("{namespace}_{name}"))
}
