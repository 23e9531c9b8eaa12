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
//! write, hot-plug's included), a writer reads the value its record holds under that lock, and
//! only the pod's latest sandbox on this node writes (the one whose ADD completed last; an
//! earlier one's value is dropped, after a restart too), so an earlier sandbox's value never
//! lands after a later one's; nor on another pod that took the name (the write checks the
//! pod's UID).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use weft_meta::CacheRecord;
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

/// Retry delay of a write that did not reach the API server or that it could not take now
/// (down, 429, 5xx, no answer in time): 0.5 s, doubling, at most 30 s.
const BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(500),
    max: Duration::from_secs(30),
};

/// Retry delay of a write the API server answered with a refusal (403 without `pods/status`,
/// 422 for an annotation it will not take): the same start, at most 5 minutes. Such a refusal
/// lasts until someone changes the cluster (RBAC, an admission policy), and every pod of every
/// node retries it: at 30 s, 10,000 such pods would keep 333 refused requests a second on the
/// API server.
const REFUSED_BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(500),
    max: Duration::from_secs(300),
};

/// The delay before the next attempt after `failures` in a row, the last one `refused` by the
/// API server (its answer) or not (unreachable, overloaded, no answer, the record).
pub fn retry_delay(failures: u32, refused: bool) -> Duration {
    match refused {
        true => REFUSED_BACKOFF.delay(failures),
        false => BACKOFF.delay(failures),
    }
}

/// How long one write may take (an API server that accepts and never answers must not hold
/// the pod's lock for the client's own, much longer, timeout).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// After this many failed attempts in a row (the third comes 1.5 s after the first) a writer records a
/// `NetworkStatusNotWritten` Warning on the pod, once per streak: a write the API server
/// refuses for good (403 without `pods/status`, 422 for an annotation over the size limit)
/// is then visible on the pod (`kubectl describe`), not only in the agent's log.
pub const EVENT_AFTER_FAILURES: u32 = 3;

/// A pod (namespace, name).
type PodKey = (String, String);

/// The pod a record is for (a record without a namespace is the `default` namespace's).
fn pod_of(record: &CacheRecord) -> PodKey {
    (record.pod_namespace().to_string(), record.k8s.pod_name.clone())
}

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
    /// Each pod's latest sandbox with a value to write (set by its ADD, dropped by its DEL):
    /// an earlier sandbox of the pod does not write.
    latest: Mutex<HashMap<PodKey, String>>,
    pods: super::records::Stripes,
    /// Failures of every writer, logged once per interval with a count.
    log: Mutex<LogThrottle>,
    pending: Gauge,
    failures: Counter,
    /// Where a write that keeps failing is made visible on its pod (none in unit tests).
    events: Option<crate::event_recorder::Recorder>,
    /// The node's running ADDs, which a new writer waits for at most this long
    /// ([`super::adds_running`]; none in unit tests).
    yield_to: Option<(Arc<super::adds_running::AddsRunning>, Duration)>,
}

