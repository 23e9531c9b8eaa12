//! Repeated failures logged once per interval with a count, not at every attempt: during an
//! API server outage a watch cache relists every 500 ms per kind, and logging each attempt
//! floods the log. The decision (log now / count silently) is [`LogThrottle::decide`], pure in
//! the time it is given.

use std::time::{Duration, Instant};

/// How often a repeated failure is logged by default.
pub const DEFAULT_LOG_EVERY: Duration = Duration::from_secs(10);

/// Whether to log a failure now, and how many were counted silently before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Log this failure; `suppressed` earlier ones were counted and not logged.
    Log {
        /// Failures since the last logged one.
        suppressed: u64,
    },
    /// Count this failure and log nothing.
    Count,
}

/// The state of one repeated failure (one per kind of failure, e.g. per watched kind).
#[derive(Clone, Debug)]
pub struct LogThrottle {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl Default for LogThrottle {
    fn default() -> Self {
        Self::new(DEFAULT_LOG_EVERY)
    }
}

impl LogThrottle {
    /// Log at most once per `every`.
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// A failure at `now`: the first one is logged at once, later ones once `every` has passed
    /// since the last logged one (with the count of those in between).
    pub fn decide(&mut self, now: Instant) -> Decision {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                self.suppressed += 1;
                Decision::Count
            }
            _ => {
                self.last = Some(now);
                Decision::Log {
                    suppressed: std::mem::take(&mut self.suppressed),
                }
            }
        }
    }

    /// The failure is over (a call succeeded): the next one is logged at once. Returns how
    /// many failures were counted and never logged, if there were any, or whether any failure
    /// happened at all since the last recovery (`Some(0)`), so the caller can log the recovery.
    pub fn recover(&mut self) -> Option<u64> {
        let failed = self.last.take().map(|_| std::mem::take(&mut self.suppressed));
        self.suppressed = 0;
        failed
    }
}

/// One [`LogThrottle`] per key (e.g. per object a reconcile loop fails on every pass), so
/// one object's repeated failure does not hide another's first.
#[derive(Clone, Debug, Default)]
pub struct KeyedThrottle {
    every: Option<Duration>,
    keys: std::collections::HashMap<String, LogThrottle>,
}

impl KeyedThrottle {
    /// Log each key's failure at most once per `every`.
    pub fn new(every: Duration) -> Self {
        Self {
            every: Some(every),
            keys: Default::default(),
        }
    }

    /// A failure of `key` at `now` (see [`LogThrottle::decide`]).
    pub fn decide(&mut self, key: &str, now: Instant) -> Decision {
        let every = self.every.unwrap_or(DEFAULT_LOG_EVERY);
        self.keys
            .entry(key.to_string())
            .or_insert_with(|| LogThrottle::new(every))
            .decide(now)
    }

    /// `key` succeeded: forget it (its next failure is logged at once). Returns what
    /// [`LogThrottle::recover`] returns.
    pub fn recover(&mut self, key: &str) -> Option<u64> {
        self.keys.remove(key).and_then(|mut t| t.recover())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_is_throttled_on_its_own() {
        let start = Instant::now();
        let mut t = KeyedThrottle::new(Duration::from_secs(10));
        assert_eq!(t.decide("vm/a", start), Decision::Log { suppressed: 0 });
        assert_eq!(t.decide("vm/a", start + Duration::from_secs(1)), Decision::Count);
        assert_eq!(
            t.decide("vm/b", start + Duration::from_secs(1)),
            Decision::Log { suppressed: 0 },
            "another object's first failure is logged"
        );
        assert_eq!(t.recover("vm/a"), Some(1));
        assert_eq!(t.recover("vm/a"), None);
        assert_eq!(
            t.decide("vm/a", start + Duration::from_secs(2)),
            Decision::Log { suppressed: 0 }
        );
    }

    #[test]
    fn the_first_failure_is_logged_then_counted_until_the_interval_passes() {
        let start = Instant::now();
        let mut t = LogThrottle::new(Duration::from_secs(10));
        assert_eq!(t.decide(start), Decision::Log { suppressed: 0 });
        for ms in [500, 1000, 9999] {
            assert_eq!(t.decide(start + Duration::from_millis(ms)), Decision::Count);
        }
        assert_eq!(
            t.decide(start + Duration::from_secs(10)),
            Decision::Log { suppressed: 3 }
        );
        assert_eq!(t.decide(start + Duration::from_secs(11)), Decision::Count);
        assert_eq!(
            t.decide(start + Duration::from_secs(25)),
            Decision::Log { suppressed: 1 }
        );
    }

    #[test]
    fn twenty_failures_a_second_for_a_minute_log_six_lines() {
        let start = Instant::now();
        let mut t = LogThrottle::new(Duration::from_secs(10));
        let logged = (0..1200)
            .filter(|i| {
                matches!(
                    t.decide(start + Duration::from_millis(i * 50)),
                    Decision::Log { .. }
                )
            })
            .count();
        assert_eq!(logged, 6, "one line per 10 s over 60 s");
    }

    #[test]
    fn after_a_recovery_the_next_failure_is_logged_at_once() {
        let start = Instant::now();
        let mut t = LogThrottle::new(Duration::from_secs(10));
        assert_eq!(t.recover(), None, "nothing failed");
        t.decide(start);
        t.decide(start + Duration::from_secs(1));
        t.decide(start + Duration::from_secs(2));
        assert_eq!(t.recover(), Some(2), "two failures never logged");
        assert_eq!(t.recover(), None);
        assert_eq!(
            t.decide(start + Duration::from_secs(3)),
            Decision::Log { suppressed: 0 }
        );
        assert_eq!(t.recover(), Some(0));
    }

    #[test]
    fn a_clock_going_backwards_does_not_log_every_attempt() {
        let start = Instant::now() + Duration::from_secs(100);
        let mut t = LogThrottle::new(Duration::from_secs(10));
        t.decide(start);
        assert_eq!(t.decide(start - Duration::from_secs(1)), Decision::Count);
    }
}
