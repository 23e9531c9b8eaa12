//! End to end on the local cluster: `weft up` with the example VM (two NICs), the guest's
//! leases as qemu-guest-agent reports them, connectivity, then `weft down` restoring the host
//! exactly.
//!
//! Tests named `exclusive_*` change host-wide state (they compare the host before and after),
//! so scripts/test.sh runs them alone, after everything else.

mod common;

use common::*;

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn exclusive_up_runs_the_example_vm_and_down_restores_the_host() {
    if !root_or_skip("exclusive_up_runs_the_example_vm_and_down_restores_the_host") {
        return;
    }
    // The guest's status comes from qemu-guest-agent, copied into the guest image from the host.
    if !std::path::Path::new("/usr/sbin/qemu-ga").exists() {
        weft_testing::skip(
            "exclusive_up_runs_the_example_vm_and_down_restores_the_host",
            "qemu-guest-agent is not installed (scripts/install-deps.sh)",
        );
        return;
    }
    let before = host_snapshot();
    let state = tempfile::tempdir().unwrap();
    let outcome = std::panic::catch_unwind(|| exercise(state.path()));
    let logs = collect_logs(state.path());
    let down = weft(state.path(), &["down"]);
    if let Err(panic) = outcome {
        eprintln!("logs:\n{logs}");
        std::panic::resume_unwind(panic);
    }
    assert!(down.status.success(), "weft down failed:\n{}", text(&down));
    let after = host_snapshot();
    assert_eq!(before, after, "weft down must restore the host exactly");
}