/// What one look at a sandbox's record came to.
enum Attempt {
    /// The value is on the pod now.
    Written,
    /// Nothing to write (any more): dropped, the pod is gone, or the record is gone.
    Done,
    /// The value for pod `.1` is still to write: this failed, refused by the API server's
    /// answer (`.2`) or not.
    Failed(String, PodKey, bool),
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
            latest: Mutex::new(HashMap::new()),
            pods: Default::default(),
            log: Mutex::new(LogThrottle::default()),
            pending,
            failures,
            events: None,
            yield_to: None,
        }
    }

    /// A new writer's first write waits up to `max` while other ADDs run (`adds`).
    pub fn yielding_to(mut self, adds: Arc<super::adds_running::AddsRunning>, max: Duration) -> Self {
        self.yield_to = Some((adds, max));
        self
    }

    /// Record a Warning on a pod whose write keeps failing ([`EVENT_AFTER_FAILURES`]).
    pub fn with_events(mut self, events: crate::event_recorder::Recorder) -> Self {
        self.events = Some(events);
        self
    }

    /// An ADD of sandbox `container_id` for pod `namespace`/`name` left a value in its record:
    /// it is the pod's latest sandbox; start its writer, or wake the one that waits out a
    /// backoff (it then writes the newer value at once).
    pub fn kick(self: &Arc<Self>, container_id: &str, namespace: &str, name: &str) {
        let previous = lock(&self.latest).insert(pod_key(namespace, name), container_id.to_string());
        // An earlier sandbox's writer waiting out a backoff drops its value at once.
        if let Some(previous) = previous.filter(|p| p != container_id)
            && let Some(wake) = lock(&self.running).get(&previous)
        {
            wake.notify_one();
        }
        self.start(container_id, None);
    }

    /// Start `container_id`'s writer (or wake it); a writer it starts first waits for `gate`
    /// to turn true.
    fn start(self: &Arc<Self>, container_id: &str, gate: Option<tokio::sync::watch::Receiver<bool>>) {
        let mut running = lock(&self.running);
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
            if let Some((adds, max)) = &writes.yield_to {
                adds.quiet(*max).await;
            }
            writes.writer(container, wake).await
        });
    }

    /// `container_id`'s record is gone (its DEL ran, for pod `namespace`/`name`): a writer
    /// waiting out a backoff looks at once and ends, instead of at its next retry.
    pub fn forget(&self, container_id: &str, namespace: &str, name: &str) {
        let key = pod_key(namespace, name);
        let mut latest = lock(&self.latest);
        if latest.get(&key).map(String::as_str) == Some(container_id) {
            latest.remove(&key);
        }
        drop(latest);
        if let Some(wake) = lock(&self.running).get(container_id) {
            wake.notify_one();
        }
    }

    /// Serialise a write of pod `namespace`/`name`'s network-status with the writers' (hot-plug
    /// writes it too).
    pub async fn lock_pod(&self, namespace: &str, name: &str) -> tokio::sync::MutexGuard<'_, ()> {
        self.pods.lock(&pod_key(namespace, name)).await
    }

    async fn writer(self: Arc<Self>, container: String, wake: Arc<Notify>) {
        let mut failures = 0u32;
        loop {
            loop {
                match self.attempt(&container).await {
                    Attempt::Written => {
                        if failures > 0 && lock(&self.log).recover().is_some() {
                            tracing::info!("network-status written again");
                        }
                        failures = 0;
                        // A newer value that reached the record meanwhile is still there (only
                        // the value written was cleared): the look below finds it.
                        break;
                    }
                    Attempt::Done => {
                        failures = 0;
                        break;
                    }
                    Attempt::Failed(error, (namespace, name), refused) => {
                        failures += 1;
                        self.failures.inc();
                        self.log_failure(&container, failures, &error);
                        if failures == EVENT_AFTER_FAILURES
                            && let Some(events) = &self.events
                        {
                            super::pod_events::status_not_written(
                                events, &namespace, &name, failures, &error,
                            );
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(retry_delay(failures, refused)) => {}
                            _ = wake.notified() => {}
                        }
                    }
                }
            }
            // Nothing pending. Leave, then look once more: a value written into the record
            // after the look above was kicked while this writer was still registered.
            {
                let mut running = lock(&self.running);
                running.remove(&container);
                self.pending.set(running.len() as i64);
            }
            if self
                .read(&container)
                .await
                .and_then(|r| r.network_status)
                .is_none()
            {
                return;
            }
            let mut running = lock(&self.running);
            if running.contains_key(&container) {
                return; // a new writer took over
            }
            running.insert(container.clone(), wake.clone());
            self.pending.set(running.len() as i64);
        }
    }

    /// Write the value pending in `container`'s record, if any, and mark it written.
    async fn attempt(&self, container: &str) -> Attempt {
        // A sandbox's record names one pod for its life: pick its lock, then read the value
        // under it (a later ADD of the sandbox, hot-plug or DEL may have changed it meanwhile).
        let Some(record) = self.read(container).await else {
            return Attempt::Done;
        };
        let (namespace, name) = pod_of(&record);
        let _serialised = self.lock_pod(&namespace, &name).await;
        let Some(record) = self.read(container).await else {
            return Attempt::Done;
        };
        let Some(value) = record.network_status.clone() else {
            return Attempt::Done;
        };
        let latest = lock(&self.latest)
            .get(&(namespace.clone(), name.clone()))
            .cloned();
        if latest.is_some_and(|latest| latest != container) {
            // A later sandbox of the pod: its value is the pod's, this one is not written.
            return self
                .cleared(container, value, Attempt::Done, (namespace, name))
                .await;
        }
        let uid = Some(record.k8s.pod_uid.as_str()).filter(|uid| !uid.is_empty());
        let write = write_status(&self.store, &self.api, &namespace, &name, &value, uid);
        let outcome = tokio::time::timeout(WRITE_TIMEOUT, write).await;
        let pod = (namespace, name);
        match outcome {
            Ok(Ok(true)) => self.cleared(container, value, Attempt::Written, pod).await,
            // The pod is gone, or the name is another pod's now: nothing to write.
            Ok(Ok(false)) => self.cleared(container, value, Attempt::Done, pod).await,
            Ok(Err(e)) if e.is_not_found() => self.cleared(container, value, Attempt::Done, pod).await,
            Ok(Err(e)) => {
                // 403 and other answers the Kubernetes backend keeps as Backend, 400/422 as
                // Invalid; a conflict that outlasted the retries is contention, not a refusal.
                let refused = e.is_invalid() || matches!(e, StoreError::Backend(_));
                Attempt::Failed(e.to_string(), pod, refused)
            }
            Err(_) => Attempt::Failed(format!("no answer in {WRITE_TIMEOUT:?}"), pod, false),
        }
    }

    /// `container`'s record, if it is there and readable.
    async fn read(&self, container: &str) -> Option<CacheRecord> {
        let (dir, container) = (self.cache_dir.clone(), container.to_string());
        crate::sys::blocking(move || super::records::read(&dir, &container))
            .await
            .ok()
            .flatten()
    }

    /// Mark `value` no longer pending in `container`'s record; then `outcome`. A record that
    /// cannot be updated keeps the value: a failure, retried with backoff (the next write of
    /// an annotation that holds the value already is no request).
    async fn cleared(&self, container: &str, value: String, outcome: Attempt, pod: PodKey) -> Attempt {
        let (dir, id) = (self.cache_dir.clone(), container.to_string());
        let cleared =
            crate::sys::blocking(move || super::records::clear_pending_status(&dir, &id, &value)).await;
        match cleared {
            Ok(Ok(())) => outcome,
            Ok(Err(e)) => Attempt::Failed(
                format!("written, but the attachment record cannot be updated: {e}"),
                pod,
                false,
            ),
            Err(e) => Attempt::Failed(format!("{e:#}"), pod, false),
        }
    }

    fn log_failure(&self, container: &str, failures: u32, error: &str) {
        if let Decision::Log { suppressed } = lock(&self.log).decide(Instant::now()) {
            tracing::warn!(
                container,
                failures,
                suppressed,
                "network-status not written yet (retried with backoff): {error}"
            );
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn pod_key(namespace: &str, name: &str) -> PodKey {
    let namespace = if namespace.is_empty() {
        "default"
    } else {
        namespace
    };
    (namespace.to_string(), name.to_string())
}

/// Set pod `namespace`/`name`'s network-status to `value` through its status subresource
/// (`store`, or `api` itself when `store`, a watch cache, does not hold the pod yet). An
/// annotation that already holds `value` is not written again; with `uid`, a pod of that name
/// with another UID (the name was taken by a new pod) is not written: `Ok(false)`.
pub async fn write_status(
    store: &Arc<dyn Store>,
    api: &Arc<dyn Store>,
    namespace: &str,
    name: &str,
    value: &str,
    uid: Option<&str>,
) -> Result<bool, StoreError> {
    let write = |store: Arc<dyn Store>| async move {
        let mut same_pod = true;
        Api::<Pod>::namespaced(store, namespace)
            .modify_status(name, |p| {
                same_pod = uid.is_none_or(|uid| p.metadata.uid.as_deref().is_none_or(|found| found == uid));
                let changed =
                    same_pod && p.metadata.annotation(weft_netconf::NETWORK_STATUS_ANNOTATION) != Some(value);
                if changed {
                    p.metadata
                        .annotations
                        .insert(weft_netconf::NETWORK_STATUS_ANNOTATION.into(), value.to_string());
                }
                changed
            })
            .await
            .map(|_| same_pod)
    };
    match write(store.clone()).await {
        Err(e) if e.is_not_found() => write(api.clone()).await,
        other => other,
    }
}

/// Each pod's latest sandbox among `sandboxes` (container id, pod, when its ADD completed; a
/// record without the time counts as the oldest): the one whose network-status is the pod's.
pub fn latest_per_pod(sandboxes: &[(String, PodKey, u64)]) -> HashMap<PodKey, String> {
    let mut latest: HashMap<PodKey, (String, u64)> = HashMap::new();
    for (container, pod, added) in sandboxes {
        match latest.get(pod) {
            Some((_, seen)) if *seen >= *added => {}
            _ => {
                latest.insert(pod.clone(), (container.clone(), *added));
            }
        }
    }
    latest
        .into_iter()
        .map(|(pod, (container, _))| (pod, container))
        .collect()
}

/// Take up the values an earlier run of the agent left pending (it stopped before writing
/// them). Only each pod's latest sandbox (of all its records, written or not) writes; an
/// earlier sandbox's value is dropped at once. The writers count as pending at once, and write
/// once `synced` (the watch caches hold this node's pods, or gave up waiting after 20 s):
/// before that every write would read its pod from the API server first.
pub async fn resume(writes: Arc<StatusWrites>, synced: tokio::sync::watch::Receiver<bool>) {
    let dir = writes.cache_dir.clone();
    let records = crate::sys::blocking(move || super::records::all(&dir))
        .await
        .unwrap_or_default();
    let sandboxes: Vec<(String, PodKey, u64)> = records
        .iter()
        .map(|r| (r.container_id.clone(), pod_of(r), r.added_ms.unwrap_or(0)))
        .collect();
    let latest = latest_per_pod(&sandboxes);
    let pending: Vec<(String, PodKey, String)> = records
        .into_iter()
        .filter_map(|r| {
            let pod = pod_of(&r);
            r.network_status.map(|value| (r.container_id, pod, value))
        })
        .collect();
    if pending.is_empty() {
        return;
    }
    let mut taken_up = 0;
    for (container, pod, value) in pending {
        if latest.get(&pod) == Some(&container) {
            // An ADD since this run started may have set its own, later, sandbox: it wins.
            lock(&writes.latest)
                .entry(pod)
                .or_insert_with(|| container.clone());
            writes.start(&container, Some(synced.clone()));
            taken_up += 1;
        } else {
            let _ = writes.cleared(&container, value, Attempt::Done, pod).await;
        }
    }
    tracing::info!(
        sandboxes = taken_up,
        "network-status the last run left pending: written once the caches sync"
    );
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
    fn a_refused_write_backs_off_to_five_minutes_an_unreachable_api_to_thirty_seconds() {
        let secs = |failures, refused| retry_delay(failures, refused).as_secs_f64();
        // The same start: the Warning after 3 failures comes as soon either way.
        for failures in 1..=3 {
            assert_eq!(secs(failures, true), secs(failures, false));
        }
        assert_eq!(secs(1, false), 0.5);
        assert_eq!(secs(7, false), 30.0);
        assert_eq!(secs(20, false), 30.0);
        assert_eq!(secs(7, true), 32.0);
        assert_eq!(secs(20, true), 300.0);
    }

    #[test]
    fn only_the_latest_sandbox_of_a_pod_writes_after_a_restart() {
        let pod = |n: &str| ("default".to_string(), n.to_string());
        let sandboxes = vec![
            ("a1".to_string(), pod("a"), 10),
            ("b1".to_string(), pod("b"), 5),
            ("a2".to_string(), pod("a"), 20),
            ("a0".to_string(), pod("a"), 0),
        ];
        let latest = latest_per_pod(&sandboxes);
        assert_eq!(latest.len(), 2);
        assert_eq!(latest[&pod("a")], "a2");
        assert_eq!(latest[&pod("b")], "b1");
        assert!(latest_per_pod(&[]).is_empty());
    }
}
