//! A bound on how many plugin processes run at once, shared by every runtime that holds it.
//!
//! Why: the reference plugins are Go programs whose runtimes spin and contend (the kernel's
//! rtnl lock, their own threads) when there are many more of them than cores. A node agent
//! that runs every pod's delegates at once during a burst (a node boot, a scale-up) spends more
//! CPU in total than one that lets a few at a time through: on the benchmark's 2 cores, 8 pods
//! × 5 delegates at once took 1.06–1.23× the direct runner, 0.91–1.02× through a bound of 5.
//!
//! Slots are handed out in arrival order (a waiter is never overtaken by a later one), and the
//! executor gives a slot back once its plugin has run [`SLOT_GRACE`]: a plugin still running
//! then is waiting (for a DHCP server, an API server), not burning CPU, and must not hold up
//! the node's other ADDs.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a plugin holds its slot at most ([`super::exec::ProcessExec`] gives it back then).
pub const SLOT_GRACE: Duration = Duration::from_secs(1);

/// A first-come-first-served counting semaphore for plugin processes (blocking: callers are
/// the delegates' threads).
#[derive(Debug)]
pub struct ExecLimit {
    max: usize,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    running: usize,
    next_ticket: u64,
    /// Tickets of the waiters, oldest first.
    waiting: VecDeque<u64>,
}

impl ExecLimit {
    /// At most `max` (at least 1) processes at once.
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            state: Mutex::default(),
            changed: Condvar::new(),
        }
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Slots taken now.
    pub fn running(&self) -> usize {
        self.lock().running
    }

    /// Callers waiting for a slot now.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a slot, behind every earlier waiter, until `deadline`; `None` when none came
    /// free by then.
    pub fn acquire(&self, deadline: Instant) -> Option<Permit<'_>> {
        let mut state = self.lock();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.waiting.push_back(ticket);
        loop {
            if state.running < self.max && state.waiting.front() == Some(&ticket) {
                state.waiting.pop_front();
                state.running += 1;
                // The next waiter may fit too.
                self.changed.notify_all();
                return Some(Permit(self));
            }
            let now = Instant::now();
            if now >= deadline {
                state.waiting.retain(|t| *t != ticket);
                // Whoever was behind this waiter may be first now.
                self.changed.notify_all();
                return None;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// One slot of an [`ExecLimit`], given back when dropped.
#[derive(Debug)]
pub struct Permit<'a>(&'a ExecLimit);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.0.lock().running -= 1;
        self.0.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    #[test]
    fn slots_go_in_arrival_order_and_a_waiter_that_gave_up_blocks_no_one() {
        let limit = Arc::new(ExecLimit::new(1));
        let held = limit.acquire(Instant::now()).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let queued = |n: usize| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while limit.waiting() != n {
                assert!(Instant::now() < deadline, "{n} waiters queued within 10 s");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        std::thread::scope(|scope| {
            // The first waiter gives up after 2 s; three more queue behind it meanwhile.
            let quitter = limit.clone();
            let quitter =
                scope.spawn(move || quitter.acquire(Instant::now() + Duration::from_secs(2)).is_none());
            queued(1);
            for n in 0..3 {
                let (limit, order) = (limit.clone(), order.clone());
                scope.spawn(move || {
                    let _permit = limit.acquire(Instant::now() + Duration::from_secs(20)).unwrap();
                    order.lock().unwrap().push(n);
                });
                queued(n + 2);
            }
            assert!(quitter.join().unwrap(), "the first waiter gave up");
            drop(held);
        });
        assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
        assert_eq!((limit.running(), limit.waiting()), (0, 0));
    }
}
