//! An event recorder for long-running components (the agent), as client-go's `EventCorrelator`:
//! occurrences are aggregated in memory into one Event per (object, reason) — a repeat is a
//! PUT of the count on the object this recorder last wrote, no GET — and the writes about one
//! involved object are rate limited by a token bucket (burst 25, then 1 a second by default).
//! An occurrence over the limit is not lost: it is counted, and one deferred write carries
//! every suppressed occurrence once the bucket has a token again. Writes run on their own task,
//! never in the caller's (a CNI ADD is not slowed by its Event).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weft_store::{Api, Store, StoreError};

use crate::events::{event_name, event_namespace, occurrences};
use crate::kinds::{Event, ObjectReference};

/// A token bucket: `burst` tokens, refilled at `per_second` (pure: time is an argument).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    capacity: f64,
    tokens: f64,
    per_second: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(burst: u32, per_second: f64, now: Instant) -> Self {
        Self {
            capacity: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            per_second,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.capacity);
        self.last = self.last.max(now);
    }

    /// Take a token at `now` if there is one.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How long after `now` until a token is there.
    pub fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 1.0 || self.per_second <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / self.per_second)
        }
    }
}

/// Rate limit per involved object.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Writes allowed at once.
    pub burst: u32,
    /// Writes a second after the burst.
    pub per_second: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            burst: 25,
            per_second: 1.0,
        }
    }
}

/// Occurrences of one Event not written yet.
#[derive(Debug, Clone)]
struct Pending {
    /// The Event object's name.
    name: String,
    object: ObjectReference,
    type_: String,
    reason: String,
    message: String,
    last_timestamp: String,
    count: u32,
}

#[derive(Default)]
struct State {
    buckets: HashMap<String, TokenBucket>,
    pending: HashMap<String, Pending>,
    /// Events with a deferred write scheduled.
    deferred: std::collections::HashSet<String>,
}

struct Inner {
    store: Arc<dyn Store>,
    component: String,
    limits: Limits,
    state: Mutex<State>,
    /// The Events as this recorder last wrote them (by `namespace/name`); one writer at a time.
    written: tokio::sync::Mutex<HashMap<String, Event>>,
}

/// Records Events through a store, aggregated and rate limited. Cheap to clone.
#[derive(Clone)]
pub struct Recorder(Arc<Inner>);

fn object_key(object: &ObjectReference) -> String {
    format!("{}/{}/{}", object.kind, object.namespace, object.name)
}

impl Recorder {
    /// A recorder writing as `component` (the Events' `reportingComponent`).
    pub fn new(store: Arc<dyn Store>, component: &str, limits: Limits) -> Self {
        Self(Arc::new(Inner {
            store,
            component: component.into(),
            limits,
            state: Mutex::new(State::default()),
            written: tokio::sync::Mutex::new(HashMap::new()),
        }))
    }

    /// Record one occurrence; the write (now, or deferred by the rate limit) runs on its own
    /// task. Must be called inside a tokio runtime.
    pub fn record(&self, object: &ObjectReference, type_: &str, reason: &str, message: &str) {
        self.record_keyed(object, type_, reason, "", message);
    }

