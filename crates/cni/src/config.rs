//! Network configurations, kept losslessly as JSON objects (key order and unknown keys
//! preserved) with typed accessors for the fields the spec defines.

use serde_json::{Map, Value};

use crate::version::{CniVersion, VersionError};

/// A JSON object.
pub type JsonObject = Map<String, Value>;

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not JSON.
    #[error("network config is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Valid JSON but not an object.
    #[error("network config must be a JSON object")]
    NotAnObject,
    /// A field is missing or has the wrong type.
    #[error("network config field {field:?}: {problem}")]
    Field {
        /// The field (dotted path for nested fields, e.g. `plugins[1].type`).
        field: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// `cniVersion` is malformed.
    #[error("network config field \"cniVersion\": {0}")]
    Version(#[from] VersionError),
}

fn field_error(field: impl Into<String>, problem: &'static str) -> ConfigError {
    ConfigError::Field {
        field: field.into(),
        problem,
    }
}

fn parse_object(bytes: &[u8]) -> Result<JsonObject, ConfigError> {
    match serde_json::from_slice(bytes)? {
        Value::Object(map) => Ok(map),
        _ => Err(ConfigError::NotAnObject),
    }
}

fn optional_str<'a>(map: &'a JsonObject, key: &str) -> Result<Option<&'a str>, ConfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(field_error(key, "must be a string")),
    }
}

fn optional_object<'a>(map: &'a JsonObject, key: &str) -> Result<Option<&'a JsonObject>, ConfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(field_error(key, "must be an object")),
    }
}

/// One plugin's configuration (a `.conf`, or one entry of a list's `plugins`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkConfig(JsonObject);

impl NetworkConfig {
    /// Parses a single-plugin configuration; `type` is required.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ConfigError> {
        Self::from_object(parse_object(bytes)?)
    }

    /// Wraps an object, validating the typed fields.
    pub fn from_object(map: JsonObject) -> Result<Self, ConfigError> {
        let config = Self(map);
        config.validate("")?;
        Ok(config)
    }

    fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        let named = |e: ConfigError| match e {
            ConfigError::Field { field, problem } => field_error(format!("{prefix}{field}"), problem),
            other => other,
        };
        match optional_str(&self.0, "type").map_err(named)? {
            Some(t) if !t.is_empty() => {}
            _ => return Err(field_error(format!("{prefix}type"), "required")),
        }
        optional_str(&self.0, "name").map_err(named)?;
        if let Some(version) = optional_str(&self.0, "cniVersion").map_err(named)? {
            CniVersion::of_config(Some(version))?;
        }
        for key in [
            "capabilities",
            "ipam",
            "dns",
            "args",
            "runtimeConfig",
            "prevResult",
        ] {
            optional_object(&self.0, key).map_err(named)?;
        }
        if let Some(ipam) = optional_object(&self.0, "ipam")?
            && ipam.get("type").is_some_and(|t| !t.is_string())
        {
            return Err(field_error(format!("{prefix}ipam.type"), "must be a string"));
        }
        Ok(())
    }

    /// The underlying object.
    pub fn as_object(&self) -> &JsonObject {
        &self.0
    }

    /// Unwraps the object.
    pub fn into_object(self) -> JsonObject {
        self.0
    }

    /// JSON text, keys in their original order.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.0).expect("a JSON object always serializes")
    }

    /// `cniVersion` as written (may be absent).
    pub fn cni_version_str(&self) -> Option<&str> {
        self.0.get("cniVersion").and_then(Value::as_str)
    }

    /// `cniVersion` parsed (absent means 0.1.0).
    pub fn cni_version(&self) -> CniVersion {
        CniVersion::of_config(self.cni_version_str()).expect("validated on construction")
    }

    /// `name`.
    pub fn name(&self) -> Option<&str> {
        self.0.get("name").and_then(Value::as_str)
    }

    /// `type`: the plugin binary's name.
    pub fn plugin_type(&self) -> &str {
        self.0
            .get("type")
            .and_then(Value::as_str)
            .expect("validated on construction")
    }

    /// `capabilities` entries set to `true`.
    pub fn capabilities(&self) -> impl Iterator<Item = &str> {
        self.object("capabilities")
            .into_iter()
            .flat_map(|caps| caps.iter())
            .filter(|(_, enabled)| enabled.as_bool() == Some(true))
            .map(|(name, _)| name.as_str())
    }

    /// Whether the plugin declares `capability` as `true`.
    pub fn has_capability(&self, capability: &str) -> bool {
        self.capabilities().any(|c| c == capability)
    }

    /// `ipam`.
    pub fn ipam(&self) -> Option<&JsonObject> {
        self.object("ipam")
    }

    /// `ipam.type`.
    pub fn ipam_type(&self) -> Option<&str> {
        self.ipam()?.get("type")?.as_str()
    }

    /// `dns`.
    pub fn dns(&self) -> Option<&JsonObject> {
        self.object("dns")
    }

    /// `args` (conventions: `args.cni` holds per-attachment arguments).
    pub fn args(&self) -> Option<&JsonObject> {
        self.object("args")
    }

    /// `runtimeConfig`.
    pub fn runtime_config(&self) -> Option<&JsonObject> {
        self.object("runtimeConfig")
    }

    /// `prevResult`, raw (any version; read it with [`crate::result_from_value`]).
    pub fn prev_result(&self) -> Option<&Value> {
        self.0.get("prevResult").filter(|v| !v.is_null())
    }

    fn object(&self, key: &str) -> Option<&JsonObject> {
        self.0.get(key).and_then(Value::as_object)
    }

    /// Sets a top-level key, replacing any previous value in place (key order kept).
    /// Rejected (and not applied) when it would make the config invalid.
    pub fn insert(&mut self, key: &str, value: Value) -> Result<(), ConfigError> {
        self.update(|object| {
            object.insert(key.to_string(), value);
        })
    }

    /// Edits the object; the edit is kept only if the result is still a valid config.
    pub fn update(&mut self, edit: impl FnOnce(&mut JsonObject)) -> Result<(), ConfigError> {
        let mut edited = Self(self.0.clone());
        edit(&mut edited.0);
        edited.validate("")?;
        *self = edited;
        Ok(())
    }
}

