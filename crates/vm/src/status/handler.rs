//! The node agent's part of `status.interfaces`: rebuilt from the libvirt domain's interfaces,
//! the pod interface cache and the guest agent, keeping the controller-owned fields.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::api::{BindingKind, InterfaceStatus, VmiSpec};
use crate::infosource::{self, DOMAIN, DOMAIN_AND_GUEST_AGENT, GUEST_AGENT, MULTUS_STATUS};

/// Guest-only interfaces reported at most.
pub const MAX_GUEST_ONLY_INTERFACES: usize = 10;
/// Alias prefix of user-defined devices in the domain.
pub const USER_ALIAS_PREFIX: &str = "ua-";
/// Alias prefix (after `ua-`) of SR-IOV host devices.
pub const SRIOV_ALIAS_PREFIX: &str = "sriov-";

/// A domain `<interface>` as the status needs it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainInterface {
    /// Alias, e.g. `ua-default`.
    #[serde(default)]
    pub alias: String,
    /// MAC address.
    #[serde(default)]
    pub mac: String,
    /// virtio queues (driver `queues`), if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<u32>,
    /// `<link state>`, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_state: Option<String>,
}

/// What the node knows about a VM's running domain.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainReport {
    /// `<interface>` devices in domain order.
    #[serde(default)]
    pub interfaces: Vec<DomainInterface>,
    /// Aliases of `<hostdev>` devices (e.g. `ua-sriov-net1`).
    #[serde(default)]
    pub hostdev_aliases: Vec<String>,
    /// Guest agent interfaces.
    #[serde(default)]
    pub guest_agent_interfaces: Vec<GuestAgentInterface>,
    /// Pod interface cache by network name.
    #[serde(default)]
    pub pod_interface_cache: BTreeMap<String, PodInterfaceCache>,
}

/// An interface reported by the guest agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestAgentInterface {
    /// MAC address (matched by exact string).
    #[serde(default)]
    pub mac: String,
    /// First address.
    #[serde(default)]
    pub ip: String,
    /// All addresses.
    #[serde(default)]
    pub ips: Vec<String>,
    /// Name inside the guest.
    #[serde(default)]
    pub interface_name: String,
}

/// The node's pod interface cache entry of a network.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodInterfaceCache {
    /// First pod IP.
    #[serde(rename = "podIP", default)]
    pub pod_ip: String,
    /// Pod IPs.
    #[serde(rename = "podIPs", default)]
    pub pod_ips: Vec<String>,
}

/// The pod interface cache entry the node writes for a network: the first global-unicast
/// IPv4 and the first global-unicast IPv6 of the pod interface, the cluster's primary family
/// first. Bridge binding keeps IPv4 only (the guest gets no DHCPv6).
pub fn pod_interface_cache(
    addresses: &[IpAddr],
    primary_is_ipv4: bool,
    bridge_binding: bool,
) -> PodInterfaceCache {
    let v4 = addresses.iter().find(|a| a.is_ipv4() && is_global_unicast(a));
    let v6 = addresses
        .iter()
        .find(|a| a.is_ipv6() && is_global_unicast(a))
        .filter(|_| !bridge_binding);
    let ordered = if primary_is_ipv4 { [v4, v6] } else { [v6, v4] };
    let pod_ips: Vec<String> = ordered.into_iter().flatten().map(ToString::to_string).collect();
    PodInterfaceCache {
        pod_ip: pod_ips.first().cloned().unwrap_or_default(),
        pod_ips,
    }
}

