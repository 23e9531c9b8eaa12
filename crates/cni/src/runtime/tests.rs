//! Runtime semantics against a fake executor that records every call.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use serde_json::{Value, json};

use super::*;

#[derive(Clone, Debug)]
struct Call {
    plugin: String,
    command: String,
    env: HashMap<String, String>,
    stdin: Value,
}

/// Plugins live in `/fake/<type>`; each supports `versions[type]` (default 0.1.0–1.0.0) and
/// answers ADD with one address `10.0.0.<n>/24` appended to `prevResult`.
#[derive(Default)]
struct Fake {
    versions: HashMap<String, Vec<CniVersion>>,
    fail: HashMap<(String, String), Value>,
    calls: Mutex<Vec<Call>>,
}

impl Fake {
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
    fn calls_of(&self, command: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.command == command)
            .collect()
    }
}

impl PluginExec for Fake {
    fn find(&self, plugin_type: &str, search_path: &[PathBuf]) -> Result<PathBuf, FindError> {
        if plugin_type == "missing" {
            return Err(FindError::NotFound {
                plugin: plugin_type.into(),
                search_path: search_path.to_vec(),
            });
        }
        Ok(PathBuf::from("/fake").join(plugin_type))
    }

    fn exec(&self, binary: &Path, env: &[(String, String)], stdin: &[u8]) -> Result<Vec<u8>, ExecError> {
        let plugin = binary.file_name().unwrap().to_string_lossy().into_owned();
        let env: HashMap<String, String> = env.iter().cloned().collect();
        let command = env["CNI_COMMAND"].clone();
        let stdin: Value = serde_json::from_slice(stdin).unwrap();
        self.calls.lock().unwrap().push(Call {
            plugin: plugin.clone(),
            command: command.clone(),
            env,
            stdin: stdin.clone(),
        });
        if command == "VERSION" {
            let versions = self
                .versions
                .get(&plugin)
                .cloned()
                .unwrap_or_else(|| CniVersion::SUPPORTED[..6].to_vec());
            return Ok(serde_json::to_vec(&VersionReply::new(CniVersion::V1_0_0, &versions)).unwrap());
        }
        if let Some(error) = self.fail.get(&(plugin.clone(), command.clone())) {
            return Err(ExecError::Failed {
                status: ExitStatus::from_raw(1 << 8),
                stdout: serde_json::to_vec(error).unwrap(),
                stderr: b"something on stderr\n".to_vec(),
            });
        }
        if command != "ADD" {
            return Ok(Vec::new());
        }
        let mut result = match stdin.get("prevResult") {
            Some(prev) => crate::result_from_value(prev.clone()).unwrap(),
            None => CniResult::default(),
        };
        let n = result.ips.len() + 1;
        result.ips.push(crate::IpConfig {
            address: format!("10.0.0.{n}/24").parse().unwrap(),
            gateway: None,
            interface: None,
        });
        let version: CniVersion = stdin["cniVersion"].as_str().unwrap().parse().unwrap();
        Ok(crate::result_to_bytes(&result, version).unwrap())
    }
}

fn list(value: Value) -> NetworkConfigList {
    let Value::Object(map) = value else { panic!() };
    NetworkConfigList::from_object(map).unwrap()
}

