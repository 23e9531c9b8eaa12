//! Label and field selectors for list and watch.

use serde_json::Value;

use crate::Object;

/// Which objects a list or watch returns. Empty selectors match everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Equality label selector: every `(key, value)` must match.
    pub labels: Vec<(String, String)>,
    /// Equality field selector on dotted paths, e.g. `("spec.nodeName", "node1")`.
    pub fields: Vec<(String, String)>,
}

impl ListOptions {
    /// Select by one label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.push((key.into(), value.into()));
        self
    }
    /// Select by one field path.
    pub fn field(mut self, path: &str, value: &str) -> Self {
        self.fields.push((path.into(), value.into()));
        self
    }
    /// Whether `obj` is selected.
    pub fn matches(&self, obj: &Object) -> bool {
        self.labels
            .iter()
            .all(|(k, v)| obj.metadata.labels.get(k) == Some(v))
            && self.fields.iter().all(|(path, want)| match obj.path(path) {
                Some(Value::String(s)) => &s == want,
                Some(Value::Null) | None => want.is_empty(),
                Some(other) => {
                    let text = other.to_string();
                    text == *want
                }
            })
    }
    /// `k=v,k2=v2` form of the label selector (Kubernetes query syntax).
    pub fn label_selector(&self) -> Option<String> {
        (!self.labels.is_empty()).then(|| {
            self.labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
    }
    /// `path=v,...` form of the field selector (Kubernetes query syntax).
    pub fn field_selector(&self) -> Option<String> {
        (!self.fields.is_empty()).then(|| {
            self.fields
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
    }
}
