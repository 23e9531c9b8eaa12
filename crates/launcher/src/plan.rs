//! The wiring plan of one guest NIC inside the launcher pod's netns: the ordered link, address,
//! sysctl and NAT operations of the bridge and masquerade bindings (KubeVirt,
//! docs/upstream/kubevirt-network.md §7.3/§7.4), each with the operations that undo it, and the
//! DHCP lease the guest gets.

use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

use crate::addressing::{AddressingError, MasqueradePair, VmNetworkCidrs};
use crate::lease::{GuestLease, bridge_lease, masquerade_lease};
use crate::mac::{MASQUERADE_BRIDGE_MAC, MacAddr};
use crate::names::{LinkNames, fake_bridge_ip, is_valid_link_name};
use crate::nft::{NatAddresses, NatInput, NatOptions, masquerade_rules};
pub use crate::op::{Op, TapOwner};
use crate::pod_link::PodLink;

/// sysctl (path under `/proc/sys`) making the pod ignore ARP for addresses not on the receiving
/// interface (set when a bridge-bound pod interface had an IPv4).
pub const SYSCTL_ARP_IGNORE: &str = "net/ipv4/conf/all/arp_ignore";
/// sysctl enabling IPv4 forwarding (masquerade with IPv4).
pub const SYSCTL_IPV4_FORWARD: &str = "net/ipv4/ip_forward";
/// sysctl enabling IPv6 forwarding (masquerade with IPv6).
pub const SYSCTL_IPV6_FORWARD: &str = "net/ipv6/conf/all/forwarding";

/// The sysctl letting the masquerade bridge route loopback-sourced (DNATed) traffic.
pub fn route_localnet_sysctl(bridge: &str) -> String {
    format!("net/ipv4/conf/{bridge}/route_localnet")
}

/// How the guest NIC is connected to the pod interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Binding {
    /// L2: the pod interface is enslaved to a bridge with the TAP; the guest takes the pod IP.
    Bridge,
    /// L3: the guest sits behind NAT on a private VM network.
    Masquerade(NatOptions),
    /// A binding plugin with `domainAttachmentType: managedTap` (docs/upstream/kubevirt-network.md
    /// §7.6): the bridge binding's links without the fake bridge address, and no DHCP (the plugin
    /// configures the guest).
    ManagedTap,
}

/// The TAP device's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TapSettings {
    /// Owner of the TAP.
    pub owner: TapOwner,
    /// Queue count; more than 1 makes it a multi-queue TAP.
    pub queues: u32,
}

/// Everything the plan of one guest NIC is computed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WiringRequest {
    /// The binding of the VMI interface.
    pub binding: Binding,
    /// The pod interface name (`eth0`, `pod<hash>`, `net1`).
    pub pod_iface: String,
    /// Whether this is the pod (or Multus default) network: its TAP is `tap0`.
    pub primary: bool,
    /// Position of the interface in the VMI's interface list (the fake bridge IP suffix).
    pub interface_index: usize,
    /// The pod interface as discovered in the netns.
    pub pod_link: PodLink,
    /// The guest MAC when the VMI fixes one (spec `macAddress`, else status `mac`).
    pub guest_mac: Option<MacAddr>,
    /// The masquerade VM networks.
    pub vm_cidrs: VmNetworkCidrs,
    /// TAP owner and queues.
    pub tap: TapSettings,
}

/// One step of a plan: the change and how to undo it. Undo operations run in their listed order;
/// steps are undone in reverse plan order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WiringStep {
    /// The change.
    pub op: Op,
    /// What undoes it (empty when a later-undone step removes it anyway, e.g. an address on a link
    /// that is deleted, or when it is netns-global and shared, like the forwarding sysctls).
    pub undo: Vec<Op>,
}

/// The complete wiring of one guest NIC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WiringPlan {
    /// The pod interface this plan wires.
    pub pod_iface: String,
    /// The derived link names.
    pub names: LinkNames,
    /// The steps, in order.
    pub steps: Vec<WiringStep>,
    /// What the DHCP servers serve on the bridge; `None` when no server runs.
    pub lease: Option<GuestLease>,
    /// The guest NIC's MAC for the domain XML (fixed MAC, else the pod interface's MAC).
    pub guest_mac: MacAddr,
    /// MTU of the guest NIC (the pod interface's).
    pub mtu: u32,
    /// The pod IPs to report (KubeVirt's pod interface cache; IPv4 only for the bridge binding).
    pub pod_ips: Vec<IpAddr>,
    /// The pod interface as it was before the bridge binding took its addresses. KubeVirt keeps it
    /// as a dummy link named like the pod interface; weft keeps this record instead (see
    /// docs/compat.md). `None` for masquerade, which leaves the pod interface as it is.
    pub detached_pod_link: Option<PodLink>,
}

