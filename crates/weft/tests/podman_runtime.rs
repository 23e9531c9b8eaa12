//! A real CNI runtime calls weft: podman 4.3 (CNI backend) starts a container whose network is
//! weft's conflist. The container gets eth0 from the cluster network plus two secondary networks
//! from NADs (bridge + weft-ipam, bridge + host-local), seen from inside the container and in the
//! pod's network-status; `podman rm -f` calls DEL and every secondary link and address goes.
//!
//! Setup (a recipe proven on the dev machines): podman runs under `nsenter --net=` (not
//! `ip netns exec`, which remounts /sys and hides the cgroup fs from runc) in a node namespace
//! the test creates, with its own containers.conf, storage, runc, explicit ulimits and a
//! busybox-static rootfs; the agent runs in the same node namespace.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Whether the prerequisites are here; prints why not (or panics under CI, where they must be).
fn prerequisites_or_skip(test: &str) -> bool {
    let ci = std::env::var_os("CI").is_some();
    if !nix::unistd::Uid::effective().is_root() {
        assert!(!ci, "{test}: CI is set but the test does not run as root");
        return weft_testing::skip(test, "needs root (network namespaces, podman)");
    }
    for tool in ["podman", "runc", "nsenter", "busybox"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            assert!(!ci, "{test}: CI is set but `{tool}` is not installed");
            return weft_testing::skip(test, &format!("`{tool}` is not installed"));
        }
    }
    true
}

/// Names of the links enslaved to `bridge` in `netns` (none when the bridge is gone).
fn bridge_ports(netns: &Netns, bridge: &str) -> Vec<String> {
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

/// The agent process; killed on drop.
struct Agent(Child);
impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Podman confined to the test: its own containers.conf, storage and run dirs under `work`,
/// always run inside the node namespace. Drop removes every container of this storage, unmounts
/// what podman left mounted under `work` and drops podman's libcni result cache of our network.
struct Podman {
    work: PathBuf,
    node_netns: String,
    network: String,
}

impl Podman {
    fn command(&self) -> Command {
        let mut command = Command::new("timeout");
        command
            .arg("120")
            .arg("nsenter")
            .arg(format!("--net={}", self.node_netns))
            .arg("podman")
            .arg("--root")
            .arg(self.work.join("storage"))
            .arg("--runroot")
            .arg(self.work.join("run"))
            .args(["--storage-driver", "vfs", "--runtime", "runc"])
            .env("CONTAINERS_CONF", self.work.join("containers.conf"))
            .stdin(Stdio::null());
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("run podman")
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        if self.work.join("storage").exists() {
            let _ = self
                .command()
                .args(["rm", "-af", "-t0"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let prefix = self.work.display().to_string();
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let mut ours: Vec<&str> = mounts
            .lines()
            .filter_map(|line| line.split(' ').nth(1))
            .filter(|target| target.starts_with(&prefix))
            .collect();
        ours.sort_unstable_by(|a, b| b.cmp(a));
        for target in ours {
            let _ = Command::new("umount").args(["-l", target]).status();
        }
        if let Ok(entries) = std::fs::read_dir("/var/lib/cni/results") {
            let ours = format!("{}-", self.network);
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&ours) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }
}

/// A busybox-static root filesystem for `--rootfs` (no image pull).
fn busybox_rootfs(root: &Path) {
    for dir in ["bin", "etc", "proc", "sys", "dev", "tmp"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    let busybox = Command::new("sh")
        .args(["-c", "command -v busybox"])
        .output()
        .unwrap();
    let busybox = String::from_utf8_lossy(&busybox.stdout).trim().to_string();
    std::fs::copy(&busybox, root.join("bin/busybox")).unwrap();
    let applets = Command::new(&busybox).arg("--list").output().unwrap();
    for applet in String::from_utf8_lossy(&applets.stdout).lines() {
        let link = root.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", link).unwrap();
        }
    }
}

/// `(ifname, address/prefix)` of every IPv4 address in `ip -o addr` output.
fn ipv4_addresses(ip_o_addr: &str) -> Vec<(String, String)> {
    ip_o_addr
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let inet = fields.iter().position(|f| *f == "inet")?;
            Some((fields.get(1)?.to_string(), fields.get(inet + 1)?.to_string()))
        })
        .collect()
}

fn address_of<'a>(addresses: &'a [(String, String)], ifname: &str) -> Option<&'a str> {
    addresses
        .iter()
        .find(|(name, _)| name == ifname)
        .map(|(_, address)| address.as_str())
}

