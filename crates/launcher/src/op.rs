//! The primitive changes a wiring plan is made of; every executor backend performs them.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::mac::MacAddr;
use crate::nft::{NatRuleSet, NftFamily};
use crate::pod_link::PodRoute;

/// Owner of the TAP device (0 for root VMIs, 107 for non-root ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TapOwner {
    /// Owning user id.
    pub uid: u32,
    /// Owning group id.
    pub gid: u32,
}

/// One primitive change in the pod netns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Op {
    /// Create a bridge (left down), optionally with a fixed MAC and MTU.
    CreateBridge {
        /// Bridge name.
        name: String,
        /// Fixed MAC, else the kernel's.
        mac: Option<MacAddr>,
        /// MTU, else the kernel's.
        mtu: Option<u32>,
    },
    /// Create a persistent TAP (`IFF_TAP | IFF_NO_PI | IFF_VNET_HDR`, + `IFF_MULTI_QUEUE` when
    /// queues > 1) owned by `owner`, then set its MTU.
    CreateTap {
        /// TAP name.
        name: String,
        /// Owner.
        owner: TapOwner,
        /// Queue count.
        queues: u32,
        /// MTU.
        mtu: u32,
    },
    /// Delete a link.
    DeleteLink {
        /// Link name.
        name: String,
    },
    /// Set a link administratively up.
    SetUp {
        /// Link name.
        name: String,
    },
    /// Set a link administratively down.
    SetDown {
        /// Link name.
        name: String,
    },
    /// Rename a link (it must be down).
    Rename {
        /// Current name.
        from: String,
        /// New name.
        to: String,
    },
    /// Set a link's MAC.
    SetMac {
        /// Link name.
        link: String,
        /// The MAC.
        mac: MacAddr,
    },
    /// Set a link's MAC to the current MAC of another link.
    CopyMac {
        /// Link name.
        link: String,
        /// The link whose MAC is copied.
        from: String,
    },
    /// Enslave a link to a bridge.
    SetMaster {
        /// Link name.
        link: String,
        /// Bridge name.
        master: String,
    },
    /// Release a link from its bridge.
    ClearMaster {
        /// Link name.
        link: String,
    },
    /// Remove every IPv4 and IPv6 address of a link.
    FlushAddresses {
        /// Link name.
        link: String,
    },
    /// Add addresses to a link (already present ones are kept).
    AddAddresses {
        /// Link name.
        link: String,
        /// Addresses with prefix length.
        addresses: Vec<IpNet>,
    },
    /// Add routes through a link (already present ones are replaced).
    AddRoutes {
        /// Link name.
        link: String,
        /// The routes.
        routes: Vec<PodRoute>,
    },
    /// Turn MAC learning of a bridge port on or off.
    SetLearning {
        /// The bridge port.
        link: String,
        /// Learning on?
        enabled: bool,
    },
    /// Write a sysctl.
    Sysctl {
        /// Path under `/proc/sys` (`net/ipv4/ip_forward`).
        key: String,
        /// Value.
        value: String,
    },
    /// Install (or replace) the NAT tables.
    InstallNat {
        /// The rule set.
        rules: NatRuleSet,
    },
    /// Remove the NAT tables of these families as a whole.
    RemoveNat {
        /// Families whose `nat` table goes.
        families: Vec<NftFamily>,
    },
}
