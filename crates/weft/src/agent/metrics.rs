//! Prometheus metrics of the node agent.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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

/// The agent's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Requests by verb and result.
    pub requests: Family<RequestLabels, Counter>,
    /// Request latency by verb, seconds.
    pub latency: Family<VerbLabels, Histogram>,
    /// Delegate failures by plugin type.
    pub delegate_errors: Family<DelegateLabels, Counter>,
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
        Self {
            registry: Mutex::new(registry),
            requests,
            latency,
            delegate_errors,
        }
    }
}

impl Metrics {
    /// Record one request.
    pub fn observe(&self, verb: &str, ok: bool, seconds: f64) {
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
