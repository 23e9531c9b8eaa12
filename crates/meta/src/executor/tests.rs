use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use serde_json::{Value, json};
use weft_cni::runtime::exec::{ExecError, FindError};

use super::*;
use crate::catalog::MemoryCatalog;
use crate::config::MetaConfig;
use crate::plan::{Pod, plan_add};

/// Records every call; ADD of a plugin whose type starts with `fail` fails.
#[derive(Default)]
struct FakeExec {
    calls: Mutex<Vec<(String, String, String)>>,
}

impl PluginExec for FakeExec {
    fn find(&self, plugin_type: &str, _search_path: &[PathBuf]) -> Result<PathBuf, FindError> {
        Ok(PathBuf::from(plugin_type))
    }

    fn exec(&self, binary: &Path, env: &[(String, String)], stdin: &[u8]) -> Result<Vec<u8>, ExecError> {
        let var = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let command = var("CNI_COMMAND");
        let ifname = var("CNI_IFNAME");
        let plugin = binary.display().to_string();
        self.calls
            .lock()
            .unwrap()
            .push((command.clone(), plugin.clone(), ifname.clone()));
        let config: Value = serde_json::from_slice(stdin).unwrap();
        if command == "ADD" && plugin.starts_with("busy") {
            return Err(ExecError::NoSlot {
                waited: std::time::Duration::from_secs(60),
                max: 4,
            });
        }
        if command == "ADD" && plugin.starts_with("fail") {
            return Err(ExecError::Failed {
                status: ExitStatus::from_raw(256),
                stdout: br#"{"cniVersion":"1.0.0","code":100,"msg":"expected plugin failure"}"#.to_vec(),
                stderr: Vec::new(),
            });
        }
        if command == "DEL" && plugin.starts_with("undel") {
            return Err(ExecError::Failed {
                status: ExitStatus::from_raw(256),
                stdout: br#"{"cniVersion":"1.0.0","code":100,"msg":"expected DEL failure"}"#.to_vec(),
                stderr: Vec::new(),
            });
        }
        if command != "ADD" {
            return Ok(Vec::new());
        }
        let n: u32 = ifname
            .trim_start_matches(|c: char| c.is_alphabetic())
            .parse()
            .unwrap_or(0);
        let result = json!({
            "cniVersion": config["cniVersion"],
            "interfaces": [{"name": ifname, "mac": "02:00:00:00:00:01", "sandbox": var("CNI_NETNS")}],
            "ips": [{"address": format!("10.0.{n}.2/24"), "gateway": format!("10.0.{n}.1"), "interface": 0}],
            "routes": [{"dst": "0.0.0.0/0", "gw": format!("10.0.{n}.1")}]
        });
        Ok(serde_json::to_vec(&result).unwrap())
    }
}

struct RecordingRoutes(Mutex<Vec<(String, RouteAction)>>);

impl RouteEditor for RecordingRoutes {
    fn apply(&self, _netns: &str, ifname: &str, action: &RouteAction) -> Result<(), String> {
        self.0.lock().unwrap().push((ifname.into(), action.clone()));
        Ok(())
    }
}

