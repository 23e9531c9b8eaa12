//! Pure builders of what each delegate plugin receives: its stdin config and its environment.
//! They follow libcni `buildOneConfig`/`injectRuntimeConfig` and `Args.AsEnv`.

use std::path::PathBuf;

use serde_json::Value;

use crate::config::{JsonObject, NetworkConfig};
use crate::plugin::{GcAttachment, LEGACY_ATTACHMENTS_KEY, VALID_ATTACHMENTS_KEY};
use crate::request::{CniCommand, vars};
use crate::version::CniVersion;

use super::RuntimeConf;

/// The stdin of one plugin of a list: the plugin's own config with the list's `name` and the
/// negotiated `cniVersion` injected, `prevResult` when given (already written in `version`),
/// and `runtimeConfig` replaced by the capability args the plugin declares in `capabilities`
/// (left untouched when none of them is supplied, as libcni does).
pub fn plugin_stdin(
    network_name: &str,
    version: CniVersion,
    plugin: &NetworkConfig,
    prev_result: Option<Value>,
    capability_args: &JsonObject,
) -> JsonObject {
    let mut config = plugin.as_object().clone();
    config.insert("name".into(), Value::from(network_name));
    config.insert("cniVersion".into(), Value::from(version.to_string()));
    if let Some(prev_result) = prev_result {
        config.insert("prevResult".into(), prev_result);
    }
    let runtime_config: JsonObject = plugin
        .capabilities()
        .filter_map(|capability| {
            capability_args
                .get(capability)
                .map(|value| (capability.to_string(), value.clone()))
        })
        .collect();
    if !runtime_config.is_empty() {
        config.insert("runtimeConfig".into(), Value::Object(runtime_config));
    }
    config
}

/// The stdin of one plugin for GC: its config (name and version injected) plus the valid
/// attachments under both the spec key and libcni's earlier spelling.
pub fn gc_stdin(
    network_name: &str,
    version: CniVersion,
    plugin: &NetworkConfig,
    valid: &[GcAttachment],
) -> JsonObject {
    let mut config = plugin_stdin(network_name, version, plugin, None, &JsonObject::new());
    let list = serde_json::to_value(valid).expect("attachments serialize");
    config.insert(LEGACY_ATTACHMENTS_KEY.into(), list.clone());
    config.insert(VALID_ATTACHMENTS_KEY.into(), list);
    config
}

/// The CNI variables for a command. Attachment verbs get container id, netns, ifname and
/// args; STATUS, GC and VERSION only the command and the path.
pub fn plugin_env(
    command: CniCommand,
    runtime: Option<&RuntimeConf>,
    search_path: &[PathBuf],
) -> Vec<(String, String)> {
    let mut env = vec![(vars::COMMAND.to_string(), command.as_str().to_string())];
    if let (true, Some(runtime)) = (command.is_attachment(), runtime) {
        env.extend([
            (vars::CONTAINER_ID.to_string(), runtime.container_id.clone()),
            (vars::NETNS.to_string(), runtime.netns.clone()),
            (vars::IFNAME.to_string(), runtime.ifname.clone()),
            (vars::ARGS.to_string(), runtime.args.to_string()),
        ]);
    }
    let path = search_path
        .iter()
        .map(|p| p.to_string_lossy())
        .collect::<Vec<_>>()
        .join(":");
    env.push((vars::PATH.to_string(), path));
    env
}

