//! The meta-plugin configuration (`weft-cni` / Multus conf keys), Multus's defaults and
//! validation (docs/upstream/multus.md §2.1; `vectors/multus/10-loadnetconf-validation.json`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weft_netconf::{DelegateConfig, DelegateConfigError};

/// Multus's default `confDir` (NAD configs without `spec.config`, name-based `clusterNetwork`).
pub const DEFAULT_CONF_DIR: &str = "/etc/cni/multus/net.d";
/// Multus's default `cniDir` (per-container cache).
pub const DEFAULT_CNI_DIR: &str = "/var/lib/cni/multus";
/// Default `binDir`, searched before `CNI_PATH`.
pub const DEFAULT_BIN_DIR: &str = "/opt/cni/bin";
/// Default `multusNamespace`.
pub const DEFAULT_MULTUS_NAMESPACE: &str = "kube-system";
/// Default agent socket directory.
pub const DEFAULT_SOCKET_DIR: &str = "/run/weft";

/// Why a meta-plugin configuration is rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not JSON, or a field of the wrong type.
    #[error("LoadNetConf: failed to load netconf: {0}")]
    Json(String),
    /// Neither `delegates` nor `clusterNetwork`.
    #[error("LoadNetConf: at least one delegate/clusterNetwork must be specified")]
    NoDelegates,
    /// An inline delegate is invalid.
    #[error("LoadNetConf: delegates[{index}]: {source}")]
    Delegate {
        /// Position in `delegates`.
        index: usize,
        /// Why.
        source: DelegateConfigError,
    },
}

/// Log verbosity (Multus levels, most verbose first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Everything.
    Debug,
    /// Informational.
    Verbose,
    /// Errors.
    Error,
    /// Only fatal conditions (Multus's default).
    Panic,
}

impl LogLevel {
    /// Case-insensitive; unknown names give `None` (Multus keeps its default then).
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "debug" => Some(Self::Debug),
            "verbose" => Some(Self::Verbose),
            "error" => Some(Self::Error),
            "panic" => Some(Self::Panic),
            _ => None,
        }
    }
}

/// The configuration, with defaults applied. `raw` keeps every key as given (the thick overlay
/// and the generated conflist work on it).
#[derive(Clone, Debug, PartialEq)]
pub struct MetaConfig {
    /// `cniVersion` (used for synthetic results and injected into cached lists lacking one).
    pub cni_version: String,
    /// `name`.
    pub name: String,
    /// `type`.
    pub plugin_type: String,
    /// `clusterNetwork`: NAD name, conf name, directory or file of the cluster network.
    pub cluster_network: String,
    /// `defaultNetworks`: always-attached networks (not for `systemNamespaces` pods).
    pub default_networks: Vec<String>,
    /// `delegates`: inline configs; ignored when `clusterNetwork` is set.
    pub delegates: Vec<DelegateConfig>,
    /// `multusNamespace`.
    pub multus_namespace: String,
    /// `systemNamespaces`.
    pub system_namespaces: Vec<String>,
    /// `namespaceIsolation`.
    pub namespace_isolation: bool,
    /// `globalNamespaces` parsed (replaces the implicit `["default"]`).
    pub non_isolated_namespaces: Vec<String>,
    /// `readinessindicatorfile` (empty = none).
    pub readiness_indicator_file: String,
    /// `confDir`.
    pub conf_dir: String,
    /// `cniDir`.
    pub cni_dir: String,
    /// `binDir`.
    pub bin_dir: String,
    /// `logLevel` (unknown names → `Panic`, as Multus).
    pub log_level: LogLevel,
    /// `logFile` (empty = none).
    pub log_file: String,
    /// `logToStderr`.
    pub log_to_stderr: bool,
    /// `socketDir`, where the agent listens (`daemonSocketDir` is what the shim dials).
    pub socket_dir: String,
    /// `daemonSocketDir` (shim side), defaults to `socketDir`.
    pub daemon_socket_dir: String,
    /// `retryDeleteOnError`.
    pub retry_delete_on_error: bool,
    /// `runtimeConfig` supplied by the container runtime.
    pub runtime_config: Map<String, Value>,
    /// `runtimeConfigToAllDelegates` (weft): give the runtime's `runtimeConfig` to every
    /// delegate, as Multus does, instead of only to the cluster network (NPWG §7.5;
    /// docs/upstream/multus.md §3.3.2).
    pub runtime_config_to_all_delegates: bool,
    /// `auxiliaryCNIChainName`: a chain of plugin configs from
    /// `<dir(clusterNetwork)>/<name>/` run as one more delegate (empty: none).
    pub auxiliary_cni_chain_name: String,
    /// `deviceCheckpointFile` (weft): the kubelet device-plugin checkpoint read for NADs
    /// with a `resourceName` (default: the kubelet's path).
    pub device_checkpoint_file: String,
    /// `deviceInfoDir` (weft): base directory of device-info files (`dp/`, `cni/`).
    pub device_info_dir: String,
    /// Every key as given.
    pub raw: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    #[serde(default)]
    cni_version: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default, rename = "type")]
    plugin_type: Option<String>,
    #[serde(default)]
    cluster_network: Option<String>,
    #[serde(default)]
    default_networks: Option<Vec<String>>,
    #[serde(default)]
    delegates: Option<Vec<Map<String, Value>>>,
    #[serde(default)]
    multus_namespace: Option<String>,
    #[serde(default)]
    system_namespaces: Option<Vec<String>>,
    #[serde(default)]
    namespace_isolation: Option<bool>,
    #[serde(default)]
    global_namespaces: Option<String>,
    #[serde(default, rename = "readinessindicatorfile")]
    readiness_indicator_file: Option<String>,
    #[serde(default)]
    conf_dir: Option<String>,
    #[serde(default)]
    cni_dir: Option<String>,
    #[serde(default)]
    bin_dir: Option<String>,
    #[serde(default)]
    log_level: Option<String>,
    #[serde(default)]
    log_file: Option<String>,
    #[serde(default)]
    log_to_stderr: Option<bool>,
    #[serde(default)]
    socket_dir: Option<String>,
    #[serde(default)]
    daemon_socket_dir: Option<String>,
    #[serde(default)]
    retry_delete_on_error: Option<bool>,
    #[serde(default)]
    runtime_config: Option<Map<String, Value>>,
    #[serde(default)]
    runtime_config_to_all_delegates: Option<bool>,
    #[serde(default, rename = "auxiliaryCNIChainName")]
    auxiliary_cni_chain_name: Option<String>,
    #[serde(default)]
    device_checkpoint_file: Option<String>,
    #[serde(default)]
    device_info_dir: Option<String>,
}

