//! Per-interface field rules (KubeVirt `netiface.go`): name, model, MAC, PCI address, ports,
//! port ranges, DHCP options.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use super::{Cause, CauseType};
use crate::api::{BindingKind, Interface, VmiSpec};
use crate::config::ClusterConfig;

/// Supported NIC models (empty means virtio).
pub const SUPPORTED_MODELS: &[&str] = &["e1000", "e1000e", "igb", "ne2k_pci", "pcnet", "rtl8139", "virtio"];

const MAX_PORT_RANGES: usize = 10;

pub(super) fn interface_fields(root: &str, spec: &VmiSpec, config: &ClusterConfig, causes: &mut Vec<Cause>) {
    for (i, iface) in spec.interfaces().iter().enumerate() {
        let path = format!("{root}.domain.devices.interfaces[{i}]");
        let on_pod = spec
            .networks
            .iter()
            // KubeVirt indexes networks by name in a map: the last duplicate wins.
            .rfind(|n| n.name == iface.name)
            .is_some_and(|n| n.pod.is_some());
        name(&path, iface, causes);
        model(&path, iface, causes);
        mac(&path, iface, causes);
        pci(&path, iface, causes);
        if on_pod {
            ports(&path, iface, causes);
        }
        port_ranges(&path, iface, on_pod, config, causes);
        dhcp_options(root, &path, iface, causes);
    }
}

fn name(path: &str, iface: &Interface, causes: &mut Vec<Cause>) {
    let valid = !iface.name.is_empty()
        && iface
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid {
        causes.push(Cause::new(
            CauseType::FieldValueInvalid,
            format!("{path}.name"),
            "Network interface name can only contain alphabetical characters, numbers, dashes (-) or underscores (_)",
        ));
    }
}

fn model(path: &str, iface: &Interface, causes: &mut Vec<Cause>) {
    if !iface.model.is_empty() && !SUPPORTED_MODELS.contains(&iface.model.as_str()) {
        causes.push(Cause::new(
            CauseType::FieldValueNotSupported,
            format!("{path}.model"),
            format!(
                "interface {path}.name uses model {} that is not supported.",
                iface.model
            ),
        ));
    }
}

fn mac(path: &str, iface: &Interface, causes: &mut Vec<Cause>) {
    if iface.mac_address.is_empty() {
        return;
    }
    let message = match parse_mac_len(&iface.mac_address) {
        None => format!(
            "interface {path}.name has malformed MAC address ({}).",
            iface.mac_address
        ),
        Some(len) if len > 6 => {
            format!(
                "interface {path}.name has too long MAC address ({}).",
                iface.mac_address
            )
        }
        Some(_) => return,
    };
    causes.push(Cause::new(
        CauseType::FieldValueInvalid,
        format!("{path}.macAddress"),
        message,
    ));
}

/// The byte length of a hardware address Go's `net.ParseMAC` accepts (6, 8 or 20), or `None`.
pub fn parse_mac_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if b.len() < 14 {
        return None;
    }
    let hex_groups = |group: usize, sep: u8| -> Option<usize> {
        let stride = group + 1;
        if !(b.len() + 1).is_multiple_of(stride) {
            return None;
        }
        let groups = (b.len() + 1) / stride;
        for (k, chunk) in b.chunks(stride).enumerate() {
            let (digits, rest) = chunk.split_at(group.min(chunk.len()));
            if digits.len() != group || !digits.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let last = k + 1 == groups;
            if (!last && rest != [sep]) || (last && !rest.is_empty()) {
                return None;
            }
        }
        Some(groups * group / 2)
    };
    let len = if b[2] == b':' || b[2] == b'-' {
        hex_groups(2, b[2])?
    } else if b[4] == b'.' {
        hex_groups(4, b'.')?
    } else {
        return None;
    };
    matches!(len, 6 | 8 | 20).then_some(len)
}

fn pci(path: &str, iface: &Interface, causes: &mut Vec<Cause>) {
    if iface.pci_address.is_empty() || is_pci_address(&iface.pci_address) {
        return;
    }
    causes.push(Cause::new(
        CauseType::FieldValueInvalid,
        format!("{path}.pciAddress"),
        format!(
            "interface {path}.name has malformed PCI address ({}).",
            iface.pci_address
        ),
    ));
}

/// `^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`.
pub fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11])
}