fn chain(version: &str) -> NetworkConfigList {
    list(json!({
        "cniVersion": version,
        "name": "net",
        "plugins": [
            {"type": "bridge", "bridge": "br0", "ipam": {"type": "host-local"}},
            {"type": "tuning", "capabilities": {"mac": true}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    }))
}

fn runtime_conf() -> RuntimeConf {
    let Value::Object(capability_args) = json!({"mac": "02:00:00:00:00:09", "ips": ["10.0.0.9/24"]}) else {
        panic!()
    };
    RuntimeConf {
        container_id: "ctr".into(),
        netns: "/run/netns/p".into(),
        ifname: "net1".into(),
        args: CniArgs::from_pairs([("IgnoreUnknown", "1")]),
        capability_args,
    }
}

fn runtime(fake: Fake) -> CniRuntime<Fake> {
    CniRuntime::with_executor(["/fake"], fake)
}

#[test]
fn add_chains_prev_result_and_filters_runtime_config() {
    let cni = runtime(Fake::default());
    let result = cni.add(&chain("1.0.0"), &runtime_conf()).unwrap();
    assert_eq!(result.cni_version, "1.0.0");
    assert_eq!(result.ips.len(), 3);
    let adds = cni.executor().calls_of("ADD");
    assert_eq!(
        adds.iter().map(|c| c.plugin.as_str()).collect::<Vec<_>>(),
        ["bridge", "tuning", "portmap"]
    );
    assert!(adds[0].stdin.get("prevResult").is_none());
    assert_eq!(adds[1].stdin["prevResult"]["ips"].as_array().unwrap().len(), 1);
    assert_eq!(adds[2].stdin["prevResult"]["ips"].as_array().unwrap().len(), 2);
    for add in &adds {
        assert_eq!(add.stdin["name"], "net");
        assert_eq!(add.stdin["cniVersion"], "1.0.0");
        assert_eq!(add.env["CNI_IFNAME"], "net1");
        assert_eq!(add.env["CNI_ARGS"], "IgnoreUnknown=1");
        assert_eq!(add.env["CNI_PATH"], "/fake");
    }
    assert!(adds[0].stdin.get("runtimeConfig").is_none());
    assert_eq!(
        adds[1].stdin["runtimeConfig"],
        json!({"mac": "02:00:00:00:00:09"})
    );
    assert!(adds[2].stdin.get("runtimeConfig").is_none());
}

#[test]
fn versions_are_negotiated_per_plugin_and_probed_once() {
    let mut fake = Fake::default();
    fake.versions.insert("tuning".into(), vec![CniVersion::V0_3_1]);
    let cni = runtime(fake);
    let result = cni.add(&chain("1.1.0"), &runtime_conf()).unwrap();
    assert_eq!(result.cni_version, "1.1.0");
    cni.add(&chain("1.1.0"), &runtime_conf()).unwrap();
    let adds = cni.executor().calls_of("ADD");
    assert_eq!(adds[0].stdin["cniVersion"], "1.0.0");
    assert_eq!(adds[1].stdin["cniVersion"], "0.3.1");
    assert_eq!(adds[1].stdin["prevResult"]["cniVersion"], "0.3.1");
    assert_eq!(adds[1].stdin["prevResult"]["ips"][0]["version"], "4");
    assert_eq!(
        cni.executor().calls_of("VERSION").len(),
        3,
        "one probe per binary"
    );
}

#[test]
fn without_negotiation_the_list_version_is_passed() {
    let cni = runtime(Fake::default()).without_version_negotiation();
    cni.add(&chain("1.1.0"), &runtime_conf()).unwrap();
    assert!(cni.executor().calls_of("VERSION").is_empty());
    assert!(
        cni.executor()
            .calls_of("ADD")
            .iter()
            .all(|c| c.stdin["cniVersion"] == "1.1.0")
    );
}

#[test]
fn incompatible_plugin_is_reported() {
    let mut fake = Fake::default();
    fake.versions.insert("bridge".into(), vec![CniVersion::V1_0_0]);
    let cni = runtime(fake);
    let err = cni.add(&chain("0.4.0"), &runtime_conf()).unwrap_err();
    assert!(matches!(err, DelegateError::Incompatible { .. }), "{err}");
    assert_eq!(err.to_cni_error().code, codes::INCOMPATIBLE_VERSION);
}

#[test]
fn add_failure_carries_the_plugin_error_and_stderr() {
    let mut fake = Fake::default();
    fake.fail.insert(
        ("tuning".into(), "ADD".into()),
        json!({"cniVersion": "1.0.0", "code": 11, "msg": "busy", "details": "retry"}),
    );
    let cni = runtime(fake);
    let err = cni.add(&chain("1.0.0"), &runtime_conf()).unwrap_err();
    let DelegateError::Plugin { plugin, error, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(plugin, "tuning");
    assert_eq!(error.code, 11);
    assert_eq!(error.details, "retry; stderr: something on stderr");
    assert_eq!(err.to_cni_error().code, 11);
    assert_eq!(
        cni.executor().calls_of("ADD").len(),
        2,
        "stops at the failing plugin"
    );
}

#[test]
fn a_failed_plugin_after_the_first_undoes_the_plugins_before_it() {
    let mut fake = Fake::default();
    fake.fail.insert(
        ("portmap".into(), "ADD".into()),
        json!({"cniVersion": "1.0.0", "code": 11, "msg": "busy"}),
    );
    let cni = runtime(fake);
    let err = cni.add(&chain("1.0.0"), &runtime_conf()).unwrap_err();
    assert!(
        matches!(&err, DelegateError::Plugin { plugin, .. } if plugin == "portmap"),
        "{err}"
    );
    assert_eq!(err.to_cni_error().code, 11, "the plugin's own code");
    let dels = cni.executor().calls_of("DEL");
    assert_eq!(
        dels.iter().map(|c| c.plugin.as_str()).collect::<Vec<_>>(),
        ["tuning", "bridge"],
        "last to first, not the failing plugin"
    );
    for del in &dels {
        // What the plugins before the failing one made: bridge's and tuning's addresses.
        assert_eq!(
            del.stdin["prevResult"]["ips"].as_array().unwrap().len(),
            2,
            "{}",
            del.stdin
        );
        assert_eq!(del.env["CNI_IFNAME"], "net1");
    }
    // Before 0.4.0 a DEL gets no prevResult, as any DEL of that version.
    let mut fake = Fake::default();
    fake.fail
        .insert(("tuning".into(), "ADD".into()), json!({"code": 7, "msg": "bad"}));
    let cni = runtime(fake);
    cni.add(&chain("0.3.1"), &runtime_conf()).unwrap_err();
    let dels = cni.executor().calls_of("DEL");
    assert_eq!(dels.len(), 1);
    assert!(dels[0].stdin.get("prevResult").is_none(), "{}", dels[0].stdin);
}

#[test]
fn a_failed_first_plugin_is_not_undone_and_a_failed_undo_is_reported() {
    let mut fake = Fake::default();
    fake.fail.insert(
        ("bridge".into(), "ADD".into()),
        json!({"code": 7, "msg": "name taken"}),
    );
    let cni = runtime(fake);
    cni.add(&chain("1.0.0"), &runtime_conf()).unwrap_err();
    assert!(
        cni.executor().calls_of("DEL").is_empty(),
        "the first plugin made nothing"
    );

    let mut fake = Fake::default();
    fake.fail.insert(
        ("portmap".into(), "ADD".into()),
        json!({"code": 11, "msg": "busy"}),
    );
    fake.fail.insert(
        ("bridge".into(), "DEL".into()),
        json!({"code": 5, "msg": "cannot"}),
    );
    let cni = runtime(fake);
    let err = cni.add(&chain("1.0.0"), &runtime_conf()).unwrap_err();
    let DelegateError::Undo { add, undo, .. } = &err else {
        panic!("{err}")
    };
    assert!(matches!(**add, DelegateError::Plugin { .. }), "{add}");
    assert!(undo.to_string().contains("cannot"), "{undo}");
    // What is still attached is the result the list made before portmap: tuning's (it passes
    // the bridge's on).
    let attached = err.still_attached().expect("the undo failed: something stays");
    assert_eq!(attached.ips.len(), 2, "{attached:?}");
    let cni_error = err.to_cni_error();
    assert_eq!(cni_error.code, 11, "still the ADD's code");
    assert!(cni_error.details.contains("undoing"), "{cni_error:?}");
    assert_eq!(
        cni.executor().calls_of("DEL").len(),
        2,
        "the undo keeps going: tuning, bridge"
    );
    assert!(!err.is_no_slot());
}

#[test]
fn del_runs_in_reverse_with_cached_result_and_collects_errors() {
    let mut fake = Fake::default();
    fake.fail
        .insert(("portmap".into(), "DEL".into()), json!({"code": 5, "msg": "pm"}));
    fake.fail
        .insert(("bridge".into(), "DEL".into()), json!({"code": 5, "msg": "br"}));
    let cni = runtime(fake);
    let cached = crate::parse_result(br#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1/24"}]}"#).unwrap();
    let err = cni
        .del(&chain("1.0.0"), &runtime_conf(), Some(&cached))
        .unwrap_err();
    let DelegateError::Multiple(errors) = err else {
        panic!()
    };
    assert_eq!(errors.len(), 2);
    let dels = cni.executor().calls_of("DEL");
    assert_eq!(
        dels.iter().map(|c| c.plugin.as_str()).collect::<Vec<_>>(),
        ["portmap", "tuning", "bridge"]
    );
    assert!(
        dels.iter()
            .all(|c| c.stdin["prevResult"]["ips"][0]["address"] == "10.0.0.1/24")
    );
}

#[test]
fn del_before_0_4_0_sends_no_prev_result() {
    let cni = runtime(Fake::default());
    let cached = CniResult::default();
    cni.del(&chain("0.3.1"), &runtime_conf(), Some(&cached)).unwrap();
    assert!(
        cni.executor()
            .calls_of("DEL")
            .iter()
            .all(|c| c.stdin.get("prevResult").is_none())
    );
}

#[test]
fn del_with_a_missing_plugin_still_runs_the_others() {
    let cni = runtime(Fake::default());
    let network = list(
        json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "bridge"}, {"type": "missing"}]}),
    );
    let err = cni.del(&network, &runtime_conf(), None).unwrap_err();
    assert!(matches!(err, DelegateError::NotFound(_)));
    assert!(
        err.to_string().contains("failed to find plugin \"missing\""),
        "{err}"
    );
    assert_eq!(cni.executor().calls_of("DEL").len(), 1);
}

