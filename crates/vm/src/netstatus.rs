//! Reading the launcher pod's `k8s.v1.cni.cncf.io/network-status` annotation the way KubeVirt does.

use std::collections::BTreeMap;

use serde_json::Value;
use weft_netconf::{NETWORK_STATUS_ANNOTATION, NetworkStatus};

/// The network-status entries of a pod, from its annotations.
///
/// KubeVirt is tolerant here: a missing, empty or invalid annotation is an empty list (Go's
/// decoder also accepts entries without `name`, so those get an empty name).
pub fn network_statuses(annotations: &BTreeMap<String, String>) -> Vec<NetworkStatus> {
    annotations
        .get(NETWORK_STATUS_ANNOTATION)
        .map(|raw| parse_network_statuses(raw))
        .unwrap_or_default()
}

/// Parse a network-status annotation value; anything invalid yields an empty list.
pub fn parse_network_statuses(raw: &str) -> Vec<NetworkStatus> {
    let Ok(Value::Array(entries)) = serde_json::from_str::<Value>(raw) else {
        return Vec::new();
    };
    let mut parsed = Vec::with_capacity(entries.len());
    for mut entry in entries {
        if let Value::Object(fields) = &mut entry {
            fields
                .entry("name")
                .or_insert_with(|| Value::String(String::new()));
        }
        match serde_json::from_value::<NetworkStatus>(entry) {
            Ok(status) => parsed.push(status),
            Err(_) => return Vec::new(),
        }
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_or_missing_is_empty() {
        assert!(parse_network_statuses("").is_empty());
        assert!(parse_network_statuses("{").is_empty());
        assert!(parse_network_statuses("[{\"name\": 3}]").is_empty());
        assert!(network_statuses(&BTreeMap::new()).is_empty());
        let s = parse_network_statuses(
            r#"[{"interface":"net1"},{"name":"a","interface":"eth0","default":true,"dns":{}}]"#,
        );
        assert_eq!(s.len(), 2);
        assert!(s[1].default);
    }
}
