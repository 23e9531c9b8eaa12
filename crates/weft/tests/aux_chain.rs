//! The auxiliary CNI chain (`auxiliaryCNIChainName`, multus.md §3.1 step 7) through the real
//! shim and agent: `passthru` (weft's multi-call name) heads a chain whose plugins come from
//! `<dir(clusterNetwork)>/<chain>/*.conf`; the chain runs after the pod's networks as `net<N>`
//! and is torn down on DEL.

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Self {
        let name = format!("wt-{tag}-{}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        assert!(
            Command::new("ip")
                .args(["netns", "add", &name])
                .status()
                .unwrap()
                .success()
        );
        Self(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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

fn shim(bin: &Path, conf: &Value, command: &str, pod_ns: &Netns) -> std::process::Output {
    let mut child = Command::new(bin.join("weft-cni"))
        .env_clear()
        .env("CNI_COMMAND", command)
        .env(
            "CNI_CONTAINERID",
            "c0ffee0000000000000000000000000000000000000000000000000000000003",
        )
        .env("CNI_NETNS", format!("/run/netns/{}", pod_ns.0))
        .env("CNI_IFNAME", "eth0")
        .env(
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=aux;K8S_POD_INFRA_CONTAINER_ID=c0ffee",
        )
        .env("CNI_PATH", format!("{}:/usr/lib/cni", bin.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.to_string().as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn shim_agent_auxiliary_chain_runs_after_the_pod_networks_and_is_torn_down() {
    if !root_or_skip("shim_agent_auxiliary_chain_runs_after_the_pod_networks_and_is_torn_down") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let bin = state.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(weft_bin(), bin.join("weft-cni")).unwrap();
    std::os::unix::fs::symlink(weft_bin(), bin.join("passthru")).unwrap();
    let plugin = bin.join("chainrec");
    std::fs::write(&plugin, CHAINED_PLUGIN).unwrap();
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let calls = state.join("calls");

    let conf_dir = state.join("net.d");
    std::fs::create_dir_all(conf_dir.join("vendor-chain")).unwrap();
    let cluster = json!({
        "cniVersion": "1.0.0", "name": "cluster",
        "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.252.0.0/24"}]],
                              "dataDir": state.join("host-local")}}]
    });
    std::fs::write(conf_dir.join("10-cluster.conflist"), cluster.to_string()).unwrap();
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
    let file = state.join("objects.yaml");
    std::fs::write(&file, manifests).unwrap();
    let applied = weft(state, &["apply", "-f", file.to_str().unwrap()]);
    assert!(applied.status.success(), "{}", text(&applied));

    let node = Netns::new("aux-node");
    let socket = state.join("weft.sock");
    let _agent = Agent(
        Command::new("ip")
            .args(["netns", "exec", &node.0])
            .arg(weft_bin())
            .arg("--state-dir")
            .arg(state)
            .args(["agent", "--node", "n1"])
            .arg("--socket")
            .arg(&socket)
            .arg("--conf-dir")
            .arg(&conf_dir)
            .arg("--cache-dir")
            .arg(state.join("cache"))
            .arg("--cni-bin-dir")
            .arg(&bin)
            .arg("--cni-bin-dir")
            .arg("/usr/lib/cni")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(state.join("agent.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = || std::fs::read_to_string(state.join("agent.log")).unwrap_or_default();
    let conf = json!({
        "cniVersion": "1.0.0", "name": "weft", "type": "weft-cni",
        "clusterNetwork": conf_dir.join("10-cluster.conflist"),
        "daemonSocketDir": state,
        "auxiliaryCNIChainName": "vendor-chain",
    });
    let pod = Netns::new("aux-pod");

    let add = shim(&bin, &conf, "ADD", &pod);
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

    let del = shim(&bin, &conf, "DEL", &pod);
    assert!(del.status.success(), "DEL failed: {}\n{}", text(&del), log());
    assert_eq!(std::fs::read_to_string(calls.join("DEL.ifname")).unwrap(), "net1");
}
