//! The dynamic-networks role (what multus-dynamic-networks-controller does, inside the agent):
//! every pod this node attached (its cache record names the sandbox and netns, so no CRI call
//! is needed) follows its `k8s.v1.cni.cncf.io/networks` annotation: new elements are
//! hot-plugged, removed ones unplugged, network-status kept current.
//!
//! Watch-driven on the reconciler framework ([`weft_store::reconcile`]): the watch of this
//! node's pods → a key per pod → [`reconcile_pod`] from the watch cache, with exponential
//! backoff on errors (logged once per interval with a count) and a resync of every attached
//! pod every [`RESYNC`]. An ADD's network-status write is a change of its pod, so a pod whose
//! annotation changed while its ADD ran is looked at again when the ADD is done. With nothing
//! changing the agent reads nothing and makes no request for hot-plug.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use weft_store::reconcile::{self, Action, Backoff, Change, Resync};
use weft_store::{Api, CachedStore, ListOptions, Resource, Store, WatchEvent};

use super::Agent;
use crate::kinds::Pod;

/// Every attached pod is compared with its annotation at least this often, changes or not.
pub const RESYNC: Duration = Duration::from_secs(180);

/// Error backoff per pod: 1 s, doubling, at most 5 minutes.
const BACKOFF: Backoff = Backoff {
    initial: Duration::from_secs(1),
    max: Duration::from_secs(300),
};

/// A pod (namespace, name): what one hot-plug reconcile is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodKey(pub String, pub String);

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.0, self.1)
    }
}

/// The key a change touches (pure): a pod created or changed; nothing for a deleted pod (its
/// DEL owns it) or another kind (the agent's cache also watches NADs).
pub fn key_for(change: &Change) -> Option<PodKey> {
    if change.ty.kind != Pod::KIND || matches!(change.event, WatchEvent::Deleted(_)) {
        return None;
    }
    let pod = change.event.object();
    let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    Some(PodKey(ns, pod.metadata.name.clone()))
}

