//! Where a node keeps its per-pod files (serial log, domain XML): a leaf the kubelet and the
//! launcher both use.

use std::path::PathBuf;

use crate::agent::Agent;

/// Per-pod files (serial log, domain XML) of this node.
pub fn pod_dir(agent: &Agent, namespace: &str, name: &str) -> PathBuf {
    agent
        .args
        .cache_dir
        .parent()
        .unwrap_or(&agent.args.cache_dir)
        .join("pods")
        .join(format!("{namespace}_{name}"))
}
