//! Device IDs and device-info through the real shim and agent (docs/upstream/multus.md §1.6,
//! §3.3.4): a NAD with `k8s.v1.cni.cncf.io/resourceName`, the pod's devices in a fake kubelet
//! checkpoint, a device plugin's device-info file, and a script delegate that records its stdin and
//! writes the per-attachment device-info file.

mod common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};

/// A delegate that records each call's stdin as `<dir>/<COMMAND>.json`; on ADD it records
/// what the device-info file held before it ran, writes its own device-info there and returns
/// one sandbox interface.
const RECORDING_PLUGIN: &str = r#"#!/bin/sh
dir="$(dirname "$0")/../calls"
mkdir -p "$dir"
input="$(cat)"
printf '%s' "$input" > "$dir/$CNI_COMMAND.json"
case "$CNI_COMMAND" in
VERSION)
  echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0"]}' ;;
ADD)
  file="$(printf '%s' "$input" | jq -r '.runtimeConfig.CNIDeviceInfoFile // empty')"
  if [ -n "$file" ]; then
    cat "$file" > "$dir/devinfo-before-add.json" 2>/dev/null
    echo '{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:03:00.2","rdma-device":"mlx5_1"}}' > "$file"
  fi
  printf '{"cniVersion":"1.0.0","interfaces":[{"name":"%s","mac":"02:00:00:00:00:02","sandbox":"%s"}],"ips":[{"address":"192.168.99.2/24","interface":0}]}\n' "$CNI_IFNAME" "$CNI_NETNS" ;;
esac
exit 0
"#;

fn pod_uid(state: &Path, name: &str) -> String {
    let out = weft(state, &["get", "pod", name, "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let pod: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pod = if pod.is_array() { pod[0].clone() } else { pod };
    pod["metadata"]["uid"].as_str().expect("pod uid").to_owned()
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn shim_agent_resource_device_reaches_the_delegate_and_device_info_the_status() {
    if !root_or_skip("shim_agent_resource_device_reaches_the_delegate_and_device_info_the_status") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let (bin, conf_dir) = node_files(state, "10.251.0.0/24");
    install_script_plugin(&bin, "devrec", RECORDING_PLUGIN);
    let calls = state.join("calls");
    let manifests = r#"---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: sriov
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/resourceName: intel.com/sriov
spec:
  config: '{"cniVersion":"1.0.0","type":"devrec","capabilities":{"deviceID":true,"CNIDeviceInfoFile":true}}'
---
apiVersion: v1
kind: Pod
metadata:
  name: dev
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/networks: sriov
spec: {nodeName: n1}
"#;
    apply(state, "objects.yaml", manifests);

    // The kubelet's checkpoint: this pod holds two devices of the resource (NUMA-keyed form),
    // another pod one more.
    let uid = pod_uid(state, "dev");
    let checkpoint = json!({
        "Data": {"PodDeviceEntries": [
            {"PodUID": uid, "ContainerName": "c", "ResourceName": "intel.com/sriov",
             "DeviceIDs": {"0": ["0000:03:00.3", "0000:03:00.2"]}, "AllocResp": "Cg=="},
            {"PodUID": "someone-else", "ContainerName": "c", "ResourceName": "intel.com/sriov",
             "DeviceIDs": {"0": ["0000:03:00.1"]}}
        ], "RegisteredDevices": {}},
        "Checksum": 0
    });
    let checkpoint_file = state.join("kubelet_internal_checkpoint");
    std::fs::write(&checkpoint_file, checkpoint.to_string()).unwrap();
    // The device plugin's device-info file for the device the pod gets first.
    let devinfo = state.join("devinfo");
    let dp_file = devinfo.join("dp/intel.com-sriov-0000:03:00.2-device.json");
    std::fs::create_dir_all(dp_file.parent().unwrap()).unwrap();
    let dp_info = json!({"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:03:00.2"}});
    std::fs::write(&dp_file, dp_info.to_string()).unwrap();

    let node = Netns::new("dev-node");
    let _agent = start_agent(&node, state, &conf_dir, &bin, &[]);
    let log = || std::fs::read_to_string(state.join("agent.log")).unwrap_or_default();
    let conf = shim_config(
        state,
        &conf_dir,
        json!({"deviceCheckpointFile": checkpoint_file, "deviceInfoDir": devinfo}),
    );
    let pod = Netns::new("dev-pod");

    let add = run_shim(&bin, &conf, "ADD", &pod, "default", "dev");
    assert!(
        add.status.success(),
        "ADD failed: {}\nagent log:\n{}",
        text(&add),
        log()
    );

    let seen: Value = serde_json::from_slice(&std::fs::read(calls.join("ADD.json")).unwrap()).unwrap();
    let cni_file = devinfo.join(format!("cni/default-sriov-{CONTAINER_ID}_net1"));
    assert_eq!(
        seen["deviceID"], "0000:03:00.2",
        "lowest of the pod's devices: {seen}"
    );
    assert_eq!(seen["pciBusID"], "0000:03:00.2", "{seen}");
    assert_eq!(seen["runtimeConfig"]["deviceID"], "0000:03:00.2", "{seen}");
    assert_eq!(
        seen["runtimeConfig"]["CNIDeviceInfoFile"],
        cni_file.display().to_string(),
        "{seen}"
    );
    let before: Value =
        serde_json::from_slice(&std::fs::read(calls.join("devinfo-before-add.json")).unwrap()).unwrap();
    assert_eq!(before, dp_info, "the device plugin's file was copied before ADD");

    let status = weft(state, &["net", "status", "dev"]);
    let status: Value = serde_json::from_slice(&status.stdout).expect("network-status");
    assert_eq!(status[1]["name"], "default/sriov", "{status}");
    assert_eq!(status[1]["interface"], "net1", "{status}");
    assert_eq!(
        status[1]["device-info"],
        json!({"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:03:00.2","rdma-device":"mlx5_1"}}),
        "the file as the delegate left it: {status}"
    );
    assert!(status[0].get("device-info").is_none(), "{status}");

    let del = run_shim(&bin, &conf, "DEL", &pod, "default", "dev");
    assert!(del.status.success(), "DEL failed: {}\n{}", text(&del), log());
    let del_seen: Value = serde_json::from_slice(&std::fs::read(calls.join("DEL.json")).unwrap()).unwrap();
    assert_eq!(
        del_seen["deviceID"], "0000:03:00.2",
        "DEL from the cache: {del_seen}"
    );
    assert!(
        !cni_file.exists(),
        "DEL removes the attachment's device-info file"
    );
    assert!(dp_file.exists(), "the device plugin's file stays");
}
