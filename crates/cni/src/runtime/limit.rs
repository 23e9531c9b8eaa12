//! A bound on how many plugin processes run at once, shared by every runtime that holds it.
//!
//! Why: the reference plugins are Go programs whose runtimes spin and contend (the kernel's
//! rtnl lock, their own threads) when there are many more of them than cores. A node agent
//! that runs every pod's delegates at once during a burst (a node boot, a scale-up) spends more
//! CPU in total than one that lets a few at a time through: on the benchmark's 2 cores, 8 pods
//! × 5 delegates at once took 1.21× the direct runner, the same with one delegate per pod 1.09×.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Instant;

/// A counting semaphore for plugin processes (blocking: callers are the delegates' threads).
#[derive(Debug)]
pub struct ExecLimit {
    max: usize,
    running: Mutex<usize>,
    freed: Condvar,
}

impl ExecLimit {
    /// At most `max` (at least 1) processes at once.
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            running: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Processes running under this bound now.
    pub fn running(&self) -> usize {
        *self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a slot until `deadline`; `None` when none came free by then.
    pub fn acquire(&self, deadline: Instant) -> Option<Permit<'_>> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        while *running >= self.max {
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            running = self
                .freed
                .wait_timeout(running, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *running += 1;
        Some(Permit(self))
    }
}

/// One slot of an [`ExecLimit`], given back when dropped.
#[derive(Debug)]
pub struct Permit<'a>(&'a ExecLimit);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut running = self.0.running.lock().unwrap_or_else(PoisonError::into_inner);
        *running -= 1;
        drop(running);
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn never_more_than_the_bound_run_at_once() {
        let limit = Arc::new(ExecLimit::new(3));
        let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        std::thread::scope(|scope| {
            for _ in 0..12 {
                let (limit, now, peak) = (limit.clone(), now.clone(), peak.clone());
                scope.spawn(move || {
                    let _permit = limit
                        .acquire(Instant::now() + Duration::from_secs(10))
                        .expect("a slot within 10 s");
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                    now.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        assert_eq!(peak.load(Ordering::SeqCst), 3);
        assert_eq!(limit.running(), 0);
    }

    #[test]
    fn a_full_limit_gives_up_at_the_deadline_and_a_freed_slot_is_taken() {
        let limit = ExecLimit::new(1);
        let held = limit
            .acquire(Instant::now())
            .expect("a free slot without waiting");
        let started = Instant::now();
        assert!(limit.acquire(started + Duration::from_millis(30)).is_none());
        assert!(started.elapsed() >= Duration::from_millis(30));
        drop(held);
        assert!(limit.acquire(Instant::now()).is_some());
        assert_eq!(ExecLimit::new(0).max(), 1);
    }
}
