//! A small reconciler framework over [`Store`](crate::Store), in the shape of kube-runtime's
//! `Controller`: watched kinds (list+watch through a [`CachedStore`](crate::CachedStore) built
//! with [`CachedStore::with_changes`](crate::CachedStore::with_changes)) → a mapping of each
//! change to the keys it touches → a de-duplicating per-key [`WorkQueue`] → `reconcile(key)`,
//! one at a time → an [`Action`] (done, or requeue after a delay), with exponential
//! [`Backoff`] per key on errors (reset on success) and full resyncs at most every few minutes.
//!
//! The queue, the backoff and the de-duplication are pure (no I/O, time passed in) and tested
//! as such; [`run`] only wires them to the change channel and the clock.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::throttle::{Decision, KeyedThrottle};
use crate::{ResourceType, WatchEvent};

/// What a reconcile asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Converged: run again only when a watched change touches the key (or at a resync).
    Done,
    /// Run again after this delay even if nothing changes (waiting on something unwatched).
    RequeueAfter(Duration),
}

/// Exponential backoff for a key whose reconcile fails: `initial`, doubled per consecutive
/// failure, at most `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub initial: Duration,
    /// Upper bound of the delay.
    pub max: Duration,
}

impl Default for Backoff {
    /// 200 ms → 5 min, as kube-runtime's default error policy.
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// The delay after `failures` consecutive failures (`failures >= 1`; 0 gives no delay).
    pub fn delay(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32.checked_shl(failures - 1).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// A watched change: the kind and the event (a relist reports what changed meanwhile as
/// `Added`/`Modified`/`Deleted` too).
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The kind the event is about.
    pub ty: ResourceType,
    /// The event.
    pub event: WatchEvent,
}

#[derive(Debug)]
struct Entry {
    /// When the key is due (queued), if it is.
    due: Option<Instant>,
    /// Consecutive failures.
    failures: u32,
    /// When the last failure was (events never pull a failing key closer than `initial` to it).
    failed_at: Option<Instant>,
    /// Being reconciled now.
    active: bool,
}

/// A de-duplicating work queue of keys with per-key backoff: a key is queued at most once (the
/// earliest due time wins), is never handed out while it is being reconciled (a change meanwhile
/// queues it again for after), and fails into exponential backoff. Queueing, handing out and
/// finishing a key are O(log n) (an index by due time): at 10,000 VMs a full resync queues
/// tens of thousands of keys.
#[derive(Debug)]
pub struct WorkQueue<K: Ord + Clone> {
    entries: BTreeMap<K, Entry>,
    /// `(due, key)` of every entry that is queued and not active.
    ready: BTreeSet<(Instant, K)>,
    backoff: Backoff,
}

impl<K: Ord + Clone> WorkQueue<K> {
    /// An empty queue with this backoff.
    pub fn new(backoff: Backoff) -> Self {
        Self {
            entries: BTreeMap::new(),
            ready: BTreeSet::new(),
            backoff,
        }
    }

    /// Queue `key` now: a change touched it. A key in error backoff runs at its backoff time or
    /// `backoff.initial` after its last failure, whichever is sooner (a change may be the fix,
    /// but a reconcile that fails and touches its own object must not spin).
    pub fn add(&mut self, key: K, now: Instant) {
        let initial = self.backoff.initial;
        let at = match self.entries.get(&key).and_then(|e| e.failed_at) {
            Some(failed) => (failed + initial).max(now),
            None => now,
        };
        self.add_at(key, at);
    }

    /// Queue `key` for `at` (or sooner if it is already queued sooner).
    pub fn add_at(&mut self, key: K, at: Instant) {
        let entry = self.entries.entry(key.clone()).or_insert(Entry {
            due: None,
            failures: 0,
            failed_at: None,
            active: false,
        });
        let due = entry.due.map_or(at, |due| due.min(at));
        let old = entry.due.replace(due);
        if !entry.active {
            if let Some(old) = old {
                self.ready.remove(&(old, key.clone()));
            }
            self.ready.insert((due, key));
        }
    }

