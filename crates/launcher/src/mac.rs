//! MAC addresses: the tree's one type is [`weft_host::MacAddr`] (owned by `weft_cni::mac`); this
//! module adds the addresses KubeVirt reserves.

pub use weft_host::MacAddr;
pub use weft_host::mac::MacParseError;

/// The MAC KubeVirt reserves for the masquerade bridge (`pkg/network/link/mac.go`).
pub const MASQUERADE_BRIDGE_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masquerade_bridge_mac_text() {
        assert_eq!(MASQUERADE_BRIDGE_MAC.to_string(), "02:00:00:00:00:00");
    }
}
