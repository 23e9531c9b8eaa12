//! network-status written after the ADD has answered the runtime (`weft agent --network-status
//! after-reply`, the default on Kubernetes).
//!
//! Multus writes a pod's network-status before its ADD answers, so every pod start waits for
//! a write to the API server (a few milliseconds on an idle one, far more on a busy one) and
//! fails when that write fails. Here the ADD puts the annotation value into the attachment
//! record it writes anyway (`CacheRecord::network_status`), answers, and a writer task per
//! sandbox writes it: at once, then with backoff while the API server cannot take it, until
//! the value is on the pod, the pod is gone, or the sandbox's DEL removed the record. The
//! record keeps the value until it is written, so an agent restarted meanwhile writes it too
//! ([`resume`]), and a hot-plug pass leaves the pod alone until then (`hotplug_ready`).
//!
//! Order: the writes of one pod are serialised (a lock per stripe of pods, held across the
//! write), and a writer always writes the value its record holds *now*, so an earlier
//! sandbox's value can never land after a later one's.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use weft_store::reconcile::Backoff;
use weft_store::throttle::{Decision, LogThrottle};
use weft_store::{Api, Store, StoreError};

use crate::kinds::Pod;

/// When an ADD writes the pod's network-status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusWrite {
    /// Before the ADD answers, as Multus: a write that fails fails the ADD (code 11).
    BeforeReply,
    /// Right after the ADD answered, kept in the attachment record until it is written and
    /// retried with backoff: a pod start does not wait for the API server.
    AfterReply,
}

impl StatusWrite {
    /// The mode of an agent given `--network-status` (`flag`) and its store: after the reply
    /// on Kubernetes, where the write is a round trip to the API server; before it on the
    /// embedded store, where it is a local write that costs no wait and the local roles read
    /// the annotation as soon as the sandbox is up.
    pub fn resolve(flag: Option<Self>, kubernetes: bool) -> Self {
        match (flag, kubernetes) {
            (Some(mode), _) => mode,
            (None, true) => Self::AfterReply,
            (None, false) => Self::BeforeReply,
        }
    }
}

/// Retry delay of a write the API server did not take: 0.5 s, doubling, at most 30 s.
const BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(500),
    max: Duration::from_secs(30),
};

/// Pods are serialised in this many stripes (a fixed set: no per-pod state to clean up).
const STRIPES: usize = 64;

/// The deferred network-status writes of one agent.
pub struct StatusWrites {
    /// The agent's store (watch caches on Kubernetes) and the API server itself (for a pod
    /// the caches do not hold yet).
    store: Arc<dyn Store>,
    api: Arc<dyn Store>,
    /// Where the attachment records are.
    cache_dir: PathBuf,
    /// The sandboxes whose writer task runs, each with the wake-up a newer value gives it.
    running: Mutex<HashMap<String, Arc<Notify>>>,
    stripes: Vec<tokio::sync::Mutex<()>>,
    /// Failures of every writer, logged once per interval with a count.
    log: Mutex<LogThrottle>,
    pending: Gauge,
    failures: Counter,
}

impl StatusWrites {
    /// Writes through `store` (falling back to `api` for a pod `store` does not hold) of the
    /// values in the records under `cache_dir`; `pending` and `failures` are the agent's
    /// metrics.
    pub fn new(
        store: Arc<dyn Store>,
        api: Arc<dyn Store>,
        cache_dir: PathBuf,
        pending: Gauge,
        failures: Counter,
    ) -> Self {
        Self {
            store,
            api,
            cache_dir,
            running: Mutex::new(HashMap::new()),
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            log: Mutex::new(LogThrottle::default()),
            pending,
            failures,
        }
    }

    /// Make sure the value pending in `container_id`'s record gets written: start its writer,
    /// or wake the one that waits out a backoff (it then writes the newer value at once).
    pub fn kick(self: &Arc<Self>, container_id: &str) {
        self.start(container_id, None);
    }

