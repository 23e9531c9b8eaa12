//! A delegate's CNI configuration (single plugin or conflist), kept byte-for-byte, and how a
//! NetworkAttachmentDefinition or a conf-dir file becomes one (docs/upstream/multus.md §1.2).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::NetworkAttachmentDefinition;

/// A CNI network configuration to invoke a delegate with. The text is what the delegate gets
/// (lossless: plugin-specific keys survive to DEL); the rest is read from it once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DelegateConfig {
    text: String,
    name: String,
    cni_version: String,
    kind: DelegateKind,
}

/// Single plugin or plugin list, with the plugin types in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DelegateKind {
    /// A single plugin configuration (`type` at top level).
    Plugin {
        /// The plugin's `type`.
        plugin_type: String,
    },
    /// A conflist (`plugins` array).
    List {
        /// `type` of every plugin, in order.
        plugin_types: Vec<String>,
    },
}

/// The meta-plugin's own plugin type (the `weft-cni` shim). A delegate of this type would
/// hand the pod's ADD back to the agent that runs it, which would plan the same networks again
/// from within its own ADD: a configuration naming it is not a delegate
/// ([`DelegateConfigError::MetaPlugin`]), whether a tenant's NAD, a conf-dir file, an inline
/// delegate or an auxiliary chain.
pub const META_PLUGIN_TYPE: &str = "weft-cni";

/// Why a configuration cannot be used as a delegate (Multus's `LoadDelegateNetConf` texts).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DelegateConfigError {
    /// Not a JSON object.
    #[error("LoadDelegateNetConf: error unmarshalling delegate config: {0}")]
    NotJson(String),
    /// Neither `type` nor `plugins`.
    #[error(
        "LoadDelegateNetConf: failed with: LoadDelegateNetConfList: delegate must have the 'type' or 'plugin' field"
    )]
    NoTypeOrPlugins,
    /// `plugins` is not an array of objects.
    #[error(
        "LoadDelegateNetConf: failed with: LoadDelegateNetConfList: error unmarshalling delegate conflist: 'plugins' must be an array of objects"
    )]
    PluginsNotObjects,
    /// The first plugin of a list has no `type`.
    #[error(
        "LoadDelegateNetConf: failed with: LoadDelegateNetConfList: a plugin delegate must have the 'type' field"
    )]
    FirstPluginWithoutType,
    /// A field has the wrong JSON type.
    #[error("LoadDelegateNetConf: field '{field}' must be a {expected}")]
    FieldType {
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A plugin of the configuration is the meta-plugin itself ([`META_PLUGIN_TYPE`]).
    #[error(
        "plugin type {META_PLUGIN_TYPE:?} is the meta-plugin itself (it would attach the pod's networks again, from within its own ADD); name the plugin to delegate to"
    )]
    MetaPlugin,
}

impl DelegateConfig {
    /// Classify a configuration as Multus does: top-level `type` → single plugin, else it must be
    /// a list whose first plugin has a `type`.
    pub fn parse(text: impl Into<String>) -> Result<Self, DelegateConfigError> {
        let text = text.into();
        let value: Map<String, Value> =
            serde_json::from_str(&text).map_err(|e| DelegateConfigError::NotJson(e.to_string()))?;
        let name = string_field(&value, "name")?;
        let cni_version = string_field(&value, "cniVersion")?;
        let plugin_type = string_field(&value, "type")?;
        let kind = if !plugin_type.is_empty() {
            DelegateKind::Plugin { plugin_type }
        } else {
            let plugins = match value.get("plugins") {
                None | Some(Value::Null) => return Err(DelegateConfigError::NoTypeOrPlugins),
                Some(Value::Array(p)) => p,
                Some(_) => return Err(DelegateConfigError::PluginsNotObjects),
            };
            let plugin_types = plugins
                .iter()
                .map(|p| match p {
                    Value::Object(p) => string_field(p, "type"),
                    _ => Err(DelegateConfigError::PluginsNotObjects),
                })
                .collect::<Result<Vec<_>, _>>()?;
            if plugin_types.first().is_none_or(String::is_empty) {
                return Err(DelegateConfigError::FirstPluginWithoutType);
            }
            DelegateKind::List { plugin_types }
        };
        let types: &[String] = match &kind {
            DelegateKind::Plugin { plugin_type } => std::slice::from_ref(plugin_type),
            DelegateKind::List { plugin_types } => plugin_types,
        };
        if types.iter().any(|t| t == META_PLUGIN_TYPE)
            || objects_of(&kind, &value).into_iter().any(execs_meta_plugin)
        {
            return Err(DelegateConfigError::MetaPlugin);
        }
        Ok(Self {
            text,
            name,
            cni_version,
            kind,
        })
    }