/// One podman "node": its namespace, the agent in it, podman confined to a temp dir, weft's
/// network configured, NADs `blue` (bridge + weft-ipam), `green` (bridge + host-local) and
/// `broken` (a plugin that does not exist) and the Pod object named like the container.
/// Fields drop in order: containers first (their DEL needs the agent), then the agent, the
/// namespace, the temp dir.
struct Fixture {
    podman: Podman,
    _agent: Agent,
    node: Netns,
    state: PathBuf,
    rootfs: PathBuf,
    network: String,
    container: String,
    green_dir: PathBuf,
    agent_log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// `tag` keeps names unique between the tests of this binary (the pid between binaries);
    /// `annotation` is the pod's networks annotation.
    fn new(tag: &str, annotation: &str) -> Self {
        let pid = std::process::id();
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().to_path_buf();
        let network = format!("wt-pm{tag}-{pid}");
        let container = format!("wt-pm{tag}-{pid}");

        // CNI plugin dir podman searches first: weft's plugins, as installed.
        let plugins = state.join("plugins");
        install_plugins(&plugins);

        // The cluster network lives in the agent's conf dir, not in podman's.
        let agent_conf_dir = state.join("agent-net.d");
        std::fs::create_dir_all(&agent_conf_dir).unwrap();
        let cluster_file = agent_conf_dir.join("10-cluster.conflist");
        let cluster = serde_json::json!({
            "cniVersion": "1.0.0", "name": "cluster",
            "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true,
                         "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.250.0.0/24"}]],
                                  "routes": [{"dst": "0.0.0.0/0"}], "dataDir": state.join("host-local")}}]
        });
        std::fs::write(&cluster_file, cluster.to_string()).unwrap();

        // podman's network: weft's meta conflist.
        let podman_conf_dir = state.join("net.d");
        std::fs::create_dir_all(&podman_conf_dir).unwrap();
        let meta = serde_json::json!({
            "cniVersion": "1.0.0", "name": network,
            "plugins": [{"type": "weft-cni", "clusterNetwork": cluster_file, "daemonSocketDir": state}]
        });
        std::fs::write(
            podman_conf_dir.join(format!("{network}.conflist")),
            meta.to_string(),
        )
        .unwrap();
        for dir in ["storage", "run", "tmp"] {
            std::fs::create_dir_all(state.join(dir)).unwrap();
        }
        std::fs::write(
            state.join("containers.conf"),
            format!(
                r#"[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{state}/events.log"
tmp_dir = "{state}/tmp"
[network]
network_backend = "cni"
network_config_dir = "{conf}"
cni_plugin_dirs = ["{plugins}", "/usr/lib/cni"]
default_network = "{network}"
"#,
                state = state.display(),
                conf = podman_conf_dir.display(),
                plugins = plugins.display(),
            ),
        )
        .unwrap();
        let rootfs = state.join("rootfs");
        busybox_rootfs(&rootfs);

        // Three NADs (the last one fails at ADD) and the pod podman will ask for (CNI_ARGS K8S_POD_NAME=<container name>).
        let green_dir = state.join("host-local-green");
        let manifests = format!(
            r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {{name: blue, namespace: default}}
spec:
  config: '{{"cniVersion":"1.0.0","name":"blue","type":"bridge","bridge":"br-blue","ipam":{{"type":"weft-ipam","range":"192.168.77.0/24","stateDir":"{state}"}}}}'
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {{name: green, namespace: default}}
spec:
  config: '{{"cniVersion":"1.0.0","name":"green","plugins":[{{"type":"bridge","bridge":"br-green","ipam":{{"type":"host-local","ranges":[[{{"subnet":"192.168.78.0/24"}}]],"dataDir":"{green}"}}}}]}}'
---
apiVersion: v1
kind: Pod
metadata:
  name: {container}
  namespace: default
  annotations:
        k8s.v1.cni.cncf.io/networks: {annotation}
spec: {{nodeName: n1}}
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {{name: broken, namespace: default}}
spec:
  config: '{{"cniVersion":"1.0.0","name":"broken","type":"weft-no-such-plugin"}}'
"#,
            state = state.display(),
            green = green_dir.display(),
        );
        let manifest_file = state.join("objects.yaml");
        std::fs::write(&manifest_file, manifests).unwrap();
        init_store(&state);
        let applied = weft(&state, &["apply", "-f", manifest_file.to_str().unwrap()]);
        assert!(applied.status.success(), "{}", text(&applied));

        let node = Netns::new(&format!("pmnode{tag}"));
        let socket = state.join("weft.sock");
        let agent_log = state.join("agent.log");
        let agent = Agent(
            node.command(&[weft_bin().to_str().unwrap()])
                .arg("--state-dir")
                .arg(&state)
                .args(["agent", "--node", "n1"])
                .arg("--socket")
                .arg(&socket)
                .arg("--conf-dir")
                .arg(&agent_conf_dir)
                .arg("--cache-dir")
                .arg(state.join("cache"))
                .arg("--cni-bin-dir")
                .arg(&plugins)
                .arg("--cni-bin-dir")
                .arg("/usr/lib/cni")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&agent_log).unwrap())
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(socket.exists(), "agent socket never appeared");
        let podman = Podman {
            work: state.clone(),
            node_netns: node.path().display().to_string(),
            network: network.clone(),
        };
        Self {
            podman,
            _agent: agent,
            node,
            state,
            rootfs,
            network,
            container,
            green_dir,
            agent_log,
            _dir: dir,
        }
    }

    fn agent_log(&self) -> String {
        std::fs::read_to_string(&self.agent_log).unwrap_or_default()
    }

    fn podman_run(&self) -> Output {
        self.podman
            .command()
            .args(["run", "-d", "--name", &self.container, "--network", &self.network])
            .args(["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"])
            .arg("--rootfs")
            .arg(&self.rootfs)
            .args(["/bin/sleep", "600"])
            .output()
            .unwrap()
    }

    /// Nothing attached, nothing reserved: no port on any node bridge, no weft-ipam
    /// reservation, no host-local address file.
    fn assert_nothing_held(&self, when: &str) {
        for bridge in ["br-blue", "br-green", "cni0"] {
            assert_eq!(
                bridge_ports(&self.node, bridge),
                Vec::<String>::new(),
                "{when}: veth left on {bridge}\nagent log:\n{}",
                self.agent_log()
            );
        }
        let held = weft(&self.state, &["ipam", "list"]);
        assert!(held.status.success(), "{}", text(&held));
        let held = String::from_utf8_lossy(&held.stdout).into_owned();
        assert!(
            !held.contains("192.168.77."),
            "{when}: weft-ipam reservation left:\n{held}\nagent log:\n{}",
            self.agent_log()
        );
        for (dir, subnet) in [
            (self.green_dir.join("green"), "192.168.78."),
            (self.state.join("host-local/cluster"), "10.250.0."),
        ] {
            let files: Vec<String> = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(subnet))
                .collect();
            assert!(
                files.is_empty(),
                "{when}: host-local address left in {}: {files:?}",
                dir.display()
            );
        }
    }
}