/// A configuration list (`.conflist`): shared name and version, plugins run in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkConfigList {
    raw: JsonObject,
    plugins: Vec<NetworkConfig>,
}

impl NetworkConfigList {
    /// Parses a list; `name` and a non-empty `plugins` array of valid plugin configs are required.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ConfigError> {
        Self::from_object(parse_object(bytes)?)
    }

    /// Wraps an object, validating it.
    pub fn from_object(raw: JsonObject) -> Result<Self, ConfigError> {
        match optional_str(&raw, "name")? {
            Some(name) if !name.is_empty() => {}
            _ => return Err(field_error("name", "required")),
        }
        if let Some(version) = optional_str(&raw, "cniVersion")? {
            CniVersion::of_config(Some(version))?;
        }
        for key in ["disableCheck", "disableGC"] {
            if raw.get(key).is_some_and(|v| !v.is_boolean() && !v.is_null()) {
                return Err(field_error(key, "must be a boolean"));
            }
        }
        let plugins = match raw.get("plugins") {
            Some(Value::Array(plugins)) if !plugins.is_empty() => plugins,
            Some(Value::Array(_)) => return Err(field_error("plugins", "must not be empty")),
            _ => return Err(field_error("plugins", "must be an array")),
        };
        let plugins = plugins
            .iter()
            .enumerate()
            .map(|(index, plugin)| {
                let prefix = format!("plugins[{index}].");
                let Value::Object(map) = plugin else {
                    return Err(field_error(format!("plugins[{index}]"), "must be an object"));
                };
                let config = NetworkConfig(map.clone());
                config.validate(&prefix)?;
                Ok(config)
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { raw, plugins })
    }

    /// Turns a single-plugin config into a one-plugin list with the same name and version
    /// (what libcni does for `.conf` files).
    pub fn from_single(config: NetworkConfig) -> Self {
        let mut raw = JsonObject::new();
        if let Some(version) = config.cni_version_str() {
            raw.insert("cniVersion".into(), Value::from(version));
        }
        raw.insert("name".into(), Value::from(config.name().unwrap_or_default()));
        raw.insert(
            "plugins".into(),
            Value::Array(vec![Value::Object(config.0.clone())]),
        );
        Self {
            raw,
            plugins: vec![config],
        }
    }

    /// The underlying object (its `plugins` as given).
    pub fn as_object(&self) -> &JsonObject {
        &self.raw
    }

    /// JSON text, keys in their original order.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.raw).expect("a JSON object always serializes")
    }

    /// `name`.
    pub fn name(&self) -> &str {
        self.raw.get("name").and_then(Value::as_str).unwrap_or_default()
    }

    /// `cniVersion` as written.
    pub fn cni_version_str(&self) -> Option<&str> {
        self.raw.get("cniVersion").and_then(Value::as_str)
    }

    /// `cniVersion` parsed (absent means 0.1.0).
    pub fn cni_version(&self) -> CniVersion {
        CniVersion::of_config(self.cni_version_str()).expect("validated on construction")
    }

    /// `disableCheck`.
    pub fn disable_check(&self) -> bool {
        self.raw.get("disableCheck").and_then(Value::as_bool) == Some(true)
    }

    /// `disableGC`.
    pub fn disable_gc(&self) -> bool {
        self.raw.get("disableGC").and_then(Value::as_bool) == Some(true)
    }

    /// The plugins, in order.
    pub fn plugins(&self) -> &[NetworkConfig] {
        &self.plugins
    }

    /// Edits the list's own object (not `plugins`: use [`Self::update_plugins`]); kept only if
    /// the list stays valid. E.g. inject a missing `name` or `cniVersion`.
    pub fn update(&mut self, edit: impl FnOnce(&mut JsonObject)) -> Result<(), ConfigError> {
        let mut raw = self.raw.clone();
        edit(&mut raw);
        raw.insert("plugins".into(), self.raw["plugins"].clone());
        *self = Self::from_object(raw)?;
        Ok(())
    }

    /// Edits every plugin's object in order (e.g. add `deviceID`, `args.cni`); kept only if
    /// every plugin stays valid.
    pub fn update_plugins(&mut self, mut edit: impl FnMut(&mut JsonObject)) -> Result<(), ConfigError> {
        let mut raw = self.raw.clone();
        if let Some(Value::Array(plugins)) = raw.get_mut("plugins") {
            plugins
                .iter_mut()
                .filter_map(Value::as_object_mut)
                .for_each(&mut edit);
        }
        *self = Self::from_object(raw)?;
        Ok(())
    }
}