    /// The next key due at `now` that is not being reconciled, marked active.
    pub fn pop_ready(&mut self, now: Instant) -> Option<K> {
        let (due, _) = self.ready.first()?;
        if *due > now {
            return None;
        }
        let (_, key) = self.ready.pop_first().expect("just seen");
        let entry = self.entries.get_mut(&key).expect("indexed keys have entries");
        entry.due = None;
        entry.active = true;
        Some(key)
    }

    /// When the next queued (not active) key is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.ready.first().map(|(due, _)| *due)
    }

    /// `key`'s reconcile ended: `Ok(action)` resets its backoff (and requeues it if asked),
    /// `Err(())` queues it after its backoff delay. Returns the number of consecutive failures.
    pub fn finish(&mut self, key: &K, outcome: Result<Action, ()>, now: Instant) -> u32 {
        let backoff = self.backoff;
        let Some(entry) = self.entries.get_mut(key) else {
            return 0;
        };
        let was_active = std::mem::replace(&mut entry.active, false);
        let old = entry.due;
        match outcome {
            Ok(action) => {
                entry.failures = 0;
                entry.failed_at = None;
                if let Action::RequeueAfter(delay) = action {
                    let at = now + delay;
                    entry.due = Some(entry.due.map_or(at, |due| due.min(at)));
                }
            }
            Err(()) => {
                entry.failures = entry.failures.saturating_add(1);
                entry.failed_at = Some(now);
                let at = now + backoff.delay(entry.failures);
                // A change during the failed run waits for the backoff too.
                entry.due = Some(entry.due.map_or(at, |due| due.max(at)));
            }
        }
        let (failures, due) = (entry.failures, entry.due);
        if !was_active && let Some(old) = old {
            self.ready.remove(&(old, key.clone()));
        }
        match due {
            Some(due) => {
                self.ready.insert((due, key.clone()));
            }
            None if failures == 0 => {
                self.entries.remove(key);
            }
            None => {}
        }
        failures
    }

    /// Keys queued or active.
    pub fn len(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.active || e.due.is_some())
            .count()
    }

    /// Whether nothing is queued or active.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Consecutive failures of `key`.
    pub fn failures(&self, key: &K) -> u32 {
        self.entries.get(key).map_or(0, |e| e.failures)
    }
}

/// A periodic resync: every `every`, the keys `keys()` resolves to are queued.
pub struct Resync<K> {
    /// The interval.
    pub every: Duration,
    /// The keys to queue (read from the cache: no API request). A future, so that keys read
    /// from disk are read on the blocking pool, not on the reconciler's async worker.
    pub keys: Box<dyn FnMut() -> BoxFuture<'static, Vec<K>> + Send>,
}

impl<K: Send + 'static> Resync<K> {
    /// A resync whose keys are at hand (in memory: a watch cache, a constant).
    pub fn new(every: Duration, mut keys: impl FnMut() -> Vec<K> + Send + 'static) -> Self {
        Self::from_future(every, move || Box::pin(std::future::ready(keys())))
    }

    /// A resync whose keys take a future (e.g. records read on the blocking pool).
    pub fn from_future(
        every: Duration,
        keys: impl FnMut() -> BoxFuture<'static, Vec<K>> + Send + 'static,
    ) -> Self {
        Self {
            every,
            keys: Box::new(keys),
        }
    }
}

/// How [`run`] runs.
pub struct Config<K> {
    /// A name for the logs (`controller`, `agent`).
    pub name: &'static str,
    /// Error backoff per key.
    pub backoff: Backoff,
    /// Periodic resyncs (e.g. every key every 5 minutes; the IPAM sweep every 30 s).
    pub resyncs: Vec<Resync<K>>,
    /// Called when the queue has run dry after work, with how many keys were reconciled since
    /// the last call (the controller returns freed heap to the system there).
    pub on_idle: Option<Box<dyn FnMut(usize) + Send>>,
}