    /// The exact configuration text.
    pub fn text(&self) -> &str {
        &self.text
    }
    /// The CNI network name (`name`; libcni's cache identity, not the NAD name).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// `cniVersion` (empty when absent).
    pub fn cni_version(&self) -> &str {
        &self.cni_version
    }
    /// Single plugin or list.
    pub fn kind(&self) -> &DelegateKind {
        &self.kind
    }
    /// True for a conflist.
    pub fn is_list(&self) -> bool {
        matches!(self.kind, DelegateKind::List { .. })
    }
    /// The type of the (first) plugin, for messages.
    pub fn first_type(&self) -> &str {
        match &self.kind {
            DelegateKind::Plugin { plugin_type } => plugin_type,
            DelegateKind::List { plugin_types } => &plugin_types[0],
        }
    }
    /// The configuration as a JSON object.
    pub fn to_value(&self) -> Map<String, Value> {
        serde_json::from_str(&self.text).expect("validated at parse")
    }

    /// The plugin's object, or every plugin object of a list.
    fn plugin_objects(&self) -> Vec<Map<String, Value>> {
        let value = self.to_value();
        objects_of(&self.kind, &value).into_iter().cloned().collect()
    }

    /// True when the delegate changes state of the pod's namespace that another delegate of the
    /// same pod may share or name, so that a pod's delegates must run one after another in
    /// plan order: `linkInContainer` (CNI 1.1's macvlan, ipvlan and vlan: the `master` is a link
    /// in the pod, possibly another delegate's interface), `vrf` (finds the VRF by name or
    /// creates it, and picks a free table), `sbr` without a `table` (picks the first free
    /// routing table).
    pub fn needs_plan_order(&self) -> bool {
        self.plugin_objects().iter().any(|plugin| {
            let kind = plugin.get("type").and_then(Value::as_str).unwrap_or_default();
            plugin.get("linkInContainer") == Some(&Value::Bool(true))
                || kind == "vrf"
                || (kind == "sbr" && plugin.get("table").is_none_or(Value::is_null))
        })
    }

    /// True when the delegate may install a default route of its own: a plugin with
    /// `isDefaultGateway: true`, an `ipam` of type `dhcp` (the server's Router option becomes
    /// `0.0.0.0/0`) or `ipam.routes` with a `/0` destination. The reference plugins add routes
    /// exclusively, so whichever of two such delegates comes second fails: Multus' order (the
    /// cluster network first) decides which one.
    pub fn may_add_default_route(&self) -> bool {
        self.plugin_objects().iter().any(|plugin| {
            let ipam = plugin.get("ipam").and_then(Value::as_object);
            plugin.get("isDefaultGateway") == Some(&Value::Bool(true))
                || ipam.and_then(|i| i.get("type")).and_then(Value::as_str) == Some("dhcp")
                || ipam
                    .and_then(|i| i.get("routes"))
                    .and_then(Value::as_array)
                    .is_some_and(|routes| {
                        routes.iter().any(|r| {
                            r.get("dst")
                                .and_then(Value::as_str)
                                .is_some_and(|dst| dst.trim().ends_with("/0"))
                        })
                    })
        })
    }

    /// Capabilities set to `true` by the plugin (single) or by any plugin (list).
    pub fn capabilities(&self) -> BTreeSet<String> {
        self.plugin_objects()
            .iter()
            .filter_map(|p| p.get("capabilities").and_then(Value::as_object))
            .flat_map(|caps| caps.iter())
            .filter(|(_, on)| on.as_bool() == Some(true))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Apply `edit` to the configuration (single plugin) or to every plugin of a list, keeping the
    /// order of every key. Used for `args.cni`, `deviceID`. Fails if the edit breaks the
    /// classification (removes `type`, say).
    pub fn map_plugins(
        &self,
        mut edit: impl FnMut(&mut Map<String, Value>),
    ) -> Result<Self, DelegateConfigError> {
        let mut value = self.to_value();
        match self.kind {
            DelegateKind::Plugin { .. } => edit(&mut value),
            DelegateKind::List { .. } => {
                if let Some(Value::Array(plugins)) = value.get_mut("plugins") {
                    plugins
                        .iter_mut()
                        .filter_map(Value::as_object_mut)
                        .for_each(&mut edit);
                }
            }
        }
        self.replaced(value)
    }

    /// Set top-level `cniVersion` when the configuration has none (DEL of cached lists).
    pub fn with_cni_version_if_missing(&self, version: &str) -> Self {
        if !self.cni_version.is_empty() {
            return self.clone();
        }
        let mut value = self.to_value();
        value.insert("cniVersion".into(), Value::String(version.into()));
        Self {
            text: serde_json::to_string(&value).expect("a JSON map serialises"),
            cni_version: version.into(),
            ..self.clone()
        }
    }

    fn replaced(&self, value: Map<String, Value>) -> Result<Self, DelegateConfigError> {
        Self::parse(serde_json::to_string(&value).expect("a JSON map serialises"))
    }
}

impl TryFrom<String> for DelegateConfig {
    type Error = DelegateConfigError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(text)
    }
}

