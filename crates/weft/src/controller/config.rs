//! The cluster's KubeVirt configuration as the controller reads it: the `KubeVirt` CR in the
//! store (registered binding plugins such as `passt`, feature gates, the default interface),
//! KubeVirt's defaults when there is none.

use std::sync::Arc;

use weft_store::{Api, ListOptions, Store};
use weft_vm::ClusterConfig;
use weft_vm::api::KubeVirt;

/// The effective configuration: the oldest `KubeVirt` object of any namespace (KubeVirt serves
/// only one install and leaves later CRs unused), or the defaults (also when the API has no
/// KubeVirt CRD).
pub async fn load(store: &Arc<dyn Store>) -> anyhow::Result<ClusterConfig> {
    let mut all = match Api::<KubeVirt>::all(store.clone())
        .list(&ListOptions::default())
        .await
    {
        // A Kubernetes cluster without KubeVirt's CRD: KubeVirt's defaults.
        Err(e) if e.is_not_served() => Vec::new(),
        other => other?,
    };
    all.sort_by(|a, b| {
        (
            &a.metadata.creation_timestamp,
            &a.metadata.namespace,
            &a.metadata.name,
        )
            .cmp(&(
                &b.metadata.creation_timestamp,
                &b.metadata.namespace,
                &b.metadata.name,
            ))
    });
    Ok(all.first().map(ClusterConfig::from_kubevirt).unwrap_or_default())
}
