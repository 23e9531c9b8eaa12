//! Per-interface field rules (KubeVirt `netiface.go`): name, model, MAC, PCI address, ports,
//! port ranges, DHCP options.

use std::collections::HashSet;
use std::net::IpAddr;

use super::{Cause, CauseType};
use crate::api::{Interface, VmiSpec};
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
        port_configuration(&path, iface, on_pod, config, causes);
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
    let message = match weft_netconf::parse_hardware_addr(&iface.mac_address).map(|octets| octets.len()) {
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

/// Ports and port ranges; only validated on the pod network (KubeVirt never checks them on
/// Multus networks).
fn port_configuration(
    path: &str,
    iface: &Interface,
    on_pod: bool,
    config: &ClusterConfig,
    causes: &mut Vec<Cause>,
) {
    let has_ranges = !iface.port_ranges.is_empty();
    let invalid = |field: String, message: &str| Cause::new(CauseType::FieldValueInvalid, field, message);
    if has_ranges && !config.gates.port_ranges_spec {
        causes.push(invalid(
            format!("{path}.name"),
            "portRanges is specified on interface but the PortRangesSpec feature gate is not enabled",
        ));
    }
    if !on_pod {
        return;
    }
    let ranges_checked = has_ranges && config.gates.port_ranges_spec;
    if ranges_checked && !iface.ports.is_empty() {
        causes.push(invalid(
            format!("{path}.name"),
            "Cannot define both ports and portRanges on interface",
        ));
    }
    ports(path, iface, causes);
    if ranges_checked {
        if iface.masquerade.is_none() {
            causes.push(invalid(
                format!("{path}.name"),
                "portRanges are only supported on masquerade interfaces",
            ));
        }
        port_ranges(path, iface, causes);
    }
}

fn ports(path: &str, iface: &Interface, causes: &mut Vec<Cause>) {
    // Names first (all ports), then each port's number and protocol, as KubeVirt does.
    let mut names = HashSet::new();
    for (j, port) in iface.ports.iter().enumerate() {
        if port.name.is_empty() {
            continue;
        }
        let field = format!("{path}.ports[{j}].name");
        if !names.insert(port.name.as_str()) {
            causes.push(Cause::new(
                CauseType::FieldValueDuplicate,
                field.clone(),
                format!("Duplicate name of the port: {}", port.name),
            ));
        }
        if !is_valid_port_name(&port.name) {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                field,
                format!("Invalid name of the port: {}", port.name),
            ));
        }
    }
    for (j, port) in iface.ports.iter().enumerate() {
        let port_path = format!("{path}.ports[{j}]");
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

fn port_ranges(path: &str, iface: &Interface, causes: &mut Vec<Cause>) {
    let field = format!("{path}.portRanges");
    let invalid = |field: String, message: String| Cause::new(CauseType::FieldValueInvalid, field, message);
    if iface.port_ranges.len() > MAX_PORT_RANGES {
        causes.push(invalid(field, "No more than 10 portRanges are allowed".into()));
        return;
    }
    for (j, range) in iface.port_ranges.iter().enumerate() {
        let (child, message) = if !matches!(range.protocol.as_str(), "TCP" | "UDP") {
            ("protocol", "Unknown protocol, only TCP or UDP allowed")
        } else if !(1..65536).contains(&range.start) {
            ("start", "Start must be a valid port number, 0 < x < 65536")
        } else if !(1..65536).contains(&range.end) {
            ("end", "End must be a valid port number, 0 < x < 65536")
        } else if range.start > range.end {
            ("start", "Start must be less than or equal to end")
        } else {
            continue;
        };
        causes.push(invalid(format!("{field}[{j}].{child}"), message.into()));
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
    // One cause per out-of-range option, as KubeVirt loops over them.
    for _ in dhcp
        .private_options
        .iter()
        .filter(|o| !(224..=254).contains(&o.option))
    {
        causes.push(Cause::new(
            CauseType::FieldValueInvalid,
            root,
            "provided DHCPPrivateOptions are out of range, must be in range 224 to 254",
        ));
    }
    for (k, ntp) in dhcp.ntp_servers.iter().enumerate() {
        if !is_ipv4(ntp) {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                format!("{path}.dhcpOptions.ntpServers[{k}]"),
                "NTP servers must be a list of valid IPv4 addresses.",
            ));
        }
    }
}