/// A configuration as found in a NAD or a conf dir: a single plugin or a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnyNetworkConfig {
    /// A single plugin (`.conf`).
    Single(NetworkConfig),
    /// A list (`.conflist`).
    List(NetworkConfigList),
}

impl AnyNetworkConfig {
    /// Classifies and parses: an object with a `plugins` key is a list, anything else a
    /// single plugin.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ConfigError> {
        Self::from_object(parse_object(bytes)?)
    }

    /// Classifies and validates an object.
    pub fn from_object(map: JsonObject) -> Result<Self, ConfigError> {
        if map.contains_key("plugins") {
            NetworkConfigList::from_object(map).map(Self::List)
        } else {
            NetworkConfig::from_object(map).map(Self::Single)
        }
    }

    /// The network name.
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Single(config) => config.name(),
            Self::List(list) => Some(list.name()),
        }
    }

    /// The declared spec version.
    pub fn cni_version(&self) -> CniVersion {
        match self {
            Self::Single(config) => config.cni_version(),
            Self::List(list) => list.cni_version(),
        }
    }

    /// JSON text.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Self::Single(config) => config.to_bytes(),
            Self::List(list) => list.to_bytes(),
        }
    }

    /// Edits the single plugin, or every plugin of the list (Multus sets `deviceID` this way).
    pub fn update_plugins(&mut self, mut edit: impl FnMut(&mut JsonObject)) -> Result<(), ConfigError> {
        match self {
            Self::Single(config) => config.update(edit),
            Self::List(list) => list.update_plugins(&mut edit),
        }
    }

    /// The configuration as a list: a single plugin becomes a one-plugin list with its own
    /// name and version (what libcni runs).
    pub fn into_list(self) -> NetworkConfigList {
        match self {
            Self::Single(config) => NetworkConfigList::from_single(config),
            Self::List(list) => list,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const CONFLIST: &str = r#"{"cniVersion":"1.0.0","name":"br","disableCheck":true,"plugins":[{"type":"bridge","bridge":"br0","zzz":1,"aaa":{"x":[1,2]},"ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]]}},{"type":"tuning","capabilities":{"mac":true,"ips":false},"mtu":1400}]}"#;

    #[test]
    fn conflist_is_lossless_and_typed() {
        let list = NetworkConfigList::from_bytes(CONFLIST.as_bytes()).unwrap();
        assert_eq!(list.to_bytes(), CONFLIST.as_bytes());
        assert_eq!(list.name(), "br");
        assert_eq!(list.cni_version(), CniVersion::V1_0_0);
        assert!(list.disable_check());
        assert!(!list.disable_gc());
        let [bridge, tuning] = list.plugins() else {
            panic!()
        };
        assert_eq!(bridge.plugin_type(), "bridge");
        assert_eq!(bridge.ipam_type(), Some("host-local"));
        assert_eq!(tuning.capabilities().collect::<Vec<_>>(), vec!["mac"]);
        assert!(!tuning.has_capability("ips"));
        let keys: Vec<&str> = bridge.as_object().keys().map(String::as_str).collect();
        assert_eq!(keys, vec!["type", "bridge", "zzz", "aaa", "ipam"]);
    }

    #[test]
    fn classifier() {
        assert!(matches!(
            AnyNetworkConfig::from_bytes(CONFLIST.as_bytes()).unwrap(),
            AnyNetworkConfig::List(_)
        ));
        let single =
            AnyNetworkConfig::from_bytes(br#"{"cniVersion":"0.3.1","name":"m","type":"macvlan"}"#).unwrap();
        assert!(matches!(single, AnyNetworkConfig::Single(_)));
        assert_eq!(single.name(), Some("m"));
        assert_eq!(single.cni_version(), CniVersion::V0_3_1);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (json!({"name": "x"}), "\"type\""),
            (json!({"type": 5}), "\"type\""),
            (json!({"type": "a", "ipam": []}), "\"ipam\""),
            (json!({"type": "a", "ipam": {"type": 1}}), "\"ipam.type\""),
            (json!({"type": "a", "cniVersion": "1.0"}), "cniVersion"),
            (json!({"plugins": [{"type": "a"}]}), "\"name\""),
            (json!({"name": "n", "plugins": []}), "\"plugins\""),
            (
                json!({"name": "n", "plugins": [{"type": "a"}, {"x": 1}]}),
                "\"plugins[1].type\"",
            ),
            (
                json!({"name": "n", "plugins": [{"type": "a"}, {"type": "b", "capabilities": 1}]}),
                "\"plugins[1].capabilities\"",
            ),
            (
                json!({"name": "n", "disableGC": "yes", "plugins": [{"type": "a"}]}),
                "\"disableGC\"",
            ),
        ];
        for (value, field) in cases {
            let Value::Object(map) = value.clone() else {
                unreachable!()
            };
            let err = AnyNetworkConfig::from_object(map).unwrap_err().to_string();
            assert!(err.contains(field), "{value} -> {err}");
        }
        assert!(matches!(
            AnyNetworkConfig::from_bytes(b"[]"),
            Err(ConfigError::NotAnObject)
        ));
        assert!(matches!(
            AnyNetworkConfig::from_bytes(b"{"),
            Err(ConfigError::Json(_))
        ));
    }

    #[test]
    fn single_becomes_one_plugin_list() {
        let single =
            NetworkConfig::from_bytes(br#"{"cniVersion":"1.0.0","name":"m","type":"macvlan","master":"x"}"#)
                .unwrap();
        let list = NetworkConfigList::from_single(single.clone());
        assert_eq!(list.name(), "m");
        assert_eq!(list.cni_version(), CniVersion::V1_0_0);
        assert_eq!(list.plugins(), &[single]);
    }

    #[test]
    fn edits_keep_configs_valid() {
        let mut list = NetworkConfigList::from_bytes(CONFLIST.as_bytes()).unwrap();
        list.update_plugins(|p| {
            p.insert("deviceID".into(), json!("0000:00:01.0"));
        })
        .unwrap();
        assert!(
            list.plugins()
                .iter()
                .all(|p| p.as_object()["deviceID"] == "0000:00:01.0")
        );
        assert_eq!(list.as_object()["plugins"][1]["deviceID"], "0000:00:01.0");
        assert!(
            list.update_plugins(|p| {
                p.remove("type");
            })
            .is_err()
        );
        assert_eq!(
            list.plugins()[0].plugin_type(),
            "bridge",
            "a failed edit changes nothing"
        );
        list.update(|l| {
            l.insert("cniVersion".into(), json!("1.1.0"));
            l.remove("plugins");
        })
        .unwrap();
        assert_eq!(list.cni_version(), CniVersion::V1_1_0);
        assert_eq!(list.plugins().len(), 2);

        let mut single = NetworkConfig::from_bytes(br#"{"type":"macvlan"}"#).unwrap();
        assert!(single.insert("cniVersion", json!("x")).is_err());
        single.insert("name", json!("n")).unwrap();
        assert_eq!(single.name(), Some("n"));
        let any = AnyNetworkConfig::Single(single);
        assert_eq!(any.into_list().name(), "n");
    }

    proptest! {
        #[test]
        fn classifier_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = AnyNetworkConfig::from_bytes(&bytes);
        }

        #[test]
        fn unknown_keys_survive_a_round_trip(extra in proptest::collection::vec(("[a-z]{1,6}", any::<i64>()), 0..8)) {
            let mut map = JsonObject::new();
            map.insert("type".into(), Value::from("bridge"));
            // Keys the spec defines are validated (an integer `dns` is rightly an error): only
            // truly unknown keys are generated.
            const KNOWN: [&str; 9] = ["type", "name", "cniVersion", "capabilities", "ipam", "dns", "args", "runtimeConfig", "prevResult"];
            for (k, v) in extra.iter().filter(|(k, _)| !KNOWN.contains(&k.as_str())) {
                map.insert(k.clone(), Value::from(*v));
            }
            let config = NetworkConfig::from_object(map.clone()).unwrap();
            let back: Value = serde_json::from_slice(&config.to_bytes()).unwrap();
            prop_assert_eq!(back, Value::Object(map));
        }
    }
}