/// Errors planning the wiring.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The discovered link is not the requested pod interface.
    #[error("pod link ({expected}) is missing: discovery returned {found:?}")]
    PodLinkMismatch {
        /// The requested pod interface.
        expected: String,
        /// The link given.
        found: String,
    },
    /// A derived link name is not a valid Linux interface name.
    #[error(
        "pod interface {pod_iface:?}: derived link name {name:?} is not a valid interface name (1-15 bytes)"
    )]
    InvalidLinkName {
        /// The pod interface.
        pod_iface: String,
        /// The derived name.
        name: String,
    },
    /// The interface index does not give a fake bridge address (`169.254.75.1<index>`).
    #[error("interface index {0} is too large for the bridge binding's fake bridge address (max 99)")]
    InterfaceIndexTooLarge(usize),
    /// The pod link's MTU is unusable.
    #[error("pod link {link}: mtu {mtu} is out of range 68..=65535")]
    InvalidMtu {
        /// The pod link.
        link: String,
        /// The MTU given.
        mtu: u32,
    },
    /// Masquerade addressing failed.
    #[error(transparent)]
    Addressing(#[from] AddressingError),
}

/// Plan the wiring of one guest NIC.
pub fn plan_wiring(request: &WiringRequest) -> Result<WiringPlan, PlanError> {
    let link = &request.pod_link;
    if link.name != request.pod_iface {
        return Err(PlanError::PodLinkMismatch {
            expected: request.pod_iface.clone(),
            found: link.name.clone(),
        });
    }
    if !(68..=65535).contains(&link.mtu) {
        return Err(PlanError::InvalidMtu {
            link: link.name.clone(),
            mtu: link.mtu,
        });
    }
    let names = LinkNames::derive(&request.pod_iface, request.primary);
    let renamed_used = matches!(request.binding, Binding::Bridge | Binding::ManagedTap);
    for name in [&request.pod_iface, &names.tap, &names.bridge]
        .into_iter()
        .chain(renamed_used.then_some(&names.renamed_pod_nic))
    {
        if !is_valid_link_name(name) {
            return Err(PlanError::InvalidLinkName {
                pod_iface: request.pod_iface.clone(),
                name: name.clone(),
            });
        }
    }
    match &request.binding {
        Binding::Bridge => plan_bridge(request, names, true),
        Binding::ManagedTap => plan_bridge(request, names, false),
        Binding::Masquerade(options) => plan_masquerade(request, names, options),
    }
}

fn step(op: Op, undo: Vec<Op>) -> WiringStep {
    WiringStep { op, undo }
}

fn tap_steps(request: &WiringRequest, names: &LinkNames) -> Vec<WiringStep> {
    let tap = names.tap.clone();
    vec![
        step(
            Op::CreateTap {
                name: tap.clone(),
                owner: request.tap.owner,
                queues: request.tap.queues,
                mtu: request.pod_link.mtu,
            },
            vec![Op::DeleteLink { name: tap.clone() }],
        ),
        step(
            Op::SetMaster {
                link: tap.clone(),
                master: names.bridge.clone(),
            },
            vec![],
        ),
        step(Op::SetUp { name: tap }, vec![]),
    ]
}

fn sysctl(key: &str) -> WiringStep {
    step(
        Op::Sysctl {
            key: key.to_string(),
            value: "1".to_string(),
        },
        vec![],
    )
}

