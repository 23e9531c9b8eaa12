//! Thick-mode configuration files: the daemon-config overlay on each request
//! (`vectors/multus/17-thick-config-override.json`), the generated node CNI configuration from
//! the primary (first) network config (`vectors/multus/18-thick-generated-config.json`,
//! `vectors/multus/19-thin-generated-config.json`), and primary discovery in the autoconfig dir
//! (docs/upstream/multus.md §2.3–§2.4, §4.2).

use serde_json::{Map, Value};
use weft_netconf::DelegateConfig;

/// The file weft writes into the node's CNI conf dir.
pub const WEFT_CONFLIST_NAME: &str = "00-weft.conflist";
/// The shim's plugin type.
pub const WEFT_PLUGIN_TYPE: &str = weft_netconf::META_PLUGIN_TYPE;
/// The network name of the generated configuration (Multus's, so existing tooling matches).
pub const DEFAULT_NETWORK_NAME: &str = "multus-cni-network";

/// Daemon-config keys copied into the generated node configuration when present (Multus's
/// generator list).
const GENERATED_OPTION_KEYS: [&str; 10] = [
    "logFile",
    "logLevel",
    "logToStderr",
    "logOptions",
    "namespaceIsolation",
    "globalNamespaces",
    "cniDir",
    "auxiliaryCNIChainName",
    "daemonSocketDir",
    "binDir",
];

/// The effective configuration of a request: the shim's stdin with every top-level key of the
/// daemon configuration overlaid (shallow), without `readinessindicatorfile` when the agent
/// watches the file itself (`vectors/multus/17-thick-config-override.json`).
pub fn overlay_daemon_config(
    request: &Map<String, Value>,
    daemon: &Map<String, Value>,
    strip_readiness_indicator: bool,
) -> Map<String, Value> {
    let mut out = request.clone();
    for (k, v) in daemon {
        out.insert(k.clone(), v.clone());
    }
    if strip_readiness_indicator {
        out.remove("readinessindicatorfile");
    }
    out
}

/// The primary network configuration file in an autoconfig dir: the first `.conf` or
/// `.conflist` in name order, skipping our own and Multus's generated files.
pub fn find_primary_config(files: &[(String, Vec<u8>)]) -> Option<&(String, Vec<u8>)> {
    let mut candidates: Vec<&(String, Vec<u8>)> = files
        .iter()
        .filter(|(f, _)| f.ends_with(".conf") || f.ends_with(".conflist"))
        .filter(|(f, _)| !f.starts_with("00-multus") && f != WEFT_CONFLIST_NAME)
        .collect();
    candidates.sort_by(|a, b| a.0.cmp(&b.0));
    candidates.into_iter().next()
}

/// Capabilities set to `true` by the primary (top level, or any plugin of a list), as a JSON
/// object, `None` when there are none.
fn capabilities_of(primary: Option<&DelegateConfig>) -> Option<Value> {
    let caps: Map<String, Value> = primary?
        .capabilities()
        .into_iter()
        .map(|c| (c, Value::Bool(true)))
        .collect();
    (!caps.is_empty()).then_some(Value::Object(caps))
}

/// Multus's thick generated `00-multus.conf` (`vectors/multus/18-thick-generated-config.json`):
/// `cniVersion` and `clusterNetwork` from the daemon configuration (`clusterNetwork` replaced by
/// `primary_path` when given), `name` `multus-cni-network` (the primary's with
/// `override_network_name`), `type` `plugin_type`, the primary's true capabilities, and the
/// daemon's generator options.
pub fn generate_thick_config(
    daemon: &Map<String, Value>,
    plugin_type: &str,
    primary_path: Option<&str>,
    primary: Option<&DelegateConfig>,
    override_network_name: bool,
) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(caps) = capabilities_of(primary) {
        out.insert("capabilities".into(), caps);
    }
    if let Some(v) = daemon.get("cniVersion") {
        out.insert("cniVersion".into(), v.clone());
    }
    match (primary_path, daemon.get("clusterNetwork")) {
        (Some(path), _) => {
            out.insert("clusterNetwork".into(), Value::from(path));
        }
        (None, Some(v)) => {
            out.insert("clusterNetwork".into(), v.clone());
        }
        (None, None) => {}
    }
    let name = match primary {
        Some(p) if override_network_name && !p.name().is_empty() => p.name(),
        _ => DEFAULT_NETWORK_NAME,
    };
    out.insert("name".into(), Value::from(name));
    out.insert("type".into(), Value::from(plugin_type));
    for key in GENERATED_OPTION_KEYS {
        if let Some(v) = daemon.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    out
}

