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

fn pods() -> weft_store::ResourceType {
    weft_store::ResourceType::new("v1", "Pod", "pods", true)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn open_store(state: &Path) -> weft_store::SqliteStore {
    weft_store::SqliteStore::open(state.join("store.db")).unwrap()
}

/// The pods now and the store's revision, for replaying the pod changes after it.
fn pod_revision(state: &Path) -> weft_store::ObjectList {
    use weft_store::Store;
    let store = open_store(state);
    runtime().block_on(async { store.list(&pods(), None, &Default::default()).await.unwrap() })
}

/// The nodes of the launcher pods whose network-status holds `ip`.
fn holders(pods: &std::collections::BTreeMap<String, serde_json::Value>, ip: &str) -> Vec<String> {
    let mut nodes: Vec<String> = pods
        .values()
        .filter(|p| {
            let raw = p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
                .as_str()
                .unwrap_or("[]");
            let statuses: Vec<serde_json::Value> = serde_json::from_str(raw).unwrap_or_default();
            statuses
                .iter()
                .any(|s| s["ips"].as_array().is_some_and(|ips| ips.iter().any(|i| i == ip)))
        })
        .filter_map(|p| p["spec"]["nodeName"].as_str().map(String::from))
        .collect();
    nodes.sort();
    nodes
}

/// Replays every pod change after the list `start` (the store keeps its change log) up to the
/// pods there are now, and returns the most launcher pods that held `ip` at the same time.
fn holders_at_once(state: &Path, start: &weft_store::ObjectList, ip: &str) -> Vec<String> {
    let from = start.resource_version.as_str();
    use futures::StreamExt;
    use weft_store::{Store, WatchEvent};
    let store = open_store(state);
    runtime().block_on(async {
        let now = store.list(&pods(), None, &Default::default()).await.unwrap();
        let head: u64 = now.resource_version.parse().unwrap();
        let mut live: std::collections::BTreeMap<String, serde_json::Value> = start
            .items
            .iter()
            .map(|o| (o.metadata.name.clone(), serde_json::to_value(o).unwrap()))
            .collect();
        let mut most = holders(&live, ip);
        let mut events = store
            .watch(&pods(), None, &Default::default(), Some(from))
            .await
            .unwrap();
        // The pods now were last changed at or before `head`: replaying up to their latest
        // revisions replays the whole migration.
        let mut pending: std::collections::BTreeMap<String, u64> = now
            .items
            .iter()
            .map(|o| {
                (
                    o.metadata.name.clone(),
                    o.metadata
                        .resource_version
                        .as_deref()
                        .unwrap_or("0")
                        .parse()
                        .unwrap(),
                )
            })
            .filter(|(_, rv)| *rv > from.parse::<u64>().unwrap())
            .collect();
        let mut saw_deletion = false;
        while !(saw_deletion && pending.is_empty()) {
            let event = tokio::time::timeout(Duration::from_secs(30), events.next())
                .await
                .expect("the change log replays within 30 s")
                .expect("the watch ends only when dropped")
                .unwrap();
            let object = event.object().clone();
            let name = object.metadata.name.clone();
            let rv: u64 = object
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or("0")
                .parse()
                .unwrap();
            assert!(
                rv <= head || pending.is_empty(),
                "replayed past the revision read"
            );
            if pending.get(&name).is_some_and(|want| rv >= *want) {
                pending.remove(&name);
            }
            match event {
                WatchEvent::Deleted(_) => {
                    saw_deletion = true;
                    live.remove(&name);
                }
                WatchEvent::Added(_) | WatchEvent::Modified(_) => {
                    live.insert(name, serde_json::to_value(&object).unwrap());
                }
            }
            let now = holders(&live, ip);
            if now.len() > most.len() {
                most = now;
            }
        }
        most
    })
}

/// No sandbox namespace of a vm1 launcher pod is left: the agent deletes it right after the
/// pod's CNI DEL.
fn launcher_netns_gone(state: &Path) -> Option<()> {
    let prefix = weft::local::Topology::load(state)
        .ok()?
        .pod_netns("default", "virt-launcher-vm1-");
    let left = std::fs::read_dir("/run/netns")
        .ok()?
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with(&prefix));
    (!left).then_some(())
}

/// `weft stop vm1`, returning once its launcher pod is gone and the pod's CNI DEL is done
/// (the agent runs it when it sees the pod gone; the sandbox's namespace goes after it).
fn stop_vm1(state: &Path) {
    assert!(weft(state, &["stop", "vm1"]).status.success());
    wait("vm1 stopped", || no_pods(state));
    wait("the launcher's CNI DEL", || launcher_netns_gone(state));
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
    stop_vm1(state);
    assert_eq!(
        claim_ips(state),
        vec![format!("{ip}/24")],
        "pod deletion (its CNI DEL done) keeps the claim's address"
    );
    assert!(weft(state, &["start", "vm1"]).status.success());
    let (again, _) = wait("vm1 running again", || data_ip(state));
    assert_eq!(again, ip, "stop/start keeps the IP");

    // Move to node2 (nodeSelector), still the same address.
    stop_vm1(state);
    let moved = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/vm.yaml"))
        .unwrap()
        .replace(
            "      domain:\n",
            "      nodeSelector:\n        kubernetes.io/hostname: node2\n      domain:\n",
        );
    apply(state, "vm1-node2.yaml", &moved);
    let (moved_ip, moved_node) = wait("vm1 on node2", || data_ip(state).filter(|(_, n)| n == "node2"));
    assert_eq!(
        (moved_ip.as_str(), moved_node.as_str()),
        (ip.as_str(), "node2"),
        "a node move keeps the IP"
    );

    // Migration back to node1: a target pod starts while the source runs, both hold the
    // claimed address (two owners), then the source goes and the VMI moves. Both holding it
    // is a passing state, so it is read from the store's change log afterwards rather than
    // polled for.
    let before = pod_revision(state);
    assert!(weft(state, &["migrate", "vm1", "--to", "node1"]).status.success());
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
    let owners = holders_at_once(state, &before, &ip);
    assert_eq!(
        owners,
        vec!["node1".to_string(), "node2".to_string()],
        "during the migration two launcher pods (node2's source, node1's target) held the address at once"
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
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn exclusive_claims_keep_vm_addresses_across_stop_start_and_node_moves() {
    if !root_or_skip("exclusive_claims_keep_vm_addresses_across_stop_start_and_node_moves") {
        return;
    }
    then_down(run);
}
