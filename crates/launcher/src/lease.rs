//! What the launcher's DHCP servers must serve to the guest NIC behind one pod interface
//! (`pkg/network/setup/netpod/discoverbridge.go`, `pkg/network/dhcp/{bridge,masquerade}.go`).

use std::net::{IpAddr, Ipv4Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

use crate::addressing::MasqueradePair;
use crate::mac::{MASQUERADE_BRIDGE_MAC, MacAddr};
use crate::pod_link::PodRoute;

/// The lease of one guest NIC: DHCPv4 and/or DHCPv6.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestLease {
    /// The interface the servers listen on (the `k6t-…` bridge).
    pub server_interface: String,
    /// Serve only this client MAC, the guest NIC's (both bindings: KubeVirt's masquerade server
    /// answers any MAC, weft's does not); `None` would serve any client.
    pub client_mac: Option<MacAddr>,
    /// Option 26, the interface MTU.
    pub mtu: u16,
    /// The DHCPv4 lease, if the guest gets IPv4.
    pub ipv4: Option<LeaseV4>,
    /// The DHCPv6 lease, with the router advertisement that goes with it, if the guest gets
    /// IPv6 (masquerade with an IPv6 pod address, or a bridge-bound pod interface with one).
    pub ipv6: Option<LeaseV6>,
}

/// The DHCPv4 part of a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseV4 {
    /// The server identifier and source address.
    pub server_ip: Ipv4Addr,
    /// The address offered, with the subnet mask as prefix length.
    pub address: Ipv4Net,
    /// Option 3, the router; `None` sends no router option.
    pub router: Option<Ipv4Addr>,
    /// Option 121 classless routes, in discovery order (the default route is `0.0.0.0/0`).
    pub routes: Vec<GuestRoute>,
}

/// A classless static route for option 121.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestRoute {
    /// Destination (`0.0.0.0/0` for the default route).
    pub destination: Ipv4Net,
    /// Next hop; `None` is sent as `0.0.0.0` (on-link).
    pub gateway: Option<Ipv4Addr>,
}

/// The DHCPv6 part of a lease and the router advertisement sent with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseV6 {
    /// The IA_NA address offered; its network is the on-link prefix advertised.
    pub address: Ipv6Net,
    /// The server DUID-LL hardware address (the bridge MAC).
    pub server_mac: MacAddr,
    /// Whether the launcher is the guest's IPv6 router (masquerade): the advertisement then has
    /// a router lifetime and the guest's default route points at the bridge. A bridge-bound
    /// NIC's advertisement carries the prefix only (the launcher does not route for it).
    #[serde(default)]
    pub default_router: bool,
}

impl LeaseV6 {
    /// The on-link prefix the router advertisement carries.
    pub fn on_link_prefix(&self) -> Ipv6Net {
        self.address.trunc()
    }
}

/// One server the launcher runs for a guest NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestServer {
    /// DHCPv4 on the bridge, for the guest's MAC.
    Dhcpv4,
    /// DHCPv6 (IA_NA) on the bridge, for the guest's MAC.
    Dhcpv6,
    /// Router advertisements into the guest's tap: the managed flag and the on-link prefix,
    /// with a router lifetime when `default_router`.
    RouterAdvertisement {
        /// The advertised on-link prefix.
        prefix: Ipv6Net,
        /// Whether the advertisement makes the launcher the guest's default router.
        default_router: bool,
    },
}

impl GuestLease {
    /// The servers to run for this lease, in start order: DHCPv4 for an IPv4 lease; DHCPv6 and
    /// router advertisements for an IPv6 one (KubeVirt runs DHCPv6 for masquerade only and
    /// advertises no router, kubevirt #19193 and #7979).
    pub fn servers(&self) -> Vec<GuestServer> {
        let mut servers = Vec::new();
        if self.ipv4.is_some() {
            servers.push(GuestServer::Dhcpv4);
        }
        if let Some(v6) = &self.ipv6 {
            servers.push(GuestServer::Dhcpv6);
            servers.push(GuestServer::RouterAdvertisement {
                prefix: v6.on_link_prefix(),
                default_router: v6.default_router,
            });
        }
        servers
    }
}

