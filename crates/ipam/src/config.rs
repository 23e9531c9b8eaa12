//! The `ipam` section of a network configuration, whereabouts-compatible: parsing and validation.
//!
//! Only the keys weft uses are read; every other key (whereabouts' `kubernetes`, `log_file`,
//! `enable_overlapping_ranges`, ...) is ignored so that a whereabouts NAD switches to weft by
//! changing `type`.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use serde_json::{Map, Value};
use weft_cni::{CniError, Dns, IpConfig, Route, codes};

use crate::range::AddressRange;

/// The `type` this plugin answers to.
pub const PLUGIN_TYPE: &str = "weft-ipam";
/// Where the embedded store lives when `stateDir` is not set.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/weft";

/// A config error naming the key, e.g. `ipam.range_start: 10.0.0.300 is not an IP address`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    /// Dotted path of the key (`ipam.ipRanges[1].exclude[0]`).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}

impl From<ConfigError> for CniError {
    fn from(e: ConfigError) -> Self {
        CniError::new(codes::INVALID_NETWORK_CONFIG, e.to_string())
    }
}

/// The validated IPAM configuration of one network.
#[derive(Clone, Debug, PartialEq)]
pub struct IpamConfig {
    /// Network reservations are keyed by: `network_name`, else the network config's `name`.
    pub network: String,
    /// The network config's `name` (what an IPAMClaim's `spec.network` refers to).
    pub config_name: String,
    /// The ranges; ADD hands out one address from each.
    pub ranges: Vec<AddressRange>,
    /// Routes returned with every result.
    pub routes: Vec<Route>,
    /// DNS returned with every result.
    pub dns: Dns,
    /// Static addresses appended to every result (as whereabouts/`static` do).
    pub addresses: Vec<IpConfig>,
    /// Where the embedded store lives.
    pub state_dir: PathBuf,
    /// Top-level `allowPersistentIPs` of the network config (IPAMClaim support).
    pub allow_persistent_ips: bool,
}

/// Parse and validate a whole network configuration (the plugin's stdin), reading `name`,
/// `allowPersistentIPs` and the `ipam` section.
pub fn parse_network_config(conf: &Value) -> Result<IpamConfig, ConfigError> {
    let top = conf
        .as_object()
        .ok_or_else(|| ConfigError::new("config", "the network configuration is not a JSON object"))?;
    let config_name = opt_str(top, "", "name")?.unwrap_or_default().to_string();
    let allow_persistent_ips = allow_persistent_ips(top)?;
    let ipam = top.get("ipam").and_then(Value::as_object).ok_or_else(|| {
        ConfigError::new(
            "ipam",
            "missing (an object with \"type\": \"weft-ipam\" is required)",
        )
    })?;
    parse_ipam(ipam, &config_name, allow_persistent_ips)
}

/// A network config's top-level `allowPersistentIPs` (absent or `null`: `false`).
fn allow_persistent_ips(top: &Map<String, Value>) -> Result<bool, ConfigError> {
    match top.get("allowPersistentIPs") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(ConfigError::new(
            "allowPersistentIPs",
            format!("{other} is not a boolean"),
        )),
    }
}

/// The network an IPAMClaim of a NAD names (`spec.network`, what [`IpamConfig::config_name`]
/// is matched against) when the NAD's config allows persistent IPs, else `None`: the config's
/// `name`, or `nad_name` when it has none. `allowPersistentIPs` is read as
/// [`parse_network_config`] reads it; a conflist allows persistent IPs when it or one of its
/// `plugins` entries does (each plugin gets its entry, with the list's `name`, as its network
/// configuration). Only the flag is read: the `ipam` section is checked on ADD, and a NAD of
/// another IPAM honouring IPAMClaims gets its claims too.
pub fn persistent_claim_network(conf: &Value, nad_name: &str) -> Result<Option<String>, ConfigError> {
    let top = conf
        .as_object()
        .ok_or_else(|| ConfigError::new("config", "the network configuration is not a JSON object"))?;
    let mut allowed = allow_persistent_ips(top)?;
    if let Some(plugins) = top.get("plugins").and_then(Value::as_array) {
        for plugin in plugins.iter().filter_map(Value::as_object) {
            allowed |= allow_persistent_ips(plugin)?;
        }
    }
    let name = opt_str(top, "", "name")?
        .filter(|n| !n.is_empty())
        .unwrap_or(nad_name);
    Ok(allowed.then(|| name.to_string()))
}

