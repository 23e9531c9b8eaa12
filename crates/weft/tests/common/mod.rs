//! Helpers for the weft binary's end-to-end tests.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub mod runtime;

/// True when running as root; otherwise prints why the test is skipped.
pub fn root_or_skip(test: &str) -> bool {
    weft_testing::root_or_skip(test)
}

/// The weft binary under test.
pub fn weft_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weft"))
}

/// weft's CNI plugins as a node has them (`weft install-cni --link`) in `bin`: `passthru` (the
/// binary under test), `weft-cni` and `weft-ipam` (the static clients it carries).
pub fn install_plugins(bin: &Path) {
    let out = Command::new(weft_bin())
        .args(["install-cni", "--link", "--bin-dir"])
        .arg(bin)
        .output()
        .expect("run weft install-cni");
    assert!(out.status.success(), "weft install-cni: {}", text(&out));
}

/// Run `weft` with a state dir; returns the output (stdout+stderr kept separately).
pub fn weft(state: &Path, args: &[&str]) -> Output {
    Command::new(weft_bin())
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env("WEFT_LOG", "info")
        .output()
        .expect("run weft")
}

/// `weft apply -f` of `manifests`, first written to `file` in `state` (left there for the
/// post-mortem); panics with the output unless the apply succeeded.
pub fn apply(state: &Path, file: &str, manifests: &str) {
    let path = state.join(file);
    std::fs::write(&path, manifests).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    let applied = weft(state, &["apply", "-f", path.to_str().expect("a UTF-8 path")]);
    assert!(
        applied.status.success(),
        "weft apply -f {file}: {}",
        text(&applied)
    );
}

/// Text of an output, for assertion messages.
pub fn text(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Host state that `weft down` must restore: links, netns, nft ruleset.
pub fn host_snapshot() -> String {
    let run = |args: &[&str]| {
        let out = Command::new(args[0])
            .args(&args[1..])
            .output()
            .expect("snapshot command");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let links: serde_json::Value = serde_json::from_str(&run(&["ip", "-j", "link"])).unwrap_or_default();
    // Counters and timestamps change; names, kinds, addresses and state must not.
    let links: Vec<String> = links
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|l| format!("{} {} {}", l["ifname"], l["address"], l["operstate"]))
        .collect();
    let netns: Vec<String> = run(&["ip", "netns", "list"])
        .lines()
        .filter(|l| l.starts_with("weft-"))
        .map(String::from)
        .collect();
    format!(
        "links: {links:?}\nnetns: {netns:?}\nnft: {}",
        run(&["nft", "list", "ruleset"])
    )
}

pub use weft_testing::Netns;

/// The container id the runtime passes in [`run_shim`].
pub const CONTAINER_ID: &str = "c0ffee0000000000000000000000000000000000000000000000000000000001";

/// Exec the shim (`<bin>/weft-cni`, as [`install_plugins`] puts it) as a runtime does: `command`
/// for pod `namespace/pod` in `pod_ns`, eth0, the config on stdin, `bin` first on CNI_PATH.
pub fn run_shim(
    bin: &Path,
    conf: &serde_json::Value,
    command: &str,
    pod_ns: &Netns,
    namespace: &str,
    pod: &str,
) -> Output {
    run_shim_as(bin, conf, command, pod_ns, namespace, pod, CONTAINER_ID)
}

/// [`run_shim`] for the sandbox `container_id` (several pods at once).
pub fn run_shim_as(
    bin: &Path,
    conf: &serde_json::Value,
    command: &str,
    pod_ns: &Netns,
    namespace: &str,
    pod: &str,
    container_id: &str,
) -> Output {
    spawn_shim_as(bin, conf, command, pod_ns, namespace, pod, container_id)
        .wait_with_output()
        .unwrap()
}

/// [`run_shim_as`] without waiting: the running shim, its config already on stdin.
pub fn spawn_shim_as(
    bin: &Path,
    conf: &serde_json::Value,
    command: &str,
    pod_ns: &Netns,
    namespace: &str,
    pod: &str,
    container_id: &str,
) -> std::process::Child {
    let cni_path = format!("{}:/usr/lib/cni", bin.display());
    let mut child = Command::new(bin.join("weft-cni"))
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", container_id)
        .env("CNI_NETNS", pod_ns.path())
        .env("CNI_IFNAME", "eth0")
        .env(
            "CNI_ARGS",
            format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID=c0ffee"),
        )
        .env("CNI_PATH", cni_path)
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
    child
}

/// Every kind `weft controller` lists and watches (all roles), Events included: what a fake
/// API server serves for it.
pub fn controller_kinds() -> Vec<weft_store::ResourceType> {
    use weft_store::{Resource, ResourceType};
    vec![
        ResourceType::new("v1", "Pod", "pods", true),
        ResourceType::new("v1", "Node", "nodes", false),
        ResourceType::new("v1", "Event", "events", true),
        weft_netconf::NetworkAttachmentDefinition::resource_type(),
        weft_vm::VirtualMachine::resource_type(),
        weft_vm::VirtualMachineInstance::resource_type(),
        weft_vm::VirtualMachineInstanceMigration::resource_type(),
        weft_vm::api::KubeVirt::resource_type(),
        weft_ipam::IpamClaim::resource_type(),
        weft_ipam::IpReservation::resource_type(),
    ]
}

/// Every object of `types` in the local cluster's store (`<state>/store.db`), as
/// `Kind/namespace/name`.
pub fn stored_keys(state: &Path, types: &[weft_store::ResourceType]) -> Vec<String> {
    use weft_store::Store;
    let store = weft_store::SqliteStore::open(state.join("store.db")).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut out = Vec::new();
        for ty in types {
            for object in store.list(ty, None, &Default::default()).await.unwrap().items {
                out.push(format!("{}/{}", ty.kind, object.key()));
            }
        }
        out
    })
}

