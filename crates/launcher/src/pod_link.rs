//! The pod interface as discovered inside the launcher pod's netns (filled by the executor's
//! discovery, consumed by the pure planners).

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::addressing::is_global_unicast;
use crate::mac::MacAddr;

/// A pod interface as the CNI plugins left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodLink {
    /// Interface name (`eth0`, `pod<hash>`, `net1`).
    pub name: String,
    /// Kernel interface index in the pod netns.
    pub index: u32,
    /// Hardware address.
    pub mac: MacAddr,
    /// MTU.
    pub mtu: u32,
    /// Addresses with prefix length, IPv4 and IPv6, link-local ones excluded.
    pub addresses: Vec<IpNet>,
    /// Routes through this interface (main table, kernel-made connected routes excluded), in the
    /// kernel's listing order.
    pub routes: Vec<PodRoute>,
}

/// A route through the pod interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRoute {
    /// Destination; the default route is `0.0.0.0/0` or `::/0`.
    pub destination: IpNet,
    /// Next hop, if any.
    pub gateway: Option<IpAddr>,
}

impl PodLink {
    /// The first global unicast IPv4 address, with its prefix.
    pub fn global_ipv4(&self) -> Option<IpNet> {
        self.addresses
            .iter()
            .copied()
            .find(|a| a.addr().is_ipv4() && is_global_unicast(a.addr()))
    }

    /// The first global unicast IPv6 address, with its prefix.
    pub fn global_ipv6(&self) -> Option<IpNet> {
        self.addresses
            .iter()
            .copied()
            .find(|a| a.addr().is_ipv6() && is_global_unicast(a.addr()))
    }
}
