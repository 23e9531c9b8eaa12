//! `weft controller` against the fake API server over TCP: it names itself
//! (`User-Agent: weft-controller/<version>`, fieldManager `weft-controller`), and a VM whose
//! reconcile fails on every pass (here: a role that may read but not create IPAMClaims, so each
//! pass gets the API server's 403 for the claim of the VM's persistent network) is retried with
//! exponential backoff and logged once per interval with a count. Beside KubeVirt it never
//! creates a VMI.

mod common;
mod kube_cluster;

use std::time::{Duration, Instant};

use common::*;
use kube_cluster::*;
use serde_json::json;
use weft_store::Resource;
use weft_store::fake_api::strict::Rules;

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn controller_names_itself_and_logs_a_failing_vm_once_per_interval() {
    if !root_or_skip("controller_names_itself_and_logs_a_failing_vm_once_per_interval") {
        return;
    }
    let node = Netns::new("ak-ctl");
    let vms = weft_vm::VirtualMachine::resource_type();
    let vmis = weft_vm::VirtualMachineInstance::resource_type();
    let cluster = FakeCluster::serving(
        &node,
        vec![
            pods(),
            nads(),
            vms.clone(),
            vmis.clone(),
            weft_ipam::IpamClaim::resource_type(),
            weft_ipam::IpReservation::resource_type(),
            weft_store::ResourceType::new("v1", "Node", "nodes", false),
        ],
    );
    cluster.api.without_status_subresource(&vmis);
    let read_only = json!({"kind": "ClusterRole", "rules": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]});
    let user = "system:serviceaccount:weft-system:weft-controller";
    cluster
        .api
        .grant("controller-token", user, Rules::from_role(&read_only).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster
        .tcp
        .as_ref()
        .unwrap()
        .write_kubeconfig_with_token(&kubeconfig, "controller-token")
        .unwrap();
    let config = json!({"cniVersion": "1.0.0", "name": "blue", "type": "bridge",
        "allowPersistentIPs": true, "ipam": {"type": "weft-ipam", "range": "10.78.0.0/24"}});
    cluster.create(
        &nads(),
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"name": "blue", "namespace": "default"},
               "spec": {"config": config.to_string()}}),
    );
    cluster.create(
        &vms,
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
               "metadata": {"name": "vm1", "namespace": "default"},
               "spec": {"running": true, "template": {"spec": {
                   "domain": {"devices": {"interfaces": [{"name": "blue", "bridge": {}}]}},
                   "networks": [{"name": "blue", "multus": {"networkName": "blue"}}]}}}}),
    );
    let log = dir.path().join("controller.log");
    let mut controller = node
        .command(&[weft_bin().to_str().unwrap()])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--state-dir")
        .arg(dir.path())
        .args(["--log", "info", "controller"])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let lines = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("vm default/vm1"))
            .count()
    };
    // The first failure is logged at once.
    let deadline = Instant::now() + Duration::from_secs(15);
    while lines() == 0 {
        assert!(
            Instant::now() < deadline,
            "no failure logged:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let window = Instant::now() + Duration::from_secs(5);
    while Instant::now() < window {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = controller.kill();
    let _ = controller.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("is forbidden") && text.contains("cannot create resource"),
        "the API server's 403 is what is logged: {text}"
    );
    assert!(
        text.contains("cannot create resource \"ipamclaims\""),
        "the claim's create is what fails: {text}"
    );
    let records = cluster.api.records();
    assert!(
        !records
            .iter()
            .any(|r| r.uri.contains("/virtualmachineinstances") || r.uri.contains("/pods") && r.is_write()),
        "beside KubeVirt no VMI or pod is touched: {records:#?}"
    );
    let attempts = records
        .iter()
        .filter(|r| r.method == "POST" && r.uri.contains("/ipamclaims"))
        .count();
    // Backoff 200 ms, 400 ms, 800 ms, 1.6 s, 3.2 s ...: a handful in the ~6 s watched, not
    // one every 400 ms.
    assert!(
        (3..=8).contains(&attempts),
        "the controller retries with backoff: {attempts} attempts"
    );
    assert!(lines() <= 2, "{attempts} failed attempts logged as:\n{text}");

    let version = format!("weft-controller/{}", env!("CARGO_PKG_VERSION"));
    for record in cluster.api.records() {
        assert_eq!(record.user_agent.as_deref(), Some(version.as_str()), "{record:?}");
        if record.is_write() && record.method != "DELETE" {
            assert_eq!(
                record.field_manager.as_deref(),
                Some("weft-controller"),
                "{record:?}"
            );
        }
    }
}
