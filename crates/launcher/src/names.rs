//! In-pod link names derived from the pod interface name, with KubeVirt's rules
//! (`pkg/network/link/names.go`), and the bridge binding's fake bridge address.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// Linux `IFNAMSIZ - 1`: the longest interface name the kernel accepts.
pub const MAX_LINK_NAME_LEN: usize = 15;

/// The names of the links the launcher creates for one pod interface.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkNames {
    /// The TAP the guest NIC is attached to (`tap0`, `tap<hash>`, `tap<n>`).
    pub tap: String,
    /// The in-pod bridge (`k6t-eth0`, `k6t-<hash>`).
    pub bridge: String,
    /// The name the pod interface is renamed to by the bridge binding (`eth0-nic`, `<hash>-nic`).
    pub renamed_pod_nic: String,
}

impl LinkNames {
    /// Derive the link names for the pod interface `pod_iface`; `primary` is true for the pod
    /// network (or the Multus default network), whose TAP is always `tap0`.
    pub fn derive(pod_iface: &str, primary: bool) -> Self {
        LinkNames {
            tap: tap_name(pod_iface, primary),
            bridge: bridge_name(pod_iface),
            renamed_pod_nic: renamed_pod_nic_name(pod_iface),
        }
    }
}

/// TAP name: `tap0` for the primary network, else `"tap" + pod_iface[3..]` (`pod<h>` → `tap<h>`,
/// `net1` → `tap1`).
pub fn tap_name(pod_iface: &str, primary: bool) -> String {
    if primary {
        return "tap0".to_string();
    }
    format!("tap{}", pod_iface.get(3..).unwrap_or(""))
}

/// Bridge name: `"k6t-"` + the pod interface name with a leading `pod` stripped.
pub fn bridge_name(pod_iface: &str) -> String {
    format!("k6t-{}", strip_pod_prefix(pod_iface))
}

/// Renamed pod interface: the pod interface name with a leading `pod` stripped, + `"-nic"`.
pub fn renamed_pod_nic_name(pod_iface: &str) -> String {
    format!("{}-nic", strip_pod_prefix(pod_iface))
}

fn strip_pod_prefix(pod_iface: &str) -> &str {
    pod_iface.strip_prefix("pod").unwrap_or(pod_iface)
}

/// The bridge binding's fake bridge address `169.254.75.1<index>/32`, where the decimal index is
/// concatenated as a string (0 → `.10`, 10 → `.110`). `None` when the result is not an address
/// (index ≥ 100).
pub fn fake_bridge_ip(interface_index: usize) -> Option<Ipv4Net> {
    let last: u8 = format!("1{interface_index}").parse().ok()?;
    Some(Ipv4Net::new(Ipv4Addr::new(169, 254, 75, last), 32).expect("32 is a valid IPv4 prefix"))
}

/// Whether `name` is a valid Linux interface name (1–15 bytes, no `/`, whitespace or `:`).
pub fn is_valid_link_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_LINK_NAME_LEN
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_bridge_ip_concatenates_the_index() {
        assert_eq!(fake_bridge_ip(0).unwrap().to_string(), "169.254.75.10/32");
        assert_eq!(fake_bridge_ip(9).unwrap().to_string(), "169.254.75.19/32");
        assert_eq!(fake_bridge_ip(10).unwrap().to_string(), "169.254.75.110/32");
        assert_eq!(fake_bridge_ip(99).unwrap().to_string(), "169.254.75.199/32");
        assert_eq!(fake_bridge_ip(100), None);
    }

    #[test]
    fn link_name_validity() {
        assert!(is_valid_link_name("k6t-16477688c0e"));
        assert!(!is_valid_link_name("k6t-custom-iface"));
        assert!(!is_valid_link_name(""));
        assert!(!is_valid_link_name("a/b"));
    }
}