impl From<DelegateConfig> for String {
    fn from(config: DelegateConfig) -> String {
        config.text
    }
}

/// The plugin object of a configuration (`value`, of `kind`), or every plugin object of a list.
fn objects_of<'a>(kind: &DelegateKind, value: &'a Map<String, Value>) -> Vec<&'a Map<String, Value>> {
    match (kind, value.get("plugins")) {
        (DelegateKind::List { .. }, Some(Value::Array(plugins))) => {
            plugins.iter().filter_map(Value::as_object).collect()
        }
        _ => vec![value],
    }
}

/// The fields by which a plugin names another plugin that it execs with its own configuration:
/// its IPAM plugin (every reference plugin), and a delegate (flannel's, and plugins shaped
/// like it).
const EXEC_FIELDS: [&str; 2] = ["ipam", "delegate"];

/// Whether `plugin` execs the meta-plugin through one of [`EXEC_FIELDS`] (`"ipam": {"type":
/// "weft-cni"}`): the shim would then get the plugin's ADD as a meta-plugin call of its own.
fn execs_meta_plugin(plugin: &Map<String, Value>) -> bool {
    EXEC_FIELDS.iter().any(|field| {
        plugin
            .get(*field)
            .and_then(|nested| nested.get("type"))
            .and_then(Value::as_str)
            == Some(META_PLUGIN_TYPE)
    })
}

fn string_field(map: &Map<String, Value>, field: &'static str) -> Result<String, DelegateConfigError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(DelegateConfigError::FieldType {
            field,
            expected: "string",
        }),
    }
}

/// Why a NAD gives no usable configuration. Every message names the NAD.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NadConfigError {
    /// `spec.config` is not a JSON object.
    #[error(
        "NetworkAttachmentDefinition {nad}: GetCNIConfig: err in getCNIConfigFromSpec: failed to unmarshal Spec.Config: {detail}"
    )]
    SpecNotJson {
        /// `<namespace>/<name>`.
        nad: String,
        /// The decoder's message.
        detail: String,
    },
    /// `spec.config` is empty and the conf dir has no matching file.
    #[error("NetworkAttachmentDefinition {nad}: GetCNIConfig: err in GetCNIConfigFromFile: {source}")]
    ConfDir {
        /// `<namespace>/<name>`.
        nad: String,
        /// The lookup failure.
        source: ConfDirError,
    },
    /// The configuration is not a valid delegate.
    #[error("NetworkAttachmentDefinition {nad}: {source}")]
    Invalid {
        /// `<namespace>/<name>`.
        nad: String,
        /// The classification failure.
        source: DelegateConfigError,
    },
}

