//! The heap of weft's long-running processes. glibc's malloc gives every thread that ever
//! allocated an arena of its own (up to eight per core) and returns freed memory to the system
//! only on a trim.
//! - The controller: at 10,000 VMs beside KubeVirt its live data is tens of MiB, but the
//!   initial LIST pages, the 20,000 claim POSTs and their watch events freed pages spread over
//!   every arena (docs/benchmarks.md, "Controller at 10,000 VMs"): at most two arenas, and a
//!   trim when the work queue runs dry after a large burst.
//! - The node agent: every pod's delegates run on threads of their own (several pods at once,
//!   several delegates each), each of which would otherwise get an arena: at most two.
//!
//! The decision when to trim is [`TrimPolicy`] (pure); the calls into glibc are the two thin
//! functions below.

use std::time::{Duration, Instant};

/// When a dry work queue is worth a `malloc_trim`: after at least `min_reconciled` keys since
/// the last trim, and not more often than every `min_interval` (a trim walks every arena: a
/// few milliseconds at 100 MiB, nothing to pay after each of a burst's many short pauses).
#[derive(Debug, Clone)]
pub struct TrimPolicy {
    min_reconciled: usize,
    min_interval: Duration,
    pending: usize,
    last: Option<Instant>,
}

impl Default for TrimPolicy {
    fn default() -> Self {
        Self::new(500, Duration::from_secs(10))
    }
}

impl TrimPolicy {
    /// A policy trimming after `min_reconciled` keys, at most every `min_interval`.
    pub fn new(min_reconciled: usize, min_interval: Duration) -> Self {
        Self {
            min_reconciled,
            min_interval,
            pending: 0,
            last: None,
        }
    }

    /// The queue ran dry at `now` after `reconciled` keys: whether to trim now. Keys of
    /// several short bursts add up until one trim covers them.
    pub fn on_idle(&mut self, reconciled: usize, now: Instant) -> bool {
        self.pending += reconciled;
        let due = self
            .last
            .is_none_or(|last| now.duration_since(last) >= self.min_interval);
        if self.pending >= self.min_reconciled && due {
            self.pending = 0;
            self.last = Some(now);
            true
        } else {
            false
        }
    }
}

/// At most two malloc arenas for this process (glibc's default is eight per core): called
/// before the runtime starts its threads, so they share the two.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; M_ARENA_MAX takes any positive count.
    unsafe {
        nix::libc::mallopt(nix::libc::M_ARENA_MAX, 2);
    }
}

/// Returns the heap's free pages to the system (glibc's `malloc_trim`); elsewhere nothing.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; it takes no pointers.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_burst_trims_once_small_ones_add_up_and_trims_are_spaced() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut p = TrimPolicy::new(100, Duration::from_secs(10));
        assert!(!p.on_idle(3, at(0)), "a few keys: no trim");
        assert!(!p.on_idle(96, at(1)));
        assert!(p.on_idle(1, at(2)), "the bursts add up to 100");
        assert!(!p.on_idle(1000, at(5)), "a trim 3 s ago: wait");
        assert!(p.on_idle(0, at(12)), "the pending 1000 once the interval passed");
        assert!(
            !p.on_idle(0, at(30)),
            "nothing pending: no trim, however long it has been"
        );
    }

    #[test]
    fn trimming_and_limiting_arenas_are_harmless_to_call() {
        limit_arenas();
        let v: Vec<Vec<u8>> = (0..1000).map(|i| vec![0u8; 1000 + i]).collect();
        drop(v);
        trim();
    }
}