/// Go's `net.ParseIP(s).To4() != nil`: IPv4, or IPv4-mapped IPv6.
fn is_ipv4(s: &str) -> bool {
    match s.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => true,
        Ok(IpAddr::V6(v6)) => v6.to_ipv4_mapped().is_some(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Marker, Network, Port, PortRange};

    fn causes(iface: Interface, config: &ClusterConfig) -> Vec<(String, String)> {
        let mut spec = VmiSpec {
            networks: vec![Network {
                name: iface.name.clone(),
                ..Network::default_pod()
            }],
            ..Default::default()
        };
        spec.interfaces_mut().push(iface);
        let mut out = Vec::new();
        interface_fields("fake", &spec, config, &mut out);
        out.into_iter().map(|c| (c.field, c.message)).collect()
    }

    fn range(protocol: &str, start: i64, end: i64) -> PortRange {
        PortRange {
            protocol: protocol.into(),
            start,
            end,
            ..Default::default()
        }
    }

    #[test]
    fn port_range_fields_follow_kubevirt() {
        let mut config = ClusterConfig::default();
        config.gates.port_ranges_spec = true;
        let base = Interface {
            name: "default".into(),
            masquerade: Some(Marker::new()),
            ..Default::default()
        };
        let with = |ranges: Vec<PortRange>| Interface {
            port_ranges: ranges,
            ..base.clone()
        };
        let p = "fake.domain.devices.interfaces[0]";
        assert_eq!(
            causes(with(vec![range("SCTP", 80, 90)]), &config),
            [(
                format!("{p}.portRanges[0].protocol"),
                "Unknown protocol, only TCP or UDP allowed".into()
            )]
        );
        assert_eq!(
            causes(with(vec![range("TCP", 0, 100)]), &config)[0].0,
            format!("{p}.portRanges[0].start")
        );
        assert_eq!(
            causes(with(vec![range("TCP", 80, 70000)]), &config)[0].0,
            format!("{p}.portRanges[0].end")
        );
        assert_eq!(
            causes(with(vec![range("TCP", 100, 80)]), &config)[0].0,
            format!("{p}.portRanges[0].start")
        );
        let mut both = with(vec![range("TCP", 80, 90)]);
        both.ports.push(Port {
            port: 22,
            ..Default::default()
        });
        assert_eq!(
            causes(both, &config),
            [(
                format!("{p}.name"),
                "Cannot define both ports and portRanges on interface".into()
            )]
        );
        let mut bridge = with(vec![range("TCP", 80, 90)]);
        bridge.masquerade = None;
        bridge.bridge = Some(Marker::new());
        assert_eq!(
            causes(bridge, &config),
            [(
                format!("{p}.name"),
                "portRanges are only supported on masquerade interfaces".into()
            )]
        );
        assert!(causes(with(vec![range("TCP", 80, 200), range("UDP", 150, 300)]), &config).is_empty());
    }

    #[test]
    fn ntp_servers_and_private_options() {
        let iface = Interface {
            name: "default".into(),
            masquerade: Some(Marker::new()),
            dhcp_options: Some(crate::api::DhcpOptions {
                ntp_servers: vec![
                    "::1".into(),
                    "hostname".into(),
                    "::ffff:1.2.3.4".into(),
                    "127.0.0.1".into(),
                ],
                private_options: vec![
                    crate::api::DhcpPrivateOption {
                        option: 223,
                        ..Default::default()
                    },
                    crate::api::DhcpPrivateOption {
                        option: 255,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
            ..Default::default()
        };
        let got = causes(iface, &ClusterConfig::default());
        let fields: Vec<&str> = got.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "fake",
                "fake",
                "fake.domain.devices.interfaces[0].dhcpOptions.ntpServers[0]",
                "fake.domain.devices.interfaces[0].dhcpOptions.ntpServers[1]"
            ]
        );
    }
}