/// How the generated configuration refers to the primary network configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrimaryReference {
    /// `clusterNetwork: <path>`: the agent reads the file byte-for-byte at every ADD (picks up
    /// edits of the primary; `defaultNetworks` work, as they need `clusterNetwork`).
    Path,
    /// `delegates: [<primary>]`: the primary's JSON embedded verbatim (key order kept), no file
    /// read at ADD (Multus thin style).
    Embedded,
}

/// weft's `00-weft.conflist`: a list wrapping the thick plugin entry, in the primary's
/// `cniVersion` (the runtime then speaks the same version to us as to the primary before),
/// with the union of the primary's true capabilities and the daemon's generator options.
/// Either way no field of the primary is lost (Multus issue #1449).
pub fn generate_weft_conflist(
    daemon: &Map<String, Value>,
    primary_path: &str,
    primary: &DelegateConfig,
    reference: PrimaryReference,
) -> String {
    let mut plugin =
        generate_thick_config(daemon, WEFT_PLUGIN_TYPE, Some(primary_path), Some(primary), false);
    if reference == PrimaryReference::Embedded {
        plugin.remove("clusterNetwork");
        plugin.insert(
            "delegates".into(),
            Value::Array(vec![Value::Object(primary.to_value())]),
        );
    }
    let version = match primary.cni_version() {
        "" => plugin.get("cniVersion").cloned().unwrap_or(Value::from("1.0.0")),
        v => Value::from(v),
    };
    plugin.remove("cniVersion");
    let name = plugin.remove("name").unwrap_or(Value::from(DEFAULT_NETWORK_NAME));
    let mut list = Map::new();
    list.insert("cniVersion".into(), version);
    list.insert("name".into(), name);
    list.insert("plugins".into(), Value::Array(vec![Value::Object(plugin)]));
    let mut text = serde_json::to_string_pretty(&Value::Object(list)).expect("JSON serialises");
    text.push('\n');
    text
}

/// Options of the thin generator that appear as top-level keys, in output order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThinOptions {
    /// `name` (default `multus-cni-network`).
    pub network_name: Option<String>,
    /// `namespaceIsolation`.
    pub namespace_isolation: bool,
    /// `globalNamespaces`.
    pub global_namespaces: String,
    /// `logToStderr`.
    pub log_to_stderr: bool,
    /// `logLevel`.
    pub log_level: String,
    /// `logFile`.
    pub log_file: String,
    /// `readinessindicatorfile`.
    pub readiness_indicator_file: String,
    /// `kubeconfig` (host path).
    pub kubeconfig: String,
}

/// Multus's thin `00-multus.conf` text, byte-exact with its template
/// (`vectors/multus/19-thin-generated-config.json`), the primary embedded verbatim (compacted, key
/// order kept) as the only delegate.
pub fn generate_thin_config(primary: &DelegateConfig, plugin_type: &str, options: &ThinOptions) -> String {
    let q = |s: &str| Value::from(s).to_string();
    let mut lines = vec![
        format!("\"cniVersion\": {}", q(primary.cni_version())),
        format!(
            "\"name\": {}",
            q(options.network_name.as_deref().unwrap_or(DEFAULT_NETWORK_NAME))
        ),
        format!("\"type\": {}", q(plugin_type)),
    ];
    if let Some(caps) = capabilities_of(Some(primary)) {
        lines.push(format!("\"capabilities\": {caps}"));
    }
    if options.namespace_isolation {
        lines.push("\"namespaceIsolation\": true".into());
    }
    if !options.global_namespaces.is_empty() {
        lines.push(format!("\"globalNamespaces\": {}", q(&options.global_namespaces)));
    }
    lines.push(format!("\"logToStderr\": {}", options.log_to_stderr));
    if !options.log_level.is_empty() {
        lines.push(format!("\"logLevel\": {}", q(&options.log_level)));
    }
    if !options.log_file.is_empty() {
        lines.push(format!("\"logFile\": {}", q(&options.log_file)));
    }
    if !options.readiness_indicator_file.is_empty() {
        lines.push(format!(
            "\"readinessindicatorfile\": {}",
            q(&options.readiness_indicator_file)
        ));
    }
    lines.push(format!("\"kubeconfig\": {}", q(&options.kubeconfig)));
    let delegate = Value::Object(primary.to_value()).to_string();
    lines.push(format!("\"delegates\": [\n                {delegate}\n        ]"));
    let body: Vec<String> = lines.into_iter().map(|l| format!("        {l}")).collect();
    format!("{{\n{}\n}}\n", body.join(",\n"))
}