    /// [`Self::kick`]; a writer it starts first waits for `gate` to turn true.
    fn start(self: &Arc<Self>, container_id: &str, gate: Option<tokio::sync::watch::Receiver<bool>>) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(wake) = running.get(container_id) {
            wake.notify_one();
            return;
        }
        let wake = Arc::new(Notify::new());
        running.insert(container_id.to_string(), wake.clone());
        self.pending.set(running.len() as i64);
        let (writes, container) = (self.clone(), container_id.to_string());
        tokio::spawn(async move {
            if let Some(mut gate) = gate {
                let _ = gate.wait_for(|open| *open).await;
            }
            writes.writer(container, wake).await
        });
    }

    /// `container_id`'s record is gone (its DEL ran): a writer waiting out a backoff looks at
    /// once and ends, instead of at its next retry.
    pub fn forget(&self, container_id: &str) {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(wake) = running.get(container_id) {
            wake.notify_one();
        }
    }

    async fn writer(self: Arc<Self>, container: String, wake: Arc<Notify>) {
        let mut failures = 0u32;
        loop {
            while let Some((namespace, name, value)) = self.pending_value(&container).await {
                match self.write(&namespace, &name, &value).await {
                    Ok(()) => {
                        failures = 0;
                        self.written(&container, value).await;
                    }
                    Err(e) => {
                        failures += 1;
                        self.failures.inc();
                        self.log_failure(&namespace, &name, failures, &e);
                        tokio::select! {
                            _ = tokio::time::sleep(BACKOFF.delay(failures)) => {}
                            _ = wake.notified() => {}
                        }
                    }
                }
            }
            // Nothing pending. Leave, then look once more: a value written into the record
            // after the look above was kicked while this writer was still registered.
            {
                let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
                running.remove(&container);
                self.pending.set(running.len() as i64);
            }
            if self.pending_value(&container).await.is_none() {
                return;
            }
            let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            if running.contains_key(&container) {
                return; // a new writer took over
            }
            running.insert(container.clone(), wake.clone());
            self.pending.set(running.len() as i64);
        }
    }

    /// The pod and the value pending in `container`'s record (none: written, or the record
    /// is gone: the sandbox's DEL ran).
    async fn pending_value(&self, container: &str) -> Option<(String, String, String)> {
        let (dir, container) = (self.cache_dir.clone(), container.to_string());
        let record = crate::sys::blocking(move || super::records::read(&dir, &container))
            .await
            .ok()
            .flatten()?;
        let value = record.network_status?;
        let namespace = match record.k8s.pod_namespace.as_str() {
            "" => "default".to_string(),
            ns => ns.to_string(),
        };
        Some((namespace, record.k8s.pod_name, value))
    }

    /// Write `value` as the pod's network-status, after any write of the same pod in flight.
    /// A pod that is gone needs no status: that counts as written.
    async fn write(&self, namespace: &str, name: &str, value: &str) -> Result<(), StoreError> {
        let stripe = stripe_of(namespace, name);
        let _serialised = self.stripes[stripe].lock().await;
        match write_status(&self.store, &self.api, namespace, name, value).await {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    async fn written(&self, container: &str, value: String) {
        let (dir, container) = (self.cache_dir.clone(), container.to_string());
        let cleared =
            crate::sys::blocking(move || super::records::clear_pending_status(&dir, &container, &value))
                .await;
        let error = match cleared {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(e) => format!("{e:#}"),
        };
        // The value stays pending: the next look writes it again (an annotation that holds
        // it already is not written twice) and clears it then.
        tracing::warn!("network-status written, but its attachment record could not be updated: {error}");
    }

    fn log_failure(&self, namespace: &str, name: &str, failures: u32, e: &StoreError) {
        let decision = self
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .decide(Instant::now());
        if let Decision::Log { suppressed } = decision {
            tracing::warn!(
                pod = %format!("{namespace}/{name}"),
                failures,
                suppressed,
                "network-status not written yet (retried with backoff): {e}"
            );
        }
    }
}

/// The stripe of pod `namespace`/`name`.
fn stripe_of(namespace: &str, name: &str) -> usize {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (namespace, name).hash(&mut hasher);
    (hasher.finish() % STRIPES as u64) as usize
}

/// Set pod `namespace`/`name`'s network-status to `value` through its status subresource
/// (`store`, or `api` itself when `store`, a watch cache, does not hold the pod yet). An
/// annotation that already holds `value` is not written again.
pub async fn write_status(
    store: &Arc<dyn Store>,
    api: &Arc<dyn Store>,
    namespace: &str,
    name: &str,
    value: &str,
) -> Result<(), StoreError> {
    let write = |store: Arc<dyn Store>| async move {
        Api::<Pod>::namespaced(store, namespace)
            .modify_status(name, |p| {
                let changed = p.metadata.annotation(weft_netconf::NETWORK_STATUS_ANNOTATION) != Some(value);
                p.metadata
                    .annotations
                    .insert(weft_netconf::NETWORK_STATUS_ANNOTATION.into(), value.to_string());
                changed
            })
            .await
    };
    match write(store.clone()).await {
        Err(e) if e.is_not_found() => write(api.clone()).await.map(|_| ()),
        other => other.map(|_| ()),
    }
}

/// Start the writers of the values an earlier run of the agent left pending (it stopped
/// before writing them). They count as pending at once, and write once `synced` (the watch
/// caches hold this node's pods, or gave up waiting): before that every write would read its
/// pod from the API server first, and during an outage the caches sync when it is back.
pub async fn resume(writes: Arc<StatusWrites>, synced: tokio::sync::watch::Receiver<bool>) {
    let dir = writes.cache_dir.clone();
    let records = crate::sys::blocking(move || super::records::all(&dir))
        .await
        .unwrap_or_default();
    let pending: Vec<String> = records
        .into_iter()
        .filter(|r| r.network_status.is_some())
        .map(|r| r.container_id)
        .collect();
    if !pending.is_empty() {
        tracing::info!(
            sandboxes = pending.len(),
            "network-status the last run left pending: written once the caches sync"
        );
    }
    for container in pending {
        writes.start(&container, Some(synced.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_the_reply_on_kubernetes_before_it_on_the_embedded_store_unless_told() {
        use StatusWrite::*;
        assert_eq!(StatusWrite::resolve(None, true), AfterReply);
        assert_eq!(StatusWrite::resolve(None, false), BeforeReply);
        assert_eq!(StatusWrite::resolve(Some(BeforeReply), true), BeforeReply);
        assert_eq!(StatusWrite::resolve(Some(AfterReply), false), AfterReply);
    }

    #[test]
    fn a_pod_always_lands_in_the_same_stripe() {
        assert_eq!(stripe_of("default", "web"), stripe_of("default", "web"));
        assert!(stripe_of("a", "b") < STRIPES);
    }
}