fn ip_of(cidr: &str) -> &str {
    cidr.split('/').next().unwrap_or(cidr)
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn podman_container_gets_cluster_and_two_nad_networks_and_loses_them_on_rm() {
    if !prerequisites_or_skip("podman_container_gets_cluster_and_two_nad_networks_and_loses_them_on_rm") {
        return;
    }
    let f = Fixture::new("a", "blue@blue0, green@green0");
    let started = f.podman_run();
    assert!(
        started.status.success(),
        "podman run: {}\nagent log:\n{}",
        text(&started),
        f.agent_log()
    );

    // From inside the container.
    let inside = f.podman.run(&["exec", &f.container, "/bin/ip", "-o", "addr"]);
    assert!(inside.status.success(), "podman exec: {}", text(&inside));
    let addresses = ipv4_addresses(&String::from_utf8_lossy(&inside.stdout));
    let address = |ifname: &str| {
        address_of(&addresses, ifname)
            .unwrap_or_else(|| panic!("no {ifname} address: {addresses:?}"))
            .to_string()
    };
    let (eth0, blue0, green0) = (address("eth0"), address("blue0"), address("green0"));
    assert!(eth0.starts_with("10.250.0."), "{addresses:?}");
    assert!(blue0.starts_with("192.168.77."), "{addresses:?}");
    assert!(green0.starts_with("192.168.78."), "{addresses:?}");
    let ping = f
        .podman
        .run(&["exec", &f.container, "/bin/ping", "-c1", "-W2", "10.250.0.1"]);
    assert!(ping.status.success(), "eth0 -> cluster gateway: {}", text(&ping));

    // What podman recorded is the cluster network's result only.
    let inspect = f.podman.run(&[
        "inspect",
        "--format",
        "{{json .NetworkSettings.Networks}}",
        &f.container,
    ]);
    assert!(inspect.status.success(), "{}", text(&inspect));
    let networks: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap_or_default();
    assert_eq!(
        networks[&f.network]["IPAddress"].as_str(),
        Some(ip_of(&eth0)),
        "{networks}"
    );

    // The pod's network-status in the store.
    let status = weft(&f.state, &["net", "status", &f.container]);
    assert!(status.status.success(), "{}", text(&status));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("network-status");
    assert_eq!(status[0]["interface"], "eth0", "{status}");
    assert_eq!(status[0]["default"], true, "{status}");
    assert_eq!(status[0]["ips"][0].as_str(), Some(ip_of(&eth0)), "{status}");
    assert_eq!(status[1]["name"], "default/blue", "{status}");
    assert_eq!(status[1]["interface"], "blue0", "{status}");
    assert_eq!(status[1]["ips"][0].as_str(), Some(ip_of(&blue0)), "{status}");
    assert_eq!(status[2]["name"], "default/green", "{status}");
    assert_eq!(status[2]["interface"], "green0", "{status}");
    assert_eq!(status[2]["ips"][0].as_str(), Some(ip_of(&green0)), "{status}");

    let held = weft(&f.state, &["ipam", "list", "--network", "blue"]);
    let held = String::from_utf8_lossy(&held.stdout).into_owned();
    assert!(held.contains(ip_of(&blue0)), "{held}");
    assert!(f.green_dir.join("green").join(ip_of(&green0)).exists());
    for bridge in ["br-blue", "br-green", "cni0"] {
        assert_eq!(bridge_ports(&f.node, bridge).len(), 1, "one veth on {bridge}");
    }

    // Removal: podman calls DEL; every attachment and reservation goes.
    let removed = f.podman.run(&["rm", "-f", "-t0", &f.container]);
    assert!(
        removed.status.success(),
        "podman rm: {}\nagent log:\n{}",
        text(&removed),
        f.agent_log()
    );
    f.assert_nothing_held("after podman rm");
    let listed = f.podman.run(&["ps", "-aq"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).trim().is_empty(),
        "{}",
        text(&listed)
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn podman_run_fails_and_leaks_nothing_when_a_later_network_fails() {
    if !prerequisites_or_skip("podman_run_fails_and_leaks_nothing_when_a_later_network_fails") {
        return;
    }
    // eth0, blue0 and green0 attach, then `broken` fails: weft rolls back every earlier one.
    let f = Fixture::new("b", "blue@blue0, green@green0, broken@broken0");
    let started = f.podman_run();
    assert!(
        !started.status.success(),
        "podman run must fail: {}\nagent log:\n{}",
        text(&started),
        f.agent_log()
    );
    let stderr = String::from_utf8_lossy(&started.stderr);
    assert!(
        stderr.contains("broken"),
        "the error names the failing network: {stderr}"
    );
    f.assert_nothing_held("after the failed podman run");
    let removed = f.podman.run(&["rm", "-af", "-t0"]);
    assert!(removed.status.success(), "podman rm: {}", text(&removed));
    f.assert_nothing_held("after podman rm");
}
