//! What the tests that run a real container runtime against weft share (podman_runtime.rs,
//! containerd_cri.rs): the prerequisites check, the node's networks and NADs, the agent in the
//! node namespace, and what they read back (bridge ports, addresses, mounts).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{KillOnDrop, Netns, agent_command, text, weft, weft_bin};

/// Whether the test may run: root and every tool in `tools` on PATH; otherwise says why it
/// skips (and panics under `WEFT_REQUIRE_ROOT_TESTS=1`, as CI runs, where they must be there).
pub fn runtime_prerequisites_or_skip(test: &str, tools: &[&str]) -> bool {
    if !weft_testing::root_or_skip(test) {
        return false;
    }
    for tool in tools {
        if which(tool).is_none() {
            return weft_testing::skip(test, &format!("`{tool}` is not installed"));
        }
    }
    true
}

/// The path of `tool` on PATH.
pub fn which(tool: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !path.is_empty()).then(|| PathBuf::from(path))
}

/// Poll `ready` every 50 ms until it holds or `deadline` passes; whether it held.
pub fn wait_for(deadline: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + deadline;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The weft-cni conflist a runtime loads, named `name`, written to `<dir>/<file>`: weft's shim
/// with the cluster network of [`super::node_files`] in `agent_conf` and the agent in `state`.
pub fn write_meta_conflist(dir: &Path, file: &str, name: &str, state: &Path, agent_conf: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let meta = serde_json::json!({
        "cniVersion": "1.0.0", "name": name,
        "plugins": [{"type": "weft-cni", "clusterNetwork": agent_conf.join("10-cluster.conflist"),
                     "daemonSocketDir": state}]
    });
    std::fs::write(dir.join(file), meta.to_string()).unwrap();
}

/// The secondary networks of a runtime test: NAD `blue` (bridge `blue_bridge` + weft-ipam on
/// `blue_range`) and NAD `green` (bridge `green_bridge` + host-local on `green_subnet`, leases
/// under `green_dir`).
pub struct BlueGreen<'a> {
    /// Bridge of `blue` on the node.
    pub blue_bridge: &'a str,
    /// weft-ipam range of `blue`.
    pub blue_range: &'a str,
    /// Bridge of `green` on the node.
    pub green_bridge: &'a str,
    /// host-local subnet of `green`.
    pub green_subnet: &'a str,
    /// host-local's data dir for `green`.
    pub green_dir: &'a Path,
}

impl BlueGreen<'_> {
    /// Apply the two NADs, the Pod `pod` (node `n1`) whose networks annotation is `networks`,
    /// and `extra` YAML documents to the embedded store of `state` (made by
    /// [`super::node_files`]).
    pub fn apply(&self, state: &Path, pod: &str, networks: &str, extra: &str) {
        let manifests = format!(
            r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {{name: blue, namespace: default}}
spec:
  config: '{{"cniVersion":"1.0.0","name":"blue","type":"bridge","bridge":"{blue_bridge}","ipam":{{"type":"weft-ipam","range":"{blue_range}","stateDir":"{state}"}}}}'
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {{name: green, namespace: default}}
spec:
  config: '{{"cniVersion":"1.0.0","name":"green","plugins":[{{"type":"bridge","bridge":"{green_bridge}","ipam":{{"type":"host-local","ranges":[[{{"subnet":"{green_subnet}"}}]],"dataDir":"{green}"}}}}]}}'
---
apiVersion: v1
kind: Pod
metadata:
  name: {pod}
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/networks: '{networks}'
spec: {{nodeName: n1}}
{extra}"#,
            blue_bridge = self.blue_bridge,
            blue_range = self.blue_range,
            green_bridge = self.green_bridge,
            green_subnet = self.green_subnet,
            state = state.display(),
            green = self.green_dir.display(),
        );
        let manifest_file = state.join("objects.yaml");
        std::fs::write(&manifest_file, manifests).unwrap();
        let applied = weft(state, &["apply", "-f", manifest_file.to_str().unwrap()]);
        assert!(applied.status.success(), "{}", text(&applied));
    }
    /// Panics (saying `when`, with `log`) unless every address of the pod is released: no
    /// weft-ipam reservation in `blue`'s range, no host-local lease file of `green`'s subnet or
    /// of the cluster network on `cluster_subnet` ([`super::node_files`]'s leases).
    pub fn assert_released(&self, state: &Path, cluster_subnet: &str, when: &str, log: &str) {
        let held = weft(state, &["ipam", "list"]);
        assert!(held.status.success(), "{}", text(&held));
        let held = String::from_utf8_lossy(&held.stdout).into_owned();
        assert!(
            !held.contains(subnet_prefix(self.blue_range)),
            "{when}: weft-ipam reservation left:\n{held}\nagent log:\n{log}"
        );
        for (dir, subnet) in [
            (self.green_dir.join("green"), self.green_subnet),
            (state.join("host-local/cluster"), cluster_subnet),
        ] {
            let left: Vec<String> = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(subnet_prefix(subnet)))
                .collect();
            assert!(
                left.is_empty(),
                "{when}: host-local address left in {}: {left:?}\nagent log:\n{log}",
                dir.display()
            );
        }
    }
}