/// The plugins of a list to DEL after plugin `failed`'s ADD failed: those before it, last to
/// first (the failing plugin cleans up its own ADD).
pub fn undo_targets(failed: usize) -> Vec<usize> {
    (0..failed).rev().collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::args::CniArgs;

    fn plugin(value: Value) -> NetworkConfig {
        let Value::Object(map) = value else { panic!() };
        NetworkConfig::from_object(map).unwrap()
    }

    fn caps(value: Value) -> JsonObject {
        let Value::Object(map) = value else { panic!() };
        map
    }

    #[test]
    fn injects_name_version_prev_result_in_place() {
        let tuning = plugin(json!({"type": "tuning", "name": "old", "mtu": 1400, "cniVersion": "0.3.1"}));
        let prev = json!({"cniVersion": "1.0.0", "ips": []});
        let stdin = plugin_stdin(
            "net",
            CniVersion::V1_0_0,
            &tuning,
            Some(prev.clone()),
            &JsonObject::new(),
        );
        assert_eq!(
            Value::Object(stdin.clone()),
            json!({"type": "tuning", "name": "net", "mtu": 1400, "cniVersion": "1.0.0", "prevResult": prev})
        );
        let keys: Vec<&str> = stdin.keys().map(String::as_str).collect();
        assert_eq!(keys, ["type", "name", "mtu", "cniVersion", "prevResult"]);
    }

    #[test]
    fn runtime_config_only_for_declared_capabilities() {
        let args = caps(json!({"mac": "02:00:00:00:00:01", "ips": ["10.0.0.5/24"], "portMappings": []}));
        let with_caps =
            plugin(json!({"type": "tuning", "capabilities": {"mac": true, "ips": false, "bandwidth": true}}));
        let stdin = plugin_stdin("n", CniVersion::V1_0_0, &with_caps, None, &args);
        assert_eq!(stdin["runtimeConfig"], json!({"mac": "02:00:00:00:00:01"}));

        let own = plugin(json!({"type": "x", "runtimeConfig": {"keep": 1}}));
        let stdin = plugin_stdin("n", CniVersion::V1_0_0, &own, None, &args);
        assert_eq!(stdin["runtimeConfig"], json!({"keep": 1}));
        let stdin = plugin_stdin("n", CniVersion::V1_0_0, &own, None, &JsonObject::new());
        assert!(stdin.get("prevResult").is_none());
    }

    #[test]
    fn gc_stdin_carries_both_keys() {
        let valid = [GcAttachment {
            container_id: "c1".into(),
            ifname: "eth0".into(),
        }];
        let stdin = gc_stdin(
            "n",
            CniVersion::V1_1_0,
            &plugin(json!({"type": "bridge"})),
            &valid,
        );
        let expected = json!([{"containerID": "c1", "ifname": "eth0"}]);
        assert_eq!(stdin[VALID_ATTACHMENTS_KEY], expected);
        assert_eq!(stdin[LEGACY_ATTACHMENTS_KEY], expected);
    }

    proptest::proptest! {
        #[test]
        fn stdin_keeps_the_plugin_and_filters_capabilities(
            extra in proptest::collection::btree_map("[a-z]{1,5}", 0i64..9, 0..6),
            declared in proptest::collection::btree_map("[a-e]", proptest::bool::ANY, 0..5),
            supplied in proptest::collection::btree_map("[a-g]", 0i64..9, 0..6),
        ) {
            let mut object = JsonObject::new();
            object.insert("type".into(), Value::from("p"));
            // Spec-defined keys are validated; generate only unknown ones.
            const KNOWN: [&str; 8] = ["name", "cniVersion", "capabilities", "ipam", "dns", "args", "runtimeConfig", "prevResult"];
            for (k, v) in extra.iter().filter(|(k, _)| !KNOWN.contains(&k.as_str())) {
                object.entry(k.clone()).or_insert(Value::from(*v));
            }
            object.insert("capabilities".into(), json!(declared));
            let config = NetworkConfig::from_object(object.clone()).unwrap();
            let args: JsonObject = supplied.iter().map(|(k, v)| (k.clone(), Value::from(*v))).collect();
            let stdin = plugin_stdin("net", CniVersion::V1_0_0, &config, None, &args);
            for (key, value) in &object {
                if !matches!(key.as_str(), "name" | "cniVersion" | "runtimeConfig") {
                    proptest::prop_assert_eq!(&stdin[key], value);
                }
            }
            let expected: JsonObject = supplied
                .iter()
                .filter(|(k, _)| declared.get(*k) == Some(&true))
                .map(|(k, v)| (k.clone(), Value::from(*v)))
                .collect();
            match stdin.get("runtimeConfig") {
                Some(Value::Object(rc)) => proptest::prop_assert_eq!(rc, &expected),
                _ => proptest::prop_assert!(expected.is_empty() || object.contains_key("runtimeConfig")),
            }
        }
    }

    #[test]
    fn env_per_verb() {
        let runtime = RuntimeConf {
            container_id: "c1".into(),
            netns: "/run/netns/p".into(),
            ifname: "net1".into(),
            args: CniArgs::from_pairs([("IgnoreUnknown", "1"), ("K8S_POD_NAME", "p")]),
            capability_args: JsonObject::new(),
        };
        let path = [PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")];
        let add = plugin_env(CniCommand::Add, Some(&runtime), &path);
        assert_eq!(
            add,
            [
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", "c1"),
                ("CNI_NETNS", "/run/netns/p"),
                ("CNI_IFNAME", "net1"),
                ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=p"),
                ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        let status = plugin_env(CniCommand::Status, Some(&runtime), &path);
        assert_eq!(status.len(), 2);
        assert_eq!(status[0].1, "STATUS");
    }
}