/// The bridge binding lease: the pod interface's IPv4 and IPv6 move to the guest. `None` when
/// the pod interface has no global address (KubeVirt's "IPAM disabled": no DHCP server at all).
/// The IPv6 address is served over DHCPv6 with a router advertisement of its on-link prefix
/// and no router lifetime (KubeVirt serves no IPv6 to a bridge-bound guest, kubevirt #7979);
/// The server's DUID and the advertisement's source use the masquerade bridge MAC.
/// The router is the next hop of the first IPv4 route; the routes are all IPv4 routes except
/// the one to the address's own subnet. With no IPv4 route at all (a NAD whose IPAM has a
/// range but no `routes`, with or without a `gateway`) the lease has no router option and no
/// routes: the guest reaches its own subnet only. KubeVirt fails the whole setup there
/// ("no gateway address found in routes", kubevirt #5762; docs/compat.md).
pub fn bridge_lease(
    bridge: &str,
    server_ip: Option<Ipv4Addr>,
    guest_mac: MacAddr,
    (pod_ipv4, pod_ipv6): (Option<IpNet>, Option<IpNet>),
    pod_routes: &[PodRoute],
    mtu: u16,
) -> Option<GuestLease> {
    let ipv6 = match pod_ipv6 {
        Some(IpNet::V6(address)) => Some(LeaseV6 {
            address,
            // Never the guest's own MAC: an advertisement from the guest's own link-local
            // address is ignored as a loop.
            server_mac: MASQUERADE_BRIDGE_MAC,
            default_router: false,
        }),
        _ => None,
    };
    let ipv4 = match (pod_ipv4, server_ip) {
        (Some(IpNet::V4(address)), Some(server_ip)) => Some(bridge_lease_v4(address, server_ip, pod_routes)),
        _ => None,
    };
    guest_lease(bridge, guest_mac, mtu, ipv4, ipv6)
}

/// The lease served on `bridge` to `guest_mac` only; `None` when neither family is given.
fn guest_lease(
    bridge: &str,
    guest_mac: MacAddr,
    mtu: u16,
    ipv4: Option<LeaseV4>,
    ipv6: Option<LeaseV6>,
) -> Option<GuestLease> {
    if ipv4.is_none() && ipv6.is_none() {
        return None;
    }
    Some(GuestLease {
        server_interface: bridge.to_string(),
        client_mac: Some(guest_mac),
        mtu,
        ipv4,
        ipv6,
    })
}

fn bridge_lease_v4(address: Ipv4Net, server_ip: Ipv4Addr, pod_routes: &[PodRoute]) -> LeaseV4 {
    let ipv4_routes: Vec<GuestRoute> = pod_routes
        .iter()
        .filter_map(|r| match (r.destination, r.gateway) {
            (IpNet::V4(destination), None) => Some(GuestRoute {
                destination,
                gateway: None,
            }),
            (IpNet::V4(destination), Some(IpAddr::V4(gw))) => Some(GuestRoute {
                destination,
                gateway: Some(gw),
            }),
            _ => None,
        })
        .collect();
    let router = ipv4_routes.first().and_then(|r| r.gateway);
    let own_subnet = address.trunc();
    let routes = ipv4_routes
        .into_iter()
        .filter(|r| r.destination != own_subnet)
        .collect();
    LeaseV4 {
        server_ip,
        address,
        router,
        routes,
    }
}