/// Run the reconciler until `shutdown` completes: `map` turns each change into keys, the queue
/// de-duplicates them, `reconcile` runs one key at a time. Failures are logged once per interval
/// per key (with the count in between) and retried with backoff.
pub async fn run<K, M, R, E>(
    mut changes: mpsc::UnboundedReceiver<Change>,
    mut map: M,
    mut reconcile: R,
    mut config: Config<K>,
    shutdown: impl Future<Output = ()>,
) where
    K: Ord + Clone + Display + Send,
    M: FnMut(&Change) -> Vec<K>,
    R: FnMut(K) -> BoxFuture<'static, Result<Action, E>>,
    E: Display,
{
    let mut queue = WorkQueue::new(config.backoff);
    let mut logs = KeyedThrottle::default();
    let start = Instant::now();
    let mut next_resync: Vec<Instant> = config.resyncs.iter().map(|r| start + r.every).collect();
    let mut changes_open = true;
    let mut reconciled_since_idle = 0usize;
    tokio::pin!(shutdown);
    loop {
        // Every change waiting is mapped before the next key is taken: a burst of changes of
        // one object is one reconcile.
        while let Ok(change) = changes.try_recv() {
            for key in map(&change) {
                queue.add(key, Instant::now());
            }
        }
        let now = Instant::now();
        for (resync, next) in config.resyncs.iter_mut().zip(next_resync.iter_mut()) {
            if *next <= now {
                for key in (resync.keys)().await {
                    queue.add(key, now);
                }
                *next = now + resync.every;
            }
        }
        if let Some(key) = queue.pop_ready(now) {
            let label = key.to_string();
            reconciled_since_idle += 1;
            let outcome = reconcile(key.clone()).await;
            let finished = Instant::now();
            match outcome {
                Ok(action) => {
                    queue.finish(&key, Ok(action), finished);
                    if let Some(suppressed) = logs.recover(&label) {
                        tracing::info!(object = %label, suppressed, "{}: reconciles again", config.name);
                    }
                }
                Err(e) => {
                    let failures = queue.finish(&key, Err(()), finished);
                    if let Decision::Log { suppressed } = logs.decide(&label, std::time::Instant::now()) {
                        tracing::warn!(object = %label, suppressed, failures, "{e:#}");
                    }
                }
            }
            continue;
        }
        if reconciled_since_idle > 0 {
            if let Some(on_idle) = config.on_idle.as_mut() {
                on_idle(reconciled_since_idle);
            }
            reconciled_since_idle = 0;
        }
        let wake = [queue.next_due(), next_resync.iter().min().copied()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_secs(3600));
        tokio::select! {
            change = changes.recv(), if changes_open => match change {
                Some(change) => {
                    for key in map(&change) {
                        queue.add(key, Instant::now());
                    }
                }
                None => changes_open = false,
            },
            _ = tokio::time::sleep_until(wake) => {}
            _ = &mut shutdown => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let b = Backoff::default();
        assert_eq!(b.delay(0), Duration::ZERO);
        assert_eq!(b.delay(1), ms(200));
        assert_eq!(b.delay(2), ms(400));
        assert_eq!(b.delay(5), ms(3200));
        assert_eq!(b.delay(12), Duration::from_secs(300));
        assert_eq!(b.delay(40), Duration::from_secs(300), "no overflow");
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn keys_are_deduplicated_and_handed_out_once() {
        let t = Instant::now();
        let mut q = WorkQueue::new(Backoff::default());
        for _ in 0..5 {
            q.add("a", t);
        }
        q.add("b", t + ms(1));
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop_ready(t + ms(1)), Some("a"));
        assert_eq!(q.pop_ready(t + ms(1)), Some("b"));
        assert_eq!(q.pop_ready(t + ms(1)), None);
        assert_eq!(q.finish(&"a", Ok(Action::Done), t + ms(2)), 0);
        q.finish(&"b", Ok(Action::Done), t + ms(2));
        assert!(q.is_empty());
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn a_change_during_a_reconcile_runs_the_key_again_after_it_not_concurrently() {
        let t = Instant::now();
        let mut q = WorkQueue::new(Backoff::default());
        q.add("a", t);
        assert_eq!(q.pop_ready(t), Some("a"));
        q.add("a", t + ms(1));
        assert_eq!(q.pop_ready(t + ms(2)), None, "one at a time per key");
        assert_eq!(q.next_due(), None, "an active key is not due");
        q.finish(&"a", Ok(Action::Done), t + ms(3));
        assert_eq!(q.pop_ready(t + ms(3)), Some("a"));
    }

    #[test]
    fn failures_back_off_exponentially_and_success_resets() {
        let t = Instant::now();
        let mut q = WorkQueue::new(Backoff::default());
        q.add("a", t);
        let mut now = t;
        for (n, delay) in [(1, 200), (2, 400), (3, 800)] {
            assert_eq!(q.pop_ready(now), Some("a"));
            assert_eq!(q.finish(&"a", Err(()), now), n);
            assert_eq!(q.next_due(), Some(now + ms(delay)));
            assert_eq!(q.pop_ready(now + ms(delay - 1)), None);
            now += ms(delay);
        }
        assert_eq!(q.pop_ready(now), Some("a"));
        q.finish(&"a", Ok(Action::Done), now);
        assert_eq!(q.failures(&"a"), 0);
        assert!(q.is_empty());
        // After the reset the first failure waits the initial delay again.
        q.add("a", now);
        q.pop_ready(now);
        q.finish(&"a", Err(()), now);
        assert_eq!(q.next_due(), Some(now + ms(200)));
    }

    #[test]
    fn a_change_pulls_a_failing_key_forward_but_not_closer_than_the_initial_delay() {
        let t = Instant::now();
        let mut q = WorkQueue::new(Backoff::default());
        q.add("a", t);
        for _ in 0..6 {
            let now = q.next_due().unwrap();
            q.pop_ready(now);
            q.finish(&"a", Err(()), now);
        }
        let failed = q.next_due().unwrap() - Backoff::default().delay(6);
        assert!(q.next_due().unwrap() - failed >= Duration::from_secs(6));
        q.add("a", failed);
        assert_eq!(q.next_due(), Some(failed + ms(200)));
        q.add("a", failed + Duration::from_secs(1));
        assert_eq!(q.next_due(), Some(failed + ms(200)), "the earliest due time wins");
    }

    #[test]
    fn requeue_after_runs_the_key_again_later() {
        let t = Instant::now();
        let mut q = WorkQueue::new(Backoff::default());
        q.add("a", t);
        q.pop_ready(t);
        q.finish(&"a", Ok(Action::RequeueAfter(Duration::from_secs(2))), t);
        assert_eq!(q.pop_ready(t + ms(1999)), None);
        assert_eq!(q.pop_ready(t + Duration::from_secs(2)), Some("a"));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Add(u8),
        Pop,
        Finish(usize, bool),
        Wait(u64),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0u8..5).prop_map(Op::Add),
            Just(Op::Pop),
            (0usize..5, any::<bool>()).prop_map(|(i, ok)| Op::Finish(i, ok)),
            (0u64..400).prop_map(Op::Wait),
        ]
    }

    proptest::proptest! {
        /// Any sequence of adds, pops, finishes and waits: a key is never handed out while it
        /// is active, the queue holds each key at most once, and every key added (or failed)
        /// since it was last handed out is handed out again eventually.
        #[test]
        fn any_operation_sequence_keeps_the_invariants(ops in proptest::collection::vec(op(), 0..200)) {
            let t = Instant::now();
            let mut now = t;
            let mut q = WorkQueue::new(Backoff::default());
            let mut active: Vec<u8> = Vec::new();
            let mut wanted = std::collections::BTreeSet::new();
            for op in ops {
                match op {
                    Op::Add(key) => {
                        q.add(key, now);
                        wanted.insert(key);
                    }
                    Op::Pop => {
                        if let Some(key) = q.pop_ready(now) {
                            proptest::prop_assert!(!active.contains(&key), "key {} handed out twice", key);
                            active.push(key);
                            wanted.remove(&key);
                        }
                    }
                    Op::Finish(i, ok) => {
                        if !active.is_empty() {
                            let key = active.remove(i % active.len());
                            if !ok {
                                wanted.insert(key);
                            }
                            q.finish(&key, if ok { Ok(Action::Done) } else { Err(()) }, now);
                        }
                    }
                    Op::Wait(n) => now += ms(n),
                }
                proptest::prop_assert!(q.len() <= 5);
                let indexed = q.entries.values().filter(|e| !e.active && e.due.is_some()).count();
                proptest::prop_assert_eq!(q.ready.len(), indexed, "the due index matches the entries");
                let earliest = q.entries.values().filter(|e| !e.active).filter_map(|e| e.due).min();
                proptest::prop_assert_eq!(q.next_due(), earliest);
            }
            for key in std::mem::take(&mut active) {
                q.finish(&key, Ok(Action::Done), now);
            }
            let far = now + Duration::from_secs(3600);
            while let Some(key) = q.pop_ready(far) {
                wanted.remove(&key);
                q.finish(&key, Ok(Action::Done), far);
            }
            proptest::prop_assert!(wanted.is_empty(), "never handed out: {:?}", wanted);
            proptest::prop_assert!(q.is_empty());
        }
    }

    /// The loop: changes map to keys, duplicates collapse, a failing key backs off, and a
    /// resync queues its keys every interval (on tokio's paused clock: no real waiting).
    #[tokio::test(start_paused = true)]
    async fn the_loop_dedupes_backs_off_and_resyncs() {
        use std::sync::{Arc, Mutex};
        let (tx, rx) = mpsc::unbounded_channel();
        let runs: Arc<Mutex<Vec<(String, Duration)>>> = Arc::default();
        let start = Instant::now();
        let obj = |name: &str| -> crate::Object {
            serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name}}))
            .unwrap()
        };
        let ty = ResourceType::new("v1", "Pod", "pods", true);
        for _ in 0..3 {
            tx.send(Change {
                ty: ty.clone(),
                event: WatchEvent::Added(obj("a")),
            })
            .unwrap();
        }
        tx.send(Change {
            ty: ty.clone(),
            event: WatchEvent::Added(obj("bad")),
        })
        .unwrap();
        let seen = runs.clone();
        let idles: Arc<Mutex<Vec<usize>>> = Arc::default();
        let idle_seen = idles.clone();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run(
            rx,
            |c: &Change| vec![c.event.object().metadata.name.clone()],
            move |key: String| {
                let seen = seen.clone();
                Box::pin(async move {
                    seen.lock().unwrap().push((key.clone(), start.elapsed()));
                    if key == "bad" {
                        Err("boom")
                    } else {
                        Ok(Action::Done)
                    }
                }) as BoxFuture<'static, Result<Action, &'static str>>
            },
            Config {
                name: "test",
                backoff: Backoff::default(),
                resyncs: vec![Resync::new(Duration::from_secs(30), || vec!["sweep".to_string()])],
                on_idle: Some(Box::new(move |n| idle_seen.lock().unwrap().push(n))),
            },
            async {
                let _ = stop_rx.await;
            },
        ));
        tokio::time::sleep(Duration::from_secs(61)).await;
        stop_tx.send(()).unwrap();
        task.await.unwrap();
        let runs = runs.lock().unwrap().clone();
        let count = |k: &str| runs.iter().filter(|(key, _)| key == k).count();
        assert_eq!(count("a"), 1, "three changes of one key, one reconcile: {runs:?}");
        assert_eq!(count("sweep"), 2, "a resync every 30 s: {runs:?}");
        let bad: Vec<Duration> = runs
            .iter()
            .filter(|(k, _)| k == "bad")
            .map(|(_, at)| *at)
            .collect();
        // 0, then 0.2, 0.6, 1.4, 3.0, 6.2, 12.6, 25.4, 51.0 s (backoff doubling from 200 ms).
        assert_eq!(bad.len(), 9, "{bad:?}");
        for pair in bad.windows(2).skip(1) {
            let (a, b) = (pair[0], pair[1]);
            assert!(b > a, "{bad:?}");
        }
        assert!(
            bad[8] >= Duration::from_secs(51) && bad[8] < Duration::from_secs(52),
            "{bad:?}"
        );
        // The first burst ("a" and "bad") is one idle report; every reconcile is reported once.
        let idles = idles.lock().unwrap().clone();
        assert_eq!(idles.first(), Some(&2), "{idles:?}");
        assert_eq!(idles.iter().sum::<usize>(), runs.len(), "{idles:?} vs {runs:?}");
    }
}