    /// [`Self::record`], with occurrences of `reason` told apart by `key` (one Event per
    /// attachment: `AddedInterface` keyed by the interface, as Multus writes one per NIC).
    pub fn record_keyed(
        &self,
        object: &ObjectReference,
        type_: &str,
        reason: &str,
        key: &str,
        message: &str,
    ) {
        let stored_name = if key.is_empty() {
            event_name(object, reason)
        } else {
            event_name(object, &format!("{reason}/{key}"))
        };
        let name = format!("{}/{stored_name}", event_namespace(object));
        let now = Instant::now();
        let delay = {
            let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
            let pending = state.pending.entry(name.clone()).or_insert_with(|| Pending {
                name: stored_name.clone(),
                object: object.clone(),
                type_: String::new(),
                reason: reason.into(),
                message: String::new(),
                last_timestamp: String::new(),
                count: 0,
            });
            pending.count += 1;
            pending.type_ = type_.into();
            pending.message = message.into();
            pending.last_timestamp = weft_store::now_rfc3339();
            if state.deferred.contains(&name) {
                // The deferred write will carry this occurrence.
                return;
            }
            let limits = self.0.limits;
            let bucket = state
                .buckets
                .entry(object_key(object))
                .or_insert_with(|| TokenBucket::new(limits.burst, limits.per_second, now));
            if bucket.try_take(now) {
                None
            } else {
                let wait = bucket.wait(now);
                state.deferred.insert(name.clone());
                Some(wait)
            }
        };
        let recorder = self.clone();
        tokio::spawn(async move {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
                let mut state = recorder.0.state.lock().unwrap_or_else(|e| e.into_inner());
                state.deferred.remove(&name);
                // The deferred write spends the token it waited for.
                if let Some(p) = state.pending.get(&name).map(|p| p.object.clone()) {
                    let limits = recorder.0.limits;
                    let now = Instant::now();
                    state
                        .buckets
                        .entry(object_key(&p))
                        .or_insert_with(|| TokenBucket::new(limits.burst, limits.per_second, now))
                        .try_take(now);
                }
            }
            if let Err(error) = recorder.flush(&name).await {
                tracing::warn!(event = %name, error = %error, "cannot record Event");
            }
        });
    }

    /// Write the pending occurrences of the Event `namespace/name` (create it, or PUT the
    /// count on the version this recorder wrote; after a conflict, read it once and retry).
    async fn flush(&self, key: &str) -> Result<(), StoreError> {
        let mut written = self.0.written.lock().await;
        let Some(pending) = self
            .0
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pending
            .remove(key)
        else {
            return Ok(());
        };
        let api = Api::<Event>::namespaced(self.0.store.clone(), &event_namespace(&pending.object));
        let mut base = written.get(key).cloned();
        let mut fresh_read = false;
        let result = loop {
            let is_new = base.is_none();
            let mut next = occurrences(
                base.take(),
                &pending.object,
                &pending.type_,
                &pending.reason,
                &pending.message,
                &self.0.component,
                &pending.last_timestamp,
                pending.count,
            );
            next.metadata.name = pending.name.clone();
            let result = if is_new {
                api.create(&next).await
            } else {
                api.replace(&next).await
            };
            match result {
                Err(e) if (e.is_conflict() || e.is_already_exists() || e.is_not_found()) && !fresh_read => {
                    // Someone else wrote (or deleted) it: start from what the store has, once.
                    fresh_read = true;
                    match api.get(&pending.name).await {
                        Ok(current) => base = current,
                        Err(e) => break Err(e),
                    }
                }
                other => break other,
            }
        };
        match result {
            Ok(stored) => {
                written.insert(key.to_string(), stored);
                Ok(())
            }
            Err(error) => {
                // Keep the occurrences for the next write.
                written.remove(key);
                let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
                let entry = state.pending.entry(key.to_string()).or_insert_with(|| Pending {
                    count: 0,
                    ..pending.clone()
                });
                entry.count += pending.count;
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_a_burst_then_its_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(25, 1.0, start);
        assert_eq!((0..100).filter(|_| bucket.try_take(start)).count(), 25);
        assert!(!bucket.try_take(start + Duration::from_millis(500)));
        assert_eq!(
            bucket.wait(start + Duration::from_millis(500)),
            Duration::from_millis(500)
        );
        assert!(bucket.try_take(start + Duration::from_secs(1)));
        assert!(!bucket.try_take(start + Duration::from_secs(1)));
        // Refill stops at the burst.
        let later = start + Duration::from_secs(3600);
        assert_eq!((0..100).filter(|_| bucket.try_take(later)).count(), 25);
    }

    fn pod() -> ObjectReference {
        ObjectReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: "default".into(),
            name: "web".into(),
        }
    }

    /// Wait for the Event to reach `count`; returns it and how many GETs the wait made.
    async fn wait_for_count(store: &Arc<dyn Store>, reason: &str, count: u32) -> (Event, usize) {
        let api = Api::<Event>::namespaced(store.clone(), "default");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut gets = 0;
        loop {
            gets += 1;
            if let Some(event) = api.get(&event_name(&pod(), reason)).await.unwrap()
                && event.count == count
            {
                return (event, gets);
            }
            assert!(Instant::now() < deadline, "no {reason} Event with count {count}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn repeats_are_aggregated_and_rate_limited_without_losing_a_count() {
        use weft_store::double::{Behaviour, StoreDouble};
        let double = Arc::new(StoreDouble::new(Behaviour::Normal));
        let store: Arc<dyn Store> = double.clone();
        let recorder = Recorder::new(
            store.clone(),
            "weft-node",
            Limits {
                burst: 5,
                per_second: 10.0,
            },
        );
        for i in 0..100 {
            recorder.record(&pod(), "Warning", "FailedAddInterface", &format!("attempt {i}"));
        }
        let (event, polls) = wait_for_count(&store, "FailedAddInterface", 100).await;
        assert_eq!(event.message, "attempt 99");
        assert_eq!(event.reporting_component, "weft-node");
        assert_eq!(event.type_, "Warning");
        // One create, then PUTs of the count (at most the burst and one deferred write), and
        // no GET of the recorder's own (all GETs were this test's polls).
        let calls = double.take_calls();
        assert_eq!(calls.get("create").copied(), Some(1), "{calls:?}");
        assert_eq!(calls.get("get").copied(), Some(polls), "{calls:?}");
        assert!(calls.get("update").copied().unwrap_or(0) <= 5, "{calls:?}");
        // Later occurrences: a PUT on the version it wrote, still no GET.
        recorder.record(&pod(), "Warning", "FailedAddInterface", "again");
        let (event, polls) = wait_for_count(&store, "FailedAddInterface", 101).await;
        assert!(!event.first_timestamp.is_empty());
        let calls = double.take_calls();
        assert_eq!(calls.get("get").copied(), Some(polls), "{calls:?}");
        assert_eq!(calls.get("update").copied(), Some(1), "{calls:?}");
    }

    #[tokio::test]
    async fn a_conflict_reads_once_and_adds_to_the_stored_count() {
        let store: Arc<dyn Store> = weft_store::MemoryStore::shared();
        let recorder = Recorder::new(store.clone(), "weft-node", Limits::default());
        recorder.record(&pod(), "Normal", "AddedInterface", "Add eth0");
        wait_for_count(&store, "AddedInterface", 1).await;
        // Another writer bumps it (as a second agent process would).
        crate::events::emit(&store, &pod(), "Normal", "AddedInterface", "Add eth0", "other")
            .await
            .unwrap();
        recorder.record(&pod(), "Normal", "AddedInterface", "Add net1");
        let (event, _) = wait_for_count(&store, "AddedInterface", 3).await;
        assert_eq!(event.message, "Add net1");
    }
}
