//! Masquerade addressing: the gateway (on the bridge) and the guest address, derived from the VM
//! network CIDRs (`pkg/network/link/address.go`; defaults from `virtwrap/api/defaults.go`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

/// `vmNetworkCIDR` when none is configured.
pub const DEFAULT_VM_CIDR: &str = "10.0.2.0/24";
/// `vmIPv6NetworkCIDR` when none is configured.
pub const DEFAULT_VM_IPV6_CIDR: &str = "fd10:0:2::/120";

/// Errors deriving masquerade addresses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressingError {
    /// The CIDR text does not parse.
    #[error("invalid {field} {value:?}: {reason}")]
    InvalidCidr {
        /// The configuration field (`vmNetworkCIDR` or `vmIPv6NetworkCIDR`).
        field: &'static str,
        /// The text given.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The CIDR has fewer than 4 addresses (network, gateway, guest, broadcast).
    #[error("VM CIDR subnet is too small, at least 2 host addresses are required: {0}")]
    TooSmall(IpNet),
}

/// The VM network CIDRs of the masquerade binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmNetworkCidrs {
    /// `vmNetworkCIDR` (default `10.0.2.0/24`).
    pub ipv4: Ipv4Net,
    /// `vmIPv6NetworkCIDR` (default `fd10:0:2::/120`).
    pub ipv6: Ipv6Net,
}

impl Default for VmNetworkCidrs {
    fn default() -> Self {
        VmNetworkCidrs {
            ipv4: DEFAULT_VM_CIDR.parse().expect("default VM CIDR parses"),
            ipv6: DEFAULT_VM_IPV6_CIDR.parse().expect("default VM IPv6 CIDR parses"),
        }
    }
}

impl VmNetworkCidrs {
    /// Parse the configured CIDRs; an empty string means the default.
    pub fn parse(ipv4: &str, ipv6: &str) -> Result<Self, AddressingError> {
        let defaults = VmNetworkCidrs::default();
        let invalid = |field: &'static str, value: &str, reason: String| AddressingError::InvalidCidr {
            field,
            value: value.to_string(),
            reason,
        };
        let ipv4 = match ipv4 {
            "" => defaults.ipv4,
            text => text
                .parse()
                .map_err(|e| invalid("vmNetworkCIDR", text, format!("{e}")))?,
        };
        let ipv6 = match ipv6 {
            "" => defaults.ipv6,
            text => text
                .parse()
                .map_err(|e| invalid("vmIPv6NetworkCIDR", text, format!("{e}")))?,
        };
        Ok(VmNetworkCidrs { ipv4, ipv6 })
    }

    /// Gateway and guest addresses of the IPv4 VM network.
    pub fn ipv4_pair(&self) -> Result<MasqueradePair<Ipv4Net>, AddressingError> {
        ipv4_pair(self.ipv4)
    }

    /// Gateway and guest addresses of the IPv6 VM network.
    pub fn ipv6_pair(&self) -> Result<MasqueradePair<Ipv6Net>, AddressingError> {
        ipv6_pair(self.ipv6)
    }
}

/// The two addresses of a masquerade VM network, both with the CIDR's prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MasqueradePair<N> {
    /// The gateway, on the bridge: network address + 1.
    pub gateway: N,
    /// The guest: network address + 2.
    pub guest: N,
}

/// Gateway (network + 1) and guest (network + 2) of an IPv4 VM CIDR; at least 4 addresses.
pub fn ipv4_pair(cidr: Ipv4Net) -> Result<MasqueradePair<Ipv4Net>, AddressingError> {
    if cidr.prefix_len() > 30 {
        return Err(AddressingError::TooSmall(IpNet::V4(cidr)));
    }
    let base = u32::from(cidr.network());
    let at = |offset: u32| {
        Ipv4Net::new(Ipv4Addr::from(base + offset), cidr.prefix_len()).expect("prefix already valid")
    };
    Ok(MasqueradePair {
        gateway: at(1),
        guest: at(2),
    })
}

/// Gateway (network + 1) and guest (network + 2) of an IPv6 VM CIDR; at least 4 addresses.
pub fn ipv6_pair(cidr: Ipv6Net) -> Result<MasqueradePair<Ipv6Net>, AddressingError> {
    if cidr.prefix_len() > 126 {
        return Err(AddressingError::TooSmall(IpNet::V6(cidr)));
    }
    let base = u128::from(cidr.network());
    let at = |offset: u128| {
        Ipv6Net::new(Ipv6Addr::from(base + offset), cidr.prefix_len()).expect("prefix already valid")
    };
    Ok(MasqueradePair {
        gateway: at(1),
        guest: at(2),
    })
}

/// Go's `net.IP.IsGlobalUnicast`: not unspecified, loopback, multicast, link-local or (IPv4)
/// limited broadcast. Private and ULA addresses count as global.
pub fn is_global_unicast(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => {
            !(a.is_unspecified()
                || a.is_loopback()
                || a.is_multicast()
                || a.is_link_local()
                || a.is_broadcast())
        }
        IpAddr::V6(a) => {
            !(a.is_unspecified()
                || a.is_loopback()
                || a.is_multicast()
                || (a.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn pair_is_inside_the_cidr(addr in any::<u32>(), prefix in 0u8..=30) {
            let cidr = Ipv4Net::new(Ipv4Addr::from(addr), prefix).unwrap();
            let pair = ipv4_pair(cidr).unwrap();
            prop_assert!(cidr.trunc().contains(&pair.gateway.addr()));
            prop_assert!(cidr.trunc().contains(&pair.guest.addr()));
            prop_assert_ne!(pair.guest.addr(), cidr.broadcast());
        }
    }

    #[test]
    fn global_unicast() {
        assert!(is_global_unicast("10.0.0.1".parse().unwrap()));
        assert!(is_global_unicast("fd10::1".parse().unwrap()));
        assert!(!is_global_unicast("169.254.1.1".parse().unwrap()));
        assert!(!is_global_unicast("fe80::1".parse().unwrap()));
        assert!(!is_global_unicast("127.0.0.1".parse().unwrap()));
    }
}
