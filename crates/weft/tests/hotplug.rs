//! Hot-plug and hot-unplug of a secondary network on a running VM in the local cluster: the VM
//! template change reaches the VMI, the launcher pod's networks annotation, the pod's
//! interfaces (the agent's dynamic-networks role through weft-meta), network-status and the
//! VMI's status.interfaces, the guest (the NIC is attached to the running QEMU and leased by
//! the guest's DHCP client) — and back out with `state: absent`. The hot-plugged networks have
//! no `routes` (one with a `gateway`, one without): KubeVirt fails their setup (kubevirt #5762),
//! weft leases them without a router option, on hot-plug and when the VM boots with them.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

fn json(state: &Path, args: &[&str]) -> serde_json::Value {
    serde_json::from_slice(&weft(state, args).stdout).unwrap_or_default()
}

fn wait<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn launcher_pod(state: &Path) -> Option<serde_json::Value> {
    json(state, &["get", "pods", "-o", "json"])["items"]
        .as_array()?
        .first()
        .cloned()
}

fn statuses(pod: &serde_json::Value) -> Vec<serde_json::Value> {
    let raw = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
        .as_str()
        .unwrap_or("[]");
    serde_json::from_str(raw).unwrap_or_default()
}

/// Two NADs with a weft-ipam range and no `routes`: one with a `gateway`, one without.
const ROUTELESS_NADS: &str = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: plain-gw, namespace: default}
spec:
  config: '{"cniVersion":"1.0.0","name":"plain-gw","type":"bridge","bridge":"br-plaingw","ipam":{"type":"weft-ipam","range":"192.168.101.0/24","gateway":"192.168.101.1"}}'
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: plain, namespace: default}
spec:
  config: '{"cniVersion":"1.0.0","name":"plain","type":"bridge","bridge":"br-plain","ipam":{"type":"weft-ipam","range":"192.168.102.0/24"}}'
"#;

/// The guest's `WEFT-LEASE` lines (its DHCP client's report on the serial console) for
/// addresses starting with `prefix`, from every serial log of the cluster.
fn guest_leases(state: &Path, prefix: &str) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.to_string_lossy().ends_with(".serial.log") {
                out.push(path);
            }
        }
    }
    let mut logs = Vec::new();
    walk(state, &mut logs);
    logs.iter()
        .flat_map(|log| {
            let bytes = std::fs::read(log).unwrap_or_default();
            // Complete lines only: the guest may be writing the last one as it is read.
            let complete = bytes
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(&[][..], |end| &bytes[..end]);
            String::from_utf8_lossy(complete)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|l| {
            l.contains("WEFT-LEASE ")
                && l.split_whitespace()
                    .nth(2)
                    .is_some_and(|ip| ip.starts_with(prefix))
        })
        .collect()
}

/// The VMI's status entry for `name` once the guest reports an address starting with `prefix`.
fn leased_nic(state: &Path, name: &str, prefix: &str) -> serde_json::Value {
    wait(&format!("{name} leased inside the guest"), || {
        let vmi = json(state, &["get", "vmi", "vm1", "-o", "json"]);
        let nic = vmi["status"]["interfaces"]
            .as_array()?
            .iter()
            .find(|i| i["name"] == name)?
            .clone();
        let sources = nic["infoSource"].as_str().unwrap_or("");
        (sources.contains("domain")
            && sources.contains("guest-agent")
            && nic["ipAddress"].as_str().is_some_and(|ip| ip.starts_with(prefix)))
        .then_some(nic)
    })
}