/// Go's `net.IP.IsGlobalUnicast`.
fn is_global_unicast(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_multicast()
                || v4.is_link_local()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (v6.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

/// KubeVirt's `NetStat.UpdateStatus`: the new `status.interfaces` from the spec, the previous
/// status and the domain report.
pub fn handler_status_interfaces(
    spec: &VmiSpec,
    previous: &[InterfaceStatus],
    report: &DomainReport,
) -> Vec<InterfaceStatus> {
    let mut result: Vec<InterfaceStatus> = report
        .interfaces
        .iter()
        .map(|d| InterfaceStatus {
            name: d.alias.strip_prefix(USER_ALIAS_PREFIX).unwrap_or(&d.alias).into(),
            mac: d.mac.clone(),
            info_source: DOMAIN.into(),
            queue_count: d.queues.map_or(1, |q| q as i32),
            link_state: d.link_state.clone().unwrap_or_else(|| "up".into()),
            ..Default::default()
        })
        .collect();

    for alias in &report.hostdev_aliases {
        let alias = alias.strip_prefix(USER_ALIAS_PREFIX).unwrap_or(alias);
        if let Some(name) = alias.strip_prefix(SRIOV_ALIAS_PREFIX) {
            let mac = spec
                .interfaces()
                .iter()
                .find(|i| i.name == name)
                .map(|i| i.mac_address.clone())
                .unwrap_or_default();
            result.push(InterfaceStatus {
                name: name.into(),
                mac,
                info_source: DOMAIN.into(),
                ..Default::default()
            });
        }
    }

    for iface in spec.interfaces() {
        if let Some(entry) = result.iter_mut().find(|s| s.name == iface.name) {
            let cache = report.pod_interface_cache.get(&iface.name);
            entry.ip_address = cache.map(|c| c.pod_ip.clone()).unwrap_or_default();
            entry.ip_addresses = cache.map(|c| c.pod_ips.clone()).unwrap_or_default();
        }
    }

    merge_guest_agent(spec, &mut result, &report.guest_agent_interfaces);

    if let Some(pod_net) = spec.networks.iter().find(|n| n.pod.is_some()) {
        let position = result.iter().position(|s| s.name == pod_net.name);
        match position {
            Some(i) => {
                let entry = result.remove(i);
                result.insert(0, entry);
            }
            None if previous.iter().any(|s| s.name == pod_net.name) => {
                result.insert(
                    0,
                    InterfaceStatus {
                        name: pod_net.name.clone(),
                        ..Default::default()
                    },
                );
            }
            None => {}
        }
    }

    for prev in previous
        .iter()
        .filter(|s| infosource::contains(&s.info_source, MULTUS_STATUS))
    {
        if let Some(entry) = result.iter_mut().find(|s| s.name == prev.name) {
            entry.info_source = infosource::add(&entry.info_source, MULTUS_STATUS);
        } else if spec.networks.iter().any(|n| n.name == prev.name) {
            result.push(InterfaceStatus {
                name: prev.name.clone(),
                info_source: MULTUS_STATUS.into(),
                ..Default::default()
            });
        }
    }

    for entry in result.iter_mut().filter(|s| !s.name.is_empty()) {
        entry.pod_interface_name = previous
            .iter()
            .find(|p| p.name == entry.name)
            .map(|p| p.pod_interface_name.clone())
            .unwrap_or_default();
    }
    result
}

fn merge_guest_agent(
    spec: &VmiSpec,
    result: &mut Vec<InterfaceStatus>,
    guest_interfaces: &[GuestAgentInterface],
) {
    let mut guest_only = 0;
    for ga in guest_interfaces {
        if let Some(entry) = result.iter_mut().find(|s| s.mac == ga.mac) {
            let masquerade = spec
                .interfaces()
                .iter()
                .find(|i| i.name == entry.name)
                .is_some_and(|i| i.binding_kind() == BindingKind::Masquerade);
            let ga_ips: Vec<String> = if masquerade {
                ga.ips
                    .iter()
                    .filter(|ip| is_global_parsable(ip))
                    .cloned()
                    .collect()
            } else {
                ga.ips.clone()
            };
            entry.interface_name = ga.interface_name.clone();
            entry.ip_addresses = merge_ips(&entry.ip_addresses, &ga_ips);
            entry.ip_address = entry.ip_addresses.first().cloned().unwrap_or_default();
            if !ga.interface_name.is_empty() {
                entry.info_source = DOMAIN_AND_GUEST_AGENT.into();
            }
        } else if guest_only < MAX_GUEST_ONLY_INTERFACES {
            guest_only += 1;
            result.push(InterfaceStatus {
                mac: ga.mac.clone(),
                ip_address: ga.ip.clone().if_empty(|| ga.ips.first().cloned()),
                ip_addresses: ga.ips.clone(),
                interface_name: ga.interface_name.clone(),
                info_source: GUEST_AGENT.into(),
                ..Default::default()
            });
        }
    }
}

trait IfEmpty {
    fn if_empty(self, fallback: impl FnOnce() -> Option<String>) -> String;
}

impl IfEmpty for String {
    fn if_empty(self, fallback: impl FnOnce() -> Option<String>) -> String {
        if self.is_empty() {
            fallback().unwrap_or_default()
        } else {
            self
        }
    }
}

/// Parsable and not link-local (masquerade guests report their link-local addresses too).
fn is_global_parsable(ip: &str) -> bool {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => !v4.is_link_local(),
        Ok(IpAddr::V6(v6)) => (v6.segments()[0] & 0xffc0) != 0xfe80,
        Err(_) => false,
    }
}

fn is_v4(ip: &str) -> bool {
    ip.parse::<IpAddr>().is_ok_and(|a| a.is_ipv4())
}

/// Per family: keep the existing addresses when both sides have some, else take the guest
/// agent's; IPv4 first.
fn merge_ips(existing: &[String], guest: &[String]) -> Vec<String> {
    let family = |list: &[String], v4: bool| -> Vec<String> {
        list.iter().filter(|ip| is_v4(ip) == v4).cloned().collect()
    };
    let pick = |v4: bool| {
        let (old, new) = (family(existing, v4), family(guest, v4));
        if !old.is_empty() && !new.is_empty() {
            old
        } else {
            new
        }
    };
    let mut merged = pick(true);
    merged.extend(pick(false));
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Interface, Marker, Network};

    #[test]
    fn pod_ips_are_cached_primary_family_first() {
        let addrs: Vec<IpAddr> = ["fe80::1", "127.0.0.1", "fd10::5", "10.1.2.3", "10.1.2.4"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let c = pod_interface_cache(&addrs, true, false);
        assert_eq!(c.pod_ips, ["10.1.2.3", "fd10::5"]);
        assert_eq!(c.pod_ip, "10.1.2.3");
        assert_eq!(
            pod_interface_cache(&addrs, false, false).pod_ips,
            ["fd10::5", "10.1.2.3"]
        );
        assert_eq!(pod_interface_cache(&addrs, false, true).pod_ips, ["10.1.2.3"]);
        assert_eq!(
            pod_interface_cache(&[], true, false),
            PodInterfaceCache::default()
        );
    }

    #[test]
    fn sriov_hostdevs_and_guest_only_limit() {
        let mut spec = VmiSpec {
            networks: vec![Network {
                name: "sr".into(),
                multus: Some(Default::default()),
                ..Default::default()
            }],
            ..Default::default()
        };
        spec.interfaces_mut().push(Interface {
            name: "sr".into(),
            sriov: Some(Marker::new()),
            mac_address: "aa:bb:cc:dd:ee:ff".into(),
            ..Default::default()
        });
        let report = DomainReport {
            hostdev_aliases: vec!["ua-sriov-sr".into(), "ua-gpu".into()],
            guest_agent_interfaces: (0..12)
                .map(|i| GuestAgentInterface {
                    mac: format!("02:00:00:00:00:{i:02x}"),
                    ips: vec![format!("10.0.0.{i}")],
                    interface_name: format!("eth{i}"),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let previous = vec![InterfaceStatus {
            name: "sr".into(),
            pod_interface_name: "pod123".into(),
            info_source: "multus-status".into(),
            ..Default::default()
        }];
        let status = handler_status_interfaces(&spec, &previous, &report);
        assert_eq!(status[0].name, "sr");
        assert_eq!(status[0].mac, "aa:bb:cc:dd:ee:ff");
        assert_eq!(status[0].info_source, "domain, multus-status");
        assert_eq!(status[0].pod_interface_name, "pod123");
        assert_eq!(status[0].queue_count, 0);
        assert_eq!(status.len(), 1 + MAX_GUEST_ONLY_INTERFACES);
        assert_eq!(status[1].ip_address, "10.0.0.0");
        assert_eq!(status[1].info_source, "guest-agent");
    }
}
