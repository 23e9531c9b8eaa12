//! Where a node keeps its per-pod files (serial log, domain XML): a leaf the kubelet and the
//! launcher both use.

use std::path::PathBuf;

use crate::agent::local::context::AgentContext;

/// Per-pod files (serial log, domain XML) of this node.
pub fn pod_dir(agent: &AgentContext, namespace: &str, name: &str) -> PathBuf {
    agent.pods_dir.join(format!("{namespace}_{name}"))
}