#[test]
fn check_rules() {
    let cni = runtime(Fake::default());
    let cached = CniResult::default();
    assert!(matches!(
        cni.check(&chain("0.3.1"), &runtime_conf(), Some(&cached)),
        Err(DelegateError::Incompatible { .. })
    ));
    assert!(matches!(
        cni.check(&chain("1.0.0"), &runtime_conf(), None),
        Err(DelegateError::MissingCachedResult(_))
    ));
    cni.check(&chain("1.0.0"), &runtime_conf(), Some(&cached))
        .unwrap();
    let checks = cni.executor().calls_of("CHECK");
    assert_eq!(checks.len(), 3);
    assert!(checks.iter().all(|c| c.stdin.get("prevResult").is_some()));

    let mut disabled = chain("1.0.0").as_object().clone();
    disabled.insert("disableCheck".into(), Value::Bool(true));
    let disabled = NetworkConfigList::from_object(disabled).unwrap();
    cni.check(&disabled, &runtime_conf(), None).unwrap();
    assert_eq!(cni.executor().calls_of("CHECK").len(), 3);
}

#[test]
fn status_and_gc_only_reach_plugins_speaking_1_1_0() {
    let mut fake = Fake::default();
    fake.versions
        .insert("bridge".into(), CniVersion::SUPPORTED.to_vec());
    let cni = runtime(fake);
    cni.status(&chain("1.0.0")).unwrap();
    assert!(cni.executor().calls_of("STATUS").is_empty());
    cni.status(&chain("1.1.0")).unwrap();
    let statuses = cni.executor().calls_of("STATUS");
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].plugin, "bridge");
    assert_eq!(
        statuses[0].env.len(),
        2,
        "STATUS gets only CNI_COMMAND and CNI_PATH"
    );

    let valid = [GcAttachment {
        container_id: "ctr".into(),
        ifname: "net1".into(),
    }];
    cni.gc(&chain("1.1.0"), &valid).unwrap();
    let gcs = cni.executor().calls_of("GC");
    assert_eq!(gcs.len(), 1);
    assert_eq!(
        gcs[0].stdin["cni.dev/valid-attachments"],
        json!([{"containerID": "ctr", "ifname": "net1"}])
    );
    assert_eq!(
        gcs[0].stdin["cni.dev/attachments"],
        gcs[0].stdin["cni.dev/valid-attachments"]
    );

    let mut no_gc = chain("1.1.0").as_object().clone();
    no_gc.insert("disableGC".into(), Value::Bool(true));
    cni.gc(&NetworkConfigList::from_object(no_gc).unwrap(), &valid)
        .unwrap();
    assert_eq!(cni.executor().calls_of("GC").len(), 1);
}