fn plans(annotation: &str) -> (AttachmentRequest, Vec<DelegatePlan>) {
    let config = MetaConfig::parse(br#"{"cniVersion":"1.0.0","clusterNetwork":"cluster"}"#).unwrap();
    let mut catalog = MemoryCatalog::default().with_conf_file(
        "10-c.conf",
        r#"{"cniVersion":"1.0.0","name":"cluster","type":"ptp"}"#,
    );
    for name in ["a", "b", "c", "d"] {
        catalog = catalog.with_nad(
            "ns",
            name,
            &format!(r#"{{"cniVersion":"1.0.0","type":"{name}-plugin"}}"#),
        );
    }
    catalog = catalog.with_nad("ns", "bad", r#"{"cniVersion":"1.0.0","type":"fail-plugin"}"#);
    catalog = catalog.with_nad("ns", "busy", r#"{"cniVersion":"1.0.0","type":"busy-plugin"}"#);
    catalog = catalog.with_nad(
        "ns",
        "dhcp",
        r#"{"cniVersion":"1.0.0","type":"macvlan","master":"eth9","ipam":{"type":"dhcp"}}"#,
    );
    catalog = catalog.with_nad(
        "ns",
        "vlan",
        r#"{"cniVersion":"1.0.0","type":"vlan","master":"net1","vlanId":7,"linkInContainer":true}"#,
    );
    plan_pod(&config, &catalog, annotation)
}

/// The plans of pod `ns/p` (container `ctr`) whose networks annotation is `annotation`.
fn plan_pod(
    config: &MetaConfig,
    catalog: &MemoryCatalog,
    annotation: &str,
) -> (AttachmentRequest, Vec<DelegatePlan>) {
    let request = AttachmentRequest {
        container_id: "ctr".into(),
        netns: "/run/netns/x".into(),
        ifname: "eth0".into(),
        cni_args: String::new(),
        k8s: crate::K8sArgs {
            pod_namespace: "ns".into(),
            pod_name: "p".into(),
            pod_uid: "u".into(),
            ..Default::default()
        },
    };
    let pod = Pod {
        namespace: "ns".into(),
        name: "p".into(),
        uid: "u".into(),
        annotations: [(
            weft_netconf::NETWORKS_ANNOTATION.to_string(),
            annotation.to_string(),
        )]
        .into(),
    };
    let plans = plan_add(config, &request, Some(&pod), catalog).unwrap();
    (request, plans)
}

fn runtime(exec: FakeExec) -> CniRuntime<FakeExec> {
    CniRuntime::with_executor(Vec::<PathBuf>::new(), exec).without_version_negotiation()
}

#[test]
fn add_returns_the_master_result_and_statuses_in_order() {
    let (request, plans) = plans("a,b");
    let cni = runtime(FakeExec::default());
    for parallelism in [1, 4] {
        let outcome = Executor::new(&cni, &NoRouteEditor)
            .with_parallelism(parallelism)
            .add(&request, &plans)
            .unwrap();
        assert_eq!(outcome.result.ips[0].address.to_string(), "10.0.0.2/24");
        let names: Vec<(&str, &str, bool)> = outcome
            .statuses
            .iter()
            .map(|s| (s.name.as_str(), s.interface.as_str(), s.default))
            .collect();
        assert_eq!(
            names,
            vec![
                ("cluster", "eth0", true),
                ("ns/a", "net1", false),
                ("ns/b", "net2", false)
            ]
        );
        assert_eq!(outcome.statuses[2].ips, vec!["10.0.2.2"]);
    }
}

#[test]
fn failure_rolls_back_what_was_attached_in_reverse_not_the_failed_one() {
    let (request, plans) = plans("a,bad,b");
    let cni = runtime(FakeExec::default());
    let err = Executor::new(&cni, &NoRouteEditor)
        .add(&request, &plans)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "[ns/p/u:bad]: error adding container to network \"bad\": plugin type=\"fail-plugin\" ADD: expected plugin failure"
    );
    let calls = cni.executor().calls.lock().unwrap().clone();
    let seen: Vec<String> = calls.iter().map(|(c, p, i)| format!("{c} {p} {i}")).collect();
    assert_eq!(
        seen,
        vec![
            "ADD ptp eth0",
            "ADD a-plugin net1",
            "ADD fail-plugin net2",
            "DEL a-plugin net1",
            "DEL ptp eth0"
        ]
    );
}

#[test]
fn a_conflist_whose_undo_failed_is_held_for_the_runtimes_del() {
    let config = MetaConfig::parse(br#"{"cniVersion":"1.0.0","clusterNetwork":"cluster"}"#).unwrap();
    let catalog = MemoryCatalog::default()
        .with_conf_file(
            "10-c.conf",
            r#"{"cniVersion":"1.0.0","name":"cluster","type":"ptp"}"#,
        )
        .with_nad(
            "ns",
            "chain",
            r#"{"cniVersion":"1.0.0","plugins":[{"type":"undel-plugin"},{"type":"fail-plugin"}]}"#,
        )
        .with_nad(
            "ns",
            "clean",
            r#"{"cniVersion":"1.0.0","plugins":[{"type":"a-plugin"},{"type":"fail-plugin"}]}"#,
        );
    let (request, plans) = plan_pod(&config, &catalog, "chain");
    let cni = runtime(FakeExec::default());
    let err = Executor::new(&cni, &NoRouteEditor)
        .add(&request, &plans)
        .unwrap_err();
    let ExecutorError::Add { failed, held, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(*failed, 1);
    // The list's undo of its first plugin failed: what that plugin made (net1's address) is
    // held for the runtime's DEL; eth0 was rolled back.
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].0, 1);
    assert_eq!(held[0].1.ips[0].address.to_string(), "10.0.1.2/24");
    let record = crate::CacheRecord::new(&request, plans.clone()).holding(held);
    assert_eq!(record.delegates.len(), 1);
    assert_eq!(record.delegates[0].ifname, "net1");
    // A list whose undo succeeded holds nothing: everything it made is gone.
    let (request, plans) = plan_pod(&config, &catalog, "clean");
    let err = Executor::new(&runtime(FakeExec::default()), &NoRouteEditor)
        .add(&request, &plans)
        .unwrap_err();
    assert!(
        matches!(&err, ExecutorError::Add { held, .. } if held.is_empty()),
        "{err}"
    );
}

#[test]
fn a_delegate_without_a_plugin_slot_fails_the_add_as_retriable_and_rolls_back() {
    let (request, plans) = plans("a,busy");
    let cni = runtime(FakeExec::default());
    let err = Executor::new(&cni, &NoRouteEditor)
        .add(&request, &plans)
        .unwrap_err();
    assert!(
        matches!(
            err,
            ExecutorError::Add {
                no_slot: true,
                failed: 2,
                ..
            }
        ),
        "{err}"
    );
    let cni_error = err.to_cni_error();
    assert_eq!(cni_error.code, weft_cni::codes::TRY_AGAIN_LATER);
    assert!(cni_error.msg.contains("no free plugin slot"), "{}", cni_error.msg);
    let calls = cni.executor().calls.lock().unwrap().clone();
    let dels: Vec<&str> = calls
        .iter()
        .filter(|c| c.0 == "DEL")
        .map(|c| c.1.as_str())
        .collect();
    assert_eq!(dels, ["a-plugin", "ptp"], "what was attached is rolled back");
    // Any other failure stays "delegate failed".
    let (request, bad) = self::plans("bad");
    let err = Executor::new(&cni, &NoRouteEditor)
        .add(&request, &bad)
        .unwrap_err();
    assert_eq!(err.to_cni_error().code, weft_cni::codes::DELEGATE_FAILED);
}

#[test]
fn concurrent_failure_still_rolls_back_everything_started() {
    let (request, plans) = plans("a,b,bad,c,d");
    let cni = runtime(FakeExec::default());
    let err = Executor::new(&cni, &NoRouteEditor)
        .with_parallelism(3)
        .add(&request, &plans)
        .unwrap_err();
    assert!(matches!(err, ExecutorError::Add { failed: 3, .. }), "{err}");
    // Everything attached is deleted, not the failed delegate (net3).
    let added = assert_rolled_back(&cni, &plans, "net3");
    assert!(
        added.contains(&"eth0".to_string()),
        "the master is taken first: {added:?}"
    );
}

/// Asserts that every delegate whose ADD ran was DELeted once, in reverse plan order, except
/// the failed one (`failed`); returns the interfaces ADDed.
fn assert_rolled_back(cni: &CniRuntime<FakeExec>, plans: &[DelegatePlan], failed: &str) -> Vec<String> {
    let calls = cni.executor().calls.lock().unwrap().clone();
    let of = |verb: &str| -> Vec<String> {
        calls
            .iter()
            .filter(|c| c.0 == verb)
            .map(|c| c.2.clone())
            .collect()
    };
    let (added, deleted) = (of("ADD"), of("DEL"));
    let mut expected: Vec<String> = added.iter().filter(|i| *i != failed).cloned().collect();
    expected.sort_by_key(|ifname| std::cmp::Reverse(plans.iter().position(|p| p.ifname == *ifname)));
    assert_eq!(deleted, expected);
    added
}

#[test]
fn del_reaches_every_delegate_in_reverse_and_reports_all_errors() {
    let (request, plans) = plans("a,b");
    // The interfaces DELeted, in order, with `parallelism`.
    let dels = |request: &AttachmentRequest, plans: &[DelegatePlan], parallelism: usize| {
        let cni = runtime(FakeExec::default());
        Executor::new(&cni, &NoRouteEditor)
            .with_parallelism(parallelism)
            .del(request, plans, &[])
            .unwrap();
        let calls = cni.executor().calls.lock().unwrap().clone();
        calls.into_iter().map(|c| c.2).collect::<Vec<String>>()
    };
    assert_eq!(dels(&request, &plans, 1), ["net2", "net1", "eth0"]);
    assert_eq!(dels(&request, &plans, 4).len(), 3);
    // With a default-route edit the master was ADDed alone first, and is DELeted last.
    let (request, plans) = self::plans(r#"[{"name":"a","default-route":["10.0.1.1"]},{"name":"b"}]"#);
    let calls = dels(&request, &plans, 4);
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[2], "eth0", "the master goes last");
}

#[test]
fn default_route_actions_are_applied_and_reflected_in_results() {
    let (request, plans) = plans(r#"[{"name":"a","default-route":["10.0.1.1"]}]"#);
    let cni = runtime(FakeExec::default());
    let routes = RecordingRoutes(Mutex::new(Vec::new()));
    let outcome = Executor::new(&cni, &routes).add(&request, &plans).unwrap();
    let applied = routes.0.lock().unwrap().clone();
    assert_eq!(applied.len(), 2);
    assert!(applied[0].1.delete_v4_default && applied[0].1.add_gateways.is_empty());
    assert!(
        outcome.results[0].routes.is_empty(),
        "eth0 lost its default route"
    );
    assert_eq!(outcome.results[1].routes[0].gw, Some("10.0.1.1".parse().unwrap()));
    // Without an editor the request cannot be honoured: ADD fails and rolls back.
    let err = Executor::new(&runtime(FakeExec::default()), &NoRouteEditor)
        .add(&request, &plans)
        .unwrap_err();
    assert!(err.to_string().contains("no route editor"), "{err}");
}

#[test]
fn check_status_and_gc_reach_every_network() {
    let (request, plans) = plans("a,b");
    let cni = runtime(FakeExec::default());
    let executor = Executor::new(&cni, &NoRouteEditor);
    let outcome = executor.add(&request, &plans).unwrap();
    let cached: Vec<_> = outcome.results.into_iter().map(Some).collect();
    executor.check(&request, &plans, &cached).unwrap();
    // Without cached results CHECK cannot run: every delegate is reported.
    match executor.check(&request, &plans, &[]).unwrap_err() {
        ExecutorError::Delegates(errors) => assert_eq!(errors.len(), 3),
        other => panic!("{other}"),
    }
    let record = crate::CacheRecord::new(&request, plans.clone());
    executor.status(&plans).unwrap();
    executor.gc(&crate::gc_targets(&[record])).unwrap();
    let calls = cni.executor().calls.lock().unwrap().clone();
    let checks = calls.iter().filter(|c| c.0 == "CHECK").count();
    assert_eq!(checks, 3);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn rollback_is_complete_whatever_fails_and_however_parallel(
        count in 0usize..6,
        fail_at in proptest::option::of(0usize..6),
        parallelism in 1usize..4,
    ) {
        let names: Vec<&str> = (0..count)
            .map(|i| if Some(i) == fail_at { "bad" } else { ["a", "b", "c", "d"][i % 4] })
            .collect();
        let (request, plans) = plans(&names.join(","));
        let cni = runtime(FakeExec::default());
        let outcome = Executor::new(&cni, &NoRouteEditor).with_parallelism(parallelism).add(&request, &plans);
        let calls = cni.executor().calls.lock().unwrap().clone();
        let added: Vec<usize> = calls.iter().filter(|c| c.0 == "ADD")
            .map(|c| plans.iter().position(|p| p.ifname == c.2).unwrap()).collect();
        let deleted: Vec<usize> = calls.iter().filter(|c| c.0 == "DEL")
            .map(|c| plans.iter().position(|p| p.ifname == c.2).unwrap()).collect();
        match outcome {
            Ok(outcome) => {
                proptest::prop_assert!(fail_at.is_none_or(|f| f >= count));
                proptest::prop_assert!(deleted.is_empty());
                proptest::prop_assert_eq!(outcome.results.len(), plans.len());
            }
            Err(_) => {
                // Everything attached is deleted exactly once, in reverse plan order; the
                // failed delegate is not.
                let mut expected: Vec<usize> = added.iter().copied().filter(|i| Some(*i) != fail_at.map(|f| f + 1)).collect();
                expected.sort_unstable_by(|a, b| b.cmp(a));
                proptest::prop_assert_eq!(deleted, expected);
                if parallelism == 1 {
                    proptest::prop_assert_eq!(added[0], 0, "one by one, the master runs first");
                }
            }
        }
    }
}

#[test]
fn device_info_is_copied_reported_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().display().to_string();
    let config = MetaConfig::parse(
        json!({"cniVersion":"1.0.0","clusterNetwork":"cluster","deviceInfoDir": base})
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    let mut catalog = MemoryCatalog::default()
        .with_conf_file(
            "10-c.conf",
            r#"{"cniVersion":"1.0.0","name":"cluster","type":"ptp"}"#,
        )
        .with_nad("ns", "sriov", r#"{"cniVersion":"1.0.0","type":"sriov"}"#)
        .with_devices(vec![crate::PodDeviceEntry {
            pod_uid: "u".into(),
            resource_name: "intel.com/sriov".into(),
            device_ids: vec!["0000:03:00.1".into()],
            ..Default::default()
        }]);
    catalog
        .nads
        .get_mut(&("ns".to_string(), "sriov".to_string()))
        .unwrap()
        .metadata
        .annotations
        .insert(
            weft_netconf::RESOURCE_NAME_ANNOTATION.into(),
            "intel.com/sriov".into(),
        );
    let dp = dir.path().join("dp/intel.com-sriov-0000:03:00.1-device.json");
    std::fs::create_dir_all(dp.parent().unwrap()).unwrap();
    let info = json!({"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:03:00.1"}});
    std::fs::write(&dp, info.to_string()).unwrap();
    let (request, plans) = plan_pod(&config, &catalog, "sriov");
    let cni_file = dir.path().join("cni/ns-sriov-ctr_net1");
    assert_eq!(
        plans[1].device.as_ref().unwrap().cni_device_info_file,
        cni_file.display().to_string()
    );
    let cni = runtime(FakeExec::default());
    let executor = Executor::new(&cni, &NoRouteEditor);
    let outcome = executor.add(&request, &plans).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&cni_file).unwrap().permissions().mode() & 0o777,
        0o444
    );
    assert_eq!(outcome.statuses[1].device_info.as_ref(), Some(&info));
    assert_eq!(outcome.statuses[0].device_info, None);
    executor.del(&request, &plans, &[None, None]).unwrap();
    assert!(!cni_file.exists(), "DEL removes the device-info file");
    assert!(dp.exists(), "the device plugin's file stays");

    // The kubelet freed the device before the last DEL (no attachment record either): the
    // plan has no device, and DEL still removes the file an earlier ADD left.
    executor.add(&request, &plans).unwrap();
    assert!(cni_file.exists());
    catalog.devices.clear();
    let (_, plans) = plan_pod(&config, &catalog, "sriov");
    assert_eq!(plans[1].device, None);
    assert_eq!(plans[0].device_info_file(), None, "the cluster network has none");
    assert_eq!(
        plans[1].device_info_file(),
        Some(cni_file.display().to_string().as_str())
    );
    executor.del(&request, &plans, &[None, None]).unwrap();
    assert!(
        !cni_file.exists(),
        "DEL without the device removes the device-info file"
    );
}

#[test]
fn schedule_runs_everything_at_once_unless_a_delegate_depends_on_another() {
    let at = |annotation: &str, parallelism: usize| schedule(&plans(annotation).1, parallelism);
    let schedule = |master_alone, workers, del_workers| Schedule {
        master_alone,
        workers,
        del_workers,
    };
    // One by one (Multus): the master first.
    assert_eq!(at("a,b", 1), schedule(true, 1, 1));
    // Independent delegates: the master is one of them. ADDs up to the parallelism, DELs all
    // at once.
    assert_eq!(at("a,b", 4), schedule(false, 3, 3));
    assert_eq!(at("a,b,c,d", 4), schedule(false, 4, 5));
    assert_eq!(at("a,b,c,d", 2), schedule(false, 2, 5));
    assert_eq!(at("", 4), schedule(false, 1, 1));
    // Very many networks: their DELs at once only up to DELS_AT_ONCE.
    let many: Vec<String> = (0..40)
        .map(|i| format!(r#"{{"name":"a","interface":"n{i}"}}"#))
        .collect();
    assert_eq!(
        at(&format!("[{}]", many.join(",")), 4),
        schedule(false, 4, DELS_AT_ONCE)
    );
    // A default-route edit: the master's routes are settled before any secondary's (and
    // deleted after them).
    assert_eq!(
        at(r#"[{"name":"a","default-route":["10.0.1.1"]},{"name":"b"}]"#, 4),
        schedule(true, 2, 2)
    );
    // linkInContainer: its master link may be another delegate's interface (net1 here).
    assert_eq!(at("a,vlan", 4), schedule(true, 1, 1));
    // A secondary with a default route of its own (DHCP): the cluster network's comes first.
    assert_eq!(at("a,dhcp", 4), schedule(true, 2, 2));
}

#[test]
fn a_failing_cluster_network_beside_the_secondaries_rolls_back_what_they_attached() {
    let config = MetaConfig::parse(br#"{"cniVersion":"1.0.0","clusterNetwork":"cluster"}"#).unwrap();
    let mut catalog = MemoryCatalog::default().with_conf_file(
        "10-c.conf",
        r#"{"cniVersion":"1.0.0","name":"cluster","type":"fail-cluster"}"#,
    );
    for name in ["a", "b"] {
        catalog = catalog.with_nad(
            "ns",
            name,
            &format!(r#"{{"cniVersion":"1.0.0","type":"{name}-plugin"}}"#),
        );
    }
    let (request, plans) = plan_pod(&config, &catalog, "a,b");
    assert_eq!(
        schedule(&plans, 4),
        Schedule {
            master_alone: false,
            workers: 3,
            del_workers: 3
        }
    );
    let cni = runtime(FakeExec::default());
    let err = Executor::new(&cni, &NoRouteEditor)
        .with_parallelism(4)
        .add(&request, &plans)
        .unwrap_err();
    assert!(matches!(err, ExecutorError::Add { failed: 0, .. }), "{err}");
    assert!(
        err.to_string().contains("\"cluster\""),
        "the cluster network is named: {err}"
    );
    // Whatever secondaries started beside it are DELeted in reverse plan order; the failed
    // cluster network is not.
    let added = assert_rolled_back(&cni, &plans, "eth0");
    assert!(added.contains(&"eth0".to_string()));
}

/// Calls of `command` wait at a gate until `expected` are in flight together (or 10 s passed):
/// a concurrent schedule passes at once, one that serialises them records fewer.
struct GateExec {
    inner: FakeExec,
    command: &'static str,
    expected: usize,
    in_flight: Mutex<usize>,
    opened: std::sync::Condvar,
    most: Mutex<usize>,
}

impl PluginExec for GateExec {
    fn find(&self, plugin_type: &str, search_path: &[PathBuf]) -> Result<PathBuf, FindError> {
        self.inner.find(plugin_type, search_path)
    }

    fn exec(&self, binary: &Path, env: &[(String, String)], stdin: &[u8]) -> Result<Vec<u8>, ExecError> {
        if env.iter().any(|(k, v)| k == "CNI_COMMAND" && v == self.command) {
            let mut n = self.in_flight.lock().unwrap();
            *n += 1;
            let mut most = self.most.lock().unwrap();
            *most = (*most).max(*n);
            drop(most);
            self.opened.notify_all();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while *self.most.lock().unwrap() < self.expected && std::time::Instant::now() < deadline {
                n = self
                    .opened
                    .wait_timeout(n, std::time::Duration::from_millis(100))
                    .unwrap()
                    .0;
            }
            *n -= 1;
        }
        self.inner.exec(binary, env, stdin)
    }
}

fn gate(command: &'static str, expected: usize) -> GateExec {
    GateExec {
        inner: FakeExec::default(),
        command,
        expected,
        in_flight: Mutex::new(0),
        opened: std::sync::Condvar::new(),
        most: Mutex::new(0),
    }
}

#[test]
fn the_master_is_added_together_with_the_secondaries() {
    let (request, plans) = plans("a,b");
    let cni = CniRuntime::with_executor(Vec::<PathBuf>::new(), gate("ADD", 3)).without_version_negotiation();
    let outcome = Executor::new(&cni, &NoRouteEditor)
        .with_parallelism(4)
        .add(&request, &plans)
        .unwrap();
    assert_eq!(
        *cni.executor().most.lock().unwrap(),
        3,
        "eth0, net1 and net2 at once"
    );
    // Results and statuses stay in plan order.
    let names: Vec<&str> = outcome.statuses.iter().map(|s| s.interface.as_str()).collect();
    assert_eq!(names, ["eth0", "net1", "net2"]);
    assert_eq!(outcome.result.ips[0].address.to_string(), "10.0.0.2/24");
}

#[test]
fn every_delegate_of_a_pod_is_deleted_at_once_whatever_bounds_its_adds() {
    let (request, plans) = plans("a,b,c,d");
    assert_eq!(plans.len(), 5);
    let cni = CniRuntime::with_executor(Vec::<PathBuf>::new(), gate("DEL", 5)).without_version_negotiation();
    let executor = Executor::new(&cni, &NoRouteEditor).with_parallelism(2);
    let outcome = executor.add(&request, &plans).unwrap();
    let cached: Vec<Option<CniResult>> = outcome.results.into_iter().map(Some).collect();
    executor.del(&request, &plans, &cached).unwrap();
    assert_eq!(
        *cni.executor().most.lock().unwrap(),
        5,
        "the 5 DELs at once, though ADDs run 2 at a time"
    );
}
