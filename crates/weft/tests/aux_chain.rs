//! The auxiliary CNI chain (`auxiliaryCNIChainName`, docs/upstream/multus.md §3.1 step 7) through
//! the real shim and agent: `passthru` (weft's multi-call name) heads a chain whose plugins come
//! from `<dir(clusterNetwork)>/<chain>/*.conf`; the chain runs after the pod's networks as `net<N>`
//! and is torn down on DEL.

mod common;

use common::*;
use serde_json::{Value, json};

/// A chained plugin recording each call's stdin and `CNI_IFNAME`, passing `prevResult` on.
const CHAINED_PLUGIN: &str = r#"#!/bin/sh
dir="$(dirname "$0")/../calls"
mkdir -p "$dir"
input="$(cat)"
printf '%s' "$input" > "$dir/$CNI_COMMAND.json"
printf '%s' "$CNI_IFNAME" > "$dir/$CNI_COMMAND.ifname"
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0"]}' ;;
ADD) printf '%s' "$input" | jq -c '.prevResult' ;;
esac
exit 0
"#;

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn shim_agent_auxiliary_chain_runs_after_the_pod_networks_and_is_torn_down() {
    if !root_or_skip("shim_agent_auxiliary_chain_runs_after_the_pod_networks_and_is_torn_down") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let (bin, conf_dir) = node_files(state, "10.252.0.0/24");
    install_script_plugin(&bin, "chainrec", CHAINED_PLUGIN);
    let calls = state.join("calls");
    std::fs::create_dir_all(conf_dir.join("vendor-chain")).unwrap();
    std::fs::write(
        conf_dir.join("vendor-chain/10-rec.conf"),
        r#"{"type":"chainrec","marker":"kept"}"#,
    )
    .unwrap();
    let manifests = r#"---
apiVersion: v1
kind: Pod
metadata: {name: aux, namespace: default}
spec: {nodeName: n1}
"#;
    apply(state, "objects.yaml", manifests);

    let node = Netns::new("aux-node");
    let _agent = start_agent(&node, state, &conf_dir, &bin, &[]);
    let log = || std::fs::read_to_string(state.join("agent.log")).unwrap_or_default();
    let conf = shim_config(state, &conf_dir, json!({"auxiliaryCNIChainName": "vendor-chain"}));
    let pod = Netns::new("aux-pod");

    let add = run_shim(&bin, &conf, "ADD", &pod, "default", "aux");
    assert!(
        add.status.success(),
        "ADD failed: {}\nagent log:\n{}",
        text(&add),
        log()
    );
    let result: Value = serde_json::from_slice(&add.stdout).unwrap();
    assert!(
        result["ips"][0]["address"]
            .as_str()
            .unwrap()
            .starts_with("10.252.0."),
        "the runtime gets the cluster network's result: {result}"
    );
    let seen: Value = serde_json::from_slice(&std::fs::read(calls.join("ADD.json")).unwrap()).unwrap();
    assert_eq!(seen["name"], "vendor-chain", "{seen}");
    assert_eq!(seen["marker"], "kept", "{seen}");
    assert_eq!(
        seen["prevResult"]["cniVersion"], "1.0.0",
        "passthru's empty result: {seen}"
    );
    assert_eq!(std::fs::read_to_string(calls.join("ADD.ifname")).unwrap(), "net1");

    let del = run_shim(&bin, &conf, "DEL", &pod, "default", "aux");
    assert!(del.status.success(), "DEL failed: {}\n{}", text(&del), log());
    assert_eq!(std::fs::read_to_string(calls.join("DEL.ifname")).unwrap(), "net1");
}
