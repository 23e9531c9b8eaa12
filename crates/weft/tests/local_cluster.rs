//! End to end on the local cluster: `weft up` with the example VM (two NICs), the guest's
//! leases and connectivity, then `weft down` restoring the host exactly.
//!
//! Tests named `exclusive_*` change host-wide state (they compare the host before and after),
//! so scripts/test.sh runs them alone, after everything else.

mod common;

use common::*;

#[test]
fn exclusive_up_runs_the_example_vm_and_down_restores_the_host() {
    if !root_or_skip("exclusive_up_runs_the_example_vm_and_down_restores_the_host") {
        return;
    }
    let before = host_snapshot();
    let state = tempfile::tempdir().unwrap();
    let up = weft(state.path(), &["up", "--timeout", "240"]);
    let status = weft(state.path(), &["get", "vmi", "vm1", "-o", "json"]);
    let logs = collect_logs(state.path());
    let down = weft(state.path(), &["down"]);
    assert!(up.status.success(), "weft up failed:\n{}\n{logs}", text(&up));
    assert!(down.status.success(), "weft down failed:\n{}", text(&down));
    let vmi: serde_json::Value = serde_json::from_slice(&status.stdout).expect("vmi json");
    let interfaces = vmi["status"]["interfaces"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (network, want_prefix) in [("default", "10.0.2.2"), ("data", "192.168.100.")] {
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
    let data = interfaces.iter().find(|i| i["name"] == "data").unwrap();
    assert_eq!(
        data["podInterfaceName"], "pod6482e9630cd",
        "hashed name of network 'data'"
    );
    assert!(
        String::from_utf8_lossy(&up.stdout).contains("vm1"),
        "status printed:\n{}",
        text(&up)
    );
    let after = host_snapshot();
    assert_eq!(before, after, "weft down must restore the host exactly");
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
