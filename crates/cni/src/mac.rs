//! The one 48-bit Ethernet (MAC) address type of the tree, with the canonical lowercase
//! `aa:bb:cc:dd:ee:ff` text form. `CNI_ARGS` `MAC=`, the kernel's link addresses (`weft-host`) and
//! the launcher's plans all use it; it lives here because this is the lowest crate that needs it.
//!
//! Multus' `mac`/`infiniband-guid` fields and KubeVirt's `macAddress` follow Go's `net.ParseMAC`
//! (6, 8 or 20 octets, three notations): that grammar is `weft_netconf::hwaddr`, not this type.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 48-bit Ethernet hardware address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The raw bytes.
    pub fn octets(&self) -> [u8; 6] {
        self.0
    }
}

/// A MAC address string that is not six hex octets separated by one of `:` or `-`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address {0:?}: expected six hex octets like 02:00:00:00:00:00")]
pub struct MacParseError(pub String);

impl FromStr for MacAddr {
    type Err = MacParseError;

    /// Accepts `aa:bb:cc:dd:ee:ff` and `aa-bb-cc-dd-ee-ff` (one separator throughout), any case,
    /// exactly two hex digits per octet.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || MacParseError(s.to_string());
        let separator = if s.contains('-') { '-' } else { ':' };
        let mut octets = [0u8; 6];
        let mut parts = s.split(separator);
        for octet in &mut octets {
            let part = parts.next().ok_or_else(err)?;
            if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err());
            }
            *octet = u8::from_str_radix(part, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(MacAddr(octets))
    }
}

impl TryFrom<&[u8]> for MacAddr {
    type Error = MacParseError;

    /// A kernel link-layer address attribute: exactly six bytes.
    fn try_from(bytes: &[u8]) -> Result<Self, Self::Error> {
        <[u8; 6]>::try_from(bytes)
            .map(MacAddr)
            .map_err(|_| MacParseError(format!("{bytes:02x?}")))
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl Serialize for MacAddr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Whether `text` is a MAC address in the colon form (`02:00:00:aa:bb:cc`, any case): what
/// libvirt's `<mac address>` and QEMU's `mac=` are given.
pub fn is_colon_mac(text: &str) -> bool {
    !text.contains('-') && text.parse::<MacAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_prints_lowercase() {
        let mac: MacAddr = "12:34:56:78:90:AB".parse().unwrap();
        assert_eq!(mac.to_string(), "12:34:56:78:90:ab");
        let dashed: MacAddr = "02-AA-bb-00-00-01".parse().unwrap();
        assert_eq!(dashed.to_string(), "02:aa:bb:00:00:01");
        assert_eq!(mac.octets(), [0x12, 0x34, 0x56, 0x78, 0x90, 0xab]);
    }

    #[test]
    fn rejects_malformed_text() {
        for bad in [
            "",
            "12:34:56:78:90",
            "12:34:56:78:90:ab:cd",
            "1:34:56:78:90:ab",
            "02:AB:00:0c:1:ff",
            "zz:34:56:78:90:ab",
            "02:00:00:00:00:100",
            "02::00:00:00:00",
            "02:00-00:00:00:00",
            "+2:00:00:00:00:00",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn error_message_and_serde_form() {
        assert_eq!(
            "x".parse::<MacAddr>().unwrap_err().to_string(),
            r#"invalid MAC address "x": expected six hex octets like 02:00:00:00:00:00"#
        );
        let mac = MacAddr([0x0a, 0x58, 0, 0, 0, 1]);
        assert_eq!(serde_json::to_string(&mac).unwrap(), r#""0a:58:00:00:00:01""#);
        assert_eq!(
            serde_json::from_str::<MacAddr>(r#""0A:58:00:00:00:01""#).unwrap(),
            mac
        );
        assert!(serde_json::from_str::<MacAddr>(r#""0a:58""#).is_err());
    }

    #[test]
    fn colon_form_only() {
        assert!(is_colon_mac("02:AA:bb:00:00:01"));
        assert!(!is_colon_mac("02-aa-bb-00-00-01"));
        assert!(!is_colon_mac("02:aa:bb:00:00"));
    }

    #[test]
    fn from_kernel_bytes() {
        assert_eq!(
            MacAddr::try_from(&[1u8, 2, 3, 4, 5, 6][..]).unwrap(),
            MacAddr([1, 2, 3, 4, 5, 6])
        );
        assert!(MacAddr::try_from(&[1u8, 2, 3][..]).is_err());
    }

    proptest! {
        #[test]
        fn parser_never_panics_and_accepts_only_canonical_octets(text in ".{0,24}") {
            if let Ok(mac) = text.parse::<MacAddr>() {
                prop_assert_eq!(mac.to_string(), text.to_lowercase().replace('-', ":"));
            }
        }

        #[test]
        fn display_parse_round_trip(octets in any::<[u8; 6]>()) {
            let mac = MacAddr(octets);
            prop_assert_eq!(mac.to_string().parse::<MacAddr>().unwrap(), mac);
        }
    }
}
