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
    /// The DHCPv6 lease (masquerade with IPv6 only).
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

/// The DHCPv6 part of a masquerade lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseV6 {
    /// The IA_NA address offered.
    pub address: Ipv6Net,
    /// The server DUID-LL hardware address (the bridge MAC).
    pub server_mac: MacAddr,
}

/// The bridge binding lease: the pod interface's IPv4 moves to the guest. `None` when the pod
/// interface has no global IPv4 (KubeVirt's "IPAM disabled": no DHCP server at all).
/// The router is the next hop of the first IPv4 route; the routes are all IPv4 routes except
/// the one to the address's own subnet. With no IPv4 route at all (a NAD whose IPAM has a
/// range but no `routes`, with or without a `gateway`) the lease has no router option and no
/// routes: the guest reaches its own subnet only. KubeVirt fails the whole setup there
/// ("no gateway address found in routes", kubevirt #5762; docs/compat.md).
pub fn bridge_lease(
    bridge: &str,
    server_ip: Ipv4Addr,
    guest_mac: MacAddr,
    pod_ipv4: Option<IpNet>,
    pod_routes: &[PodRoute],
    mtu: u16,
) -> Option<GuestLease> {
    let Some(IpNet::V4(address)) = pod_ipv4 else {
        return None;
    };
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
    Some(GuestLease {
        server_interface: bridge.to_string(),
        client_mac: Some(guest_mac),
        mtu,
        ipv4: Some(LeaseV4 {
            server_ip,
            address,
            router,
            routes,
        }),
        ipv6: None,
    })
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
    if ipv4.is_none() && ipv6.is_none() {
        return None;
    }
    Some(GuestLease {
        server_interface: bridge.to_string(),
        client_mac: Some(guest_mac),
        mtu,
        ipv4: ipv4.map(|pair| LeaseV4 {
            server_ip: pair.gateway.addr(),
            address: pair.guest,
            router: Some(pair.gateway.addr()),
            routes: Vec::new(),
        }),
        ipv6: ipv6.map(|pair| LeaseV6 {
            address: pair.guest,
            server_mac: MASQUERADE_BRIDGE_MAC,
        }),
    })
}
