//! `weft explain vmi` and `weft describe` on the local cluster, with guests: the example VM
//! passes every stage (exit 0); a VM whose secondary network names a NAD that does not exist
//! fails at the spec stage naming the NAD and the fix (exit 1), and `weft describe vmi` shows
//! its Synchronized=False condition and the controller's FailedCreate Event; a NAD whose
//! delegate plugin is not installed is named at the network-status stage from the kubelet's
//! FailedCreatePodSandBox Event. One bring-up.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const BROKEN_VM: &str = r#"apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: vm-broken
  namespace: default
spec:
  running: true
  template:
    spec:
      domain:
        devices:
          interfaces:
            - name: default
              masquerade: {}
            - name: data
              bridge: {}
        resources:
          requests:
            memory: 256Mi
      networks:
        - name: default
          pod: {}
        - name: data
          multus:
            networkName: nope
"#;

/// Poll `probe` until it gives a value, for at most `seconds`.
fn wait<T>(what: &str, seconds: u64, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        match probe() {
            Ok(v) => return v,
            Err(last) => assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last:\n{last}"
            ),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn explain(state: &Path, vmi: &str) -> (Option<i32>, serde_json::Value, String) {
    let out = weft(state, &["explain", "vmi", vmi, "-o", "json"]);
    let value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (out.status.code(), value, text(&out))
}

fn stages(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| i["stages"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn run(state: &Path) {
    let up = weft(state, &["up", "--timeout", "120"]);
    assert!(up.status.success(), "{}", text(&up));

    // The example VM: every stage of both NICs passes once the guest has leased them.
    // The JSON and the text report are read in one pass: the guest-agent stages follow the
    // guest agent's session, which the two reads must both see up.
    let (healthy, printed) = wait("every stage of vm1 to pass", 180, || {
        let (code, report, out) = explain(state, "vm1");
        let all = stages(&report);
        if !(code == Some(0) && all.len() == 16 && all.iter().all(|s| s["ok"] == true)) {
            return Err(out);
        }
        let text_out = weft(state, &["explain", "vmi", "vm1"]);
        let printed = String::from_utf8_lossy(&text_out.stdout).into_owned();
        (text_out.status.success() && printed.matches('✓').count() == 16)
            .then_some((report, printed))
            .ok_or_else(|| text(&text_out))
    });
    let names: Vec<&str> = healthy["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "data"]);
    assert!(
        printed.contains("k6t-eth0") && printed.contains("nft table nat"),
        "{printed}"
    );

    // A VM whose secondary names a missing NAD.
    apply(state, "vm-broken.yaml", BROKEN_VM);
    let broken = wait("vm-broken's explain to fail on the NAD", 60, || {
        let (code, report, out) = explain(state, "vm-broken");
        let spec = &report["interfaces"][1]["stages"][0];
        (code == Some(1) && spec["ok"] == false)
            .then_some(report.clone())
            .ok_or(out)
    });
    let spec = &broken["interfaces"][1]["stages"][0];
    assert_eq!(spec["stage"], "spec");
    assert!(
        spec["reason"].as_str().unwrap().contains("default/nope"),
        "{broken}"
    );
    assert!(
        spec["fix"]
            .as_str()
            .unwrap()
            .contains("create NetworkAttachmentDefinition default/nope"),
        "{broken}"
    );
    assert_eq!(
        broken["interfaces"][1]["stages"][1]["outcome"], "not-reached",
        "{broken}"
    );

    wait(
        "vm-broken's Synchronized=False and FailedCreate Event",
        60,
        || {
            let out = weft(state, &["describe", "vmi", "vm-broken"]);
            let printed = String::from_utf8_lossy(&out.stdout).into_owned();
            let events = printed.split("\nEvents:").nth(1).unwrap_or_default().to_string();
            // The condition and the Event are two writes: wait until both are recorded.
            let conditions = printed.split("\nConditions:").nth(1).unwrap_or_default();
            let conditions = conditions.split("\nEvents:").next().unwrap_or_default();
            let condition = conditions
                .lines()
                .any(|l| l.contains("Synchronized") && l.contains("False"));
            (out.status.success()
                && condition
                && events.contains("FailedCreate")
                && events.contains("default/nope"))
            .then_some(printed)
            .ok_or_else(|| text(&out))
        },
    );

    // A NAD whose delegate plugin is not installed: the local kubelet's FailedCreatePodSandBox
    // Event carries the CNI error, explain names the plugin.
    apply(
        state,
        "vm-plug.yaml",
        &format!(
            "{BAD_PLUGIN_NAD}---\n{}",
            BROKEN_VM
                .replace("vm-broken", "vm-plug")
                .replace("networkName: nope", "networkName: badplug")
        ),
    );
    let plug = wait("vm-plug's explain to name the missing plugin", 90, || {
        let (code, report, out) = explain(state, "vm-plug");
        let status = &report["interfaces"][1]["stages"][2];
        // Until the node agent's CNI ADD has failed, the stage fails for want of an entry.
        let named = status["reason"].as_str().is_some_and(|r| r.contains("bridgex"));
        (code == Some(1) && status["ok"] == false && named)
            .then_some(report.clone())
            .ok_or(out)
    });
    let status = &plug["interfaces"][1]["stages"][2];
    assert_eq!(status["stage"], "network-status");
    assert_eq!(
        status["reason"], "delegate plugin `bridgex` is not installed in the CNI bin dir",
        "{plug}"
    );
    assert_eq!(plug["interfaces"][1]["stages"][0]["ok"], true, "{plug}");
    // The kubelet role's Event is on the pod, with the CNI error text.
    wait(
        "vm-plug's pod to show its FailedCreatePodSandBox Event",
        60,
        || {
            let (_, report, out) = explain(state, "vm-plug");
            let pod = report["pod"].as_str().ok_or(out)?.to_string();
            let described = weft(state, &["describe", "pod", &pod]);
            let printed = String::from_utf8_lossy(&described.stdout).into_owned();
            let events = printed.split("\nEvents:").nth(1).unwrap_or_default();
            (events.contains("FailedCreatePodSandBox")
                && events.contains("bridgex")
                && events.contains("weft-kubelet"))
            .then_some(())
            .ok_or_else(|| text(&described))
        },
    );
}

const BAD_PLUGIN_NAD: &str = r#"apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: badplug
  namespace: default
spec:
  config: '{"cniVersion":"1.0.0","name":"badplug","type":"bridgex","ipam":{"type":"weft-ipam","range":"192.168.150.0/24"}}'
"#;

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn exclusive_explain_and_describe_on_the_local_cluster() {
    if !root_or_skip("exclusive_explain_and_describe_on_the_local_cluster") {
        return;
    }
    then_down(run);
}
