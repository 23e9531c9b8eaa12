//! containerd's CRI calls weft the way kubelet drives it: Debian's `containerd` (1.6) runs with
//! its own config, root, state and socket in a node namespace the test creates, weft's shim is
//! the only CNI network in containerd's CNI conf dir, the sandbox ("pause") image is built here
//! from busybox (no registry), and the test speaks CRI `runtime.v1` itself (tests/cri).
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
mod cri;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use cri::{CriClient, PodSandboxConfig, PodSandboxMetadata};

/// Every bounded wait of this test.
const DEADLINE: Duration = Duration::from_secs(60);

/// Whether the prerequisites are here; prints why not (or panics under CI, where they must be).
fn prerequisites_or_skip(test: &str) -> bool {
    if !weft_testing::root_or_skip(test) {
        return false;
    }
    for tool in ["containerd", "ctr", "podman", "runc", "nsenter", "busybox"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return weft_testing::skip(test, &format!("`{tool}` is not installed"));
        }
    }
    true
}

/// Poll `ready` until it holds or [`DEADLINE`] passes; whether it held.
fn wait_for(mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + DEADLINE;
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

/// Mount points under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<String> {
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

/// The sandbox image: busybox as `/bin/sleep`, imported with podman (its own storage under
/// `work`), saved as an OCI archive; returns the archive.
fn pause_image(work: &Path, name: &str) -> PathBuf {
    let rootfs = work.join("pause-rootfs");
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    let busybox = Command::new("sh")
        .args(["-c", "command -v busybox"])
        .output()
        .unwrap();
    let busybox = String::from_utf8_lossy(&busybox.stdout).trim().to_string();
    std::fs::copy(&busybox, rootfs.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", rootfs.join("bin/sleep")).unwrap();
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
        let up = wait_for(|| containerd.client().and_then(|mut c| c.version()).is_ok());
        assert!(up, "containerd's CRI never answered\n{}", containerd.log());
        containerd
    }

    fn client(&self) -> Result<CriClient, cri::CriError> {
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
        let exited = wait_for(|| child.try_wait().is_ok_and(|s| s.is_some()));
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
        for target in mounts_under(&self.work) {
            let _ = Command::new("umount").args(["-l", &target]).status();
        }
    }
}

/// The agent process; killed on drop.
struct Agent(Child);
impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn containerd_cri_sandbox_gets_weft_networks_and_loses_them_on_remove() {
    let test = "containerd_cri_sandbox_gets_weft_networks_and_loses_them_on_remove";
    if !prerequisites_or_skip(test) {
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
    // runs for every sandbox's lo.
    let plugins = state.join("plugins");
    install_plugins(&plugins);
    std::os::unix::fs::symlink("/usr/lib/cni/loopback", plugins.join("loopback")).unwrap();

    // The cluster network lives in the agent's conf dir; containerd's has only weft's shim.
    let agent_conf = state.join("agent-net.d");
    std::fs::create_dir_all(&agent_conf).unwrap();
    let cluster_file = agent_conf.join("10-cluster.conflist");
    let cluster = serde_json::json!({
        "cniVersion": "1.0.0", "name": "cluster",
        "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.251.0.0/24"}]],
                              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": state.join("host-local")}}]
    });
    std::fs::write(&cluster_file, cluster.to_string()).unwrap();
    let cri_conf = work.join("net.d");
    std::fs::create_dir_all(&cri_conf).unwrap();
    let meta = serde_json::json!({
        "cniVersion": "1.0.0", "name": format!("weft-cri-{pid}"),
        "plugins": [{"type": "weft-cni", "clusterNetwork": cluster_file, "daemonSocketDir": state}]
    });
    std::fs::write(cri_conf.join("00-weft.conflist"), meta.to_string()).unwrap();

    // Two NADs and the pod kubelet would start.
    let pod = format!("cri-pod-{pid}");
    let green_dir = state.join("host-local-green");
    let manifests = format!(
        r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {{name: blue, namespace: default}}
spec:
  config: '{{"cniVersion":"1.0.0","name":"blue","type":"bridge","bridge":"br-cblue","ipam":{{"type":"weft-ipam","range":"192.168.87.0/24","stateDir":"{state}"}}}}'
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {{name: green, namespace: default}}
spec:
  config: '{{"cniVersion":"1.0.0","name":"green","plugins":[{{"type":"bridge","bridge":"br-cgreen","ipam":{{"type":"host-local","ranges":[[{{"subnet":"192.168.88.0/24"}}]],"dataDir":"{green}"}}}}]}}'
---
apiVersion: v1
kind: Pod
metadata:
  name: {pod}
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/networks: '[{{"name":"blue","interface":"net1"}},{{"name":"green","interface":"net2"}}]'
spec: {{nodeName: n1}}
"#,
        state = state.display(),
        green = green_dir.display(),
    );
    let manifest_file = state.join("objects.yaml");
    std::fs::write(&manifest_file, manifests).unwrap();
    init_store(&state);
    let applied = weft(&state, &["apply", "-f", manifest_file.to_str().unwrap()]);
    assert!(applied.status.success(), "{}", text(&applied));
    let got = weft(&state, &["get", "pod", &pod, "-o", "json"]);
    assert!(got.status.success(), "{}", text(&got));
    let got: serde_json::Value = serde_json::from_slice(&got.stdout).expect("pod json");
    let got = if got.is_array() { got[0].clone() } else { got };
    let uid = got["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    assert!(!uid.is_empty(), "the store gave the pod a uid: {got}");

    // The agent, in the node namespace.
    let socket = state.join("weft.sock");
    let agent_log = state.join("agent.log");
    let _agent = Agent(
        // nsenter, not `ip netns exec`: the agent must share containerd's mount namespace to
        // see the sandbox netns bind mounts containerd makes after the agent started (`ip netns
        // exec` gives it a mount namespace of its own, and nothing propagates into it where /
        // is a private mount).
        Command::new("nsenter")
            .arg(format!("--net={}", node.path().display()))
            .arg(weft_bin())
            .arg("--state-dir")
            .arg(&state)
            .args(["agent", "--node", "n1", "--socket"])
            .arg(&socket)
            .arg("--conf-dir")
            .arg(&agent_conf)
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
    assert!(wait_for(|| socket.exists()), "agent socket never appeared");
    let agent_log = || std::fs::read_to_string(&agent_log).unwrap_or_default();

    let image = format!("localhost/weft-test/pause:{pid}");
    let archive = pause_image(&work, &image);
    let mut containerd = Containerd::start(&work, &node, &plugins, &cri_conf, &image);
    containerd.import(&archive);
    let mut client = containerd.client().expect("connect to containerd");
    let (name, version, api) = client.version().expect("CRI Version");
    assert_eq!(api, "v1", "{name} {version} speaks CRI {api}");

    // RunPodSandbox → ADD.
    let config = PodSandboxConfig {
        metadata: PodSandboxMetadata {
            name: pod.clone(),
            uid: uid.clone(),
            namespace: "default".into(),
            attempt: 0,
        },
        hostname: pod.clone(),
        log_directory: work.join("pod-logs").display().to_string(),
        labels: vec![("app".into(), "weft-cri".into())],
        annotations: vec![],
    };
    let sandbox = client.run_pod_sandbox(&config).unwrap_or_else(|e| {
        panic!(
            "RunPodSandbox: {e}\ncontainerd log:\n{}\nagent log:\n{}",
            containerd.log(),
            agent_log()
        )
    });
    let status = client.pod_sandbox_status(&sandbox).expect("PodSandboxStatus");
    assert_eq!(status.state, cri::SANDBOX_READY, "{status:?}");
    assert_eq!(status.metadata.uid, uid, "{status:?}");
    assert!(status.ip.starts_with("10.251.0."), "pod IP from eth0: {status:?}");
    let info = status
        .info
        .iter()
        .find(|(k, _)| k == "info")
        .map(|(_, v)| v.clone())
        .expect("verbose info");
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
        addresses
            .iter()
            .find(|(name, _)| name == ifname)
            .map(|(_, a)| a.split('/').next().unwrap_or(a).to_string())
            .unwrap_or_else(|| panic!("no {ifname} in the sandbox: {addresses:?}"))
    };
    let (eth0, net1, net2) = (address("eth0"), address("net1"), address("net2"));
    assert_eq!(eth0, status.ip, "PodSandboxStatus reports eth0's address");
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
    let held = weft(&state, &["ipam", "list"]);
    assert!(held.status.success(), "{}", text(&held));
    assert!(
        !String::from_utf8_lossy(&held.stdout).contains("192.168.87."),
        "weft-ipam reservation left: {}",
        text(&held)
    );
    for (dir, subnet) in [
        (green_dir.join("green"), "192.168.88."),
        (state.join("host-local/cluster"), "10.251.0."),
    ] {
        let left: Vec<String> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(subnet))
            .collect();
        assert!(
            left.is_empty(),
            "host-local address left in {}: {left:?}",
            dir.display()
        );
    }
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
        wait_for(|| processes_naming(&needle).is_empty()),
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

