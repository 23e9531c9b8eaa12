//! The dynamic-networks role (what multus-dynamic-networks-controller does, inside the agent):
//! every pod this node attached (its cache record names the sandbox and netns, so no CRI call
//! is needed) follows its `k8s.v1.cni.cncf.io/networks` annotation: new elements are
//! hot-plugged, removed ones unplugged, network-status kept current.

use std::sync::Arc;
use std::time::Duration;

use weft_store::Api;

use super::Agent;
use crate::kinds::Pod;

/// How often pods are compared with their annotation (reads come from the store or its caches).
const SWEEP: Duration = Duration::from_millis(500);

/// The meta-plugin config a runtime passes for this node's conflist (its first plugin with the
/// list's name and cniVersion).
pub fn runtime_config_bytes(agent: &Agent) -> anyhow::Result<Vec<u8>> {
    let path = agent.args.conf_dir.join(weft_meta::install::WEFT_CONFLIST_NAME);
    let list: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    let mut plugin = list["plugins"][0].clone();
    if let Some(map) = plugin.as_object_mut() {
        map.insert("name".into(), list["name"].clone());
        map.insert("cniVersion".into(), list["cniVersion"].clone());
    }
    Ok(serde_json::to_vec(&plugin)?)
}

/// Bring every attached pod in line with its annotation once.
pub async fn sweep(agent: &Agent) -> anyhow::Result<usize> {
    let Ok(config) = runtime_config_bytes(agent) else {
        return Ok(0);
    };
    let mut changes = 0;
    for record in super::cni::cached_records(agent) {
        let (ns, name) = (&record.k8s.pod_namespace, &record.k8s.pod_name);
        // An ADD still running (results not recorded yet) or one that failed owns the pod.
        let attached = !record.delegates.is_empty()
            && record.results.len() == record.delegates.len()
            && record.results.iter().all(Option::is_some);
        if name.is_empty() || !attached {
            continue;
        }
        let ns = if ns.is_empty() { "default" } else { ns.as_str() };
        let Some(pod) = Api::<Pod>::namespaced(agent.store.clone(), ns).get(name).await? else {
            continue;
        };
        if pod
            .metadata
            .uid
            .as_deref()
            .is_some_and(|uid| !record.k8s.pod_uid.is_empty() && uid != record.k8s.pod_uid)
        {
            continue;
        }
        match super::cni::reconcile_pod_networks(agent, &config, &record.container_id, &record.netns, &pod)
            .await
        {
            Ok(n) => changes += n,
            Err(e) => tracing::warn!(pod = %format!("{ns}/{name}"), "dynamic networks: {}", e.msg),
        }
    }
    Ok(changes)
}

/// Run sweeps until `stop`.
pub async fn run(agent: Arc<Agent>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        if let Err(e) = sweep(&agent).await {
            tracing::warn!("dynamic networks: {e:#}");
        }
        tokio::select! {
            _ = tokio::time::sleep(SWEEP) => {}
            _ = stop.changed() => return,
        }
    }
}
