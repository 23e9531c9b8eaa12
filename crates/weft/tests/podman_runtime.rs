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

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::runtime::*;
use common::*;

/// What the tests run besides weft.
const TOOLS: &[&str] = &["podman", "runc", "nsenter", "busybox"];

/// The cluster network's subnet.
const CLUSTER_SUBNET: &str = "10.250.0.0/24";

/// The test's NADs `blue` and `green`, host-local leases of `green` under `green_dir`.
fn nads(green_dir: &std::path::Path) -> BlueGreen<'_> {
    BlueGreen {
        blue_bridge: "br-blue",
        blue_range: "192.168.77.0/24",
        green_bridge: "br-green",
        green_subnet: "192.168.78.0/24",
        green_dir,
    }
}

/// How long the agent may take to open its socket.
const AGENT_DEADLINE: Duration = Duration::from_secs(20);

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
        unmount_under(&self.work);
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

/// One podman "node": its namespace, the agent in it, podman confined to a temp dir, weft's
/// network configured, NADs `blue` (bridge + weft-ipam), `green` (bridge + host-local) and
/// `broken` (a plugin that does not exist) and the Pod object named like the container.
/// Fields drop in order: containers first (their DEL needs the agent), then the agent, the
/// namespace, the temp dir.
struct Fixture {
    podman: Podman,
    _agent: KillOnDrop,
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

        // CNI plugin dir podman searches first: weft's plugins, as installed. The cluster
        // network lives in the agent's conf dir, not in podman's.
        let (plugins, agent_conf_dir) = node_files(&state, CLUSTER_SUBNET);
        // podman's network: weft's meta conflist.
        let podman_conf_dir = state.join("podman-net.d");
        write_meta_conflist(
            &podman_conf_dir,
            &format!("{network}.conflist"),
            &network,
            &state,
            &agent_conf_dir,
        );
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
        install_busybox(&rootfs, None);
        for dir in ["etc", "proc", "sys", "dev", "tmp"] {
            std::fs::create_dir_all(rootfs.join(dir)).unwrap();
        }

        // Three NADs (the last one fails at ADD) and the pod podman will ask for (CNI_ARGS
        // K8S_POD_NAME=<container name>).
        let green_dir = state.join("host-local-green");
        let nads = nads(&green_dir);
        let broken = r#"---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: broken, namespace: default}
spec:
  config: '{"cniVersion":"1.0.0","name":"broken","type":"weft-no-such-plugin"}'
"#;
        nads.apply(&state, &container, annotation, broken);

        let node = Netns::new(&format!("pmnode{tag}"));
        let agent = start_node_agent(&node, &state, &agent_conf_dir, &plugins, AGENT_DEADLINE);
        let agent_log = state.join("agent.log");
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
        nads(&self.green_dir).assert_released(&self.state, CLUSTER_SUBNET, when, &self.agent_log());
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn podman_container_gets_cluster_and_two_nad_networks_and_loses_them_on_rm() {
    if !runtime_prerequisites_or_skip(
        "podman_container_gets_cluster_and_two_nad_networks_and_loses_them_on_rm",
        TOOLS,
    ) {
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
        address_of(&addresses, ifname).unwrap_or_else(|| panic!("no {ifname} address: {addresses:?}"))
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
        Some(eth0.as_str()),
        "{networks}"
    );

    // The pod's network-status in the store.
    let status = weft(&f.state, &["net", "status", &f.container]);
    assert!(status.status.success(), "{}", text(&status));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("network-status");
    assert_eq!(status[0]["interface"], "eth0", "{status}");
    assert_eq!(status[0]["default"], true, "{status}");
    assert_eq!(status[0]["ips"][0].as_str(), Some(eth0.as_str()), "{status}");
    assert_eq!(status[1]["name"], "default/blue", "{status}");
    assert_eq!(status[1]["interface"], "blue0", "{status}");
    assert_eq!(status[1]["ips"][0].as_str(), Some(blue0.as_str()), "{status}");
    assert_eq!(status[2]["name"], "default/green", "{status}");
    assert_eq!(status[2]["interface"], "green0", "{status}");
    assert_eq!(status[2]["ips"][0].as_str(), Some(green0.as_str()), "{status}");

    let held = weft(&f.state, &["ipam", "list", "--network", "blue"]);
    let held = String::from_utf8_lossy(&held.stdout).into_owned();
    assert!(held.contains(&blue0), "{held}");
    assert!(f.green_dir.join("green").join(&green0).exists());
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
    if !runtime_prerequisites_or_skip(
        "podman_run_fails_and_leaks_nothing_when_a_later_network_fails",
        TOOLS,
    ) {
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