/// The pods this node attached (from the attachment records: no store read), for the resync.
/// The records are read on the blocking pool.
async fn attached_pods(agent: &Agent) -> Vec<PodKey> {
    let records = match super::cni::cached_records_of(agent).await {
        Ok(records) => records,
        Err(e) => {
            tracing::warn!("dynamic networks resync: {e}");
            return Vec::new();
        }
    };
    let mut keys: Vec<PodKey> = records
        .into_iter()
        .filter(|r| !r.k8s.pod_name.is_empty())
        .map(|r| PodKey(r.pod_namespace().to_string(), r.k8s.pod_name))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The meta-plugin config a runtime passes for the conflist in `conf_dir` (its first plugin
/// with the list's name and cniVersion). Reads a file: call it on a blocking thread.
pub fn runtime_config_bytes(conf_dir: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let path = conf_dir.join(weft_meta::install::WEFT_CONFLIST_NAME);
    let list: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    let mut plugin = list["plugins"][0].clone();
    if let Some(map) = plugin.as_object_mut() {
        map.insert("name".into(), list["name"].clone());
        map.insert("cniVersion".into(), list["cniVersion"].clone());
    }
    Ok(serde_json::to_vec(&plugin)?)
}

/// Bring one pod's attachments on this node in line with its annotation; returns the number
/// of changes. The pod is read from `reads` (the watch cache).
pub async fn reconcile_pod(agent: &Agent, reads: &Arc<dyn Store>, key: &PodKey) -> anyhow::Result<usize> {
    let PodKey(ns, name) = key;
    // The pod's attachment records (decoded ones from memory: this runs on every change of
    // every pod of the node).
    let (cache_dir, pod_ns, pod_name) = (agent.args.cache_dir.clone(), ns.clone(), name.clone());
    let records =
        crate::sys::blocking(move || super::records::of_pod(&cache_dir, &pod_ns, &pod_name)).await?;
    if records.is_empty() {
        return Ok(0);
    }
    let Some(pod) = Api::<Pod>::namespaced(reads.clone(), ns).get(name).await? else {
        return Ok(0);
    };
    let status = pod.metadata.annotation(weft_netconf::NETWORK_STATUS_ANNOTATION);
    let records: Vec<_> = records
        .into_iter()
        .filter(|r| r.hotplug_ready(pod.metadata.uid.as_deref(), status))
        .collect();
    if records.is_empty() {
        return Ok(0);
    }
    let conf_dir = agent.args.conf_dir.clone();
    let config = crate::sys::blocking(move || runtime_config_bytes(&conf_dir)).await?;
    let mut changes = 0;
    for record in records {
        let Ok(config) = &config else {
            return Ok(changes);
        };
        match super::cni::reconcile_pod_networks(agent, config, &record.container_id, &record.netns, &pod)
            .await
        {
            Ok(n) => changes += n,
            Err(e) => {
                let message = match e.details.is_empty() {
                    true => e.msg.clone(),
                    false => format!("{}: {}", e.msg, e.details),
                };
                super::pod_events::hotplug_failed(agent, ns, name, &message);
                anyhow::bail!("dynamic networks: {message}");
            }
        }
    }
    Ok(changes)
}

/// Run the hot-plug reconciler until `stop`, from the moment `synced` is true (the watch caches
/// hold this node's pods: a pass before that, e.g. the resync's, would read each attached pod
/// from the API server). `changes` are the agent's pod cache's (on Kubernetes); without them
/// (the local cluster's embedded store) the role watches this node's pods through a cache of
/// its own.
pub async fn run(
    agent: Arc<Agent>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut synced: tokio::sync::watch::Receiver<bool>,
    changes: Option<tokio::sync::mpsc::UnboundedReceiver<Change>>,
) {
    tokio::select! {
        _ = synced.wait_for(|s| *s) => {}
        _ = stop.changed() => return,
    }
    let (reads, changes): (Arc<dyn Store>, _) = match changes {
        Some(changes) => (agent.store.clone(), changes),
        None => {
            let (cache, changes) = CachedStore::with_changes(
                agent.store.clone(),
                vec![(
                    Pod::resource_type(),
                    ListOptions::default().field("spec.nodeName", &agent.args.node),
                )],
            );
            (Arc::new(cache), changes)
        }
    };
    let for_resync = agent.clone();
    let config = reconcile::Config {
        name: "dynamic networks",
        backoff: BACKOFF,
        resyncs: vec![Resync::from_future(RESYNC, move || {
            let agent = for_resync.clone();
            Box::pin(async move { attached_pods(&agent).await })
        })],
        on_idle: None,
    };
    reconcile::run(
        changes,
        |change: &Change| key_for(change).into_iter().collect(),
        move |key: PodKey| {
            let (agent, reads) = (agent.clone(), reads.clone());
            Box::pin(async move {
                reconcile_pod(&agent, &reads, &key).await?;
                Ok::<_, anyhow::Error>(Action::Done)
            })
        },
        config,
        async move {
            let _ = stop.changed().await;
        },
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn change(event: fn(weft_store::Object) -> WatchEvent, kind: &str) -> Change {
        let object: weft_store::Object = serde_json::from_value(json!({"apiVersion": "v1", "kind": kind,
            "metadata": {"name": "web", "namespace": "ns"}}))
        .unwrap();
        let ty = match kind {
            "Pod" => Pod::resource_type(),
            _ => <weft_netconf::NetworkAttachmentDefinition as Resource>::resource_type(),
        };
        Change {
            ty,
            event: event(object),
        }
    }

    /// Issue 9: with nothing changing, the hot-plug role reads nothing (not even its cache) and
    /// the API sees only the cache's list and watch; a change of an attached pod's networks is
    /// looked at within moments (the root tests in tests/hotplug.rs and tests/shim_agent.rs
    /// plug and unplug real interfaces; this one counts reads).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_agent_reads_nothing_and_a_networks_change_is_looked_at_promptly() {
        use std::time::Instant;
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(weft_store::double::StoreDouble::default());
        let pods = Pod::resource_type();
        let pod: weft_store::Object = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {"nodeName": "n1"}}))
        .unwrap();
        backend.create(&pods, pod).await.unwrap();
        // The attachment record of the pod's sandbox (an ADD in flight: nothing to plug yet).
        std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        let record = weft_meta::CacheRecord {
            version: weft_meta::CACHE_VERSION,
            container_id: "c1".into(),
            netns: "/var/run/netns/none".into(),
            ifname: "eth0".into(),
            k8s: weft_meta::K8sArgs {
                pod_namespace: "default".into(),
                pod_name: "web".into(),
                pod_uid: "u1".into(),
                ..Default::default()
            },
            delegates: Vec::new(),
            results: Vec::new(),
            network_status: None,
            added_ms: None,
        };
        std::fs::write(
            dir.path().join("cache/c1.json"),
            serde_json::to_vec(&record).unwrap(),
        )
        .unwrap();
        // The changes come from a watch cache over the store; the reads go to the store
        // itself here, so every read the role makes is counted.
        let (cache, changes) = CachedStore::with_changes(
            backend.clone(),
            vec![(pods.clone(), ListOptions::default().field("spec.nodeName", "n1"))],
        );
        cache.wait_synced(Duration::from_secs(5)).await.unwrap();
        let agent = crate::agent::test_agent::on(backend.clone(), backend.clone(), dir.path());
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (_synced_tx, synced) = tokio::sync::watch::channel(true);
        let task = tokio::spawn(run(agent, stop_rx, synced, Some(changes)));
        let gets = || backend.calls("get");
        let wait_gets = |at_least: usize| {
            let backend = backend.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(5);
                while backend.calls("get") < at_least {
                    assert!(Instant::now() < deadline, "no read of the pod within 5 s");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        // Started: the pod (listed as Added) is looked at once.
        wait_gets(1).await;
        let before = backend.take_calls();
        assert_eq!(before.get("get"), Some(&1), "{before:?}");
        // Idle: a window far longer than the old 500 ms polling (which read every pod each pass).
        tokio::time::sleep(Duration::from_secs(3)).await;
        let idle = backend.take_calls();
        assert!(idle.is_empty(), "store calls while idle: {idle:?}");
        // A networks change of the pod: looked at promptly.
        let mut pod = backend.get(&pods, Some("default"), "web").await.unwrap().unwrap();
        pod.metadata
            .annotations
            .insert(weft_netconf::NETWORKS_ANNOTATION.into(), "br-hl".into());
        backend.take_calls();
        let changed = Instant::now();
        backend.update(&pods, pod).await.unwrap();
        wait_gets(1).await;
        assert_eq!(gets(), 1, "one read of the changed pod");
        assert!(
            changed.elapsed() < Duration::from_secs(2),
            "took {:?}",
            changed.elapsed()
        );
        let _ = stop_tx.send(true);
        task.await.unwrap();
    }

    #[test]
    fn a_pod_change_is_its_key_and_a_deletion_or_a_nad_nothing() {
        let key = Some(PodKey("ns".into(), "web".into()));
        assert_eq!(key_for(&change(WatchEvent::Added, "Pod")), key);
        assert_eq!(key_for(&change(WatchEvent::Modified, "Pod")), key);
        assert_eq!(key_for(&change(WatchEvent::Deleted, "Pod")), None);
        assert_eq!(
            key_for(&change(WatchEvent::Modified, "NetworkAttachmentDefinition")),
            None
        );
        assert_eq!(PodKey("ns".into(), "web".into()).to_string(), "ns/web");
    }
}
