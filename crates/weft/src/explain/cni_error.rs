//! Recognising the CNI errors weft's meta-plugin, IPAM and runtime report (their literal texts,
//! as the pod's `FailedCreatePodSandBox` Event or its status message carry them).

use std::collections::BTreeMap;

/// What a sandbox ADD failure was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CniFailure {
    /// `getKubernetesDelegate: cannot find a network-attachment-definition (NAME) in namespace (NS)`.
    NadMissing {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// `no free IP address in range RANGE of network NET`.
    PoolExhausted {
        /// The range.
        range: String,
        /// The IPAM network.
        network: String,
    },
    /// `failed to find plugin "P" in path [...]`.
    PluginMissing {
        /// The plugin (delegate `type`).
        plugin: String,
    },
    /// Anything else: the text as it is.
    Other(String),
}

/// The text between `start` and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let rest = &text[from..];
    Some(&rest[..rest.find(end)?])
}

/// Classify an error text (the first recognised cause wins).
pub fn classify(text: &str) -> CniFailure {
    if let Some(name) = between(text, "cannot find a network-attachment-definition (", ")") {
        let namespace = between(text, &format!("({name}) in namespace ("), ")").unwrap_or_default();
        return CniFailure::NadMissing {
            namespace: namespace.into(),
            name: name.into(),
        };
    }
    if let Some(range) = between(text, "no free IP address in range ", " of network ") {
        let after = format!("range {range} of network ");
        let network = text
            .find(&after)
            .map(|i| &text[i + after.len()..])
            .map(|rest| {
                rest.split(|c: char| c.is_whitespace() || c == ':' || c == ',' || c == '"')
                    .next()
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        return CniFailure::PoolExhausted {
            range: range.into(),
            network: network.into(),
        };
    }
    if let Some(plugin) = between(text, "failed to find plugin \"", "\"")
        .or_else(|| between(text, "failed to find plugin \\\"", "\\\""))
    {
        return CniFailure::PluginMissing {
            plugin: plugin.into(),
        };
    }
    CniFailure::Other(text.trim().to_string())
}

/// Usable addresses of a range in CIDR form (IPv4 without network and broadcast), when it is one.
fn range_size(range: &str) -> Option<u128> {
    let net: ipnet::IpNet = range.parse().ok()?;
    Some(match net {
        ipnet::IpNet::V4(v4) => {
            let bits = 32 - u32::from(v4.prefix_len());
            let all = 1u128 << bits;
            if bits >= 2 { all - 2 } else { all }
        }
        ipnet::IpNet::V6(v6) => 1u128
            .checked_shl(128 - u32::from(v6.prefix_len()))
            .unwrap_or(u128::MAX),
    })
}

impl CniFailure {
    /// Why, and what to change; `reservations` counts reserved addresses per IPAM network.
    pub fn reason_and_fix(&self, reservations: &BTreeMap<String, usize>) -> (String, String) {
        match self {
            CniFailure::NadMissing { namespace, name } => (
                format!("NAD {namespace}/{name} does not exist"),
                format!(
                    "create NetworkAttachmentDefinition {namespace}/{name} (or fix the network's networkName)"
                ),
            ),
            CniFailure::PoolExhausted { range, network } => {
                let reserved = reservations.get(network).copied().unwrap_or(0);
                let of = range_size(range)
                    .map(|size| format!("{reserved} of {size} reserved"))
                    .unwrap_or_else(|| format!("{reserved} reserved"));
                (
                    format!("IPAM pool {range} of network {network} is exhausted ({of})"),
                    "widen the range or free addresses (`weft ipam list`, `weft ipam check --repair`)".into(),
                )
            }
            CniFailure::PluginMissing { plugin } => (
                format!("delegate plugin `{plugin}` is not installed in the CNI bin dir"),
                format!("install `{plugin}` in the node's CNI bin dir, or fix the NAD's `type`"),
            ),
            CniFailure::Other(text) => (
                format!("the pod's CNI ADD failed: {text}"),
                "see `weft describe pod` and the node agent's log".into(),
            ),
        }
    }
}
