//! CNI spec versions: parsing, ordering, the versions weft speaks, and the `VERSION` reply.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A CNI spec version (`major.minor.patch`), ordered numerically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CniVersion {
    /// Major number.
    pub major: u16,
    /// Minor number.
    pub minor: u16,
    /// Patch number.
    pub patch: u16,
}

impl CniVersion {
    /// `0.1.0`: the first spec; results carry `ip4`/`ip6`.
    pub const V0_1_0: Self = Self::new(0, 1, 0);
    /// `0.2.0`: same result shape as 0.1.0.
    pub const V0_2_0: Self = Self::new(0, 2, 0);
    /// `0.3.0`: `interfaces`, `ips[]` with `version`.
    pub const V0_3_0: Self = Self::new(0, 3, 0);
    /// `0.3.1`: same result shape as 0.3.0.
    pub const V0_3_1: Self = Self::new(0, 3, 1);
    /// `0.4.0`: adds CHECK and `prevResult` on DEL.
    pub const V0_4_0: Self = Self::new(0, 4, 0);
    /// `1.0.0`: drops `ips[].version`.
    pub const V1_0_0: Self = Self::new(1, 0, 0);
    /// `1.1.0`: STATUS, GC, new interface and route fields.
    pub const V1_1_0: Self = Self::new(1, 1, 0);

    /// Every version weft reads and writes, oldest first.
    pub const SUPPORTED: [Self; 7] = [
        Self::V0_1_0,
        Self::V0_2_0,
        Self::V0_3_0,
        Self::V0_3_1,
        Self::V0_4_0,
        Self::V1_0_0,
        Self::V1_1_0,
    ];

    /// The newest version weft speaks.
    pub const LATEST: Self = Self::V1_1_0;

    /// A version from its three numbers.
    pub const fn new(major: u16, minor: u16, patch: u16) -> Self {
        Self { major, minor, patch }
    }

    /// Whether this is one of [`CniVersion::SUPPORTED`].
    pub fn is_supported(self) -> bool {
        Self::SUPPORTED.contains(&self)
    }

    /// Whether results in this version use the legacy `ip4`/`ip6` shape (0.1.0, 0.2.0).
    pub fn has_legacy_result(self) -> bool {
        self < Self::V0_3_0
    }

    /// Whether the CHECK command exists in this version (≥ 0.4.0).
    pub fn supports_check(self) -> bool {
        self >= Self::V0_4_0
    }

    /// Whether STATUS and GC exist in this version (≥ 1.1.0).
    pub fn supports_status_and_gc(self) -> bool {
        self >= Self::V1_1_0
    }

    /// The version a config without `cniVersion` means (libcni treats it as 0.1.0).
    pub fn of_config(value: Option<&str>) -> Result<Self, VersionError> {
        match value {
            None | Some("") => Ok(Self::V0_1_0),
            Some(text) => text.parse(),
        }
    }
}

impl fmt::Display for CniVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// A version string that is not `major.minor.patch` with decimal numbers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid CNI version {0:?}: expected major.minor.patch")]
pub struct VersionError(pub String);

impl FromStr for CniVersion {
    type Err = VersionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || VersionError(text.to_string());
        let mut parts = text.split('.');
        let mut next = || -> Result<u16, VersionError> {
            let part = parts.next().ok_or_else(invalid)?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
            part.parse().map_err(|_| invalid())
        };
        let version = Self::new(next()?, next()?, next()?);
        if parts.next().is_some() {
            return Err(invalid());
        }
        Ok(version)
    }
}

impl Serialize for CniVersion {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CniVersion {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The reply to `CNI_COMMAND=VERSION`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionReply {
    /// Version the reply is written in.
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    /// Versions the plugin accepts in network configs.
    #[serde(rename = "supportedVersions")]
    pub supported_versions: Vec<String>,
}

impl VersionReply {
    /// The reply for a plugin supporting `supported`, answered in `reply_version`.
    pub fn new(reply_version: CniVersion, supported: &[CniVersion]) -> Self {
        Self {
            cni_version: reply_version.to_string(),
            supported_versions: supported.iter().map(ToString::to_string).collect(),
        }
    }

    /// The parsed supported versions; entries that do not parse are skipped.
    pub fn versions(&self) -> Vec<CniVersion> {
        self.supported_versions
            .iter()
            .filter_map(|v| v.parse().ok())
            .collect()
    }
}

/// The version to hand a plugin that supports `supported` when the config asks for `wanted`:
/// `wanted` itself if supported, else the newest supported version below it. `None` when the
/// plugin supports nothing at or below `wanted`.
pub fn negotiate(wanted: CniVersion, supported: &[CniVersion]) -> Option<CniVersion> {
    supported.iter().copied().filter(|v| *v <= wanted).max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_orders_every_supported_version() {
        let texts = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
        let parsed: Vec<CniVersion> = texts.iter().map(|t| t.parse().unwrap()).collect();
        assert_eq!(parsed, CniVersion::SUPPORTED);
        assert!(parsed.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            CniVersion::new(0, 10, 0).cmp(&CniVersion::V0_4_0),
            std::cmp::Ordering::Greater
        );
    }

    #[test]
    fn rejects_malformed_versions() {
        for bad in [
            "", "1", "1.0", "1.0.0.0", "v1.0.0", "1.a.0", "1..0", "1.0.-1", " 1.0.0",
        ] {
            assert!(bad.parse::<CniVersion>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn missing_config_version_means_0_1_0() {
        assert_eq!(CniVersion::of_config(None).unwrap(), CniVersion::V0_1_0);
        assert_eq!(CniVersion::of_config(Some("")).unwrap(), CniVersion::V0_1_0);
    }

    #[test]
    fn negotiation_picks_newest_not_above_wanted() {
        let debian = &CniVersion::SUPPORTED[..6];
        assert_eq!(negotiate(CniVersion::V1_1_0, debian), Some(CniVersion::V1_0_0));
        assert_eq!(negotiate(CniVersion::V0_4_0, debian), Some(CniVersion::V0_4_0));
        assert_eq!(negotiate(CniVersion::V0_2_0, &[CniVersion::V1_0_0]), None);
    }

    #[test]
    fn version_reply_wire_shape() {
        let reply = VersionReply::new(CniVersion::V1_1_0, &CniVersion::SUPPORTED);
        let json = serde_json::to_string(&reply).unwrap();
        assert_eq!(
            json,
            r#"{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}"#
        );
        assert_eq!(reply.versions(), CniVersion::SUPPORTED);
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(major in 0u16.., minor in 0u16.., patch in 0u16..) {
            let v = CniVersion::new(major, minor, patch);
            prop_assert_eq!(v.to_string().parse::<CniVersion>().unwrap(), v);
        }
    }
}