fn parse_ipam(
    ipam: &Map<String, Value>,
    config_name: &str,
    allow_persistent_ips: bool,
) -> Result<IpamConfig, ConfigError> {
    let p = "ipam";
    match opt_str(ipam, p, "type")? {
        Some(PLUGIN_TYPE) => {}
        Some(other) => {
            return Err(ConfigError::new(
                "ipam.type",
                format!("is {other:?}, expected {PLUGIN_TYPE:?}"),
            ));
        }
        None => return Err(ConfigError::new("ipam.type", "missing")),
    }
    let network = match opt_str(ipam, p, "network_name")? {
        Some(n) if !n.is_empty() => n.to_string(),
        _ if !config_name.is_empty() => config_name.to_string(),
        _ => {
            return Err(ConfigError::new(
                "name",
                "the network has no name (set name or ipam.network_name)",
            ));
        }
    };
    let gateway = opt_ip(ipam, p, "gateway")?;
    let mut ranges = Vec::new();
    if ipam.contains_key("range") {
        ranges.push(parse_range(ipam, p, gateway)?);
    }
    if let Some(list) = ipam.get("ipRanges") {
        let list = list
            .as_array()
            .ok_or_else(|| ConfigError::new("ipam.ipRanges", "is not a list"))?;
        for (i, entry) in list.iter().enumerate() {
            let path = format!("ipam.ipRanges[{i}]");
            let entry = entry
                .as_object()
                .ok_or_else(|| ConfigError::new(&path, "is not an object"))?;
            let gw = opt_ip(entry, &path, "gateway")?.or(gateway);
            ranges.push(parse_range(entry, &path, gw)?);
        }
    }
    if ranges.is_empty() {
        return Err(ConfigError::new("ipam.range", "missing (set range or ipRanges)"));
    }
    for (i, a) in ranges.iter().enumerate() {
        for b in &ranges[i + 1..] {
            if a.subnet().contains(&b.subnet()) || b.subnet().contains(&a.subnet()) {
                return Err(ConfigError::new(
                    "ipam.ipRanges",
                    format!(
                        "ranges {} and {} overlap; each range gives one address",
                        a.subnet(),
                        b.subnet()
                    ),
                ));
            }
        }
    }
    Ok(IpamConfig {
        network,
        config_name: config_name.to_string(),
        ranges,
        routes: parse_list(ipam, "routes")?,
        dns: match ipam.get("dns") {
            None | Some(Value::Null) => Dns::default(),
            Some(v) => {
                serde_json::from_value(v.clone()).map_err(|e| ConfigError::new("ipam.dns", e.to_string()))?
            }
        },
        addresses: parse_list(ipam, "addresses")?,
        state_dir: opt_str(ipam, p, "stateDir")?
            .filter(|s| !s.is_empty())
            .unwrap_or(DEFAULT_STATE_DIR)
            .into(),
        allow_persistent_ips,
    })
}