fn or_default(value: Option<String>, default: &str) -> String {
    value
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

impl MetaConfig {
    /// Parse and validate (Multus `LoadNetConf`): unknown keys are kept in `raw` and ignored.
    pub fn parse(bytes: &[u8]) -> Result<Self, ConfigError> {
        let raw: Map<String, Value> =
            serde_json::from_slice(bytes).map_err(|e| ConfigError::Json(e.to_string()))?;
        Self::from_map(raw)
    }

    /// As [`MetaConfig::parse`], from a JSON object.
    pub fn from_map(raw: Map<String, Value>) -> Result<Self, ConfigError> {
        let wire: Wire = serde_json::from_value(Value::Object(raw.clone())).map_err(|e| {
            ConfigError::Json(match offending_key(&raw) {
                Some(key) => format!("field '{key}': {e}"),
                None => e.to_string(),
            })
        })?;
        let cluster_network = wire.cluster_network.unwrap_or_default();
        let delegates = if cluster_network.is_empty() {
            let delegates = wire.delegates.unwrap_or_default();
            if delegates.is_empty() {
                return Err(ConfigError::NoDelegates);
            }
            delegates
                .into_iter()
                .enumerate()
                .map(|(index, d)| {
                    DelegateConfig::parse(Value::Object(d).to_string())
                        .map_err(|source| ConfigError::Delegate { index, source })
                })
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        let socket_dir = or_default(wire.socket_dir, DEFAULT_SOCKET_DIR);
        Ok(Self {
            cni_version: wire.cni_version.unwrap_or_default(),
            name: wire.name.unwrap_or_default(),
            plugin_type: wire.plugin_type.unwrap_or_default(),
            cluster_network,
            default_networks: wire.default_networks.unwrap_or_default(),
            delegates,
            multus_namespace: or_default(wire.multus_namespace, DEFAULT_MULTUS_NAMESPACE),
            system_namespaces: wire
                .system_namespaces
                .unwrap_or_else(|| vec![DEFAULT_MULTUS_NAMESPACE.to_owned()]),
            namespace_isolation: wire.namespace_isolation.unwrap_or(false),
            non_isolated_namespaces: parse_global_namespaces(wire.global_namespaces.as_deref().unwrap_or("")),
            readiness_indicator_file: wire.readiness_indicator_file.unwrap_or_default(),
            conf_dir: or_default(wire.conf_dir, DEFAULT_CONF_DIR),
            cni_dir: or_default(wire.cni_dir, DEFAULT_CNI_DIR),
            bin_dir: or_default(wire.bin_dir, DEFAULT_BIN_DIR),
            log_level: wire
                .log_level
                .as_deref()
                .and_then(LogLevel::parse)
                .unwrap_or(LogLevel::Panic),
            log_file: wire.log_file.unwrap_or_default(),
            log_to_stderr: wire.log_to_stderr.unwrap_or(true),
            daemon_socket_dir: or_default(wire.daemon_socket_dir, &socket_dir),
            socket_dir,
            retry_delete_on_error: wire.retry_delete_on_error.unwrap_or(false),
            runtime_config: wire.runtime_config.unwrap_or_default(),
            runtime_config_to_all_delegates: wire.runtime_config_to_all_delegates.unwrap_or(false),
            auxiliary_cni_chain_name: wire.auxiliary_cni_chain_name.unwrap_or_default(),
            device_checkpoint_file: or_default(
                wire.device_checkpoint_file,
                crate::devices::DEFAULT_CHECKPOINT_FILE,
            ),
            device_info_dir: or_default(wire.device_info_dir, crate::devices::DEFAULT_DEVICE_INFO_DIR),
            raw,
        })
    }

    /// The paths (`clusterNetwork` / `defaultNetworks` entries with a `/`) a
    /// [`crate::NetworkCatalog`] must be able to answer for.
    /// The auxiliary chain's directory is one of them.
    pub fn static_paths(&self) -> Vec<String> {
        std::iter::once(self.cluster_network.as_str())
            .chain(self.default_networks.iter().map(String::as_str))
            .filter(|v| v.contains('/'))
            .map(str::to_owned)
            .chain(crate::aux_chain::aux_chain_dir(self))
            .collect()
    }

    /// True when `namespace` gets no `defaultNetworks`.
    pub fn is_system_namespace(&self, namespace: &str) -> bool {
        self.system_namespaces.iter().any(|n| n == namespace)
    }
}

/// serde's message does not name the field: find it by decoding one key at a time.
fn offending_key(raw: &Map<String, Value>) -> Option<&str> {
    raw.iter().find_map(|(key, value)| {
        let single = Map::from_iter([(key.clone(), value.clone())]);
        serde_json::from_value::<Wire>(Value::Object(single))
            .is_err()
            .then_some(key.as_str())
    })
}

/// `globalNamespaces`: comma-split, whitespace-trimmed; an empty value means `["default"]`.
pub fn parse_global_namespaces(value: &str) -> Vec<String> {
    if value.is_empty() {
        return vec!["default".to_owned()];
    }
    value.split(',').map(|n| n.trim().to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_are_case_insensitive_and_unknown_is_panic() {
        let c = MetaConfig::parse(br#"{"clusterNetwork":"x","logLevel":"DEBUG"}"#).unwrap();
        assert_eq!(c.log_level, LogLevel::Debug);
        let c = MetaConfig::parse(br#"{"clusterNetwork":"x","logLevel":"info"}"#).unwrap();
        assert_eq!(c.log_level, LogLevel::Panic);
    }

    #[test]
    fn static_paths_are_the_slash_entries() {
        let c =
            MetaConfig::parse(br#"{"clusterNetwork":"/etc/cni/net.d","defaultNetworks":["a","/x/b.conf"]}"#)
                .unwrap();
        assert_eq!(c.static_paths(), vec!["/etc/cni/net.d", "/x/b.conf"]);
        let c = MetaConfig::parse(br#"{"clusterNetwork":"/etc/n/10-a.conf","auxiliaryCNIChainName":"aux"}"#)
            .unwrap();
        assert_eq!(c.static_paths(), vec!["/etc/n/10-a.conf", "/etc/n/aux"]);
    }

    #[test]
    fn cluster_network_makes_delegates_ignored() {
        let c = MetaConfig::parse(br#"{"clusterNetwork":"x","delegates":[{"bad":1}]}"#).unwrap();
        assert!(c.delegates.is_empty());
    }

    #[test]
    fn wrong_types_are_named() {
        let err = MetaConfig::parse(br#"{"clusterNetwork":"x","namespaceIsolation":"yes"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("field 'namespaceIsolation': invalid type"), "{err}");
        assert!(MetaConfig::parse(b"[]").is_err());
    }
}