/// `"192.168.77."` of `"192.168.77.0/24"`: what the addresses of a /24 start with.
fn subnet_prefix(subnet: &str) -> &str {
    subnet.rfind('.').map_or(subnet, |dot| &subnet[..=dot])
}

/// `weft agent --node n1` in `node`'s network namespace through `nsenter --net`, so it shares
/// the caller's mount namespace (a runtime's netns bind mounts made later are visible to it;
/// `ip netns exec` would give it a mount namespace of its own). Socket `<state>/weft.sock`, log
/// `<state>/agent.log`, delegates from `bin` then /usr/lib/cni. Returns once the socket exists,
/// panicking when it does not within `deadline`.
pub fn start_node_agent(
    node: &Netns,
    state: &Path,
    conf_dir: &Path,
    bin: &Path,
    deadline: Duration,
) -> KillOnDrop {
    let socket = state.join("weft.sock");
    let mut nsenter = Command::new("nsenter");
    nsenter
        .arg(format!("--net={}", node.path().display()))
        .arg(weft_bin());
    let agent = agent_command(nsenter, state, conf_dir, bin).spawn().unwrap();
    let agent = KillOnDrop(agent);
    assert!(
        wait_for(deadline, || socket.exists()),
        "agent socket never appeared\n{}",
        std::fs::read_to_string(state.join("agent.log")).unwrap_or_default()
    );
    agent
}

/// Names of the links enslaved to `bridge` in `netns` (none when the bridge is gone).
pub fn bridge_ports(netns: &Netns, bridge: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["-n", &netns.name, "-j", "link", "show", "master", bridge])
        .output()
        .expect("ip link show master");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    json.as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str().map(String::from))
        .collect()
}

/// `(ifname, address/prefix)` of every IPv4 address in `ip -o addr` output.
pub fn ipv4_addresses(ip_o_addr: &str) -> Vec<(String, String)> {
    ip_o_addr
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let inet = fields.iter().position(|f| *f == "inet")?;
            Some((fields.get(1)?.to_string(), fields.get(inet + 1)?.to_string()))
        })
        .collect()
}

/// The address of `ifname` in [`ipv4_addresses`]'s output, without its prefix length.
pub fn address_of(addresses: &[(String, String)], ifname: &str) -> Option<String> {
    addresses
        .iter()
        .find(|(name, _)| name == ifname)
        .map(|(_, a)| a.split('/').next().unwrap_or(a).to_string())
}

/// Mount points under `dir`, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut ours: Vec<String> = mounts
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|target| target.starts_with(&prefix))
        .map(String::from)
        .collect();
    ours.sort_unstable_by(|a, b| b.cmp(a));
    ours
}

/// Lazily unmount everything mounted under `dir`, deepest first.
pub fn unmount_under(dir: &Path) {
    for target in mounts_under(dir) {
        let _ = Command::new("umount").args(["-l", &target]).status();
    }
}

/// Copy busybox (static) into `<root>/bin` and link the applets `applets` to it (all of them
/// when `None`).
pub fn install_busybox(root: &Path, applets: Option<&[&str]>) {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let busybox = which("busybox").expect("busybox on PATH");
    std::fs::copy(&busybox, bin.join("busybox")).unwrap();
    let all;
    let applets: Vec<&str> = match applets {
        Some(some) => some.to_vec(),
        None => {
            let out = Command::new(&busybox).arg("--list").output().unwrap();
            all = String::from_utf8_lossy(&out.stdout).into_owned();
            all.lines().collect()
        }
    };
    for applet in applets {
        let link = bin.join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", link).unwrap();
        }
    }
}