#[test]
fn status_error_codes_pass_through() {
    let mut fake = Fake::default();
    fake.versions
        .insert("bridge".into(), CniVersion::SUPPORTED.to_vec());
    fake.fail.insert(
        ("bridge".into(), "STATUS".into()),
        json!({"code": 50, "msg": "no IPs left"}),
    );
    let err = runtime(fake).status(&chain("1.1.0")).unwrap_err();
    assert_eq!(err.to_cni_error().code, codes::PLUGIN_NOT_AVAILABLE);
}

#[test]
fn single_conf_delegate() {
    let delegate =
        Delegate::from_bytes(br#"{"cniVersion":"0.4.0","name":"mv","type":"macvlan","master":"eth9"}"#)
            .unwrap();
    assert_eq!(delegate.name(), "mv");
    let cni = runtime(Fake::default());
    let result = delegate.add(&cni, &runtime_conf()).unwrap();
    assert_eq!(result.cni_version, "0.4.0");
    let add = &cni.executor().calls_of("ADD")[0];
    assert_eq!(
        add.stdin,
        json!({"cniVersion": "0.4.0", "name": "mv", "type": "macvlan", "master": "eth9"})
    );
    delegate.del(&cni, &runtime_conf(), Some(&result)).unwrap();
    assert_eq!(
        cni.executor().calls_of("DEL")[0].stdin["prevResult"]["ips"][0]["address"],
        "10.0.0.1/24"
    );
}

#[test]
fn legacy_plugin_results_are_converted() {
    let mut fake = Fake::default();
    fake.versions.insert("bridge".into(), vec![CniVersion::V0_2_0]);
    let cni = runtime(fake);
    let result = cni.add(&chain("1.0.0"), &runtime_conf()).unwrap();
    assert_eq!(result.ips.len(), 3);
    let adds = cni.executor().calls_of("ADD");
    assert_eq!(adds[0].stdin["cniVersion"], "0.2.0");
    assert_eq!(adds[1].stdin["prevResult"]["cniVersion"], "1.0.0");
}

#[test]
fn a_crash_without_a_cni_error_becomes_code_100_with_stderr() {
    let error = plugin_failure(
        "bridge",
        CniCommand::Add,
        ExecError::Failed {
            status: ExitStatus::from_raw(11),
            stdout: b"panic: runtime error".to_vec(),
            stderr: b"goroutine 1\n".to_vec(),
        },
    );
    let cni_error = error.to_cni_error();
    assert_eq!(cni_error.code, codes::DELEGATE_FAILED);
    assert!(cni_error.msg.contains("signal"), "{cni_error:?}");
    assert_eq!(cni_error.details, "panic: runtime error; stderr: goroutine 1");
}