/// Why a conf-dir lookup by network name failed (libcni/NAD-client texts).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfDirError {
    /// No `.conf`/`.json`/`.conflist` file at all.
    #[error("No networks found in {dir}")]
    Empty {
        /// The directory.
        dir: String,
    },
    /// No file has that network name.
    #[error("no network available in the name {name} in cni dir {dir}")]
    NotFound {
        /// The wanted name.
        name: String,
        /// The directory.
        dir: String,
    },
    /// A file scanned before the match does not parse.
    #[error("Error loading CNI config file {path}: error parsing configuration: {detail}")]
    BadFile {
        /// `<dir>/<file>`.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// A `.conflist` scanned before the match does not parse.
    #[error("Error loading CNI conflist file {path}: error parsing configuration list: {detail}")]
    BadList {
        /// `<dir>/<file>`.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// The matching single-plugin file has no `type`.
    #[error("Error loading CNI config file {path}: no 'type'; perhaps this is a .conflist?")]
    NoType {
        /// `<dir>/<file>`.
        path: String,
    },
}

/// Find the configuration whose `name` is `name` among a conf dir's files, as the NAD client does:
/// files ending `.conf`, `.json` or `.conflist`, in sorted file-name order regardless of extension
/// (docs/upstream/multus.md §1.2 QUIRK, kept: see docs/compat.md), first match wins, a broken file
/// met before the match is an error. `files` are `(file name, contents)`; `dir` is for messages. An
/// empty `name` matches the first file.
pub fn find_config_in_dir(
    dir: &str,
    files: &[(String, Vec<u8>)],
    name: &str,
) -> Result<String, ConfDirError> {
    let mut candidates: Vec<&(String, Vec<u8>)> = files
        .iter()
        .filter(|(f, _)| [".conf", ".json", ".conflist"].iter().any(|e| f.ends_with(e)))
        .collect();
    if candidates.is_empty() {
        return Err(ConfDirError::Empty { dir: dir.into() });
    }
    candidates.sort_by(|a, b| a.0.cmp(&b.0));
    for (file, bytes) in candidates {
        let path = format!("{}/{file}", dir.trim_end_matches('/'));
        let text = String::from_utf8_lossy(bytes).into_owned();
        let map: Map<String, Value> = match serde_json::from_str(&text) {
            Ok(m) => m,
            Err(e) if file.ends_with(".conflist") => {
                return Err(ConfDirError::BadList {
                    path,
                    detail: e.to_string(),
                });
            }
            Err(e) => {
                return Err(ConfDirError::BadFile {
                    path,
                    detail: e.to_string(),
                });
            }
        };
        let file_name = map.get("name").and_then(Value::as_str).unwrap_or("");
        if file.ends_with(".conflist") {
            if file_name.is_empty() {
                return Err(ConfDirError::BadList {
                    path,
                    detail: "no name".into(),
                });
            }
            if !map.get("plugins").is_some_and(Value::is_array) {
                return Err(ConfDirError::BadList {
                    path,
                    detail: "no 'plugins' key".into(),
                });
            }
            if file_name == name || name.is_empty() {
                return Ok(text);
            }
        } else if file_name == name || name.is_empty() {
            if map.get("type").and_then(Value::as_str).unwrap_or("").is_empty() {
                return Err(ConfDirError::NoType { path });
            }
            return Ok(text);
        }
    }
    Err(ConfDirError::NotFound {
        name: name.into(),
        dir: dir.into(),
    })
}

/// `spec.config` with `name` injected when absent or `""` (NPWG §3.4.2; docs/upstream/multus.md
/// §1.2). Otherwise the text is returned unchanged. The injected key goes first and the other keys
/// keep their order (Multus re-serialises a Go map, sorting keys: same JSON, different bytes —
/// docs/compat.md).
pub fn inject_network_name(spec_config: &str, nad_name: &str) -> Result<String, String> {
    let map: Map<String, Value> = serde_json::from_str(spec_config).map_err(|e| e.to_string())?;
    match map.get("name") {
        Some(Value::String(s)) if s.is_empty() => {}
        Some(_) => return Ok(spec_config.to_owned()),
        None => {}
    }
    let mut out = Map::with_capacity(map.len() + 1);
    out.insert("name".into(), Value::String(nad_name.into()));
    out.extend(map.into_iter().filter(|(k, _)| k != "name"));
    Ok(serde_json::to_string(&out).expect("a JSON map serialises"))
}

/// The delegate configuration of a NAD: `spec.config` (name injected when absent) or, when it
/// is empty, the conf-dir file whose network name is the NAD's name (`conf_dir` path for
/// messages, `conf_files` its `(file name, contents)`; the caller reads the directory).
pub fn delegate_config_from_nad(
    nad: &NetworkAttachmentDefinition,
    conf_dir: &str,
    conf_files: &[(String, Vec<u8>)],
) -> Result<DelegateConfig, NadConfigError> {
    let nad_ref = format!(
        "{}/{}",
        nad.metadata.namespace.as_deref().unwrap_or(""),
        nad.metadata.name
    );
    let text = if nad.spec.config.is_empty() {
        find_config_in_dir(conf_dir, conf_files, &nad.metadata.name).map_err(|source| {
            NadConfigError::ConfDir {
                nad: nad_ref.clone(),
                source,
            }
        })?
    } else {
        inject_network_name(&nad.spec.config, &nad.metadata.name).map_err(|detail| {
            NadConfigError::SpecNotJson {
                nad: nad_ref.clone(),
                detail,
            }
        })?
    };
    DelegateConfig::parse(text).map_err(|source| NadConfigError::Invalid { nad: nad_ref, source })
}

#[cfg(test)]
mod tests;