/// The bridge binding, and (without `dhcp`: no fake bridge address, no lease) managedTap.
fn plan_bridge(request: &WiringRequest, names: LinkNames, dhcp: bool) -> Result<WiringPlan, PlanError> {
    let link = &request.pod_link;
    let pod = request.pod_iface.clone();
    let (bridge, nic) = (names.bridge.clone(), names.renamed_pod_nic.clone());
    let pod_ipv4 = link.global_ipv4();
    let mut steps = vec![step(
        Op::CreateBridge {
            name: bridge.clone(),
            mac: None,
            mtu: None,
        },
        vec![Op::DeleteLink { name: bridge.clone() }],
    )];
    // The fake bridge address is the DHCP server's source; managedTap runs no server.
    let fake_ip = dhcp
        .then(|| fake_bridge_ip(request.interface_index))
        .map(|ip| ip.ok_or(PlanError::InterfaceIndexTooLarge(request.interface_index)))
        .transpose()?;
    if let (Some(fake_ip), Some(_)) = (fake_ip, pod_ipv4) {
        steps.push(step(
            Op::AddAddresses {
                link: bridge.clone(),
                addresses: vec![IpNet::V4(fake_ip)],
            },
            vec![],
        ));
    }
    steps.push(step(Op::SetUp { name: bridge.clone() }, vec![]));
    // Flushing the addresses takes the pod's routes with them: they come back last, once the
    // renamed-back link is up again.
    steps.push(step(
        Op::SetDown { name: pod.clone() },
        vec![
            Op::SetUp { name: pod.clone() },
            Op::AddRoutes {
                link: pod.clone(),
                routes: link.routes.clone(),
            },
        ],
    ));
    steps.push(step(
        Op::Rename {
            from: pod.clone(),
            to: nic.clone(),
        },
        vec![Op::Rename {
            from: nic.clone(),
            to: pod.clone(),
        }],
    ));
    steps.push(step(
        Op::CopyMac {
            link: nic.clone(),
            from: bridge.clone(),
        },
        vec![Op::SetMac {
            link: nic.clone(),
            mac: link.mac,
        }],
    ));
    steps.push(step(
        Op::SetMaster {
            link: nic.clone(),
            master: bridge.clone(),
        },
        vec![Op::ClearMaster { link: nic.clone() }],
    ));
    steps.push(step(
        Op::FlushAddresses { link: nic.clone() },
        vec![Op::AddAddresses {
            link: nic.clone(),
            addresses: link.addresses.clone(),
        }],
    ));
    steps.push(step(
        Op::SetUp { name: nic.clone() },
        vec![Op::SetDown { name: nic.clone() }],
    ));
    // Learning is a bridge-port setting: it goes away when the port is released.
    steps.push(step(
        Op::SetLearning {
            link: nic,
            enabled: false,
        },
        vec![],
    ));
    steps.extend(tap_steps(request, &names));
    if pod_ipv4.is_some() {
        steps.push(sysctl(SYSCTL_ARP_IGNORE));
    }

    let guest_mac = request.guest_mac.unwrap_or(link.mac);
    // managedTap runs no server at all (no fake IP); otherwise both families are served.
    let lease = match fake_ip {
        Some(fake_ip) => bridge_lease(
            &bridge,
            Some(fake_ip.addr()),
            guest_mac,
            (pod_ipv4, link.global_ipv6()),
            &link.routes,
            mtu16(link.mtu),
        ),
        None => None,
    };
    Ok(WiringPlan {
        pod_iface: pod,
        names,
        steps,
        lease,
        guest_mac,
        mtu: link.mtu,
        pod_ips: pod_ipv4.map(|a| a.addr()).into_iter().collect(),
        detached_pod_link: Some(link.clone()),
    })
}