fn run(state: &Path) {
    let up = weft(state, &["up", "--timeout", "120"]);
    assert!(up.status.success(), "{}", text(&up));
    apply(state, "routeless-nads.yaml", ROUTELESS_NADS);
    let vm = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/vm.yaml")).unwrap();
    let plugged = vm
        .replace(
            "              macAddress: \"02:00:00:0a:00:01\"\n",
            "              macAddress: \"02:00:00:0a:00:01\"\n            - name: storage\n              bridge: {}\n            - name: backup\n              bridge: {}\n",
        )
        .replace(
            "            networkName: data\n",
            "            networkName: data\n        - name: storage\n          multus:\n            networkName: plain-gw\n        - name: backup\n          multus:\n            networkName: plain\n",
        );
    assert_ne!(plugged, vm, "the example changed: update this test");
    apply(state, "vm-plugged.yaml", &plugged);

    // The VMI gets the interface; the pod gets it under its hashed name; status follows.
    let storage_iface = wait("storage attached to the pod", || {
        let pod = launcher_pod(state)?;
        statuses(&pod)
            .iter()
            .find(|s| s["name"] == "default/plain-gw")
            .map(|s| s["interface"].as_str().unwrap_or("").to_string())
    });
    assert!(
        storage_iface.starts_with("pod") && storage_iface.len() == 14,
        "{storage_iface}"
    );
    let vmi_status = wait("storage in the VMI status with its pod interface", || {
        let vmi = json(state, &["get", "vmi", "vm1", "-o", "json"]);
        vmi["status"]["interfaces"]
            .as_array()?
            .iter()
            .find(|i| i["name"] == "storage" && i["podInterfaceName"].as_str().is_some_and(|n| !n.is_empty()))
            .cloned()
    });
    assert_eq!(vmi_status["podInterfaceName"], storage_iface.as_str());
    assert!(
        vmi_status["infoSource"]
            .as_str()
            .unwrap_or("")
            .contains("multus-status"),
        "{vmi_status}"
    );
    // The NICs reach the running guest, which leases the pod's addresses on them, with no
    // router option (their networks have no routes).
    let leased_storage = leased_nic(state, "storage", "192.168.101.");
    let leased_backup = leased_nic(state, "backup", "192.168.102.");
    for (nic, prefix) in [
        (&leased_storage, "192.168.101."),
        (&leased_backup, "192.168.102."),
    ] {
        let lines = wait(
            &format!("the guest's DHCP client reports {prefix} ({nic})"),
            || {
                let lines = guest_leases(state, prefix);
                (!lines.is_empty()).then_some(lines)
            },
        );
        assert!(lines.iter().all(|l| l.contains(" router=- ")), "{lines:?}");
    }
    let leased = leased_storage;
    assert!(
        !leased["interfaceName"].as_str().unwrap_or("").is_empty(),
        "{leased}"
    );
    let pod_name = launcher_pod(state).unwrap()["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let networks = json(state, &["get", "pod", &pod_name, "-o", "json"])["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        networks.contains(&storage_iface),
        "networks annotation names the new interface: {networks}"
    );

    // The VM boots with the route-less networks: stop and start, every NIC leased again.
    assert!(weft(state, &["stop", "vm1"]).status.success());
    wait("vm1 stopped", || no_pods(state));
    assert!(weft(state, &["start", "vm1"]).status.success());
    // The stopped VM's VMI went with its pod: these are the new guest's leases.
    leased_nic(state, "storage", "192.168.101.");
    leased_nic(state, "backup", "192.168.102.");
    leased_nic(state, "data", "192.168.100.");
    let storage_iface = statuses(&launcher_pod(state).unwrap())
        .iter()
        .find(|s| s["name"] == "default/plain-gw")
        .map(|s| s["interface"].as_str().unwrap_or("").to_string())
        .unwrap();

    // Unplug: state absent → the pod interface goes, the status entry goes, the VMI forgets it.
    let unplugged = plugged.replace(
        "            - name: storage\n              bridge: {}\n",
        "            - name: storage\n              bridge: {}\n              state: absent\n",
    );
    apply(state, "vm-plugged.yaml", &unplugged);
    wait("storage detached from the pod", || {
        let pod = launcher_pod(state)?;
        (!statuses(&pod)
            .iter()
            .any(|s| s["interface"] == storage_iface.as_str()))
        .then_some(())
    });
    wait("storage gone from the VMI", || {
        let vmi = json(state, &["get", "vmi", "vm1", "-o", "json"]);
        let interfaces = vmi["spec"]["domain"]["devices"]["interfaces"].as_array()?.clone();
        (!interfaces.iter().any(|i| i["name"] == "storage")).then_some(())
    });
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn exclusive_hotplug_and_unplug_a_secondary_network_on_a_running_vm() {
    if !root_or_skip("exclusive_hotplug_and_unplug_a_secondary_network_on_a_running_vm") {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let outcome = std::panic::catch_unwind(|| run(state.path()));
    let log = std::fs::read_to_string(state.path().join("nodes/node1/agent.log")).unwrap_or_default();
    let controller = std::fs::read_to_string(state.path().join("controller.log")).unwrap_or_default();
    let down = weft(state.path(), &["down"]);
    if let Err(panic) = outcome {
        eprintln!("agent log:\n{log}\ncontroller log:\n{controller}");
        std::panic::resume_unwind(panic);
    }
    assert!(down.status.success(), "{}", text(&down));
}