fn parse_range(
    obj: &Map<String, Value>,
    path: &str,
    gateway: Option<IpAddr>,
) -> Result<AddressRange, ConfigError> {
    let text = opt_str(obj, path, "range")?.ok_or_else(|| ConfigError::new(key(path, "range"), "missing"))?;
    let (subnet, mut start, mut end) =
        parse_range_text(text).map_err(|m| ConfigError::new(key(path, "range"), m))?;
    check_prefix(&subnet).map_err(|m| ConfigError::new(key(path, "range"), m))?;
    if let Some(s) = opt_ip(obj, path, "range_start")? {
        start = Some(s);
    }
    if let Some(e) = opt_ip(obj, path, "range_end")? {
        end = Some(e);
    }
    let exclude = match obj.get("exclude") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let k = format!("{}[{i}]", key(path, "exclude"));
                let s = item
                    .as_str()
                    .ok_or_else(|| ConfigError::new(&k, format!("{item} is not a string")))?;
                parse_net_or_ip(s)
                    .ok_or_else(|| ConfigError::new(&k, format!("{s} is not a CIDR or an IP address")))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(ConfigError::new(
                key(path, "exclude"),
                format!("{other} is not a list"),
            ));
        }
    };
    AddressRange::new(subnet, start, end, &exclude, gateway)
        .map_err(|e| ConfigError::new(key(path, &e.field), e.message))
}

/// Shortest IPv4 prefix a range may have: a /8 is already 16 million addresses, and a shorter
/// one (up to `0.0.0.0/0`) would hand out addresses of every other network, results with
/// on-link routes to them included.
pub const MIN_IPV4_PREFIX: u8 = 8;
/// Shortest IPv6 prefix a range may have (`::/0` and its like cover every other network).
pub const MIN_IPV6_PREFIX: u8 = 16;

fn check_prefix(subnet: &IpNet) -> Result<(), String> {
    let (min, family) = match subnet {
        IpNet::V4(_) => (MIN_IPV4_PREFIX, "IPv4"),
        IpNet::V6(_) => (MIN_IPV6_PREFIX, "IPv6"),
    };
    if subnet.prefix_len() < min {
        return Err(format!(
            "{subnet} is too wide: an {family} range needs a prefix of /{min} or longer"
        ));
    }
    Ok(())
}

/// `10.0.0.0/24` or whereabouts' `10.0.0.10-10.0.0.20/24` (start-end inside the CIDR).
fn parse_range_text(text: &str) -> Result<(IpNet, Option<IpAddr>, Option<IpAddr>), String> {
    if let Some((start, rest)) = text.split_once('-') {
        let (end, prefix) = rest
            .split_once('/')
            .ok_or_else(|| format!("{text} is not a CIDR or start-end/prefix"))?;
        let start: IpAddr = start
            .trim()
            .parse()
            .map_err(|_| format!("{start} is not an IP address"))?;
        let end: IpAddr = end
            .trim()
            .parse()
            .map_err(|_| format!("{end} is not an IP address"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("{prefix} is not a prefix length"))?;
        let subnet = IpNet::new(start, prefix).map_err(|_| format!("/{prefix} is too long for {start}"))?;
        return Ok((subnet.trunc(), Some(start), Some(end)));
    }
    let subnet: IpNet = text.parse().map_err(|_| format!("{text} is not a CIDR"))?;
    Ok((subnet.trunc(), None, None))
}

fn parse_net_or_ip(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
}

fn parse_list<T: serde::de::DeserializeOwned>(
    obj: &Map<String, Value>,
    name: &str,
) -> Result<Vec<T>, ConfigError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                serde_json::from_value(item.clone())
                    .map_err(|e| ConfigError::new(format!("ipam.{name}[{i}]"), e.to_string()))
            })
            .collect(),
        Some(other) => Err(ConfigError::new(
            format!("ipam.{name}"),
            format!("{other} is not a list"),
        )),
    }
}

fn key(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn opt_str<'a>(obj: &'a Map<String, Value>, path: &str, name: &str) -> Result<Option<&'a str>, ConfigError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ConfigError::new(
            key(path, name),
            format!("{other} is not a string"),
        )),
    }
}

