//! containerd's CRI calls weft the way kubelet drives it: Debian's `containerd` (1.6) runs with
//! its own config, root, state and socket in a node namespace the test creates, weft's shim is
//! the only CNI network in containerd's CNI conf dir, the sandbox ("pause") image is built here
//! from busybox (no registry), and the test speaks CRI `runtime.v1` itself (the
//! `weft-cri-client` crate: tonic + prost from upstream's api.proto).
//!
//! RunPodSandbox → weft's ADD: the sandbox netns has eth0 (cluster network) and net1/net2 (NADs:
//! bridge + weft-ipam, bridge + host-local), the pod's network-status is written and
//! PodSandboxStatus reports the cluster IP. StopPodSandbox + RemovePodSandbox → DEL: the links
//! and every address go. Then containerd is stopped and nothing it made is left: no process, no
//! mount, no netns, no directory.
//!
//! On these machines containerd's CRI needs `restrict_oom_score_adj = true`, or every sandbox
//! fails in runc with `can't get final child's PID from pipe: EOF`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::runtime::*;
use common::*;
use weft_cri_client::runtime::v1::{
    LinuxPodSandboxConfig, PodSandboxConfig, PodSandboxMetadata, PodSandboxState,
};
use weft_cri_client::{CriClient, CriError};

/// Every bounded wait of this test.
const DEADLINE: Duration = Duration::from_secs(60);

/// The cluster network's subnet.
const CLUSTER_SUBNET: &str = "10.251.0.0/24";

/// What the test runs besides weft.
const TOOLS: &[&str] = &["containerd", "ctr", "podman", "runc", "nsenter", "busybox"];

/// Pids of processes (other than this one) whose command line names `needle`.
fn processes_naming(needle: &str) -> Vec<i32> {
    let own = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != own)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmd| String::from_utf8_lossy(&cmd).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

/// The sandbox image: busybox as `/bin/sleep`, imported with podman (its own storage under
/// `work`), saved as an OCI archive; returns the archive.
fn pause_image(work: &Path, name: &str) -> PathBuf {
    let rootfs = work.join("pause-rootfs");
    install_busybox(&rootfs, Some(&["sleep"]));
    let tar = work.join("pause-rootfs.tar");
    let made = Command::new("tar")
        .arg("-C")
        .arg(&rootfs)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .output()
        .unwrap();
    assert!(made.status.success(), "tar: {}", text(&made));
    let podman = |args: &[&str]| {
        let out = Command::new("timeout")
            .arg("120")
            .arg("podman")
            .arg("--root")
            .arg(work.join("podman"))
            .arg("--runroot")
            .arg(work.join("podman-run"))
            .args(["--storage-driver", "vfs"])
            .args(args)
            .env("CONTAINERS_CONF", "/dev/null")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "podman {args:?}: {}", text(&out));
    };
    podman(&[
        "import",
        "-q",
        "--change",
        r#"ENTRYPOINT ["/bin/sleep","2147483647"]"#,
        tar.to_str().unwrap(),
        name,
    ]);
    let archive = work.join("pause.tar");
    podman(&[
        "save",
        "-q",
        "--format",
        "oci-archive",
        "-o",
        archive.to_str().unwrap(),
        name,
    ]);
    archive
}

/// containerd confined to `work`, running in the node namespace; stopped on drop, with every
/// sandbox it still has removed first and whatever it left (shims, mounts) ended by id/path.
struct Containerd {
    child: Option<Child>,
    work: PathBuf,
    socket: PathBuf,
    log: PathBuf,
}

impl Containerd {
    fn start(work: &Path, node: &Netns, cni_bin: &Path, cni_conf: &Path, image: &str) -> Self {
        let socket = work.join("containerd.sock");
        let config = work.join("containerd.toml");
        std::fs::write(
            &config,
            format!(
                r#"version = 2
root = "{work}/root"
state = "{work}/state"
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{work}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{image}"
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{work}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{bin}"
    conf_dir = "{conf}"
"#,
                work = work.display(),
                socket = socket.display(),
                bin = cni_bin.display(),
                conf = cni_conf.display(),
            ),
        )
        .unwrap();
        let log = work.join("containerd.log");
        let child = Command::new("nsenter")
            .arg(format!("--net={}", node.path().display()))
            .arg("containerd")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start containerd");
        let containerd = Self {
            child: Some(child),
            work: work.to_path_buf(),
            socket,
            log,
        };
        let up = wait_for(DEADLINE, || {
            containerd.client().and_then(|mut c| c.version()).is_ok()
        });
        assert!(up, "containerd's CRI never answered\n{}", containerd.log());
        containerd
    }

