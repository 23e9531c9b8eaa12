//! Pod interface names of a VMI's networks: the hashed scheme, the legacy ordinal scheme,
//! and detecting which one a running pod uses. The in-pod link names derived from them are the
//! launcher's (`weft_launcher::LinkNames`).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use weft_netconf::NetworkStatus;

use crate::api::{InterfaceStatus, Network};

/// Name of the primary pod interface unless network-status says otherwise.
pub const PRIMARY_POD_INTERFACE_NAME: &str = "eth0";
/// The masquerade (and primary bridge) in-pod bridge, referenced by the istio annotations.
pub const DEFAULT_BRIDGE_NAME: &str = "k6t-eth0";
/// MAC reserved for the in-pod masquerade bridge.
pub const RESERVED_BRIDGE_MAC: &str = "02:00:00:00:00:00";

const HASHED_PREFIX: &str = "pod";
/// 15 (IFNAMSIZ - 1) minus the 4 chars of the `-nic` suffix.
const HASH_LEN: usize = 11;

/// Network name → pod interface name.
pub type PodInterfaceNames = BTreeMap<String, String>;

/// Which naming scheme a launcher pod uses for secondary interfaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameScheme {
    /// `pod` + 11 hex chars of SHA-256 of the network name (current).
    Hashed,
    /// `net1`, `net2`, ... in network order (legacy).
    Ordinal,
}

/// `pod` + the first 11 lowercase hex chars of SHA-256(network name).
pub fn hashed_pod_interface_name(network_name: &str) -> String {
    let digest = Sha256::digest(network_name.as_bytes());
    let mut name = String::with_capacity(HASHED_PREFIX.len() + HASH_LEN);
    name.push_str(HASHED_PREFIX);
    name.push_str(&hex::encode(&digest[..HASH_LEN.div_ceil(2)])[..HASH_LEN]);
    name
}

/// The legacy name of a network: `net<k>` where k counts secondary networks from 1 in
/// network order; `eth0` for the primary; `None` for unknown networks.
pub fn ordinal_pod_interface_name(network_name: &str, networks: &[Network]) -> Option<String> {
    ordinal_scheme(networks).remove(network_name)
}

/// Whether a pod interface name is ordinal (`^net\d+$`).
pub fn is_ordinal_name(name: &str) -> bool {
    name.strip_prefix("net")
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// Names of every primary or secondary network under the hashed scheme.
pub fn hashed_scheme(networks: &[Network]) -> PodInterfaceNames {
    scheme_with(networks, |net| hashed_pod_interface_name(&net.name))
}

/// Names of every primary or secondary network under the ordinal scheme.
pub fn ordinal_scheme(networks: &[Network]) -> PodInterfaceNames {
    let mut index = 0;
    scheme_with(networks, |_| {
        index += 1;
        format!("net{index}")
    })
}

/// The primary network named [`PRIMARY_POD_INTERFACE_NAME`], each secondary one (in network
/// order) `secondary`'s name for it; other networks none.
fn scheme_with(networks: &[Network], mut secondary: impl FnMut(&Network) -> String) -> PodInterfaceNames {
    networks
        .iter()
        .filter_map(|net| {
            if net.is_primary() {
                Some((net.name.clone(), PRIMARY_POD_INTERFACE_NAME.to_string()))
            } else if net.is_secondary() {
                Some((net.name.clone(), secondary(net)))
            } else {
                None
            }
        })
        .collect()
}

/// Names under a given scheme.
pub fn scheme_names(scheme: NameScheme, networks: &[Network]) -> PodInterfaceNames {
    match scheme {
        NameScheme::Hashed => hashed_scheme(networks),
        NameScheme::Ordinal => ordinal_scheme(networks),
    }
}

/// The scheme of a pod from its network-status: ordinal if any entry's interface is ordinal.
pub fn scheme_of_pod(statuses: &[NetworkStatus]) -> NameScheme {
    if statuses.iter().any(|s| is_ordinal_name(&s.interface)) {
        NameScheme::Ordinal
    } else {
        NameScheme::Hashed
    }
}

/// The scheme seen from inside the pod (node agent): ordinal if any existing link is.
pub fn scheme_of_links<'a>(link_names: impl IntoIterator<Item = &'a str>) -> NameScheme {
    if link_names.into_iter().any(is_ordinal_name) {
        NameScheme::Ordinal
    } else {
        NameScheme::Hashed
    }
}

/// KubeVirt's `CreateFromNetworkStatuses`: names under the scheme the pod uses.
pub fn scheme_from_network_statuses(networks: &[Network], statuses: &[NetworkStatus]) -> PodInterfaceNames {
    scheme_names(scheme_of_pod(statuses), networks)
}

/// The primary pod interface name: the interface of the `default: true` network-status entry
/// when it names one, else `eth0`.
pub fn primary_pod_interface_name(statuses: &[NetworkStatus]) -> String {
    statuses
        .iter()
        .find(|s| s.default && !s.interface.is_empty())
        .map(|s| s.interface.clone())
        .unwrap_or_else(|| PRIMARY_POD_INTERFACE_NAME.to_string())
}

/// Pod interface names a running pod uses: its scheme, with the primary name taken from
/// network-status.
pub fn pod_interface_names(networks: &[Network], statuses: &[NetworkStatus]) -> PodInterfaceNames {
    let mut names = scheme_from_network_statuses(networks, statuses);
    let primary = primary_pod_interface_name(statuses);
    for net in networks.iter().filter(|n| n.is_primary()) {
        names.insert(net.name.clone(), primary.clone());
    }
    names
}

/// KubeVirt's `HasOrdinalSecondaryIfaces`: whether the VMI's pod uses ordinal names, judged from
/// the first secondary network (spec order) whose status has a pod interface name. Unknown is
/// assumed ordinal (conservative: it blocks hot-unplug).
pub fn has_ordinal_secondary_ifaces(networks: &[Network], statuses: &[InterfaceStatus]) -> bool {
    let mut secondaries = networks.iter().filter(|n| n.is_secondary()).peekable();
    if secondaries.peek().is_none() {
        return false;
    }
    for net in secondaries {
        if let Some(status) = statuses
            .iter()
            .find(|s| s.name == net.name && !s.pod_interface_name.is_empty())
        {
            return is_ordinal_name(&status.pod_interface_name);
        }
    }
    true
}
