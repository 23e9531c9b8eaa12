//! Building network-status entries from a delegate's result exactly as the NAD client does, and
//! the annotation's byte-exact text (docs/upstream/multus.md §1.5;
//! `vectors/multus/14-network-status-single-interface.json`,
//! `vectors/multus/15-network-status-multi-interface.json`,
//! `vectors/multus/16-network-status-annotation-format.json`).

use serde::Serialize;
use serde_json::Value;
use weft_cni::{CniResult, Interface, Route};

use crate::NetworkStatus;

/// Why a network-status annotation could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StatusAnnotationError {
    /// Not a JSON array.
    #[error("network-status annotation is not a JSON array: {0}")]
    NotAnArray(String),
    /// One entry is malformed.
    #[error("network-status annotation entry {index}: {detail}")]
    BadEntry {
        /// Position in the array.
        index: usize,
        /// The decoder's message.
        detail: String,
    },
}

/// The status entries for one delegate (NAD client `CreateNetworkStatuses`): one entry when
/// the result has exactly one interface, else one per sandbox interface (a result without
/// sandbox interfaces gives none — docs/upstream/multus.md §1.5 QUIRK, kept).
pub fn network_statuses(
    result: &CniResult,
    name: &str,
    is_default: bool,
    device_info: Option<&Value>,
) -> Vec<NetworkStatus> {
    if result.interfaces.len() == 1 {
        return vec![network_status(result, name, is_default, device_info)];
    }
    let gateway = default_gateways(&result.routes);
    let in_sandbox = |i: usize| {
        result
            .interfaces
            .get(i)
            .is_some_and(|iface| !iface.sandbox.is_empty())
    };
    let default_index = if !is_default {
        None
    } else if let Some(ip) = result
        .ips
        .iter()
        .find(|ip| ip.gateway.is_some() && ip.interface.is_some())
    {
        ip.interface.filter(|i| in_sandbox(*i))
    } else {
        (0..result.interfaces.len()).find(|i| in_sandbox(*i))
    };
    let sandbox: Vec<usize> = (0..result.interfaces.len()).filter(|i| in_sandbox(*i)).collect();
    let mut entries: Vec<NetworkStatus> = sandbox
        .iter()
        .map(|&i| NetworkStatus {
            default: Some(i) == default_index,
            gateway: gateway.clone(),
            ..entry_base(&result.interfaces[i], result, name, device_info)
        })
        .collect();
    for ip in &result.ips {
        let target = match ip.interface {
            Some(i) => sandbox.iter().position(|&s| s == i),
            None => sandbox.len().checked_sub(1),
        };
        if let Some(entry) = target.and_then(|t| entries.get_mut(t)) {
            entry.ips.push(address_text(ip.address.addr()));
        }
    }
    entries
}

/// One entry for a delegate (NAD client `CreateNetworkStatus`, used for hot-plug): interface,
/// MAC and MTU of the last sandbox interface, every IP of the result.
pub fn network_status(
    result: &CniResult,
    name: &str,
    is_default: bool,
    device_info: Option<&Value>,
) -> NetworkStatus {
    let base = match result.interfaces.iter().rev().find(|i| !i.sandbox.is_empty()) {
        Some(iface) => entry_base(iface, result, name, device_info),
        None => NetworkStatus {
            name: name.to_owned(),
            dns: result.dns.clone(),
            device_info: device_info.cloned(),
            ..Default::default()
        },
    };
    NetworkStatus {
        default: is_default,
        ips: result
            .ips
            .iter()
            .map(|ip| address_text(ip.address.addr()))
            .collect(),
        gateway: default_gateways(&result.routes),
        ..base
    }
}

fn entry_base(
    iface: &Interface,
    result: &CniResult,
    name: &str,
    device_info: Option<&Value>,
) -> NetworkStatus {
    NetworkStatus {
        name: name.to_owned(),
        interface: iface.name.clone(),
        mac: iface.mac.clone(),
        mtu: iface.mtu.unwrap_or(0),
        dns: result.dns.clone(),
        device_info: device_info.cloned(),
        ..Default::default()
    }
}

/// Gateways of the default routes (`0.0.0.0/0`, `::/0`) of a result, in order.
pub fn default_gateways(routes: &[Route]) -> Vec<String> {
    routes
        .iter()
        .filter(|r| r.dst.prefix_len() == 0 && r.dst.addr().is_unspecified())
        .filter_map(|r| r.gw.map(address_text))
        .collect()
}

/// Go prints IPv4-mapped IPv6 addresses as IPv4.
fn address_text(ip: std::net::IpAddr) -> String {
    ip.to_canonical().to_string()
}

/// The annotation value, byte-exact with the NAD client: every entry pretty-printed with a
/// 4-space indent, joined by `,` inside `[` `]`, with Go's HTML-safe escaping.
pub fn format_network_status_annotation(statuses: &[NetworkStatus]) -> String {
    let entries: Vec<String> = statuses.iter().map(go_marshal_indent).collect();
    format!("[{}]", entries.join(","))
}

fn go_marshal_indent(status: &NetworkStatus) -> String {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    status.serialize(&mut serializer).expect("a status serialises");
    let text = String::from_utf8(out).expect("serde_json writes UTF-8");
    // `<`, `>`, `&`, U+2028 and U+2029 only occur inside strings, where Go escapes them.
    text.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// Parse the annotation strictly: any malformed entry is an error.
pub fn parse_network_status_annotation(value: &str) -> Result<Vec<NetworkStatus>, StatusAnnotationError> {
    let (statuses, mut errors) = read_network_status_annotation(value);
    match errors.is_empty() {
        true => Ok(statuses),
        false => Err(errors.remove(0)),
    }
}

/// Parse the annotation for a reader that wants what can be read: malformed entries are
/// skipped and reported, an empty value is an empty list.
pub fn read_network_status_annotation(value: &str) -> (Vec<NetworkStatus>, Vec<StatusAnnotationError>) {
    if value.trim().is_empty() {
        return (Vec::new(), Vec::new());
    }
    let raw: Vec<Value> = match serde_json::from_str(value) {
        Ok(raw) => raw,
        Err(e) => return (Vec::new(), vec![StatusAnnotationError::NotAnArray(e.to_string())]),
    };
    let mut statuses = Vec::new();
    let mut errors = Vec::new();
    for (index, entry) in raw.into_iter().enumerate() {
        match serde_json::from_value(entry) {
            Ok(status) => statuses.push(status),
            Err(e) => errors.push(StatusAnnotationError::BadEntry {
                index,
                detail: e.to_string(),
            }),
        }
    }
    (statuses, errors)
}

#[cfg(test)]
mod tests;