    fn client(&self) -> Result<CriClient, CriError> {
        CriClient::connect(&self.socket, DEADLINE)
    }

    fn log(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `ctr images import` into the CRI's namespace, on the CRI's snapshotter.
    fn import(&self, archive: &Path) {
        let out = Command::new("timeout")
            .arg("120")
            .arg("ctr")
            .arg("-a")
            .arg(&self.socket)
            .args(["-n", "k8s.io", "images", "import", "--snapshotter", "native"])
            .arg(archive)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "ctr images import: {}", text(&out));
    }

    /// Stop containerd (SIGTERM, bounded wait, then SIGKILL); whether it exited by itself.
    fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let exited = wait_for(DEADLINE, || child.try_wait().is_ok_and(|s| s.is_some()));
        if !exited {
            let _ = child.kill();
            let _ = child.wait();
        }
        exited
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if let (Some(_), Ok(mut client)) = (&self.child, self.client()) {
            for sandbox in client.list_pod_sandbox().unwrap_or_default() {
                let _ = client.stop_pod_sandbox(&sandbox.id);
                let _ = client.remove_pod_sandbox(&sandbox.id);
            }
        }
        self.stop();
        // Shims carry our socket path in their argv.
        for pid in processes_naming(&self.work.display().to_string()) {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        unmount_under(&self.work);
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn containerd_cri_sandbox_gets_weft_networks_and_loses_them_on_remove() {
    let test = "containerd_cri_sandbox_gets_weft_networks_and_loses_them_on_remove";
    if !runtime_prerequisites_or_skip(test, TOOLS) {
        return;
    }
    let pid = std::process::id();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("weft");
    let work = dir.path().join("containerd");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    // The node namespace (loopback up: the CRI's stream server listens there).
    let node = Netns::new("crinode");

    // containerd's CNI bin dir: weft's plugins as installed, plus the loopback plugin the CRI
    // runs for every sandbox's lo. The cluster network lives in the agent's conf dir;
    // containerd's has only weft's shim.
    let (plugins, agent_conf) = node_files(&state, CLUSTER_SUBNET);
    std::os::unix::fs::symlink("/usr/lib/cni/loopback", plugins.join("loopback")).unwrap();
    let cri_conf = work.join("net.d");
    let network = format!("weft-cri-{pid}");
    write_meta_conflist(&cri_conf, "00-weft.conflist", &network, &state, &agent_conf);

    // Two NADs and the pod kubelet would start.
    let pod = format!("cri-pod-{pid}");
    let green_dir = state.join("host-local-green");
    let nads = BlueGreen {
        blue_bridge: "br-cblue",
        blue_range: "192.168.87.0/24",
        green_bridge: "br-cgreen",
        green_subnet: "192.168.88.0/24",
        green_dir: &green_dir,
    };
    let networks = r#"[{"name":"blue","interface":"net1"},{"name":"green","interface":"net2"}]"#;
    nads.apply(&state, &pod, networks, "");
    let got = weft(&state, &["get", "pod", &pod, "-o", "json"]);
    assert!(got.status.success(), "{}", text(&got));
    let got: serde_json::Value = serde_json::from_slice(&got.stdout).expect("pod json");
    let got = if got.is_array() { got[0].clone() } else { got };
    let uid = got["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    assert!(!uid.is_empty(), "the store gave the pod a uid: {got}");

    // The agent, in the node namespace, sharing containerd's mount namespace (it must see the
    // sandbox netns bind mounts containerd makes after the agent started).
    let _agent = start_node_agent(&node, &state, &agent_conf, &plugins, DEADLINE);
    let agent_log = || std::fs::read_to_string(state.join("agent.log")).unwrap_or_default();

    let image = format!("localhost/weft-test/pause:{pid}");
    let archive = pause_image(&work, &image);
    let mut containerd = Containerd::start(&work, &node, &plugins, &cri_conf, &image);
    containerd.import(&archive);
    let mut client = containerd.client().expect("connect to containerd");
    let version = client.version().expect("CRI Version");
    assert_eq!(version.runtime_api_version, "v1", "{version:?}");

    // RunPodSandbox → ADD.
    let config = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: pod.clone(),
            uid: uid.clone(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: pod.clone(),
        log_directory: work.join("pod-logs").display().to_string(),
        labels: [("app".into(), "weft-cri".into())].into(),
        annotations: Default::default(),
        linux: Some(LinuxPodSandboxConfig::default()),
    };
    let sandbox = client.run_pod_sandbox(config).unwrap_or_else(|e| {
        panic!(
            "RunPodSandbox: {e}\ncontainerd log:\n{}\nagent log:\n{}",
            containerd.log(),
            agent_log()
        )
    });
    let response = client.pod_sandbox_status(&sandbox).expect("PodSandboxStatus");
    let status = response.status.clone().expect("PodSandboxStatus.status");
    assert_eq!(status.state(), PodSandboxState::SandboxReady, "{status:?}");
    let metadata = status.metadata.clone().unwrap_or_default();
    assert_eq!(metadata.uid, uid, "{status:?}");
    let pod_ip = status.network.clone().unwrap_or_default().ip;
    assert!(pod_ip.starts_with("10.251.0."), "pod IP from eth0: {status:?}");
    let info = response.info.get("info").cloned().expect("verbose info");
    let info: serde_json::Value = serde_json::from_str(&info).expect("info json");
    let netns = info["runtimeSpec"]["linux"]["namespaces"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|ns| ns["type"] == "network")
        .and_then(|ns| ns["path"].as_str())
        .map(PathBuf::from)
        .expect("the sandbox's network namespace path");
    assert!(netns.exists(), "{}", netns.display());

    let inside = Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .args(["ip", "-o", "addr"])
        .output()
        .unwrap();
    assert!(inside.status.success(), "{}", text(&inside));
    let addresses = ipv4_addresses(&String::from_utf8_lossy(&inside.stdout));
    let address = |ifname: &str| {
        address_of(&addresses, ifname).unwrap_or_else(|| panic!("no {ifname} in the sandbox: {addresses:?}"))
    };
    let (eth0, net1, net2) = (address("eth0"), address("net1"), address("net2"));
    assert_eq!(eth0, pod_ip, "PodSandboxStatus reports eth0's address");
    assert!(net1.starts_with("192.168.87."), "{addresses:?}");
    assert!(net2.starts_with("192.168.88."), "{addresses:?}");

    let ns = weft(&state, &["net", "status", &pod]);
    assert!(ns.status.success(), "{}", text(&ns));
    let ns: serde_json::Value = serde_json::from_slice(&ns.stdout).expect("network-status");
    assert_eq!(ns[0]["interface"], "eth0", "{ns}");
    assert_eq!(ns[0]["ips"][0].as_str(), Some(eth0.as_str()), "{ns}");
    assert_eq!(ns[1]["name"], "default/blue", "{ns}");
    assert_eq!(ns[1]["interface"], "net1", "{ns}");
    assert_eq!(ns[1]["ips"][0].as_str(), Some(net1.as_str()), "{ns}");
    assert_eq!(ns[2]["name"], "default/green", "{ns}");
    assert_eq!(ns[2]["interface"], "net2", "{ns}");
    assert_eq!(ns[2]["ips"][0].as_str(), Some(net2.as_str()), "{ns}");
    let held = weft(&state, &["ipam", "list"]);
    assert!(
        String::from_utf8_lossy(&held.stdout).contains(&net1),
        "{}",
        text(&held)
    );
    assert!(green_dir.join("green").join(&net2).exists());
    for bridge in ["cni0", "br-cblue", "br-cgreen"] {
        assert_eq!(bridge_ports(&node, bridge).len(), 1, "one veth on {bridge}");
    }

    // StopPodSandbox (DEL) + RemovePodSandbox.
    client.stop_pod_sandbox(&sandbox).unwrap_or_else(|e| {
        panic!(
            "StopPodSandbox: {e}\ncontainerd log:\n{}\nagent log:\n{}",
            containerd.log(),
            agent_log()
        )
    });
    for bridge in ["cni0", "br-cblue", "br-cgreen"] {
        assert_eq!(
            bridge_ports(&node, bridge),
            Vec::<String>::new(),
            "veth left on {bridge} after StopPodSandbox\nagent log:\n{}",
            agent_log()
        );
    }
    nads.assert_released(&state, CLUSTER_SUBNET, "after StopPodSandbox", &agent_log());
    client.remove_pod_sandbox(&sandbox).expect("RemovePodSandbox");
    assert!(
        client.list_pod_sandbox().expect("ListPodSandbox").is_empty(),
        "RemovePodSandbox left a sandbox"
    );
    assert!(!netns.exists(), "sandbox netns left: {}", netns.display());
    drop(client);

    // containerd stops and leaves nothing behind.
    assert!(containerd.stop(), "containerd did not exit on SIGTERM");
    let needle = work.display().to_string();
    assert!(
        wait_for(DEADLINE, || processes_naming(&needle).is_empty()),
        "processes of ours left: {:?}",
        processes_naming(&needle)
    );
    assert_eq!(mounts_under(&work), Vec::<String>::new(), "mounts left");
    drop(containerd);
    drop(_agent);
    drop(node);
    std::fs::remove_dir_all(&work).expect("containerd's dirs removable");
    assert!(!work.exists());
}
