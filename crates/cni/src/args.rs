//! `CNI_ARGS`: `KEY=VALUE` pairs separated by `;`, parsed with libcni `LoadArgs` semantics.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

use crate::mac::MacAddr;

/// Why `CNI_ARGS` was rejected. Messages match libcni's (`ARGS: ...`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// A pair does not split on `=` into exactly two parts.
    #[error("ARGS: invalid pair {0:?}")]
    InvalidPair(String),
    /// Keys the plugin does not know, without `IgnoreUnknown`.
    #[error("ARGS: unknown args {0:?}")]
    Unknown(Vec<String>),
    /// A value that does not parse as its key's type.
    #[error("ARGS: invalid value {value:?} for {key}: {reason}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Parsed `CNI_ARGS`, keeping every pair in order (duplicates included).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

impl CniArgs {
    /// `IgnoreUnknown`: when true, unknown keys are not an error.
    pub const IGNORE_UNKNOWN: &'static str = "IgnoreUnknown";
    /// Pod namespace (Kubernetes runtimes).
    pub const K8S_POD_NAMESPACE: &'static str = "K8S_POD_NAMESPACE";
    /// Pod name.
    pub const K8S_POD_NAME: &'static str = "K8S_POD_NAME";
    /// Sandbox (infra container) id.
    pub const K8S_POD_INFRA_CONTAINER_ID: &'static str = "K8S_POD_INFRA_CONTAINER_ID";
    /// Pod UID.
    pub const K8S_POD_UID: &'static str = "K8S_POD_UID";
    /// Requested addresses (comma-separated; legacy path of the `ips` capability).
    pub const IP: &'static str = "IP";
    /// Requested MAC address (legacy path of the `mac` capability).
    pub const MAC: &'static str = "MAC";
    /// The keys weft understands.
    pub const KNOWN_KEYS: [&'static str; 7] = [
        Self::IGNORE_UNKNOWN,
        Self::K8S_POD_NAMESPACE,
        Self::K8S_POD_NAME,
        Self::K8S_POD_INFRA_CONTAINER_ID,
        Self::K8S_POD_UID,
        Self::IP,
        Self::MAC,
    ];

    /// Parses the pair syntax: split on `;`, each pair must split on `=` into exactly two
    /// parts (so empty segments and values containing `=` are rejected, as in libcni).
    /// An empty string has no pairs.
    pub fn parse(text: &str) -> Result<Self, ArgsError> {
        if text.is_empty() {
            return Ok(Self::default());
        }
        let pairs = text
            .split(';')
            .map(|pair| {
                let mut parts = pair.split('=');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(key), Some(value), None) => Ok((key.to_string(), value.to_string())),
                    _ => Err(ArgsError::InvalidPair(pair.to_string())),
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { pairs })
    }

    /// Parses and checks the keys against `known` (plus `IgnoreUnknown`), like libcni
    /// `LoadArgs` into a struct with those fields. Typed values are checked too.
    pub fn load(text: &str, known: &[&str]) -> Result<Self, ArgsError> {
        let args = Self::parse(text)?;
        let ignore_unknown = args.ignore_unknown()?;
        let unknown: Vec<String> = args
            .pairs
            .iter()
            .map(|(key, _)| key)
            .filter(|key| key.as_str() != Self::IGNORE_UNKNOWN && !known.contains(&key.as_str()))
            .cloned()
            .collect();
        if !unknown.is_empty() && !ignore_unknown {
            return Err(ArgsError::Unknown(unknown));
        }
        args.ips()?;
        args.mac()?;
        Ok(args)
    }

    /// Builds args from pairs (runtime side).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        Self {
            pairs: pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
        }
    }

    /// Every pair in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// Appends a pair.
    pub fn push(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.pairs.push((key.into(), value.into()));
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// `IgnoreUnknown` as a Go `strconv.ParseBool` would read it (absent = false).
    pub fn ignore_unknown(&self) -> Result<bool, ArgsError> {
        match self.get(Self::IGNORE_UNKNOWN) {
            None => Ok(false),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(other) => Err(ArgsError::InvalidValue {
                key: Self::IGNORE_UNKNOWN.into(),
                value: other.into(),
                reason: "not a boolean",
            }),
        }
    }

    /// `K8S_POD_NAMESPACE`.
    pub fn pod_namespace(&self) -> Option<&str> {
        self.get(Self::K8S_POD_NAMESPACE)
    }

    /// `K8S_POD_NAME`.
    pub fn pod_name(&self) -> Option<&str> {
        self.get(Self::K8S_POD_NAME)
    }

    /// `K8S_POD_INFRA_CONTAINER_ID`.
    pub fn pod_infra_container_id(&self) -> Option<&str> {
        self.get(Self::K8S_POD_INFRA_CONTAINER_ID)
    }

    /// `K8S_POD_UID`.
    pub fn pod_uid(&self) -> Option<&str> {
        self.get(Self::K8S_POD_UID)
    }

    /// `IP`: comma-separated addresses, each with or without a prefix length.
    pub fn ips(&self) -> Result<Vec<ArgIp>, ArgsError> {
        let Some(value) = self.get(Self::IP) else {
            return Ok(Vec::new());
        };
        value
            .split(',')
            .map(|item| {
                item.trim().parse().map_err(|_| ArgsError::InvalidValue {
                    key: Self::IP.into(),
                    value: value.into(),
                    reason: "not an IP address or CIDR",
                })
            })
            .collect()
    }

    /// `MAC`.
    pub fn mac(&self) -> Result<Option<MacAddr>, ArgsError> {
        self.get(Self::MAC)
            .map(|value| {
                value.parse().map_err(|_| ArgsError::InvalidValue {
                    key: Self::MAC.into(),
                    value: value.into(),
                    reason: "not a MAC address",
                })
            })
            .transpose()
    }
}

