//! The extra columns of `-o wide`, and the table of IPReservations (`weft get ipreservations`).

use serde_json::Value;
use weft_store::Object;

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// `name=ip,ip` per entry of a list of `{name|interfaceName, ips|ipAddresses}` objects, `;`
/// between entries.
fn interfaces(entries: &[Value], name_key: &str, ips_key: &str) -> String {
    entries
        .iter()
        .map(|e| {
            let mut ips: Vec<String> = e[ips_key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            // A VMI interface may carry only the singular `ipAddress`.
            if let (true, Some(ip)) = (ips.is_empty(), e.get("ipAddress").and_then(Value::as_str)) {
                ips.push(ip.into());
            }
            format!("{}={}", text(e.get(name_key)), ips.join(","))
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// Headers of the columns `-o wide` adds for `kind` (after the default ones).
pub fn headers(kind: &str) -> &'static [&'static str] {
    match kind {
        "VirtualMachineInstance" => &["INTERFACES"],
        "VirtualMachine" => &["RUNNING"],
        "Pod" => &["NETWORKS"],
        "NetworkAttachmentDefinition" => &["TYPE"],
        "Event" => &["FIRST SEEN", "COMPONENT"],
        "IPReservation" => &["CONTAINER", "IFNAME", "POD UID"],
        _ => &[],
    }
}

/// The cells of [`headers`] for one object.
pub fn cells(kind: &str, o: &Object) -> Vec<String> {
    match kind {
        "VirtualMachineInstance" => {
            let list = o
                .path("status.interfaces")
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            vec![interfaces(&list, "name", "ipAddresses")]
        }
        "VirtualMachine" => vec![text(o.path("spec.running").as_ref())],
        "Pod" => {
            // The pod's network-status: what Multus (weft) attached, with the addresses.
            let status: Vec<Value> = o
                .metadata
                .annotations
                .get(weft_netconf::NETWORK_STATUS_ANNOTATION)
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or_default();
            vec![interfaces(&status, "name", "ips")]
        }
        "NetworkAttachmentDefinition" => {
            let config: Value = o
                .path("spec.config")
                .and_then(|c| c.as_str().and_then(|s| serde_json::from_str(s).ok()))
                .unwrap_or_default();
            let ty = config
                .get("type")
                .or_else(|| config.pointer("/plugins/0/type"))
                .cloned();
            vec![text(ty.as_ref())]
        }
        "Event" => vec![
            text(o.path("firstTimestamp").as_ref()),
            text(o.path("reportingComponent").as_ref()),
        ],
        "IPReservation" => {
            let container: String = text(o.path("spec.containerID").as_ref())
                .chars()
                .take(12)
                .collect();
            vec![
                container,
                text(o.path("spec.ifname").as_ref()),
                text(o.path("spec.podUID").as_ref()),
            ]
        }
        _ => Vec::new(),
    }
}

/// The default row of an IPReservation: NAME NETWORK IP HOLDER NODE (AGE added by the caller).
pub fn reservation_row(o: &Object) -> Vec<String> {
    let holder = match o.path("spec.claim") {
        Some(Value::String(claim)) if !claim.is_empty() => format!("claim/{claim}"),
        _ => format!("pod/{}", text(o.path("spec.podRef").as_ref())),
    };
    vec![
        o.metadata.name.clone(),
        text(o.path("spec.network").as_ref()),
        text(o.path("spec.ip").as_ref()),
        holder,
        text(o.path("spec.node").as_ref()),
    ]
}
