//! A 48-bit Ethernet MAC address with the canonical lowercase `aa:bb:cc:dd:ee:ff` text form.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 48-bit Ethernet hardware address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddress(pub [u8; 6]);

/// The MAC KubeVirt reserves for the masquerade bridge (`pkg/network/link/mac.go`).
pub const MASQUERADE_BRIDGE_MAC: MacAddress = MacAddress([0x02, 0, 0, 0, 0, 0]);

/// A MAC address string that is not six colon- or dash-separated hex octets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address {0:?}: expected six hex octets like 02:00:00:00:00:00")]
pub struct MacParseError(pub String);

impl FromStr for MacAddress {
    type Err = MacParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || MacParseError(s.to_string());
        let parts: Vec<&str> = s.split([':', '-']).collect();
        if parts.len() != 6 {
            return Err(err());
        }
        let mut octets = [0u8; 6];
        for (octet, part) in octets.iter_mut().zip(parts) {
            if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err());
            }
            *octet = u8::from_str_radix(part, 16).map_err(|_| err())?;
        }
        Ok(MacAddress(octets))
    }
}

impl fmt::Display for MacAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl Serialize for MacAddress {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddress {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_prints_lowercase() {
        let mac: MacAddress = "12:34:56:78:90:AB".parse().unwrap();
        assert_eq!(mac.to_string(), "12:34:56:78:90:ab");
        assert_eq!(MASQUERADE_BRIDGE_MAC.to_string(), "02:00:00:00:00:00");
        for bad in [
            "",
            "12:34:56:78:90",
            "12:34:56:78:90:ab:cd",
            "1:34:56:78:90:ab",
            "zz:34:56:78:90:ab",
        ] {
            assert!(bad.parse::<MacAddress>().is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn parser_never_panics_and_accepts_only_canonical_octets(text in ".{0,24}") {
            if let Ok(mac) = text.parse::<MacAddress>() {
                prop_assert_eq!(mac.to_string(), text.to_lowercase().replace('-', ":"));
            }
        }

        #[test]
        fn display_parse_round_trip(octets in any::<[u8; 6]>()) {
            let mac = MacAddress(octets);
            prop_assert_eq!(mac.to_string().parse::<MacAddress>().unwrap(), mac);
        }
    }
}