/// Run `body` on a fresh state directory, then `weft down` whatever `body` did: a panic in
/// `body` is raised again after the down, and the down must succeed.
pub fn then_down(body: impl FnOnce(&Path) + std::panic::UnwindSafe) {
    let state = tempfile::tempdir().unwrap();
    let outcome = std::panic::catch_unwind(|| body(state.path()));
    let down = weft(state.path(), &["down"]);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    assert!(down.status.success(), "weft down failed:\n{}", text(&down));
}

/// A node's CNI setup in `state` as an agent on Kubernetes has it: weft's plugins in
/// `<state>/bin` ([`install_plugins`]) and the cluster network (bridge cni0, host-local on
/// `subnet`) in `<state>/net.d/10-cluster.conflist`. Returns the bin dir and the weft-cni
/// config that delegates to that network over the agent's socket in `state`.
pub fn node_cni(state: &Path, subnet: &str) -> (PathBuf, serde_json::Value) {
    use serde_json::json;
    let bin = state.join("bin");
    install_plugins(&bin);
    let conf_dir = state.join("net.d");
    std::fs::create_dir_all(&conf_dir).unwrap();
    let cluster_network = json!({
        "cniVersion": "1.0.0", "name": "cluster",
        "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": state.join("hl-cluster")}}]
    });
    std::fs::write(conf_dir.join("10-cluster.conflist"), cluster_network.to_string()).unwrap();
    let conf = json!({
        "cniVersion": "1.0.0", "name": "weft", "type": "weft-cni",
        "clusterNetwork": conf_dir.join("10-cluster.conflist"),
        "daemonSocketDir": state,
    });
    (bin, conf)
}

/// `Some(())` once the local cluster in `state` has no pod left (a stopped VM's launcher pod
/// is gone); for polling.
pub fn no_pods(state: &Path) -> Option<()> {
    let pods: serde_json::Value =
        serde_json::from_slice(&weft(state, &["get", "pods", "-o", "json"]).stdout).unwrap_or_default();
    pods["items"]
        .as_array()
        .is_some_and(|p| p.is_empty())
        .then_some(())
}

/// A child process killed and reaped when dropped.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `weft agent --node n1` inside `node`, on the embedded store of `state`: socket
/// `<state>/weft.sock`, conf dir `conf_dir`, delegates from `bin` then /usr/lib/cni, log in
/// `<state>/agent.log`, plus `extra` arguments. Returns once the socket exists (or after 10 s).
pub fn start_agent(node: &Netns, state: &Path, conf_dir: &Path, bin: &Path, extra: &[&str]) -> KillOnDrop {
    let socket = state.join("weft.sock");
    let agent = agent_command(
        node.command(&[weft_bin().to_str().unwrap()]),
        state,
        conf_dir,
        bin,
    )
    .args(extra)
    .spawn()
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !socket.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    KillOnDrop(agent)
}

/// `weft agent` for Kubernetes node `node_name` on `state`'s kubeconfig, started in `node`: the
/// layout the Kubernetes tests give a node (`<state>/{kubeconfig, weft.sock, net.d, cache,
/// bin}`, delegates from `bin` then /usr/lib/cni, log appended to `<state>/agent.log`).
pub fn spawn_kube_agent(node: &Netns, state: &Path, node_name: &str) -> Child {
    spawn_kube_agent_with(node, state, node_name, &[])
}

