//! The runtime driving the real reference plugins from /usr/lib/cni. Root tests create their
//! own network namespaces (`wt-cni-<role>-<pid>-<n>`): a "host" one where the plugins run (bridges
//! and macvlan parents live there) and a "pod" one; both are removed on drop.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use weft_cni::runtime::exec::{ExecError, PluginExec, ProcessExec};
use weft_cni::{
    CniArgs, CniRuntime, CniVersion, Delegate, DelegateError, GcAttachment, JsonObject, RuntimeConf,
};
use weft_testing::{Netns, REFERENCE_PLUGIN_DIR, reference_plugins_or_skip, root_or_skip, unique};

fn can_run_root_tests(name: &str) -> bool {
    root_or_skip(name) && reference_plugins_or_skip(name)
}

/// `ip -j addr show dev IFNAME` in `ns`, if that link exists.
fn link_in(ns: &Netns, ifname: &str) -> Option<Value> {
    ns.has_link(ifname)
        .then(|| ns.ip_json(&["addr", "show", "dev", ifname])[0].clone())
}

/// The path of `ns` as `CNI_NETNS` carries it.
fn netns_path(ns: &Netns) -> String {
    ns.path().to_string_lossy().into_owned()
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn runtime_in(host: &Netns) -> CniRuntime<ProcessExec> {
    CniRuntime::new([REFERENCE_PLUGIN_DIR])
        .in_netns(host.path())
        .with_timeout(std::time::Duration::from_secs(30))
}

fn attachment(pod: &Netns, container_id: &str, ifname: &str) -> RuntimeConf {
    RuntimeConf {
        container_id: container_id.into(),
        netns: netns_path(pod),
        ifname: ifname.into(),
        args: CniArgs::from_pairs([("IgnoreUnknown", "1"), ("K8S_POD_NAME", "pod")]),
        capability_args: JsonObject::new(),
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn bridge_host_local_tuning_chain_add_check_del() {
    if !can_run_root_tests("bridge_host_local_tuning_chain_add_check_del") {
        return;
    }
    let host = Netns::new("cni-host-");
    let pod = Netns::new("cni-pod-");
    let state = tempfile::tempdir().unwrap();
    let id = unique().replace('-', "");
    let bridge = format!("wtb{id}");
    let mac = "02:77:00:00:00:42";
    // 1.1.0 on purpose: the Debian plugins speak ≤ 1.0.0, so the runtime must negotiate down.
    let delegate = Delegate::from_bytes(
        json!({
            "cniVersion": "1.1.0",
            "name": format!("wtnet{id}"),
            "plugins": [
                {"type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": false,
                 "ipam": {"type": "host-local", "dataDir": state.path(),
                          "ranges": [[{"subnet": "10.213.0.0/24", "rangeStart": "10.213.0.10"}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "tuning", "mtu": 1400, "capabilities": {"mac": true}}
            ]
        })
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    let cni = runtime_in(&host);
    let mut runtime = attachment(&pod, &format!("ctr{id}"), "eth0");
    runtime.capability_args = object(json!({"mac": mac, "portMappings": []}));

    let result = delegate.add(&cni, &runtime).expect("ADD");
    assert_eq!(result.cni_version, "1.1.0");
    let address = result.ips.first().expect("an address").address;
    assert_eq!(address.to_string(), "10.213.0.10/24");
    let eth0 = result
        .interfaces
        .iter()
        .find(|i| i.name == "eth0")
        .expect("eth0 in result");
    assert_eq!(eth0.sandbox, netns_path(&pod));
    assert_eq!(eth0.mac, mac);

    let link = link_in(&pod, "eth0").expect("eth0 exists in the pod netns");
    assert_eq!(link["mtu"], 1400);
    assert_eq!(link["address"], mac);
    assert!(
        link["addr_info"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["local"] == "10.213.0.10")
    );
    assert!(
        link_in(&host, &bridge).is_some(),
        "bridge created in the host netns, not ours"
    );
    assert!(
        Command::new("ip")
            .args(["link", "show", &bridge])
            .output()
            .unwrap()
            .stdout
            .is_empty(),
        "nothing leaked into our netns"
    );

    delegate.check(&cni, &runtime, Some(&result)).expect("CHECK");
    // STATUS and GC: the list is 1.1.0 but no plugin speaks it, so nothing is asked.
    delegate.status(&cni).expect("STATUS");
    delegate
        .gc(
            &cni,
            &[GcAttachment {
                container_id: runtime.container_id.clone(),
                ifname: "eth0".into(),
            }],
        )
        .expect("GC");

    delegate.del(&cni, &runtime, Some(&result)).expect("DEL");
    assert!(link_in(&pod, "eth0").is_none(), "eth0 removed by DEL");
    delegate
        .del(&cni, &runtime, Some(&result))
        .expect("second DEL succeeds");
    delegate
        .del(&cni, &runtime, None)
        .expect("DEL without a cached result succeeds");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn macvlan_static_single_conf() {
    if !can_run_root_tests("macvlan_static_single_conf") {
        return;
    }
    let host = Netns::new("cni-host-");
    let pod = Netns::new("cni-pod-");
    let id = unique().replace('-', "");
    let (parent, peer) = (format!("wtm{id}a"), format!("wtm{id}b"));
    host.ip(&["link", "add", &parent, "type", "veth", "peer", "name", &peer]);
    host.ip(&["link", "set", &parent, "up"]);
    host.ip(&["link", "set", &peer, "up"]);
    let delegate = Delegate::from_bytes(
        json!({"cniVersion": "1.0.0", "name": "wtmv", "type": "macvlan", "master": parent, "mode": "bridge",
               "ipam": {"type": "static", "addresses": [{"address": "10.214.0.11/24"}]}})
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    let cni = runtime_in(&host);
    let runtime = attachment(&pod, &format!("ctr{id}"), "net1");

    let result = delegate.add(&cni, &runtime).expect("ADD");
    assert_eq!(result.ips[0].address.to_string(), "10.214.0.11/24");
    let link = link_in(&pod, "net1").expect("net1 exists in the pod netns");
    assert!(
        link["addr_info"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["local"] == "10.214.0.11")
    );
    delegate.check(&cni, &runtime, Some(&result)).expect("CHECK");
    delegate.del(&cni, &runtime, Some(&result)).expect("DEL");
    assert!(link_in(&pod, "net1").is_none(), "net1 removed by DEL");
    delegate
        .del(&cni, &runtime, Some(&result))
        .expect("second DEL succeeds");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn add_failure_reports_the_plugin_error() {
    if !can_run_root_tests("add_failure_reports_the_plugin_error") {
        return;
    }
    let host = Netns::new("cni-host-");
    let pod = Netns::new("cni-pod-");
    let delegate = Delegate::from_bytes(
        br#"{"cniVersion":"1.0.0","name":"wtbad","type":"macvlan","master":"wt-no-such-link",
             "ipam":{"type":"static","addresses":[{"address":"10.215.0.2/24"}]}}"#,
    )
    .unwrap();
    let err = delegate
        .add(&runtime_in(&host), &attachment(&pod, "ctr-bad", "net1"))
        .expect_err("no such master");
    let DelegateError::Plugin { plugin, error, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(plugin, "macvlan");
    // macvlan 1.1.1 says only `{"code":999,"msg":"Link not found"}`.
    assert!(error.msg.to_lowercase().contains("not found"), "{error:?}");
    assert!(err.to_string().contains("macvlan"), "{err}");
    assert!(link_in(&pod, "net1").is_none());
}

#[test]
fn missing_plugin_is_a_clear_error() {
    let delegate =
        Delegate::from_bytes(br#"{"cniVersion":"1.0.0","name":"n","type":"wt-no-such-plugin"}"#).unwrap();
    let cni = CniRuntime::new(["/nonexistent-dir", REFERENCE_PLUGIN_DIR]);
    let runtime = RuntimeConf {
        container_id: "c".into(),
        netns: "/run/netns/none".into(),
        ifname: "eth0".into(),
        ..RuntimeConf::default()
    };
    let err = delegate.add(&cni, &runtime).unwrap_err();
    assert!(matches!(err, DelegateError::NotFound(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("\"wt-no-such-plugin\"") && text.contains("/nonexistent-dir"),
        "{text}"
    );
    assert_eq!(err.to_cni_error().code, weft_cni::codes::DELEGATE_FAILED);
}

#[test]
fn real_plugins_report_versions_and_reject_1_1_0_without_negotiation() {
    if !reference_plugins_or_skip("real_plugins_report_versions_and_reject_1_1_0_without_negotiation") {
        return;
    }
    let cni = CniRuntime::new([REFERENCE_PLUGIN_DIR]);
    let versions = cni
        .plugin_versions(&Path::new(REFERENCE_PLUGIN_DIR).join("bridge"))
        .expect("bridge answers VERSION");
    assert!(versions.contains(&CniVersion::V1_0_0));
    let strict = CniRuntime::new([REFERENCE_PLUGIN_DIR]).without_version_negotiation();
    let delegate = Delegate::from_bytes(br#"{"cniVersion":"1.1.0","name":"n","type":"bridge"}"#).unwrap();
    let runtime = RuntimeConf {
        container_id: "c".into(),
        netns: "/run/netns/none".into(),
        ifname: "eth0".into(),
        ..RuntimeConf::default()
    };
    if versions.contains(&CniVersion::V1_1_0) {
        eprintln!("skipping the rejection half: these plugins speak 1.1.0");
        return;
    }
    let err = delegate.add(&strict, &runtime).unwrap_err();
    let cni_error = err.to_cni_error();
    assert_eq!(cni_error.code, weft_cni::codes::INCOMPATIBLE_VERSION, "{err}");
    assert_eq!(cni_error.msg, "incompatible CNI versions");
}

/// Plugins that speak 1.1.0 (the Debian sid 1.9.1 build of the reference plugins: its `.deb`
/// unpacked, not installed, into this directory on dev machines only; CI skips this test).
const SID_PLUGIN_DIR: &str = "/var/cache/envtest/cni-sid/usr/lib/cni";

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn spec_1_1_plugins_get_status_and_gc() {
    if !can_run_root_tests("spec_1_1_plugins_get_status_and_gc") {
        return;
    }
    if !Path::new(SID_PLUGIN_DIR).join("bridge").exists() {
        eprintln!("skipping: no 1.1.0 plugins in {SID_PLUGIN_DIR}");
        return;
    }
    let host = Netns::new("cni-host-");
    let pod = Netns::new("cni-pod-");
    let state = tempfile::tempdir().unwrap();
    let id = unique().replace('-', "");
    let delegate = Delegate::from_bytes(
        json!({
            "cniVersion": "1.1.0",
            "name": format!("wtsid{id}"),
            "plugins": [{"type": "bridge", "bridge": format!("wts{id}"),
                         "ipam": {"type": "host-local", "dataDir": state.path(),
                                  "ranges": [[{"subnet": "10.216.0.0/24"}]]}}]
        })
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    let cni = CniRuntime::with_executor(
        [SID_PLUGIN_DIR],
        Recording::new(ProcessExec::in_netns(host.path())),
    );
    let bridge = Path::new(SID_PLUGIN_DIR).join("bridge");
    assert!(
        cni.plugin_versions(&bridge)
            .unwrap()
            .contains(&CniVersion::V1_1_0)
    );
    let runtime = attachment(&pod, &format!("ctr{id}"), "eth0");
    let result = delegate.add(&cni, &runtime).expect("ADD at 1.1.0");
    assert_eq!(result.cni_version, "1.1.0");
    assert!(link_in(&pod, "eth0").is_some());
    delegate.status(&cni).expect("STATUS");
    let valid = [GcAttachment {
        container_id: runtime.container_id.clone(),
        ifname: "eth0".into(),
    }];
    delegate.gc(&cni, &valid).expect("GC");
    delegate.check(&cni, &runtime, Some(&result)).expect("CHECK");
    delegate.del(&cni, &runtime, Some(&result)).expect("DEL");
    assert!(link_in(&pod, "eth0").is_none());
    let commands = cni.executor().commands.lock().unwrap().clone();
    assert_eq!(commands, ["VERSION", "ADD", "STATUS", "GC", "CHECK", "DEL"]);
}

/// Runs plugins with `inner` and records each `CNI_COMMAND`.
struct Recording<E> {
    inner: E,
    commands: std::sync::Mutex<Vec<String>>,
}

impl<E> Recording<E> {
    fn new(inner: E) -> Self {
        Self {
            inner,
            commands: Default::default(),
        }
    }
}

impl<E: PluginExec> PluginExec for Recording<E> {
    fn exec(&self, binary: &Path, env: &[(String, String)], stdin: &[u8]) -> Result<Vec<u8>, ExecError> {
        let command = env
            .iter()
            .find(|(k, _)| k == "CNI_COMMAND")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        self.commands.lock().unwrap().push(command);
        self.inner.exec(binary, env, stdin)
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn legacy_versions_are_read_from_real_plugins() {
    if !can_run_root_tests("legacy_versions_are_read_from_real_plugins") {
        return;
    }
    let host = Netns::new("cni-host-");
    let pod = Netns::new("cni-pod-");
    let state = tempfile::tempdir().unwrap();
    let cni = runtime_in(&host);
    for (index, version) in ["0.2.0", "0.3.1", "0.4.0"].into_iter().enumerate() {
        let id = unique().replace('-', "");
        let delegate = Delegate::from_bytes(
            json!({"cniVersion": version, "name": format!("wtv{id}"), "type": "bridge", "bridge": format!("wtv{id}"),
                   "ipam": {"type": "host-local", "dataDir": state.path(), "ranges": [[{"subnet": format!("10.217.{index}.0/24")}]]}})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let ifname = format!("eth{index}");
        let runtime = attachment(&pod, &format!("ctr{id}"), &ifname);
        let result = delegate
            .add(&cni, &runtime)
            .unwrap_or_else(|e| panic!("{version} ADD: {e}"));
        assert_eq!(result.cni_version, version);
        assert_eq!(
            result.ips[0].address.to_string(),
            format!("10.217.{index}.2/24"),
            "{version}"
        );
        assert_eq!(
            result.interfaces.is_empty(),
            version == "0.2.0",
            "{version}: interfaces only from 0.3.0"
        );
        assert!(link_in(&pod, &ifname).is_some(), "{version}");
        delegate
            .del(&cni, &runtime, Some(&result))
            .unwrap_or_else(|e| panic!("{version} DEL: {e}"));
        assert!(link_in(&pod, &ifname).is_none(), "{version}");
    }
}