fn plan_masquerade(
    request: &WiringRequest,
    names: LinkNames,
    options: &NatOptions,
) -> Result<WiringPlan, PlanError> {
    let link = &request.pod_link;
    let bridge = names.bridge.clone();
    let pod_ipv4 = link.global_ipv4();
    let pod_ipv6 = link.global_ipv6();
    let v4: Option<MasqueradePair<Ipv4Net>> = pod_ipv4.map(|_| request.vm_cidrs.ipv4_pair()).transpose()?;
    let v6: Option<MasqueradePair<Ipv6Net>> = pod_ipv6.map(|_| request.vm_cidrs.ipv6_pair()).transpose()?;

    let mut steps = vec![step(
        Op::CreateBridge {
            name: bridge.clone(),
            mac: Some(MASQUERADE_BRIDGE_MAC),
            mtu: Some(link.mtu),
        },
        vec![Op::DeleteLink { name: bridge.clone() }],
    )];
    let addresses: Vec<IpNet> = v4
        .map(|p| IpNet::V4(p.gateway))
        .into_iter()
        .chain(v6.map(|p| IpNet::V6(p.gateway)))
        .collect();
    if !addresses.is_empty() {
        steps.push(step(
            Op::AddAddresses {
                link: bridge.clone(),
                addresses,
            },
            vec![],
        ));
    }
    steps.push(step(Op::SetUp { name: bridge.clone() }, vec![]));
    if v4.is_some() {
        steps.push(sysctl(&route_localnet_sysctl(&bridge)));
    }
    steps.extend(tap_steps(request, &names));
    if v4.is_some() {
        steps.push(sysctl(SYSCTL_IPV4_FORWARD));
    }
    if v6.is_some() {
        steps.push(sysctl(SYSCTL_IPV6_FORWARD));
    }
    let nat = masquerade_rules(&NatInput {
        pod_iface: request.pod_iface.clone(),
        bridge: bridge.clone(),
        ipv4: v4.map(|p| NatAddresses {
            gateway: IpAddr::V4(p.gateway.addr()),
            guest: IpAddr::V4(p.guest.addr()),
            pod: pod_ipv4.map(|a| a.addr()),
        }),
        ipv6: v6.map(|p| NatAddresses {
            gateway: IpAddr::V6(p.gateway.addr()),
            guest: IpAddr::V6(p.guest.addr()),
            pod: pod_ipv6.map(|a| a.addr()),
        }),
        options: options.clone(),
    });
    if !nat.is_empty() {
        let families = nat.table_families();
        steps.push(step(
            Op::InstallNat { rules: nat },
            vec![Op::RemoveNat { families }],
        ));
    }

    let guest_mac = request.guest_mac.unwrap_or(link.mac);
    let lease = masquerade_lease(&bridge, guest_mac, v4, v6, mtu16(link.mtu));
    Ok(WiringPlan {
        pod_iface: request.pod_iface.clone(),
        names,
        steps,
        lease,
        guest_mac,
        mtu: link.mtu,
        pod_ips: pod_ipv4.into_iter().chain(pod_ipv6).map(|a| a.addr()).collect(),
        detached_pod_link: None,
    })
}

fn mtu16(mtu: u32) -> u16 {
    u16::try_from(mtu).unwrap_or(u16::MAX)
}

impl WiringPlan {
    /// The operations that undo the whole plan: every step's undo, steps in reverse order.
    /// Netns-global sysctls are left as they are (other NICs of the pod may rely on them).
    pub fn teardown(&self) -> Vec<Op> {
        undo_ops(&self.steps)
    }

    /// [`WiringPlan::teardown`] for a pod about to be deleted: the pod interface is not given
    /// its addresses and routes back, nor brought up again. A migration source's pod interface
    /// must not come back with the VM's address (and its own MAC) while the guest runs on the
    /// target: it would answer the VM's ARP and reset the VM's TCP connections.
    pub fn teardown_before_deletion(&self) -> Vec<Op> {
        self.teardown()
            .into_iter()
            .filter(|op| {
                !matches!(
                    op,
                    Op::AddAddresses { .. } | Op::AddRoutes { .. } | Op::SetUp { .. }
                )
            })
            .collect()
    }

    /// The operations that undo the first `applied` steps (rollback after a failure).
    pub fn rollback(&self, applied: usize) -> Vec<Op> {
        undo_ops(&self.steps[..applied.min(self.steps.len())])
    }
}

fn undo_ops(steps: &[WiringStep]) -> Vec<Op> {
    steps.iter().rev().flat_map(|s| s.undo.iter().cloned()).collect()
}

#[cfg(test)]
mod tests {

    #[test]
    fn teardown_before_deletion_leaves_the_pod_interface_down_without_addresses() {
        let plan = plan_wiring(&bridge_request(
            link(
                &["192.168.100.10/24"],
                &[("192.168.200.0/24", Some("192.168.100.1"))],
            ),
            1,
        ))
        .unwrap();
        let full = plan.teardown();
        assert!(full.iter().any(|op| matches!(op, Op::AddAddresses { .. })));
        let quiet = plan.teardown_before_deletion();
        assert!(quiet.iter().any(|op| matches!(op, Op::Rename { .. })));
        assert!(quiet.iter().any(|op| matches!(op, Op::ClearMaster { .. })));
        assert!(!quiet.iter().any(|op| matches!(
            op,
            Op::AddAddresses { .. } | Op::AddRoutes { .. } | Op::SetUp { .. }
        )));
    }
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;
    use crate::pod_link::PodRoute;

