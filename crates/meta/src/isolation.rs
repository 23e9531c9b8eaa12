//! Namespace isolation (docs/upstream/multus.md §5; `vectors/multus/09-namespace-isolation.json`).

use crate::config::MetaConfig;

/// A reference that isolation forbids.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "GetNetworkDelegates: namespace isolation enabled, annotation violates permission, pod is in namespace {pod_namespace} but refers to target namespace {target_namespace} (network {target_namespace}/{network})"
)]
pub struct IsolationError {
    /// The pod's namespace.
    pub pod_namespace: String,
    /// The referenced namespace.
    pub target_namespace: String,
    /// The referenced network.
    pub network: String,
}

/// With `namespaceIsolation`, a pod may reference only its own namespace and the global
/// (non-isolated) namespaces.
pub fn check_isolation(
    config: &MetaConfig,
    pod_namespace: &str,
    target_namespace: &str,
    network: &str,
) -> Result<(), IsolationError> {
    if !config.namespace_isolation
        || target_namespace == pod_namespace
        || config
            .non_isolated_namespaces
            .iter()
            .any(|n| n == target_namespace)
    {
        return Ok(());
    }
    Err(IsolationError {
        pod_namespace: pod_namespace.into(),
        target_namespace: target_namespace.into(),
        network: network.into(),
    })
}
