//! The thick plugin path with the real reference plugins: a runtime execs `weft-cni` → the
//! agent (in a node namespace) → bridge/host-local for eth0 and a NAD's bridge for a secondary
//! network; network-status lands on the pod; DEL removes everything, and DEL again succeeds.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

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
    fn exec(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
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

fn links(ns: &Netns) -> Vec<String> {
    let json: serde_json::Value = serde_json::from_str(&ns.exec(&["ip", "-j", "link"])).unwrap_or_default();
    json.as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|l| l["ifname"].as_str().map(String::from))
        .collect()
}

fn shim(bin: &Path, conf: &serde_json::Value, command: &str, pod_ns: &Netns) -> std::process::Output {
    let mut child = Command::new(bin.join("weft-cni"))
        .env_clear()
        .env("CNI_COMMAND", command)
        .env(
            "CNI_CONTAINERID",
            "c0ffee0000000000000000000000000000000000000000000000000000000001",
        )
        .env("CNI_NETNS", format!("/run/netns/{}", pod_ns.0))
        .env("CNI_IFNAME", "eth0")
        .env(
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=c0ffee",
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
fn shim_agent_reference_plugins_add_del_del() {
    if !root_or_skip("shim_agent_reference_plugins_add_del_del") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let bin: PathBuf = state.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(weft_bin(), bin.join("weft-cni")).unwrap();
    std::os::unix::fs::symlink(weft_bin(), bin.join("weft-ipam")).unwrap();
    let conf_dir = state.join("net.d");
    std::fs::create_dir_all(&conf_dir).unwrap();
    let cluster = serde_json::json!({
        "cniVersion": "1.0.0", "name": "cluster",
        "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.250.0.0/24"}]],
                              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": state.join("host-local")}}]
    });
    std::fs::write(conf_dir.join("10-cluster.conflist"), cluster.to_string()).unwrap();
    let manifests = format!(
        r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {{name: blue, namespace: default}}
spec:
  config: '{{"cniVersion":"1.0.0","type":"bridge","bridge":"br-blue","ipam":{{"type":"weft-ipam","range":"192.168.77.0/24","stateDir":"{state}"}}}}'
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/networks: blue@blue0
spec: {{nodeName: n1}}
"#,
        state = state.display()
    );
    let manifest_file = state.join("objects.yaml");
    std::fs::write(&manifest_file, manifests).unwrap();
    let applied = weft(state, &["apply", "-f", manifest_file.to_str().unwrap()]);
    assert!(applied.status.success(), "{}", text(&applied));

    let node = Netns::new("node");
    let pod = Netns::new("pod");
    let socket = state.join("weft.sock");
    let agent = Agent(
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
    let conf = serde_json::json!({
        "cniVersion": "1.0.0", "name": "weft", "type": "weft-cni",
        "clusterNetwork": conf_dir.join("10-cluster.conflist"),
        "daemonSocketDir": state,
    });
    let log = || std::fs::read_to_string(state.join("agent.log")).unwrap_or_default();

    let add = shim(&bin, &conf, "ADD", &pod);
    assert!(
        add.status.success(),
        "ADD failed: {}\nagent log:\n{}",
        text(&add),
        log()
    );
    let result: serde_json::Value = serde_json::from_slice(&add.stdout).unwrap();
    assert_eq!(result["cniVersion"], "1.0.0");
    assert!(
        result["ips"][0]["address"]
            .as_str()
            .unwrap()
            .starts_with("10.250.0."),
        "{result}"
    );
    let attached = links(&pod);
    assert!(
        attached.contains(&"eth0".to_string()) && attached.contains(&"blue0".to_string()),
        "{attached:?}"
    );
    let status = weft(state, &["net", "status", "web"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("network-status");
    assert_eq!(status[0]["interface"], "eth0");
    assert_eq!(status[0]["default"], true);
    assert_eq!(status[1]["name"], "default/blue");
    assert_eq!(status[1]["interface"], "blue0");
    assert!(
        status[1]["ips"][0].as_str().unwrap().starts_with("192.168.77."),
        "{status}"
    );

    let del = shim(&bin, &conf, "DEL", &pod);
    assert!(del.status.success(), "DEL failed: {}\n{}", text(&del), log());
    assert_eq!(links(&pod), vec!["lo".to_string()], "everything detached");
    let again = shim(&bin, &conf, "DEL", &pod);
    assert!(
        again.status.success(),
        "second DEL must succeed: {}\n{}",
        text(&again),
        log()
    );
    drop(agent);
}