/// The masquerade lease: the guest gets the VM network's guest address, the gateway is the
/// router and the server; only `guest_mac` is served (KubeVirt serves any MAC here: then any
/// frame on the bridge could take the guest's address). `None` when neither family is enabled.
pub fn masquerade_lease(
    bridge: &str,
    guest_mac: MacAddr,
    ipv4: Option<MasqueradePair<Ipv4Net>>,
    ipv6: Option<MasqueradePair<Ipv6Net>>,
    mtu: u16,
) -> Option<GuestLease> {
    let ipv4 = ipv4.map(|pair| LeaseV4 {
        server_ip: pair.gateway.addr(),
        address: pair.guest,
        router: Some(pair.gateway.addr()),
        routes: Vec::new(),
    });
    let ipv6 = ipv6.map(|pair| LeaseV6 {
        address: pair.guest,
        server_mac: MASQUERADE_BRIDGE_MAC,
        default_router: true,
    });
    guest_lease(bridge, guest_mac, mtu, ipv4, ipv6)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 9]);

    fn route(destination: &str, gateway: Option<&str>) -> PodRoute {
        PodRoute {
            destination: destination.parse().unwrap(),
            gateway: gateway.map(|g| g.parse().unwrap()),
        }
    }

    #[test]
    fn dual_stack_bridge_lease_serves_both_families_and_advertises_the_prefix_only() {
        let lease = bridge_lease(
            "k6t-net1",
            Some(Ipv4Addr::new(169, 254, 75, 11)),
            MAC,
            (
                Some("192.168.100.10/24".parse().unwrap()),
                Some("fd00:100::10/64".parse().unwrap()),
            ),
            &[
                route("0.0.0.0/0", Some("192.168.100.1")),
                route("::/0", Some("fd00:100::1")),
            ],
            1450,
        )
        .unwrap();
        let v6 = lease.ipv6.unwrap();
        assert_eq!(v6.address, "fd00:100::10/64".parse::<Ipv6Net>().unwrap());
        assert_eq!(v6.on_link_prefix(), "fd00:100::/64".parse::<Ipv6Net>().unwrap());
        assert_eq!(
            lease.ipv4.as_ref().unwrap().router,
            Some(Ipv4Addr::new(192, 168, 100, 1))
        );
        assert_eq!(
            lease.servers(),
            [
                GuestServer::Dhcpv4,
                GuestServer::Dhcpv6,
                GuestServer::RouterAdvertisement {
                    prefix: "fd00:100::/64".parse().unwrap(),
                    default_router: false,
                },
            ]
        );
    }

    #[test]
    fn ipv6_only_bridge_lease_has_no_dhcpv4_and_no_address_means_no_lease() {
        let lease = bridge_lease(
            "k6t-net1",
            None,
            MAC,
            (None, Some("fd00:100::10/64".parse().unwrap())),
            &[],
            1500,
        )
        .unwrap();
        assert!(lease.ipv4.is_none());
        assert_eq!(lease.servers().len(), 2);
        assert!(!lease.servers().contains(&GuestServer::Dhcpv4));
        assert_eq!(bridge_lease("k6t-net1", None, MAC, (None, None), &[], 1500), None);
        // An IPv4 pod address without a server address (managedTap) serves nothing over v4.
        assert_eq!(
            bridge_lease(
                "k6t-net1",
                None,
                MAC,
                (Some("10.0.0.2/24".parse().unwrap()), None),
                &[],
                1500
            ),
            None
        );
    }

    #[test]
    fn masquerade_v6_makes_the_launcher_the_guests_router() {
        let pair = crate::addressing::VmNetworkCidrs::default().ipv6_pair().unwrap();
        let lease = masquerade_lease("k6t-eth0", MAC, None, Some(pair), 1500).unwrap();
        let v6 = lease.ipv6.unwrap();
        assert_eq!(v6.address, "fd10:0:2::2/120".parse::<Ipv6Net>().unwrap());
        assert_eq!(v6.server_mac, MASQUERADE_BRIDGE_MAC);
        assert_eq!(
            lease.servers(),
            [
                GuestServer::Dhcpv6,
                GuestServer::RouterAdvertisement {
                    prefix: "fd10:0:2::/120".parse().unwrap(),
                    default_router: true,
                },
            ]
        );
    }

    #[test]
    fn leases_recorded_before_router_advertisements_still_parse() {
        let old = r#"{"address":"fd10:0:2::2/120","serverMac":"02:00:00:00:00:00"}"#;
        let v6: LeaseV6 = serde_json::from_str(old).unwrap();
        assert!(!v6.default_router);
    }
}