fn opt_ip(obj: &Map<String, Value>, path: &str, name: &str) -> Result<Option<IpAddr>, ConfigError> {
    match opt_str(obj, path, name)? {
        None | Some("") => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| ConfigError::new(key(path, name), format!("{s} is not an IP address"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(ipam: Value) -> Result<IpamConfig, ConfigError> {
        parse_network_config(&json!({"cniVersion": "1.0.0", "name": "blue", "type": "bridge", "ipam": ipam}))
    }

    #[test]
    fn ranges_wider_than_the_minimum_prefix_are_refused() {
        for (range, field) in [
            ("0.0.0.0/0", "ipam.range"),
            ("10.0.0.0/7", "ipam.range"),
            ("::/0", "ipam.range"),
            ("fd00::/15", "ipam.range"),
        ] {
            let err = parse(json!({"type": "weft-ipam", "range": range})).unwrap_err();
            assert_eq!(err.key, field, "{range}");
            assert!(err.message.contains("too wide"), "{range}: {err}");
        }
        let err = parse(json!({"type": "weft-ipam", "ipRanges": [{"range": "10.1.0.0/24"}, {"range": "0.0.0.0-0.0.0.9/0"}]}))
            .unwrap_err();
        assert_eq!(err.key, "ipam.ipRanges[1].range");
        for range in ["10.0.0.0/8", "fd00::/16", "10.0.0.0/30"] {
            assert!(
                parse(json!({"type": "weft-ipam", "range": range})).is_ok(),
                "{range}"
            );
        }
        // A prefix that leaves no address to hand out.
        let err =
            parse(json!({"type": "weft-ipam", "range": "10.0.0.4/32", "gateway": "10.0.0.4"})).unwrap_err();
        assert_eq!(err.key, "ipam.exclude", "{err}");
    }

    #[test]
    fn whereabouts_config_switches_by_type() {
        let c = parse(json!({
            "type": "weft-ipam", "range": "192.168.2.225/28", "exclude": ["192.168.2.229/30", "192.168.2.236"],
            "gateway": "192.168.2.225", "routes": [{"dst": "0.0.0.0/0"}], "dns": {"nameservers": ["1.1.1.1"]},
            "kubernetes": {"kubeconfig": "/etc/x"}, "log_level": "debug"
        }))
        .unwrap();
        assert_eq!(c.network, "blue");
        assert_eq!(c.ranges.len(), 1);
        let r = &c.ranges[0];
        assert_eq!(r.subnet().to_string(), "192.168.2.224/28");
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(!r.contains(ip("192.168.2.225")), "gateway");
        assert!(!r.contains(ip("192.168.2.230")) && !r.contains(ip("192.168.2.236")));
        assert!(r.contains(ip("192.168.2.226")));
        assert_eq!(c.routes.len(), 1);
        assert_eq!(c.dns.nameservers, vec!["1.1.1.1"]);
        assert_eq!(c.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
    }

    #[test]
    fn start_end_prefix_form_and_dual_stack_ip_ranges() {
        let c = parse(json!({
            "type": "weft-ipam", "range": "10.0.0.10-10.0.0.20/24", "network_name": "tenant-a",
            "ipRanges": [{"range": "fd00::/64", "range_start": "fd00::10", "exclude": ["fd00::11"]}],
            "stateDir": "/tmp/w", "addresses": [{"address": "10.9.0.1/24"}]
        }))
        .unwrap();
        assert_eq!(c.network, "tenant-a");
        assert_eq!(c.ranges.len(), 2);
        assert_eq!(c.ranges[0].usable_count(), 11);
        assert!(c.ranges[1].contains("fd00::12".parse().unwrap()));
        assert!(!c.ranges[1].contains("fd00::11".parse().unwrap()));
        assert_eq!(c.state_dir, PathBuf::from("/tmp/w"));
        assert_eq!(c.addresses[0].address.to_string(), "10.9.0.1/24");
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (
                json!({"type": "weft-ipam", "range": "10.0.0.0/24", "range_start": "10.0.0.300"}),
                "ipam.range_start: 10.0.0.300 is not an IP address",
            ),
            (
                json!({"type": "whereabouts", "range": "10.0.0.0/24"}),
                "ipam.type: is \"whereabouts\", expected \"weft-ipam\"",
            ),
            (
                json!({"type": "weft-ipam"}),
                "ipam.range: missing (set range or ipRanges)",
            ),
            (
                json!({"type": "weft-ipam", "range": "10.0.0/24"}),
                "ipam.range: 10.0.0/24 is not a CIDR",
            ),
            (
                json!({"type": "weft-ipam", "ipRanges": [{"range": "10.0.0.0/24", "exclude": ["x"]}]}),
                "ipam.ipRanges[0].exclude[0]: x is not a CIDR or an IP address",
            ),
            (
                json!({"type": "weft-ipam", "range": "10.0.0.0/24", "range_end": "10.0.1.1"}),
                "ipam.range_end: 10.0.1.1 is outside the range 10.0.0.0/24",
            ),
            (
                json!({"type": "weft-ipam", "range": "10.0.0.0/24", "ipRanges": [{"range": "10.0.0.0/25"}]}),
                "ipam.ipRanges: ranges 10.0.0.0/24 and 10.0.0.0/25 overlap; each range gives one address",
            ),
            (
                json!({"type": "weft-ipam", "range": "10.0.0.0/24", "routes": [{"gw": "1.2.3.4"}]}),
                "ipam.routes[0]: missing field `dst`",
            ),
        ];
        for (ipam, want) in cases {
            assert_eq!(parse(ipam).unwrap_err().to_string(), want);
        }
        let cni: CniError = parse(json!({"type": "weft-ipam"})).unwrap_err().into();
        assert_eq!(cni.code, codes::INVALID_NETWORK_CONFIG);
    }

    #[test]
    fn claims_are_named_by_the_config_name_of_a_network_allowing_persistent_ips() {
        let claim = |conf: Value| persistent_claim_network(&conf, "the-nad");
        assert_eq!(
            claim(json!({"name": "blue", "allowPersistentIPs": true}))
                .unwrap()
                .as_deref(),
            Some("blue")
        );
        // No name: the NAD's.
        assert_eq!(
            claim(json!({"allowPersistentIPs": true})).unwrap().as_deref(),
            Some("the-nad")
        );
        assert_eq!(claim(json!({"name": "x"})).unwrap(), None);
        assert_eq!(
            claim(json!({"name": "x", "allowPersistentIPs": false})).unwrap(),
            None
        );
        assert_eq!(
            claim(json!({"name": "x", "allowPersistentIPs": null})).unwrap(),
            None
        );
        // A conflist: the flag on the plugin entry that gets it, named by the list.
        assert_eq!(
            claim(json!({"name": "list", "plugins": [{"type": "bridge"},
                {"type": "bridge", "allowPersistentIPs": true, "ipam": {"type": "weft-ipam"}}]}))
            .unwrap()
            .as_deref(),
            Some("list")
        );
        // The same errors the plugin reports on ADD, not a silent "no".
        let err = claim(json!({"name": "y", "allowPersistentIPs": "yes"})).unwrap_err();
        assert!(err.to_string().contains("allowPersistentIPs"), "{err}");
        assert!(claim(json!({"plugins": [{"allowPersistentIPs": 1}]})).is_err());
        assert!(claim(json!(["not", "an", "object"])).is_err());
        // And the plugin agrees with the claim decision on the same config.
        let conf = json!({"name": "blue", "allowPersistentIPs": true,
            "ipam": {"type": "weft-ipam", "range": "10.0.0.0/24"}});
        let parsed = parse_network_config(&conf).unwrap();
        assert!(parsed.allow_persistent_ips);
        assert_eq!(claim(conf).unwrap(), Some(parsed.config_name));
    }

    #[test]
    fn persistent_ips_flag_is_read_from_the_top_level() {
        let c = parse_network_config(&json!({"name": "n", "allowPersistentIPs": true,
            "ipam": {"type": "weft-ipam", "range": "10.0.0.0/24"}}))
        .unwrap();
        assert!(c.allow_persistent_ips);
        assert_eq!(c.config_name, "n");
    }
}