fn vmi_json(state: &std::path::Path, name: &str) -> serde_json::Value {
    let out = weft(state, &["get", "vmi", name, "-o", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

fn guest_checks(vmi: &serde_json::Value) -> Vec<serde_json::Value> {
    let raw = vmi["metadata"]["annotations"]["weft.dev/guest-report"]
        .as_str()
        .unwrap_or("[]");
    serde_json::from_str(raw).unwrap_or_default()
}

fn wait_for_check(state: &std::path::Path, vmi: &str, kind: &str, target: &str) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    loop {
        let current = vmi_json(state, vmi);
        if let Some(check) = guest_checks(&current)
            .into_iter()
            .find(|c| c["kind"] == kind && c["target"] == target)
        {
            return check;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {kind} {target} check from {vmi}: {current}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

fn exercise(state: &std::path::Path) {
    let up = weft(state, &["up", "--nodes", "2", "--timeout", "240"]);
    assert!(up.status.success(), "weft up failed:\n{}", text(&up));
    assert!(
        String::from_utf8_lossy(&up.stdout).contains("vm1"),
        "status printed:\n{}",
        text(&up)
    );
    // `up` returns once every NIC is leased and the guest agent reported it; the OS info and
    // the AgentConnected condition come from the same guest-agent session: read a VMI that
    // shows them all (a session that failed meanwhile is re-established by the launcher).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let vmi = loop {
        let vmi = vmi_json(state, "vm1");
        let agent_sourced = vmi["status"]["interfaces"].as_array().is_some_and(|nics| {
            nics.len() >= 2
                && nics
                    .iter()
                    .all(|i| i["infoSource"].as_str().unwrap_or("").contains("guest-agent"))
        });
        let connected = vmi["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "AgentConnected" && c["status"] == "True")
        });
        if agent_sourced && connected && vmi["status"]["guestOSInfo"]["id"].is_string() {
            break vmi;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for vm1's guest-agent view (interfaces, AgentConnected, guestOSInfo): {vmi}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let interfaces = vmi["status"]["interfaces"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (network, want_prefix) in [("default", "10.244.1."), ("data", "192.168.100.")] {
        let nic = interfaces
            .iter()
            .find(|i| i["name"] == network)
            .unwrap_or_else(|| panic!("no {network} in {vmi}"));
        assert!(
            nic["ipAddress"].as_str().unwrap_or("").starts_with(want_prefix),
            "{network}: {nic}"
        );
        assert!(
            nic["infoSource"].as_str().unwrap_or("").contains("guest-agent"),
            "{network}: {nic}"
        );
        assert!(!nic["mac"].as_str().unwrap_or("").is_empty(), "{network}: {nic}");
    }
    // qemu-guest-agent answered (the guest-agent source above is its guest-network-get-interfaces):
    // KubeVirt's AgentConnected condition and guestOSInfo from guest-get-osinfo.
    let conditions = vmi["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "AgentConnected" && c["status"] == "True"),
        "{vmi}"
    );
    let os = &vmi["status"]["guestOSInfo"];
    assert_eq!(os["id"], "weft", "{vmi}");
    assert_eq!(os["machine"], "x86_64", "{vmi}");
    assert!(
        os["kernelRelease"].as_str().unwrap_or("").ends_with("-amd64"),
        "{vmi}"
    );
    let data = interfaces.iter().find(|i| i["name"] == "data").unwrap();
    assert_eq!(
        data["podInterfaceName"], "pod3a6eb0790f3",
        "hashed name of network 'data'"
    );
    assert!(
        data["infoSource"].as_str().unwrap().contains("multus-status"),
        "{data}"
    );
    // Masquerade: the guest reaches the remote host beyond the node (NAT), by ICMP and HTTP.
    let ping = wait_for_check(state, "vm1", "ping", "172.31.255.254");
    assert_eq!(ping["ok"], true, "{ping}");
    let wget = wait_for_check(state, "vm1", "wget", "http://172.31.255.254:8080/");
    assert_eq!(wget["ok"], true, "{wget}");
    // The secondary bridge: a second launcher pod's guest (on the other node) reaches vm1's guest on `data`.
    // vm2 also has a NIC on `l2`, an L2-only network (the same bridge, no IPAM): nothing leases
    // it, its guest sets a static address there.
    apply(state, "nad-l2.yaml", L2_NAD);
    let vm1_data_ip = data["ipAddress"].as_str().unwrap().to_string();
    let vm2 = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/vm.yaml"))
        .unwrap()
        .replace("name: vm1", "name: vm2")
        .replace("app: vm1", "app: vm2")
        .replace(
            "macAddress: \"02:00:00:0a:00:01\"",
            "macAddress: \"02:00:00:0a:00:02\"\n            - name: l2\n              bridge: {}\n              macAddress: \"02:00:00:0c:00:02\"",
        )
        .replace(
            "            networkName: data",
            "            networkName: data\n        - name: l2\n          multus:\n            networkName: l2",
        )
        .replace(
            "ping=172.31.255.254 wget=http://172.31.255.254:8080/",
            &format!("ping={vm1_data_ip} addr=02:00:00:0c:00:02=10.99.0.2/24"),
        );
    assert!(vm2.contains("networkName: l2"), "the example VM changed: {vm2}");
    apply(state, "vm2.yaml", &vm2);
    let ping = wait_for_check(state, "vm2", "ping", &vm1_data_ip);
    assert_eq!(ping["ok"], true, "vm2 -> vm1 over the data network: {ping}");
    // The least-loaded node took vm2: the ping crossed the VXLAN overlay between the nodes.
    assert_eq!(vmi_json(state, "vm1")["status"]["nodeName"], "node1");
    assert_eq!(vmi_json(state, "vm2")["status"]["nodeName"], "node2");
    l2_only_network(state);
}

/// An L2-only network: a bridge NAD without IPAM on the data network's bridge.
const L2_NAD: &str = r#"apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: l2
  namespace: default
spec:
  config: '{"cniVersion": "1.0.0", "name": "l2", "type": "bridge", "bridge": "br-data", "mtu": 1450}'
"#;

/// vm2's NIC on `l2` runs with the static address its guest set (the guest agent reports it:
/// there was nothing to lease, and the VM counts as up anyway), and vm3, with only a static
/// address there too, reaches it over that network.
fn l2_only_network(state: &std::path::Path) {
    let l2_nic = || {
        vmi_json(state, "vm2")["status"]["interfaces"]
            .as_array()
            .and_then(|nics| nics.iter().find(|i| i["name"] == "l2").cloned())
    };
    assert!(
        common::runtime::wait_for(std::time::Duration::from_secs(60), || {
            l2_nic().is_some_and(|nic| nic["ipAddress"] == "10.99.0.2")
        }),
        "vm2's l2 NIC never showed its static address: {}",
        vmi_json(state, "vm2")
    );
    let l2 = l2_nic().expect("vm2's l2 NIC");
    assert_eq!(l2["mac"], "02:00:00:0c:00:02", "{l2}");
    let source = l2["infoSource"].as_str().unwrap_or("");
    assert!(
        source.contains("guest-agent") && source.contains("multus-status"),
        "{l2}"
    );
    // The launcher pod's network-status has the L2-only attachment, with no address.
    let pods = weft(state, &["get", "pods", "-o", "json"]);
    let pods: serde_json::Value = serde_json::from_slice(&pods.stdout).unwrap_or_default();
    let launcher = pods["items"]
        .as_array()
        .and_then(|items| {
            items.iter().find(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("virt-launcher-vm2-")
            })
        })
        .cloned()
        .unwrap_or_else(|| panic!("no launcher pod of vm2: {pods}"));
    let status: Vec<serde_json::Value> = serde_json::from_str(
        launcher["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
            .as_str()
            .unwrap_or("[]"),
    )
    .unwrap();
    let entry = status
        .iter()
        .find(|e| e["name"] == "default/l2")
        .unwrap_or_else(|| panic!("no default/l2 in vm2's launcher network-status: {status:?}"));
    assert!(
        entry["ips"].as_array().is_none_or(|ips| ips.is_empty()),
        "{entry}"
    );
    let vm3 = r#"apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: vm3
  namespace: default
spec:
  running: true
  template:
    metadata:
      annotations:
        weft.dev/guest-checks: "addr=02:00:00:0c:00:03=10.99.0.3/24 ping=10.99.0.2"
    spec:
      domain:
        devices:
          interfaces:
            - name: l2
              bridge: {}
              macAddress: "02:00:00:0c:00:03"
        resources:
          requests:
            memory: 256Mi
      networks:
        - name: l2
          multus:
            networkName: l2
"#;
    apply(state, "vm3.yaml", vm3);
    let ping = wait_for_check(state, "vm3", "ping", "10.99.0.2");
    assert_eq!(ping["ok"], true, "vm3 -> vm2 over the L2-only network: {ping}");
}

fn collect_logs(state: &std::path::Path) -> String {
    let mut out = String::new();
    for entry in walk(state) {
        if entry.extension().is_some_and(|e| e == "log") {
            let text = std::fs::read_to_string(&entry).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            out += &format!(
                "--- {}\n{}\n",
                entry.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
    out
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}