/// [`spawn_kube_agent`] with more `weft agent` options.
pub fn spawn_kube_agent_with(node: &Netns, state: &Path, node_name: &str, extra: &[&str]) -> Child {
    node.command(&[weft_bin().to_str().unwrap()])
        .arg("--kubeconfig")
        .arg(state.join("kubeconfig"))
        .arg("--state-dir")
        .arg(state)
        .args(["--log", "info", "agent", "--node", node_name])
        .arg("--socket")
        .arg(state.join("weft.sock"))
        .arg("--conf-dir")
        .arg(state.join("net.d"))
        .arg("--cache-dir")
        .arg(state.join("cache"))
        .arg("--cni-bin-dir")
        .arg(state.join("bin"))
        .arg("--cni-bin-dir")
        .arg("/usr/lib/cni")
        .args(extra)
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(state.join("agent.log"))
                .unwrap(),
        )
        .spawn()
        .unwrap()
}

/// `command` (the weft binary, however it is entered into the node) completed into
/// `weft agent --node n1` on the embedded store of `state`: socket `<state>/weft.sock`, conf dir
/// `conf_dir`, delegates from `bin` then /usr/lib/cni, log in `<state>/agent.log`.
pub fn agent_command(mut command: Command, state: &Path, conf_dir: &Path, bin: &Path) -> Command {
    command
        .arg("--state-dir")
        .arg(state)
        .args(["agent", "--node", "n1", "--socket"])
        .arg(state.join("weft.sock"))
        .arg("--conf-dir")
        .arg(conf_dir)
        .arg("--cache-dir")
        .arg(state.join("cache"))
        .arg("--cni-bin-dir")
        .arg(bin)
        .arg("--cni-bin-dir")
        .arg("/usr/lib/cni")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(state.join("agent.log")).unwrap());
    command
}

/// A node's files under `state`: `bin/` holding weft's plugins ([`install_plugins`]) and the
/// script plugins tests add, and `net.d/10-cluster.conflist`, the cluster network (bridge `cni0` +
/// host-local on `subnet`, default route, leases in `<state>/host-local`). Returns (bin, conf dir).
pub fn node_files(state: &Path, subnet: &str) -> (PathBuf, PathBuf) {
    init_store(state);
    let bin = state.join("bin");
    install_plugins(&bin);
    let conf_dir = state.join("net.d");
    std::fs::create_dir_all(&conf_dir).unwrap();
    let cluster = serde_json::json!({
        "cniVersion": "1.0.0", "name": "cluster",
        "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": state.join("host-local")}}]
    });
    std::fs::write(conf_dir.join("10-cluster.conflist"), cluster.to_string()).unwrap();
    (bin, conf_dir)
}

/// `weft init`: the embedded store of `state`, for tests that run agents without `weft up`.
pub fn init_store(state: &Path) {
    let init = weft(state, &["init"]);
    assert!(init.status.success(), "weft init: {}", text(&init));
}

/// Write an executable script plugin `name` into `bin`.
pub fn install_script_plugin(bin: &Path, name: &str, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    let plugin = bin.join(name);
    std::fs::write(&plugin, script).unwrap();
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The `weft-cni` config a runtime hands the shim: the cluster network of [`node_files`], the
/// agent socket in `state`, and every key of `extra`.
pub fn shim_config(state: &Path, conf_dir: &Path, extra: serde_json::Value) -> serde_json::Value {
    let mut conf = serde_json::json!({
        "cniVersion": "1.0.0", "name": "weft", "type": "weft-cni",
        "clusterNetwork": conf_dir.join("10-cluster.conflist"),
        "daemonSocketDir": state,
    });
    if let (Some(conf), Some(extra)) = (conf.as_object_mut(), extra.as_object()) {
        conf.extend(extra.clone());
    }
    conf
}

/// `GET /metrics` of the agent on `socket`.
pub fn agent_metrics_at(socket: &Path) -> String {
    use std::io::Read;
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: weft\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// Wait until every network-status the agent on `socket` left to write after its ADDs
/// answered (`--network-status after-reply`, the default on Kubernetes) is written: its
/// `weft_agent_network_status_pending` gauge reads 0. Bounded: 10 s (`log` explains a timeout).
pub fn wait_status_written(socket: &Path, log: impl Fn() -> String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let metrics = agent_metrics_at(socket);
        if metrics
            .lines()
            .any(|l| l == "weft_agent_network_status_pending 0")
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "network-status still pending after 10 s:\n{metrics}\n{}",
            log()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
