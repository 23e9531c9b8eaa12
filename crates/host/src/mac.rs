//! Ethernet (MAC) addresses as the kernel stores them.

use std::fmt;
use std::str::FromStr;

/// A 48-bit Ethernet address, shown as `02:00:00:aa:bb:cc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The raw bytes.
    pub fn octets(&self) -> [u8; 6] {
        self.0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// Why a string is not a MAC address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address {0:?}: expected six hex octets separated by ':'")]
pub struct MacParseError(pub String);

impl FromStr for MacAddr {
    type Err = MacParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || MacParseError(text.to_owned());
        let mut octets = [0u8; 6];
        let mut parts = text.split(':');
        for octet in &mut octets {
            let part = parts.next().ok_or_else(error)?;
            if part.is_empty() || part.len() > 2 {
                return Err(error());
            }
            *octet = u8::from_str_radix(part, 16).map_err(|_| error())?;
        }
        if parts.next().is_some() {
            return Err(error());
        }
        Ok(MacAddr(octets))
    }
}

impl TryFrom<&[u8]> for MacAddr {
    type Error = MacParseError;

    fn try_from(bytes: &[u8]) -> Result<Self, Self::Error> {
        <[u8; 6]>::try_from(bytes)
            .map(MacAddr)
            .map_err(|_| MacParseError(format!("{bytes:02x?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_prints_lowercase() {
        let mac: MacAddr = "02:AB:00:0c:1:ff".parse().unwrap();
        assert_eq!(mac.to_string(), "02:ab:00:0c:01:ff");
    }

    #[test]
    fn rejects_malformed_text() {
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:00:00",
            "02:00:00:00:00:zz",
            "02:00:00:00:00:100",
            "02::00:00:00:00",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad:?} accepted");
        }
    }

    proptest! {
        #[test]
        fn display_then_parse_is_identity(octets in any::<[u8; 6]>()) {
            let mac = MacAddr(octets);
            prop_assert_eq!(mac.to_string().parse::<MacAddr>().unwrap(), mac);
        }
    }
}
