//! Prometheus metrics of the node agent.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a CNI request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// CNI verb.
    pub verb: String,
    /// `ok` or `error`.
    pub result: String,
}

/// Labels of a verb.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    /// CNI verb.
    pub verb: String,
}

/// Labels of a delegate failure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DelegateLabels {
    /// Delegate plugin type.
    pub plugin: String,
}

/// The verbs a metric label may name; any other `CNI_COMMAND` (it comes from whoever calls the
/// socket) is counted as `other`, so labels stay a small fixed set.
const VERBS: [&str; 6] = ["ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION"];

/// The metric label of a request's verb: itself when a CNI verb, `other` otherwise.
pub fn verb_label(verb: &str) -> &'static str {
    VERBS.into_iter().find(|v| *v == verb).unwrap_or("other")
}

/// Where a request came in: the label prefix of its verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/cni` (no prefix).
    Cni,
    /// `/delegate` (`delegate-`).
    Delegate,
    /// `/ipam` (`ipam-`).
    Ipam,
}

/// The `verb` label of a request: the endpoint's prefix and [`verb_label`].
pub fn request_label(endpoint: Endpoint, verb: &str) -> String {
    let verb = verb_label(verb);
    match endpoint {
        Endpoint::Cni => verb.to_string(),
        Endpoint::Delegate => format!("delegate-{verb}"),
        Endpoint::Ipam => format!("ipam-{verb}"),
    }
}

/// The agent's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Requests by verb and result.
    pub requests: Family<RequestLabels, Counter>,
    /// Request latency by verb, seconds.
    pub latency: Family<VerbLabels, Histogram>,
    /// Delegate failures by plugin type.
    pub delegate_errors: Family<DelegateLabels, Counter>,
    /// network-status writers at work: sandboxes whose ADD answered and whose value is not
    /// marked written yet (those an agent restart took up count while they wait for the caches).
    pub status_pending: Gauge,
    /// Failed network-status write attempts (the API server did not take the write, or the
    /// attachment record could not be updated after it; each retried with backoff).
    pub status_write_failures: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("weft_agent");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<VerbLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        let delegate_errors = Family::<DelegateLabels, Counter>::default();
        registry.register("cni_requests", "CNI requests handled", requests.clone());
        registry.register(
            "cni_request_duration_seconds",
            "CNI request latency",
            latency.clone(),
        );
        registry.register(
            "delegate_errors",
            "Delegate plugin failures",
            delegate_errors.clone(),
        );
        let status_pending = Gauge::default();
        let status_write_failures = Counter::default();
        registry.register(
            "network_status_pending",
            "Sandboxes whose network-status is not marked written yet (their ADD answered first)",
            status_pending.clone(),
        );
        registry.register(
            "network_status_write_failures",
            "Failed network-status write attempts (API server or attachment record)",
            status_write_failures.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            requests,
            latency,
            delegate_errors,
            status_pending,
            status_write_failures,
        }
    }
}

impl Metrics {
    /// Record one request of `verb` (untrusted: mapped by [`request_label`]) at `endpoint`.
    pub fn observe(&self, endpoint: Endpoint, verb: &str, ok: bool, seconds: f64) {
        let verb = request_label(endpoint, verb);
        let verb = verb.as_str();
        let result = if ok { "ok" } else { "error" };
        self.requests
            .get_or_create(&RequestLabels {
                verb: verb.into(),
                result: result.into(),
            })
            .inc();
        self.latency
            .get_or_create(&VerbLabels { verb: verb.into() })
            .observe(seconds);
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_are_a_fixed_set() {
        assert_eq!(verb_label("ADD"), "ADD");
        assert_eq!(verb_label("GC"), "GC");
        assert_eq!(verb_label("add"), "other");
        assert_eq!(verb_label(&"A".repeat(100_000)), "other");
        assert_eq!(request_label(Endpoint::Delegate, "DEL"), "delegate-DEL");
        assert_eq!(request_label(Endpoint::Ipam, "x\"} 1\n"), "ipam-other");
    }

    #[test]
    fn hostile_verbs_do_not_grow_the_metrics() {
        let metrics = Metrics::default();
        metrics.observe(Endpoint::Cni, "ADD", true, 0.1);
        let baseline = metrics.encode().len();
        for i in 0..50 {
            metrics.observe(Endpoint::Cni, &format!("{i}{}", "V".repeat(100_000)), false, 0.1);
        }
        let text = metrics.encode();
        assert!(!text.contains("VVVV"), "an untrusted verb reached a label");
        assert!(
            text.len() < baseline * 3,
            "{} bytes after 50 hostile verbs",
            text.len()
        );
    }
}