/// Kubernetes `IsValidPortName` (IANA_SVC_NAME).
pub fn is_valid_port_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 15
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.iter().any(u8::is_ascii_lowercase)
        && !name.contains("--")
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn ports(path: &str, iface: &Interface, causes: &mut Vec<Cause>) {
    let mut names = HashSet::new();
    for (j, port) in iface.ports.iter().enumerate() {
        let port_path = format!("{path}.ports[{j}]");
        if !port.name.is_empty() {
            if !names.insert(port.name.as_str()) {
                causes.push(Cause::new(
                    CauseType::FieldValueDuplicate,
                    format!("{port_path}.name"),
                    format!("Duplicate name of the port: {}", port.name),
                ));
            }
            if !is_valid_port_name(&port.name) {
                causes.push(Cause::new(
                    CauseType::FieldValueInvalid,
                    format!("{port_path}.name"),
                    format!("Invalid name of the port: {}", port.name),
                ));
            }
        }
        if port.port == 0 {
            causes.push(Cause::new(
                CauseType::FieldValueRequired,
                format!("{port_path}.port"),
                "Port field is mandatory.",
            ));
        } else if !(1..65536).contains(&port.port) {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                format!("{port_path}.port"),
                "Port field must be in range 0 < x < 65536.",
            ));
        }
        if !matches!(port.protocol.as_str(), "" | "TCP" | "UDP") {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                format!("{port_path}.protocol"),
                "Unknown protocol, only TCP or UDP allowed",
            ));
        }
    }
}

fn port_ranges(path: &str, iface: &Interface, on_pod: bool, config: &ClusterConfig, causes: &mut Vec<Cause>) {
    if iface.port_ranges.is_empty() {
        return;
    }
    let invalid = |field: String, message: String| Cause::new(CauseType::FieldValueInvalid, field, message);
    if !config.gates.port_ranges_spec {
        causes.push(invalid(
            format!("{path}.name"),
            "portRanges is specified on interface but the PortRangesSpec feature gate is not enabled".into(),
        ));
        return;
    }
    if !on_pod {
        return;
    }
    let field = format!("{path}.portRanges");
    if !iface.ports.is_empty() {
        causes.push(invalid(
            field.clone(),
            "Cannot define both ports and portRanges on interface".into(),
        ));
    }
    if iface.binding_kind() != BindingKind::Masquerade {
        causes.push(invalid(
            field.clone(),
            "portRanges are only supported on masquerade interfaces".into(),
        ));
    }
    if iface.port_ranges.len() > MAX_PORT_RANGES {
        causes.push(invalid(field, "No more than 10 portRanges are allowed".into()));
        return;
    }
    for (j, range) in iface.port_ranges.iter().enumerate() {
        let message = if !matches!(range.protocol.as_str(), "TCP" | "UDP") {
            "Unknown protocol, only TCP or UDP allowed"
        } else if !(1..65536).contains(&range.start) {
            "Start must be a valid port number, 0 < x < 65536"
        } else if !(1..65536).contains(&range.end) {
            "End must be a valid port number, 0 < x < 65536"
        } else if range.start > range.end {
            "Start must be less than or equal to end"
        } else {
            continue;
        };
        causes.push(invalid(format!("{field}[{j}]"), message.into()));
    }
    for protocol in ["TCP", "UDP"] {
        let mut ranges: Vec<(i64, i64)> = iface
            .port_ranges
            .iter()
            .filter(|r| r.protocol == protocol)
            .map(|r| (r.start, r.end))
            .collect();
        ranges.sort();
        for pair in ranges.windows(2) {
            let (prev, cur) = (pair[0], pair[1]);
            if cur.0 <= prev.1 {
                causes.push(invalid(
                    field.clone(),
                    format!(
                        "{protocol} portRanges [{}-{}] and [{}-{}] overlap",
                        prev.0, prev.1, cur.0, cur.1
                    ),
                ));
            }
        }
    }
}

fn dhcp_options(root: &str, path: &str, iface: &Interface, causes: &mut Vec<Cause>) {
    let Some(dhcp) = &iface.dhcp_options else {
        return;
    };
    let mut codes = HashSet::new();
    if !dhcp.private_options.iter().all(|o| codes.insert(o.option)) {
        causes.push(Cause::new(
            CauseType::FieldValueInvalid,
            root,
            "Found Duplicates: you have provided duplicate DHCPPrivateOptions",
        ));
    }
    if dhcp
        .private_options
        .iter()
        .any(|o| !(224..=254).contains(&o.option))
    {
        causes.push(Cause::new(
            CauseType::FieldValueInvalid,
            root,
            "provided DHCPPrivateOptions are out of range, must be in range 224 to 254",
        ));
    }
    for (k, ntp) in dhcp.ntp_servers.iter().enumerate() {
        if ntp.parse::<Ipv4Addr>().is_err() {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                format!("{path}.dhcpOptions.ntpServers[{k}]"),
                "NTP servers must be a list of valid IPv4 addresses.",
            ));
        }
    }
}
