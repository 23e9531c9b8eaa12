//! Persistent VM addresses on the local cluster (IPAMClaim): a VM keeps its secondary IP across
//! stop/start, a move to another node and a migration (two owners during the handover);
//! deleting the VM frees it. No guests are booted: the
//! addresses are the pod's, allocated by weft-ipam through the meta-plugin.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

fn json(state: &Path, args: &[&str]) -> serde_json::Value {
    serde_json::from_slice(&weft(state, args).stdout).unwrap_or_default()
}

fn data_ip(state: &Path) -> Option<(String, String)> {
    let vmi = json(state, &["get", "vmi", "vm1", "-o", "json"]);
    if vmi["status"]["phase"] != "Running" {
        return None;
    }
    let node = vmi["status"]["nodeName"].as_str()?.to_string();
    let nics = vmi["status"]["interfaces"].as_array()?;
    let ip = nics.iter().find(|i| i["name"] == "data")?["ipAddress"]
        .as_str()?
        .to_string();
    (!ip.is_empty()).then_some((ip, node))
}

fn wait<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn claim_ips(state: &Path) -> Vec<String> {
    let claim = json(state, &["get", "ipamclaim", "vm1.data", "-o", "json"]);
    claim["status"]["ips"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

fn run(state: &Path) {
    let up = weft(state, &["up", "--nodes", "2", "--no-guests", "--timeout", "90"]);
    assert!(up.status.success(), "{}", text(&up));
    let (ip, node) = wait("vm1 running with a data IP", || data_ip(state));
    assert_eq!(node, "node1");
    assert_eq!(
        claim_ips(state),
        vec![format!("{ip}/24")],
        "the claim holds the address"
    );

    // Stop and start: the pod goes, the claim keeps the address, the new pod gets it back.
    assert!(weft(state, &["stop", "vm1"]).status.success());
    wait("vm1 stopped", || {
        json(state, &["get", "pods", "-o", "json"])["items"]
            .as_array()
            .is_some_and(|p| p.is_empty())
            .then_some(())
    });
    assert_eq!(
        claim_ips(state),
        vec![format!("{ip}/24")],
        "pod deletion keeps the claim's address"
    );
    assert!(weft(state, &["start", "vm1"]).status.success());
    let (again, _) = wait("vm1 running again", || data_ip(state));
    assert_eq!(again, ip, "stop/start keeps the IP");

    // Move to node2 (nodeSelector), still the same address.
    assert!(weft(state, &["stop", "vm1"]).status.success());
    wait("vm1 stopped", || {
        json(state, &["get", "pods", "-o", "json"])["items"]
            .as_array()
            .is_some_and(|p| p.is_empty())
            .then_some(())
    });
    let moved = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/vm.yaml"))
        .unwrap()
        .replace(
            "      domain:\n",
            "      nodeSelector:\n        kubernetes.io/hostname: node2\n      domain:\n",
        );
    let file = state.join("vm1-node2.yaml");
    std::fs::write(&file, moved).unwrap();
    assert!(
        weft(state, &["apply", "-f", file.to_str().unwrap()])
            .status
            .success()
    );
    let (moved_ip, moved_node) = wait("vm1 on node2", || data_ip(state).filter(|(_, n)| n == "node2"));
    assert_eq!(
        (moved_ip.as_str(), moved_node.as_str()),
        (ip.as_str(), "node2"),
        "a node move keeps the IP"
    );

    // Migration back to node1: a target pod starts while the source runs, both hold the
    // claimed address (two owners), then the source goes and the VMI moves.
    assert!(weft(state, &["migrate", "vm1", "--to", "node1"]).status.success());
    let owners = wait("two launcher pods holding the address", || {
        let pods = json(state, &["get", "pods", "-o", "json"])["items"]
            .as_array()?
            .clone();
        let holders: Vec<String> = pods
            .iter()
            .filter(|p| {
                let raw = p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
                    .as_str()
                    .unwrap_or("[]");
                let statuses: Vec<serde_json::Value> = serde_json::from_str(raw).unwrap_or_default();
                statuses.iter().any(|s| {
                    s["ips"]
                        .as_array()
                        .is_some_and(|ips| ips.iter().any(|i| i == ip.as_str()))
                })
            })
            .filter_map(|p| p["spec"]["nodeName"].as_str().map(String::from))
            .collect();
        (holders.len() == 2).then_some(holders)
    });
    assert!(
        owners.contains(&"node1".to_string()) && owners.contains(&"node2".to_string()),
        "{owners:?}"
    );
    let (migrated_ip, migrated_node) = wait("vm1 migrated to node1", || {
        let pods = json(state, &["get", "pods", "-o", "json"])["items"]
            .as_array()?
            .len();
        data_ip(state).filter(|(_, n)| n == "node1" && pods == 1)
    });
    assert_eq!(
        (migrated_ip.as_str(), migrated_node.as_str()),
        (ip.as_str(), "node1"),
        "migration keeps the IP"
    );
    assert_eq!(claim_ips(state), vec![format!("{ip}/24")]);

    // Deleting the VM deletes its claim and frees the address.
    assert!(weft(state, &["delete", "vm", "vm1"]).status.success());
    wait("claim deleted", || {
        (!weft(state, &["get", "ipamclaim", "vm1.data"]).status.success()).then_some(())
    });
    let list = weft(state, &["ipam", "list", "--network", "data"]);
    wait("address released", || {
        let list = weft(state, &["ipam", "list", "--network", "data"]);
        (!String::from_utf8_lossy(&list.stdout).contains(&ip)).then_some(())
    });
    drop(list);
}

#[test]
fn exclusive_claims_keep_vm_addresses_across_stop_start_and_node_moves() {
    if !root_or_skip("exclusive_claims_keep_vm_addresses_across_stop_start_and_node_moves") {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let outcome = std::panic::catch_unwind(|| run(state.path()));
    let down = weft(state.path(), &["down"]);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    assert!(down.status.success(), "{}", text(&down));
}