/// The client's wire formats against bytes worked out by hand from the specs: protobuf
/// (field number << 3 | wire type, varints, length-delimited fields, map entries), HPACK
/// integers and literals (RFC 7541 §5.1, §6.2.2, example C.1.2) and the gRPC message prefix.
#[test]
fn cri_client_wire_formats_match_the_specs() {
    use cri::{Enc, fields, grpc_frame, hpack_literals, map_field, string_field, uint_field};
    let metadata = Enc::default()
        .string(1, "a")
        .string(2, "u")
        .string(3, "n")
        .uint(4, 1)
        .finish();
    assert_eq!(metadata, [0x0a, 1, b'a', 0x12, 1, b'u', 0x1a, 1, b'n', 0x20, 1]);
    assert_eq!(string_field(&metadata, 2).unwrap(), "u");
    assert_eq!(uint_field(&metadata, 4).unwrap(), 1);
    assert_eq!(uint_field(&metadata, 9).unwrap(), 0, "absent field is zero");
    // A 300-byte string: length varint 0xac 0x02.
    let long = "x".repeat(300);
    let encoded = Enc::default().string(1, &long).finish();
    assert_eq!(&encoded[..3], [0x0a, 0xac, 0x02]);
    assert_eq!(string_field(&encoded, 1).unwrap(), long);
    // Map entries and an embedded message; proto3 omits empty strings and zeros.
    let config = Enc::default()
        .message(1, Enc::default().string(1, "p"))
        .string(2, "")
        .map(7, &[("k", "v")])
        .finish();
    assert_eq!(
        config,
        [0x0a, 3, 0x0a, 1, b'p', 0x3a, 6, 0x0a, 1, b'k', 0x12, 1, b'v']
    );
    assert_eq!(
        map_field(&config, 7).unwrap(),
        [("k".to_string(), "v".to_string())]
    );
    assert_eq!(fields(&config).unwrap().len(), 2);
    assert!(fields(&[0x0a, 5, b'a']).is_err(), "truncated field is an error");

    assert_eq!(hpack_literals(&[("a", "b")]), [0x00, 1, b'a', 1, b'b']);
    let long_value = "v".repeat(200);
    let block = hpack_literals(&[("n", &long_value)]);
    // 200 with a 7-bit prefix: 0x7f then 200 - 127 = 73.
    assert_eq!(&block[..5], [0x00, 1, b'n', 0x7f, 73]);
    assert_eq!(block.len(), 5 + 200);

    assert_eq!(grpc_frame(&[1, 2]), [0, 0, 0, 0, 2, 1, 2]);
}
