//! The ADDs running on this node, and the API writes that yield to them
//! (`weft agent --writes-yield-ms`).
//!
//! An ADD leaves two writes behind once it has answered: its pod's network-status (on
//! Kubernetes, `--network-status after-reply`) and its `AddedInterface` Event. When many pods
//! start at once (a node boots, a deployment scales up, VMs restart after a node came back),
//! those writes compete for the node's cores with the plugins of the pods still starting: the
//! agent's own request and the watch events they cause, and, where the control plane runs on
//! the node (single-node clusters: single-node OpenShift, MicroShift, k3s), the API server's
//! and etcd's work for them. So they wait while another ADD runs, and go out as soon as none
//! does, or once the bound has passed (a node that never stops starting pods still writes).
//! Nothing is lost by waiting: the value waits in the attachment record (a restarted agent
//! writes it, `status_writes::resume`), and readers of network-status see it through a watch
//! anyway, never in step with the sandbox.

use std::time::Duration;

use tokio::sync::watch;

/// The ADDs running on the node: each holds a [`Running`] for its whole run.
pub struct AddsRunning {
    count: watch::Sender<usize>,
}

impl Default for AddsRunning {
    fn default() -> Self {
        Self {
            count: watch::Sender::new(0),
        }
    }
}

/// One running ADD: dropping it ends it.
pub struct Running<'a>(&'a AddsRunning);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.count.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl AddsRunning {
    /// An ADD starts; it ends when the guard drops (its error paths too).
    pub fn enter(&self) -> Running<'_> {
        self.count.send_modify(|n| *n += 1);
        Running(self)
    }

    /// Return once no ADD runs, or after `max` (at once when none runs, or `max` is zero).
    pub async fn quiet(&self, max: Duration) {
        if max.is_zero() {
            return;
        }
        let mut count = self.count.subscribe();
        let _ = tokio::time::timeout(max, count.wait_for(|n| *n == 0)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const MAX: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn with_no_add_running_a_write_goes_at_once() {
        let adds = AddsRunning::default();
        let started = tokio::time::Instant::now();
        adds.quiet(MAX).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
        // The guard of an ADD that ended leaves nothing running.
        drop(adds.enter());
        adds.quiet(MAX).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_waits_for_the_last_running_add_and_no_longer() {
        let adds = Arc::new(AddsRunning::default());
        let (first, second) = (adds.enter(), adds.enter());
        let started = tokio::time::Instant::now();
        let waiter = {
            let adds = adds.clone();
            tokio::spawn(async move {
                adds.quiet(MAX).await;
                started.elapsed()
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(first);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "one ADD still runs");
        drop(second);
        assert_eq!(waiter.await.unwrap(), Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_that_never_stops_adding_still_writes_after_the_bound() {
        let adds = AddsRunning::default();
        let _forever = adds.enter();
        let started = tokio::time::Instant::now();
        adds.quiet(MAX).await;
        assert_eq!(started.elapsed(), MAX);
        // A zero bound never waits.
        adds.quiet(Duration::ZERO).await;
        assert_eq!(started.elapsed(), MAX);
    }
}
