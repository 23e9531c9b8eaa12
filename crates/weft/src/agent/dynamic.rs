//! The dynamic-networks role (what multus-dynamic-networks-controller does, inside the agent):
//! every pod this node attached (its cache record names the sandbox and netns, so no CRI call
//! is needed) follows its `k8s.v1.cni.cncf.io/networks` annotation: new elements are
//! hot-plugged, removed ones unplugged, network-status kept current.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weft_store::Api;

use super::Agent;
use crate::kinds::Pod;

/// How often pods are compared with their annotation (reads come from the store or its caches).
const SWEEP: Duration = Duration::from_millis(500);

/// The first retry of a pod whose hot-plug failed waits this long; each further failure doubles
/// it, up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between two attempts at a pod whose hot-plug keeps failing.
const MAX_RETRY: Duration = Duration::from_secs(300);
/// A failure that repeats is logged again at most this often, with its count.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// A pod whose reconcile failed: when to try again and what was said about it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Failure {
    /// Consecutive failures.
    count: u32,
    /// No attempt before this.
    retry_at: Instant,
    /// The last message logged, and when.
    logged: Option<(String, Instant)>,
    /// Failures since the last log line.
    unlogged: u32,
}

/// The wait after `count` consecutive failures: exponential from [`FIRST_RETRY`], capped.
fn retry_delay(count: u32) -> Duration {
    FIRST_RETRY
        .saturating_mul(1u32 << count.saturating_sub(1).min(16))
        .min(MAX_RETRY)
}

/// Record one more failure of a pod at `now`; returns the line to log, if any: the first
/// failure, a new message, or the same one again after [`LOG_EVERY`] with how often it repeated.
fn record_failure(previous: Option<Failure>, message: &str, now: Instant) -> (Failure, Option<String>) {
    let count = previous.as_ref().map_or(0, |f| f.count) + 1;
    let mut failure = Failure {
        count,
        retry_at: now + retry_delay(count),
        logged: previous.as_ref().and_then(|f| f.logged.clone()),
        unlogged: previous.as_ref().map_or(0, |f| f.unlogged) + 1,
    };
    let line = match &failure.logged {
        Some((last, at)) if last == message && now.duration_since(*at) < LOG_EVERY => None,
        Some((last, _)) if last == message => Some(format!(
            "{message} (failed {} times since the last report; next attempt in {:?})",
            failure.unlogged,
            retry_delay(count)
        )),
        _ => Some(format!("{message} (next attempt in {:?})", retry_delay(count))),
    };
    if line.is_some() {
        failure.logged = Some((message.to_string(), now));
        failure.unlogged = 0;
    }
    (failure, line)
}

/// Pods whose reconcile failed, by container ID.
#[derive(Default)]
pub struct Failures(Mutex<HashMap<String, Failure>>);

impl Failures {
    fn due(&self, container_id: &str, now: Instant) -> bool {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(container_id).is_none_or(|f| now >= f.retry_at)
    }

    fn failed(&self, container_id: &str, message: &str, now: Instant) -> Option<String> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (failure, line) = record_failure(map.remove(container_id), message, now);
        map.insert(container_id.to_string(), failure);
        line
    }

    fn succeeded(&self, container_id: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(container_id);
    }

    fn retain(&self, live: &[String]) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|id, _| live.contains(id));
    }
}

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
pub async fn sweep(agent: &Agent, failures: &Failures) -> anyhow::Result<usize> {
    let Ok(config) = runtime_config_bytes(agent) else {
        return Ok(0);
    };
    let mut changes = 0;
    let records = super::cni::cached_records(agent);
    failures.retain(&records.iter().map(|r| r.container_id.clone()).collect::<Vec<_>>());
    for record in records {
        if !failures.due(&record.container_id, Instant::now()) {
            continue;
        }
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
            Ok(n) => {
                failures.succeeded(&record.container_id);
                changes += n
            }
            Err(e) => {
                let message = match e.details.is_empty() {
                    true => e.msg.clone(),
                    false => format!("{}: {}", e.msg, e.details),
                };
                super::pod_events::hotplug_failed(agent, ns, name, &message);
                if let Some(line) = failures.failed(&record.container_id, &message, Instant::now()) {
                    tracing::warn!(pod = %format!("{ns}/{name}"), "dynamic networks: {line}");
                }
            }
        }
    }
    Ok(changes)
}

/// Run sweeps until `stop`, the first once `synced` is true (the watch caches hold this node's
/// pods: a sweep before that would read each attached pod from the API server).
pub async fn run(
    agent: Arc<Agent>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut synced: tokio::sync::watch::Receiver<bool>,
) {
    tokio::select! {
        _ = synced.wait_for(|s| *s) => {}
        _ = stop.changed() => return,
    }
    let failures = Failures::default();
    loop {
        if let Err(e) = sweep(&agent, &failures).await {
            tracing::warn!("dynamic networks: {e:#}");
        }
        tokio::select! {
            _ = tokio::time::sleep(SWEEP) => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_exponentially_up_to_the_cap() {
        assert_eq!(retry_delay(1), Duration::from_secs(1));
        assert_eq!(retry_delay(2), Duration::from_secs(2));
        assert_eq!(retry_delay(5), Duration::from_secs(16));
        assert_eq!(retry_delay(30), MAX_RETRY);
        assert_eq!(retry_delay(u32::MAX), MAX_RETRY);
    }

    #[test]
    fn a_repeating_failure_is_logged_once_per_interval_with_its_count() {
        let t0 = Instant::now();
        let (f, line) = record_failure(None, "boom", t0);
        assert!(line.unwrap().starts_with("boom"));
        assert_eq!(f.retry_at, t0 + Duration::from_secs(1));
        let mut f = Some(f);
        let mut lines = Vec::new();
        // Ten more failures within a minute: silent.
        for i in 1..=10 {
            let (next, line) = record_failure(f, "boom", t0 + Duration::from_secs(i));
            lines.extend(line);
            f = Some(next);
        }
        assert!(lines.is_empty(), "{lines:?}");
        let (next, line) = record_failure(f, "boom", t0 + Duration::from_secs(61));
        assert!(line.unwrap().contains("failed 11 times since the last report"));
        // A different message is reported at once.
        let (_, line) = record_failure(Some(next), "other", t0 + Duration::from_secs(62));
        assert!(line.unwrap().starts_with("other"));
    }

    #[test]
    fn a_failed_pod_waits_for_its_retry_and_success_forgets_it() {
        let failures = Failures::default();
        let t0 = Instant::now();
        assert!(failures.due("c1", t0));
        assert!(failures.failed("c1", "boom", t0).is_some());
        assert!(!failures.due("c1", t0 + Duration::from_millis(500)));
        assert!(failures.due("c1", t0 + Duration::from_secs(1)));
        assert!(failures.due("c2", t0));
        failures.succeeded("c1");
        assert!(failures.due("c1", t0));
        failures.failed("c3", "boom", t0);
        failures.retain(&["c1".to_string()]);
        assert!(failures.due("c3", t0), "records of pods gone are dropped");
    }
}
