//! `weft describe KIND NAME`: kubectl's describe layout as a pure function of the object, the
//! Events about it and the current time.

use serde_json::Value;
use weft_store::Object;

use crate::kinds::Event;

/// Whether `event` is about `object` (kind, name, and namespace: an event about a
/// cluster-scoped object lives in `default`).
pub fn is_about(event: &Event, object: &Object) -> bool {
    let involved = &event.involved_object;
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    involved.kind == object.kind && involved.name == object.metadata.name && involved.namespace == namespace
}

/// Age of an RFC 3339 time at `now` (kubectl's short form), `<unknown>` when unparsable.
pub fn age(time: &str, now: jiff::Timestamp) -> String {
    let Ok(then) = time.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let seconds = (now.as_second() - then.as_second()).max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn at<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(object, |v, key| v.get(key))
}

/// Columns padded to their widest cell (kubectl's tabwriter, 2 spaces apart), each line
/// indented by `indent`.
fn columns(indent: &str, rows: &[Vec<String>]) -> String {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..width)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = indent.to_string();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line += cell;
            } else {
                line += &format!("{cell:<w$}  ", w = widths[i]);
            }
        }
        out += line.trim_end();
        out += "\n";
    }
    out
}

fn field(out: &mut String, label: &str, value: &str) {
    let value = if value.is_empty() { "<none>" } else { value };
    *out += &format!("{:<14}{value}\n", format!("{label}:"));
}

fn map_field(out: &mut String, label: &str, map: &std::collections::BTreeMap<String, String>) {
    if map.is_empty() {
        field(out, label, "<none>");
        return;
    }
    for (i, (k, v)) in map.iter().enumerate() {
        let line = format!("{k}={v}");
        if i == 0 {
            field(out, label, &line);
        } else {
            *out += &format!("{:<14}{line}\n", "");
        }
    }
}