    fn link(addresses: &[&str], routes: &[(&str, Option<&str>)]) -> PodLink {
        PodLink {
            name: "pod16477688c0e".to_string(),
            index: 7,
            mac: MacAddr([0x0a, 0x58, 0, 0, 0, 1]),
            mtu: 1400,
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
            routes: routes
                .iter()
                .map(|(d, g)| PodRoute {
                    destination: d.parse().unwrap(),
                    gateway: g.map(|g| g.parse().unwrap()),
                })
                .collect(),
        }
    }

    fn bridge_request(pod_link: PodLink, index: usize) -> WiringRequest {
        WiringRequest {
            binding: Binding::Bridge,
            pod_iface: pod_link.name.clone(),
            primary: false,
            interface_index: index,
            pod_link,
            guest_mac: None,
            vm_cidrs: VmNetworkCidrs::default(),
            tap: TapSettings {
                owner: TapOwner { uid: 107, gid: 107 },
                queues: 0,
            },
        }
    }

    #[test]
    fn bridge_without_ipv4_has_no_fake_ip_or_arp_ignore_and_serves_dhcpv6() {
        let plan = plan_wiring(&bridge_request(link(&["fd00::5/64"], &[]), 2)).unwrap();
        // KubeVirt serves nothing here (kubevirt #7979); weft hands the IPv6 to the guest.
        let lease = plan.lease.as_ref().expect("an IPv6 lease");
        assert!(lease.ipv4.is_none());
        assert_eq!(
            lease.ipv6.unwrap().address,
            "fd00::5/64".parse::<Ipv6Net>().unwrap()
        );
        assert!(plan.pod_ips.is_empty());
        assert!(
            !plan
                .steps
                .iter()
                .any(|s| matches!(s.op, Op::Sysctl { .. } | Op::AddAddresses { .. }))
        );
        assert_eq!(plan.names.tap, "tap16477688c0e");
    }

    /// KubeVirt fails here (kubevirt #5762); weft serves the address with no router option.
    #[test]
    fn bridge_with_ipv4_and_no_route_leases_without_a_router() {
        let plan = plan_wiring(&bridge_request(link(&["10.1.0.5/24"], &[]), 0)).unwrap();
        let v4 = plan.lease.unwrap().ipv4.unwrap();
        assert_eq!(v4.address.to_string(), "10.1.0.5/24");
        assert_eq!(v4.router, None);
        assert!(v4.routes.is_empty());
        // Only the subnet route (on-link): still no router, nothing else to route.
        let plan = plan_wiring(&bridge_request(
            link(&["10.1.0.5/24"], &[("10.1.0.0/24", None)]),
            0,
        ))
        .unwrap();
        let v4 = plan.lease.unwrap().ipv4.unwrap();
        assert_eq!((v4.router, v4.routes.len()), (None, 0));
    }

    #[test]
    fn guest_mac_wins_over_the_pod_mac() {
        let mut request = bridge_request(link(&["10.1.0.5/24"], &[("0.0.0.0/0", Some("10.1.0.1"))]), 0);
        request.guest_mac = Some(MacAddr([2, 0, 0, 0, 0, 9]));
        let plan = plan_wiring(&request).unwrap();
        assert_eq!(plan.guest_mac, MacAddr([2, 0, 0, 0, 0, 9]));
        assert_eq!(plan.lease.unwrap().client_mac, Some(MacAddr([2, 0, 0, 0, 0, 9])));
    }

    #[test]
    fn managed_tap_is_bridge_without_fake_ip_or_lease() {
        let mut request = bridge_request(link(&["10.1.0.5/24"], &[]), 0);
        request.binding = Binding::ManagedTap;
        let plan = plan_wiring(&request).unwrap();
        assert_eq!(plan.lease, None, "no DHCP, so no gateway needed either");
        assert!(
            !plan
                .steps
                .iter()
                .any(|s| matches!(&s.op, Op::AddAddresses { link, .. } if link.starts_with("k6t-")))
        );
        assert!(plan.steps.iter().any(|s| s.op
            == Op::Rename {
                from: "pod16477688c0e".into(),
                to: "16477688c0e-nic".into()
            }));
        assert!(
            plan.steps
                .iter()
                .any(|s| matches!(&s.op, Op::Sysctl { key, .. } if key == SYSCTL_ARP_IGNORE))
        );
    }