impl fmt::Display for CniArgs {
    /// The `CNI_ARGS` environment form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, (key, value)) in self.pairs.iter().enumerate() {
            if index > 0 {
                f.write_str(";")?;
            }
            write!(f, "{key}={value}")?;
        }
        Ok(())
    }
}

/// An address from `IP=`: with a prefix length (`10.0.0.5/24`) or without (`10.0.0.5`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgIp {
    /// A bare address.
    Address(IpAddr),
    /// An address with prefix length.
    Cidr(IpNet),
}

impl ArgIp {
    /// The address itself.
    pub fn addr(&self) -> IpAddr {
        match self {
            Self::Address(addr) => *addr,
            Self::Cidr(net) => net.addr(),
        }
    }
}

impl FromStr for ArgIp {
    type Err = ();

    fn from_str(text: &str) -> Result<Self, ()> {
        if text.contains('/') {
            text.parse().map(Self::Cidr).map_err(|_| ())
        } else {
            text.parse().map(Self::Address).map_err(|_| ())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_runtime_args() {
        let args = CniArgs::load(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=pod;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1;Other=x",
            &CniArgs::KNOWN_KEYS,
        )
        .unwrap();
        assert_eq!(args.pod_namespace(), Some("ns"));
        assert_eq!(args.pod_name(), Some("pod"));
        assert_eq!(args.pod_infra_container_id(), Some("abc"));
        assert_eq!(args.pod_uid(), Some("u-1"));
        assert_eq!(args.get("Other"), Some("x"));
    }

    #[test]
    fn rejects_pairs_like_libcni() {
        for bad in ["A", "A=b=c", "A=1;", ";A=1", "A=1;;B=2"] {
            assert!(
                matches!(CniArgs::parse(bad), Err(ArgsError::InvalidPair(_))),
                "{bad:?} accepted"
            );
        }
        assert_eq!(
            CniArgs::parse("BLAHBLAH=foo=bar").unwrap_err().to_string(),
            r#"ARGS: invalid pair "BLAHBLAH=foo=bar""#
        );
        assert!(CniArgs::parse("").unwrap().pairs().is_empty());
        assert!(CniArgs::parse("A=").is_ok());
    }

    #[test]
    fn unknown_keys_need_ignore_unknown() {
        let known = [CniArgs::K8S_POD_NAME];
        assert_eq!(
            CniArgs::load("K8S_POD_NAME=a;X=1", &known),
            Err(ArgsError::Unknown(vec!["X".into()]))
        );
        assert!(CniArgs::load("IgnoreUnknown=true;X=1", &known).is_ok());
        assert!(CniArgs::load("IgnoreUnknown=0;X=1", &known).is_err());
        assert!(CniArgs::load("IgnoreUnknown=maybe", &known).is_err());
        // Keys are case-sensitive.
        assert!(CniArgs::load("k8s_pod_name=a", &known).is_err());
    }

    #[test]
    fn typed_ip_and_mac() {
        let args = CniArgs::load(
            "IP=10.0.0.5/24,fd00::5;MAC=02:AA:bb:00:00:01",
            &CniArgs::KNOWN_KEYS,
        )
        .unwrap();
        assert_eq!(
            args.ips().unwrap(),
            vec![
                ArgIp::Cidr("10.0.0.5/24".parse().unwrap()),
                ArgIp::Address("fd00::5".parse().unwrap())
            ]
        );
        assert_eq!(args.mac().unwrap().unwrap().to_string(), "02:aa:bb:00:00:01");
        assert!(CniArgs::load("IP=10.0.0.300", &CniArgs::KNOWN_KEYS).is_err());
        assert!(CniArgs::load("MAC=02:aa:bb:00:00", &CniArgs::KNOWN_KEYS).is_err());
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(pairs in proptest::collection::vec(("[A-Za-z_0-9]{1,8}", "[a-z0-9./:,-]{0,8}"), 0..6)) {
            let args = CniArgs::from_pairs(pairs);
            prop_assert_eq!(CniArgs::parse(&args.to_string()).unwrap(), args);
        }

        #[test]
        fn mac_round_trip(bytes in any::<[u8; 6]>()) {
            let mac = MacAddr(bytes);
            prop_assert_eq!(mac.to_string().parse::<MacAddr>().unwrap(), mac);
        }
    }
}