fn table_section(out: &mut String, title: &str, header: &[&str], rows: Vec<Vec<String>>) {
    if rows.is_empty() {
        *out += &format!("{title}:  <none>\n");
        return;
    }
    *out += &format!("{title}:\n");
    let mut all = vec![header.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    all.push(header.iter().map(|h| "-".repeat(h.len())).collect());
    all.extend(rows);
    *out += &columns("  ", &all);
}

fn conditions(out: &mut String, value: &Value, path: &str) {
    let rows = at(value, path)
        .and_then(Value::as_array)
        .map(|conditions| {
            conditions
                .iter()
                .map(|c| {
                    ["type", "status", "reason", "message"]
                        .iter()
                        .map(|k| text(c.get(*k)))
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default();
    table_section(out, "Conditions", &["Type", "Status", "Reason", "Message"], rows);
}

/// The kind's key fields (after the metadata, before the conditions).
fn key_fields(out: &mut String, kind: &str, value: &Value) {
    match kind {
        "VirtualMachineInstance" => {
            field(out, "Phase", &text(at(value, "status.phase")));
            field(out, "Node", &text(at(value, "status.nodeName")));
            let networks = at(value, "spec.networks")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let rows = at(value, "spec.domain.devices.interfaces")
                .and_then(Value::as_array)
                .map(|interfaces| {
                    interfaces
                        .iter()
                        .map(|i| {
                            let name = text(i.get("name"));
                            let binding = ["masquerade", "bridge", "sriov", "passtBinding", "binding"]
                                .into_iter()
                                .find(|b| i.get(*b).is_some())
                                .unwrap_or("-")
                                .to_string();
                            let network = networks
                                .iter()
                                .find(|n| text(n.get("name")) == name)
                                .map(|n| match at(n, "multus.networkName") {
                                    Some(nad) => format!("multus {}", text(Some(nad))),
                                    None if n.get("pod").is_some() => "pod".into(),
                                    None => "-".into(),
                                })
                                .unwrap_or_else(|| "<missing>".into());
                            let status = at(value, "status.interfaces")
                                .and_then(Value::as_array)
                                .and_then(|s| s.iter().find(|s| text(s.get("name")) == name));
                            let get = |k: &str| status.map(|s| text(s.get(k))).unwrap_or_default();
                            vec![
                                name,
                                binding,
                                network,
                                get("ipAddress"),
                                get("mac"),
                                get("infoSource"),
                            ]
                        })
                        .collect()
                })
                .unwrap_or_default();
            table_section(
                out,
                "Interfaces",
                &["Name", "Binding", "Network", "IP", "MAC", "Info Source"],
                rows,
            );
        }
        "VirtualMachine" => {
            field(out, "Running", &text(at(value, "spec.running")));
            field(out, "Status", &text(at(value, "status.printableStatus")));
            field(out, "Ready", &text(at(value, "status.ready")));
        }
        "Pod" => {
            field(out, "Node", &text(at(value, "spec.nodeName")));
            field(out, "Status", &text(at(value, "status.phase")));
            field(out, "IP", &text(at(value, "status.podIP")));
            field(out, "Message", &text(at(value, "status.message")));
            let statuses = at(value, "metadata.annotations")
                .and_then(|a| a.get(weft_netconf::NETWORK_STATUS_ANNOTATION))
                .and_then(Value::as_str)
                .map(weft_vm::netstatus::parse_network_statuses)
                .unwrap_or_default();
            let rows = statuses
                .iter()
                .map(|s| {
                    vec![
                        s.name.clone(),
                        s.interface.clone(),
                        s.ips.join(","),
                        s.mac.clone(),
                        s.default.to_string(),
                    ]
                })
                .collect();
            table_section(
                out,
                "Networks",
                &["Name", "Interface", "IPs", "MAC", "Default"],
                rows,
            );
        }
        "NetworkAttachmentDefinition" => {
            let config = text(at(value, "spec.config"));
            let pretty = serde_json::from_str::<Value>(&config)
                .ok()
                .and_then(|v| serde_json::to_string_pretty(&v).ok())
                .unwrap_or(config);
            *out += "Config:\n";
            for line in pretty.lines() {
                *out += &format!("  {line}\n");
            }
        }
        "IPAMClaim" => {
            field(out, "Network", &text(at(value, "spec.network")));
            field(out, "Interface", &text(at(value, "spec.interface")));
            let ips = at(value, "status.ips")
                .and_then(Value::as_array)
                .map(|ips| ips.iter().map(|ip| text(Some(ip))).collect::<Vec<_>>().join(", "))
                .unwrap_or_default();
            field(out, "IPs", &ips);
            field(out, "Owner Pod", &text(at(value, "status.ownerPod.name")));
        }
        "Node" => {
            let addresses = at(value, "status.addresses")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|a| format!("{}={}", text(a.get("type")), text(a.get("address"))))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            field(out, "Addresses", &addresses);
        }
        _ => {}
    }
}

/// `weft describe` of `object` with the Events about it (others are ignored), at `now`.
pub fn describe(object: &Object, events: &[Event], now: jiff::Timestamp) -> String {
    let value = serde_json::to_value(object).unwrap_or(Value::Null);
    let mut out = String::new();
    field(&mut out, "Name", &object.metadata.name);
    if let Some(ns) = &object.metadata.namespace {
        field(&mut out, "Namespace", ns);
    }
    map_field(&mut out, "Labels", &object.metadata.labels);
    map_field(&mut out, "Annotations", &object.metadata.annotations);
    field(&mut out, "API Version", &object.api_version);
    field(&mut out, "Kind", &object.kind);
    field(
        &mut out,
        "Created",
        object.metadata.creation_timestamp.as_deref().unwrap_or(""),
    );
    key_fields(&mut out, &object.kind, &value);
    conditions(&mut out, &value, "status.conditions");
    let mut mine: Vec<&Event> = events.iter().filter(|e| is_about(e, object)).collect();
    mine.sort_by(|a, b| {
        (a.last_timestamp.as_str(), a.reason.as_str()).cmp(&(b.last_timestamp.as_str(), b.reason.as_str()))
    });
    let rows = mine
        .iter()
        .map(|e| {
            let seen = age(&e.last_timestamp, now);
            let age = if e.count > 1 {
                format!("{seen} (x{} over {})", e.count, age(&e.first_timestamp, now))
            } else {
                seen
            };
            vec![
                e.type_.clone(),
                e.reason.clone(),
                age,
                e.reporting_component.clone(),
                e.message.clone(),
            ]
        })
        .collect();
    table_section(
        &mut out,
        "Events",
        &["Type", "Reason", "Age", "From", "Message"],
        rows,
    );
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kinds::ObjectReference;

    fn now() -> jiff::Timestamp {
        "2026-01-01T12:00:00Z".parse().unwrap()
    }

    fn event(kind: &str, name: &str, reason: &str, message: &str, last: &str, count: u32) -> Event {
        Event {
            involved_object: ObjectReference {
                api_version: String::new(),
                kind: kind.into(),
                namespace: "default".into(),
                name: name.into(),
            },
            reason: reason.into(),
            message: message.into(),
            type_: "Warning".into(),
            count,
            first_timestamp: "2026-01-01T11:00:00Z".into(),
            last_timestamp: last.into(),
            reporting_component: "weft-controller".into(),
            ..Default::default()
        }
    }

    fn vmi() -> Object {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "default", "labels": {"app": "demo"},
                         "creationTimestamp": "2026-01-01T11:00:00Z"},
            "spec": {
                "domain": {"devices": {"interfaces": [
                    {"name": "default", "masquerade": {}},
                    {"name": "br1", "bridge": {}}
                ]}},
                "networks": [{"name": "default", "pod": {}}, {"name": "br1", "multus": {"networkName": "nope"}}]
            },
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "Synchronized", "status": "False", "reason": "FailedCreate",
                    "message": "failed to render launch manifest: failed to locate network attachment definition default/nope"}],
                "interfaces": [{"name": "default", "ipAddress": "10.0.2.2", "mac": "02:00:00:00:00:01", "infoSource": "domain"}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_vmi_with_its_conditions_and_only_its_events() {
        let events = vec![
            event(
                "VirtualMachineInstance",
                "vm1",
                "FailedCreate",
                "failed to locate network attachment definition default/nope",
                "2026-01-01T11:59:30Z",
                3,
            ),
            event(
                "VirtualMachineInstance",
                "vm2",
                "Other",
                "not mine",
                "2026-01-01T11:59:00Z",
                1,
            ),
            event(
                "Pod",
                "vm1",
                "Other",
                "not mine either",
                "2026-01-01T11:59:00Z",
                1,
            ),
        ];
        let text = describe(&vmi(), &events, now());
        assert!(!text.contains("not mine"));
        insta::assert_snapshot!("describe_vmi", text);
    }

    #[test]
    fn no_events_and_no_conditions_say_none() {
        let node: Object = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "node1"},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.99.0.2"}]}
        }))
        .unwrap();
        let mut about_node = event(
            "Node",
            "node1",
            "AgentRestarted",
            "restarted",
            "2026-01-01T11:00:00Z",
            1,
        );
        about_node.involved_object.namespace.clear();
        let text = describe(&node, &[about_node], now());
        insta::assert_snapshot!("describe_node", text);
    }

    #[test]
    fn a_pod_lists_its_network_status() {
        let status = json!([{"name": "weft-pod-network", "interface": "eth0", "ips": ["10.244.1.5"],
            "mac": "0a:58:0a:f4:01:05", "default": true}]);
        let pod: Object = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default",
                "annotations": {weft_netconf::NETWORK_STATUS_ANNOTATION: status.to_string()}},
            "spec": {"nodeName": "node1"},
            "status": {"phase": "Running", "podIP": "10.244.1.5"}
        }))
        .unwrap();
        let text = describe(&pod, &[], now());
        assert!(text.contains("Events:  <none>"), "{text}");
        assert!(text.contains("Conditions:  <none>"), "{text}");
        let networks = text
            .lines()
            .skip_while(|l| !l.starts_with("Networks:"))
            .nth(3)
            .unwrap();
        assert_eq!(
            networks,
            "  weft-pod-network  eth0       10.244.1.5  0a:58:0a:f4:01:05  true"
        );
    }

    #[test]
    fn vm_nad_and_claim_key_fields() {
        let vm: Object = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm1", "namespace": "default"},
            "spec": {"running": true},
            "status": {"printableStatus": "Running", "ready": true,
                "conditions": [{"type": "Failure", "status": "False"}]}
        }))
        .unwrap();
        let text = describe(&vm, &[], now());
        for line in [
            "Running:      true",
            "Status:       Running",
            "Ready:        true",
            "  Failure  False",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        }
        let nad: Object = serde_json::from_value(json!({
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {"config": "{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}"}
        }))
        .unwrap();
        let text = describe(&nad, &[], now());
        assert!(
            text.contains("Config:\n  {\n    \"cniVersion\": \"1.0.0\",\n    \"type\": \"bridge\"\n  }\n"),
            "{text}"
        );
        let claim: Object = serde_json::from_value(json!({
            "apiVersion": "k8s.cni.cncf.io/v1alpha1", "kind": "IPAMClaim",
            "metadata": {"name": "vm1.data", "namespace": "default"},
            "spec": {"network": "data", "interface": "pod3a6eb0790f3"},
            "status": {"ips": ["192.168.100.10/24"], "ownerPod": {"name": "virt-launcher-vm1-x"}}
        }))
        .unwrap();
        let text = describe(&claim, &[], now());
        for line in [
            "Network:      data",
            "IPs:          192.168.100.10/24",
            "Owner Pod:    virt-launcher-vm1-x",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        }
    }

    #[test]
    fn ages_are_kubectls() {
        assert_eq!(age("2026-01-01T11:59:30Z", now()), "30s");
        assert_eq!(age("2026-01-01T11:00:00Z", now()), "60m");
        assert_eq!(age("2025-12-30T12:00:00Z", now()), "2d");
        assert_eq!(age("", now()), "<unknown>");
    }
}