    #[test]
    fn bad_requests_are_refused_with_the_field() {
        let mut request = bridge_request(link(&[], &[]), 100);
        assert_eq!(
            plan_wiring(&request).unwrap_err(),
            PlanError::InterfaceIndexTooLarge(100)
        );
        request.pod_iface = "eth1".to_string();
        assert!(
            plan_wiring(&request)
                .unwrap_err()
                .to_string()
                .contains("pod link (eth1) is missing")
        );
        let mut long = bridge_request(link(&[], &[]), 0);
        long.pod_link.name = "custom-iface".to_string();
        long.pod_iface = "custom-iface".to_string();
        long.primary = true;
        let err = plan_wiring(&long).unwrap_err().to_string();
        assert!(err.contains("k6t-custom-iface"), "{err}");
        let mut masquerade = bridge_request(link(&["10.1.0.5/24"], &[]), 0);
        masquerade.binding = Binding::Masquerade(NatOptions::default());
        masquerade.vm_cidrs.ipv4 = "10.0.2.0/31".parse().unwrap();
        assert!(
            plan_wiring(&masquerade)
                .unwrap_err()
                .to_string()
                .contains("VM CIDR subnet is too small")
        );
    }

    fn arb_link() -> impl Strategy<Value = PodLink> {
        (
            proptest::collection::vec((any::<[u8; 4]>(), 8u8..=30), 0..3),
            proptest::collection::vec(
                (any::<[u8; 4]>(), 0u8..=32, proptest::option::of(any::<[u8; 4]>())),
                0..4,
            ),
            68u32..=9000,
        )
            .prop_map(|(addresses, routes, mtu)| PodLink {
                name: "eth0".to_string(),
                index: 2,
                mac: MacAddr([0x0a, 0x58, 0, 0, 0, 1]),
                mtu,
                addresses: addresses
                    .into_iter()
                    .map(|(a, p)| IpNet::V4(Ipv4Net::new(a.into(), p).unwrap()))
                    .collect(),
                routes: routes
                    .into_iter()
                    .map(|(d, p, g)| PodRoute {
                        destination: IpNet::V4(Ipv4Net::new(d.into(), p).unwrap().trunc()),
                        gateway: g.map(|g| IpAddr::V4(g.into())),
                    })
                    .collect(),
            })
    }

    proptest! {
        /// Whatever the pod link looks like, every link a plan creates is deleted by its
        /// teardown, the pod interface gets its name, MAC, addresses and routes back, and a
        /// rollback after any step undoes exactly a prefix of the teardown's work.
        #[test]
        fn teardown_undoes_every_creation(link in arb_link(), masquerade in any::<bool>()) {
            let binding = if masquerade { Binding::Masquerade(NatOptions::default()) } else { Binding::Bridge };
            let request = WiringRequest {
                binding,
                pod_iface: "eth0".to_string(),
                primary: true,
                interface_index: 0,
                pod_link: link.clone(),
                guest_mac: None,
                vm_cidrs: VmNetworkCidrs::default(),
                tap: TapSettings { owner: TapOwner { uid: 0, gid: 0 }, queues: 4 },
            };
            let Ok(plan) = plan_wiring(&request) else { return Ok(()) };
            let created: BTreeSet<&String> = plan.steps.iter().filter_map(|s| match &s.op {
                Op::CreateBridge { name, .. } | Op::CreateTap { name, .. } => Some(name),
                _ => None,
            }).collect();
            let teardown = plan.teardown();
            let deleted: BTreeSet<&String> = teardown.iter().filter_map(|op| match op {
                Op::DeleteLink { name } => Some(name),
                _ => None,
            }).collect();
            prop_assert_eq!(created, deleted);
            if !masquerade {
                let rename_back = Op::Rename { from: "eth0-nic".into(), to: "eth0".into() };
                let restore_mac = Op::SetMac { link: "eth0-nic".into(), mac: link.mac };
                let restore_addresses = Op::AddAddresses { link: "eth0-nic".into(), addresses: link.addresses.clone() };
                let restore_routes = Op::AddRoutes { link: "eth0".into(), routes: link.routes.clone() };
                for op in [rename_back, restore_mac, restore_addresses, restore_routes] {
                    prop_assert!(teardown.contains(&op), "{:?} missing", op);
                }
                prop_assert_eq!(teardown.last(), Some(&Op::DeleteLink { name: "k6t-eth0".into() }));
            }
            for applied in 0..=plan.steps.len() {
                let rollback = plan.rollback(applied);
                prop_assert!(teardown.ends_with(&rollback));
            }
        }
    }
}
