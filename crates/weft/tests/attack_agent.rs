//! Attacks on the node agent and the CNI shim (issue 13, items 5–8), each performed for real:
//! hostile environments for the shim, socket paths that are not weft's, `CNI_NETNS` aimed at
//! the agent's own namespace, a failed ADD in a namespace shared with another container,
//! hostile verbs for the metrics, connection floods, lying `Content-Length`s, huge configs.

mod common;

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A node namespace running an agent on the embedded store, with the cluster network of
/// [`node_files`] and the objects of `manifests` applied.
struct Node {
    // Dropped first: the agent stops before its namespace and state go.
    agent: KillOnDrop,
    dir: tempfile::TempDir,
    bin: PathBuf,
    conf: serde_json::Value,
    node: Netns,
}

impl Node {
    fn start(tag: &str, manifests: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let (bin, conf_dir) = node_files(state, "10.251.0.0/24");
        if !manifests.is_empty() {
            apply(
                state,
                "objects.yaml",
                &manifests.replace("{state}", &state.display().to_string()),
            );
        }
        let node = Netns::new(&format!("{tag}-node"));
        let agent = start_agent(&node, state, &conf_dir, &bin, extra);
        assert!(
            state.join("weft.sock").exists(),
            "agent did not start:\n{}",
            log(state)
        );
        let conf = shim_config(state, &conf_dir, serde_json::json!({}));
        Self {
            agent,
            dir,
            bin,
            conf,
            node,
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("weft.sock")
    }

    /// Exec the shim for `command` with `env` over a runtime's usual environment (container
    /// [`CONTAINER_ID`], pod `default/<pod>`, `netns`, eth0).
    fn shim(&self, command: &str, netns: &Path, pod: &str, env: &[(&str, &OsStr)]) -> Output {
        shim_with(
            &self.bin,
            self.conf.to_string().as_bytes(),
            command,
            netns,
            pod,
            env,
        )
    }
}

/// Pod `default/p` on n1, cluster network only.
const POD_P: &str =
    "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec: {nodeName: n1}\n";

fn log(state: &Path) -> String {
    std::fs::read_to_string(state.join("agent.log")).unwrap_or_default()
}

fn shim_with(
    bin: &Path,
    stdin: &[u8],
    command: &str,
    netns: &Path,
    pod: &str,
    env: &[(&str, &OsStr)],
) -> Output {
    let mut cmd = Command::new(bin.join("weft-cni"));
    cmd.env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", CONTAINER_ID)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", "eth0")
        .env(
            "CNI_ARGS",
            format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID=c0ffee"),
        )
        .env("CNI_PATH", format!("{}:/usr/lib/cni", bin.display()));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A shim that refuses early may close stdin before reading it all.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

/// The CNI error a shim printed on stdout (asserting it failed cleanly, not by a panic).
fn cni_error(out: &Output) -> serde_json::Value {
    assert!(!out.status.success(), "must fail: {}", text(out));
    assert_eq!(
        out.status.code(),
        Some(1),
        "a CNI error exits 1 (no panic): {}",
        text(out)
    );
    let error: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no CNI error on stdout ({e}): {}", text(out)));
    assert!(error["code"].is_u64() && error["msg"].is_string(), "{error}");
    error
}

fn non_utf8(bytes: &[u8]) -> OsString {
    OsString::from_vec(bytes.to_vec())
}

/// Send raw bytes to `socket` and read the answer until the agent closes the connection or
/// `within` passes; returns how long it took and what was read.
fn raw(socket: &Path, request: &[u8], within: Duration) -> (Duration, Vec<u8>) {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(within)).unwrap();
    let started = Instant::now();
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    (started.elapsed(), answer)
}

/// The status code and JSON body of a raw HTTP answer.
fn parse_answer(answer: &[u8]) -> (u16, serde_json::Value) {
    let text = String::from_utf8_lossy(answer);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    (
        status,
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

fn post_cni(env: serde_json::Value, config: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let body = serde_json::json!({
        "env": env,
        "config": base64::engine::general_purpose::STANDARD.encode(config),
    })
    .to_string();
    format!(
        "POST /cni HTTP/1.1\r\nHost: weft\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Wait (bounded) for `child` to exit.
fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "process did not exit within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---- item 5: the shim and non-UTF-8 environments ----

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn attack_shim_non_utf8_environment_is_a_cni_error_not_a_panic() {
    if !root_or_skip("attack_shim_non_utf8_environment_is_a_cni_error_not_a_panic") {
        return;
    }
    let node = Node::start("atk-env", POD_P, &[]);
    let pod = Netns::new("atk-env-pod");
    let lang = non_utf8(b"en_\xff");
    // An unrelated non-UTF-8 variable is ignored: the request goes through.
    let add = node.shim("ADD", &pod.path(), "p", &[("LANG", &lang)]);
    assert!(add.status.success(), "ADD with LANG=en_\\xff: {}", text(&add));
    let result: serde_json::Value = serde_json::from_slice(&add.stdout).unwrap();
    assert!(result["interfaces"].is_array(), "{result}");
    assert!(pod.has_link("eth0"), "the cluster network was attached");
    let del = node.shim("DEL", &pod.path(), "p", &[("LANG", &lang)]);
    assert!(del.status.success(), "{}", text(&del));
    // A non-UTF-8 CNI variable is a CNI error naming it; nothing is attached.
    let args = non_utf8(b"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=\xfe\xff");
    let add = node.shim("ADD", &pod.path(), "p", &[("LANG", &lang), ("CNI_ARGS", &args)]);
    let error = cni_error(&add);
    assert_eq!(error["code"], 4, "{error}");
    assert!(error["msg"].as_str().unwrap().contains("CNI_ARGS"), "{error}");
    assert_eq!(pod.links(), vec!["lo".to_string()], "nothing attached");
}

// ---- item 6: the socket path ----

/// `weft agent` on `socket` (in the current namespace: no CNI request is made to it).
fn spawn_agent(state: &Path, socket: &Path) -> KillOnDrop {
    spawn_agent_with(state, socket, &[])
}

fn spawn_agent_with(state: &Path, socket: &Path, extra: &[&str]) -> KillOnDrop {
    let child = Command::new(weft_bin())
        .arg("--state-dir")
        .arg(state)
        .args(["agent", "--node", "n1", "--socket"])
        .arg(socket)
        .arg("--conf-dir")
        .arg(state.join("net.d"))
        .arg("--cache-dir")
        .arg(state.join("cache"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(state.join("agent.log")).unwrap())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Wait (bounded) until `path` is a socket an agent answers on.
fn wait_serving(path: &Path, state: &Path, agent: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while UnixStream::connect(path).is_err() {
        assert!(
            agent.try_wait().unwrap().is_none(),
            "agent exited:\n{}",
            log(state)
        );
        assert!(Instant::now() < deadline, "agent not serving:\n{}", log(state));
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn attack_socket_in_a_directory_others_can_write_is_refused_and_left_alone() {
    if !root_or_skip("attack_socket_in_a_directory_others_can_write_is_refused_and_left_alone") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    // A /tmp-like directory: anyone may create (and so replace) files there.
    let shared = state.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let mut agent = spawn_agent(state, &shared.join("weft.sock"));
    let status = wait_exit(&mut agent.0, Duration::from_secs(20));
    assert!(!status.success());
    assert!(
        log(state).contains("writable by group or others"),
        "{}",
        log(state)
    );
    assert_eq!(mode(&shared), 0o1777, "the directory's mode was changed");
    assert!(!shared.join("weft.sock").exists());
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn attack_socket_path_on_a_regular_file_or_live_socket_is_refused() {
    if !root_or_skip("attack_socket_path_on_a_regular_file_or_live_socket_is_refused") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    // A /run-like directory (root's, 0755): usable, and its mode stays.
    let run = state.join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = run.join("important.db");
    std::fs::write(&file, b"precious").unwrap();
    let mut agent = spawn_agent(state, &file);
    assert!(!wait_exit(&mut agent.0, Duration::from_secs(20)).success());
    assert!(log(state).contains("is not a socket"), "{}", log(state));
    assert_eq!(std::fs::read(&file).unwrap(), b"precious", "the file was touched");
    assert_eq!(mode(&run), 0o755, "/run-like directory chmodded");
    // A live agent's socket is not taken over by a second one.
    let socket = run.join("weft.sock");
    let mut first = spawn_agent(state, &socket);
    wait_serving(&socket, state, &mut first.0);
    assert_eq!(mode(&run), 0o755, "/run-like directory chmodded");
    let second_state = tempfile::tempdir().unwrap();
    let mut second = spawn_agent(second_state.path(), &socket);
    assert!(!wait_exit(&mut second.0, Duration::from_secs(20)).success());
    assert!(
        log(second_state.path()).contains("another process is serving"),
        "{}",
        log(second_state.path())
    );
    assert!(
        UnixStream::connect(&socket).is_ok(),
        "the live socket was replaced"
    );
    assert!(first.0.try_wait().unwrap().is_none());
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn attack_sigterm_removes_the_socket_and_a_stale_one_is_replaced() {
    if !root_or_skip("attack_sigterm_removes_the_socket_and_a_stale_one_is_replaced") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    // weft creates a missing directory, 0700.
    let socket = state.join("run/weft/weft.sock");
    // A stale socket nobody answers on (a crashed agent's) is replaced.
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    std::fs::set_permissions(socket.parent().unwrap(), std::fs::Permissions::from_mode(0o700)).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(UnixStream::connect(&socket).is_err(), "stale");
    let mut agent = spawn_agent(state, &socket);
    wait_serving(&socket, state, &mut agent.0);
    let ready = Command::new(weft_bin())
        .args(["agent-ready", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(ready.status.success(), "{}", text(&ready));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = wait_exit(&mut agent.0, Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{}", log(state));
    assert!(
        std::fs::symlink_metadata(&socket).is_err(),
        "socket left behind after SIGTERM"
    );
    // The readiness probe of deploy/ now fails for a stopped agent.
    let ready = Command::new(weft_bin())
        .args(["agent-ready", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(!ready.status.success(), "{}", text(&ready));
    // A directory weft creates is 0700.
    let fresh = state.join("fresh/dir/weft.sock");
    let mut agent = spawn_agent(state, &fresh);
    wait_serving(&fresh, state, &mut agent.0);
    assert_eq!(mode(fresh.parent().unwrap()), 0o700);
    assert_eq!(mode(&fresh), 0o600);
}

// ---- item 7: CNI_NETNS and rollback scope ----

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn attack_cni_netns_of_the_agent_itself_is_refused() {
    if !root_or_skip("attack_cni_netns_of_the_agent_itself_is_refused") {
        return;
    }
    let node = Node::start("atk-own", POD_P, &[]);
    let paths = [
        node.node.path(),
        PathBuf::from(format!("/proc/{}/ns/net", node.agent.0.id())),
    ];
    let before = node.node.links();
    for path in &paths {
        let add = node.shim("ADD", path, "p", &[]);
        let error = cni_error(&add);
        assert_eq!(error["code"], 4, "{error}");
        assert!(
            error["msg"]
                .as_str()
                .unwrap()
                .contains("agent's own network namespace"),
            "{error}"
        );
        assert_eq!(
            node.node.links(),
            before,
            "ADD created links in the agent's namespace"
        );
        let check = node.shim("CHECK", path, "p", &[]);
        assert_eq!(cni_error(&check)["code"], 4);
    }
    // Something a DEL aimed at the agent's namespace would remove.
    assert!(
        node.node
            .ip(&["link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"])
            .status
            .success()
    );
    let before = node.node.links();
    for path in &paths {
        let del = node.shim("DEL", path, "p", &[]);
        assert!(del.status.success(), "DEL must not fail forever: {}", text(&del));
        assert_eq!(
            node.node.links(),
            before,
            "DEL removed links of the agent's namespace"
        );
    }
}

const BLUE_NAD: &str = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: blue, namespace: default}
spec:
  config: '{"cniVersion":"1.0.0","type":"bridge","bridge":"br-atkblue","ipam":{"type":"host-local","ranges":[[{"subnet":"192.168.79.0/24"}]],"dataDir":"{state}/hl-blue"}}'
---
apiVersion: v1
kind: Pod
metadata:
  name: a
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/networks: blue@net1
spec: {nodeName: n1}
"#;

/// (name, ifindex, mac) of `names` in `ns`.
fn identities(ns: &Netns, names: &[&str]) -> Vec<(String, u64, String)> {
    let mut found: Vec<(String, u64, String)> = ns
        .link_details()
        .iter()
        .filter(|l| names.contains(&l["ifname"].as_str().unwrap_or("")))
        .map(|l| {
            (
                l["ifname"].as_str().unwrap().to_string(),
                l["ifindex"].as_u64().unwrap(),
                l["address"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    found.sort();
    found
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn attack_failed_add_in_a_shared_netns_leaves_the_other_containers_links() {
    if !root_or_skip("attack_failed_add_in_a_shared_netns_leaves_the_other_containers_links") {
        return;
    }
    let node = Node::start("atk-share", BLUE_NAD, &[]);
    let shared = Netns::new("atk-share-pod");
    let add = node.shim("ADD", &shared.path(), "a", &[]);
    assert!(add.status.success(), "{}\n{}", text(&add), log(node.dir.path()));
    let theirs = identities(&shared, &["eth0", "net1"]);
    assert_eq!(theirs.len(), 2, "{:?}", shared.links());
    let other = OsStr::new("d00d000000000000000000000000000000000000000000000000000000000002");
    // Another container in the same namespace: its eth0 is taken, ADD fails at once.
    let add = node.shim("ADD", &shared.path(), "a", &[("CNI_CONTAINERID", other)]);
    cni_error(&add);
    assert_eq!(
        identities(&shared, &["eth0", "net1"]),
        theirs,
        "rollback removed the other's links"
    );
    // Its master succeeds on eth1, then net1 is taken: only eth1 (its own) is rolled back.
    let eth1 = OsStr::new("eth1");
    let add = node.shim(
        "ADD",
        &shared.path(),
        "a",
        &[("CNI_CONTAINERID", other), ("CNI_IFNAME", eth1)],
    );
    let error = cni_error(&add);
    assert!(error["msg"].as_str().unwrap().contains("blue"), "{error}");
    assert_eq!(
        identities(&shared, &["eth0", "net1"]),
        theirs,
        "rollback removed the other's links"
    );
    assert!(!shared.has_link("eth1"), "its own eth1 was rolled back");
    // The runtime's DEL after the failed ADD removes nothing of the other container.
    let del = node.shim(
        "DEL",
        &shared.path(),
        "a",
        &[("CNI_CONTAINERID", other), ("CNI_IFNAME", eth1)],
    );
    assert!(del.status.success(), "{}", text(&del));
    assert_eq!(
        identities(&shared, &["eth0", "net1"]),
        theirs,
        "DEL removed the other's links"
    );
    let del = node.shim("DEL", &shared.path(), "a", &[]);
    assert!(del.status.success(), "{}", text(&del));
    assert_eq!(shared.links(), vec!["lo".to_string()]);
}

// ---- item 8: metrics, connections, timeouts, sizes ----

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn attack_hostile_verbs_do_not_reach_metric_labels() {
    if !root_or_skip("attack_hostile_verbs_do_not_reach_metric_labels") {
        return;
    }
    let node = Node::start("atk-met", "", &[]);
    for letter in ["X", "Y", "Z"] {
        let verb = letter.repeat(100_000);
        let request = post_cni(
            serde_json::json!({"CNI_COMMAND": verb, "CNI_CONTAINERID": "x", "CNI_IFNAME": "eth0"}),
            br#"{"cniVersion":"1.0.0","name":"weft","type":"weft-cni"}"#,
        );
        let (_, answer) = raw(&node.socket(), &request, Duration::from_secs(20));
        let (status, error) = parse_answer(&answer);
        assert_eq!(status, 400, "{error}");
        assert!(error["code"].is_u64(), "{error}");
        // The same verb from the static shim's `/cni-call`.
        let vars = [
            ("CNI_COMMAND", verb.as_str()),
            ("CNI_CONTAINERID", "x"),
            ("CNI_IFNAME", "eth0"),
        ];
        let body = weft_plugin_client::wire::encode_call(
            vars.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())),
            br#"{"cniVersion":"1.0.0","name":"weft","type":"weft-cni"}"#,
        );
        let request = weft_plugin_client::http::post_request(
            weft_plugin_client::wire::CNI_CALL_PATH,
            weft_plugin_client::wire::CONTENT_TYPE,
            &body,
        );
        let (_, answer) = raw(&node.socket(), &request, Duration::from_secs(20));
        let (status, error) = parse_answer(&answer);
        assert_eq!(status, 400, "{error}");
        assert_eq!(error["cniVersion"], "1.0.0", "{error}");
    }
    let (_, answer) = raw(
        &node.socket(),
        b"GET /metrics HTTP/1.1\r\nHost: weft\r\nConnection: close\r\n\r\n",
        Duration::from_secs(20),
    );
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(!text.contains("XXXXXXXX"), "a hostile verb became a label");
    assert!(text.contains("verb=\"other\""), "{text}");
    assert!(answer.len() < 64 << 10, "metrics grew to {} bytes", answer.len());
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn attack_more_connections_than_the_cap_get_a_prompt_cni_error() {
    if !root_or_skip("attack_more_connections_than_the_cap_get_a_prompt_cni_error") {
        return;
    }
    // Idle connections are held for up to 120 s: the cap, not the timeout, answers the ADD.
    let node = Node::start(
        "atk-cap",
        POD_P,
        &["--max-connections", "4", "--read-timeout", "120"],
    );
    let pod = Netns::new("atk-cap-pod");
    let idle: Vec<UnixStream> = (0..4)
        .map(|_| UnixStream::connect(node.socket()).unwrap())
        .collect();
    let started = Instant::now();
    let add = node.shim("ADD", &pod.path(), "p", &[]);
    let took = started.elapsed();
    let error = cni_error(&add);
    assert_eq!(error["code"], 11, "retryable: {error}");
    assert!(error["msg"].as_str().unwrap().contains("busy"), "{error}");
    assert!(took < Duration::from_secs(5), "ADD took {took:?}");
    assert_eq!(pod.links(), vec!["lo".to_string()]);
    // A flood over the cap is answered, and does not flood the log.
    for _ in 0..200 {
        let (_, answer) = raw(
            &node.socket(),
            b"GET /healthz HTTP/1.1\r\nHost: weft\r\n\r\n",
            Duration::from_secs(10),
        );
        assert_eq!(parse_answer(&answer).0, 503);
    }
    let logged = log(node.dir.path()).matches("connections refused").count();
    assert!(
        (1..=3).contains(&logged),
        "{logged} log lines for 201 refused connections"
    );
    // Once the idle connections go, the agent serves again.
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ready = Command::new(weft_bin())
            .args(["agent-ready", "--socket"])
            .arg(node.socket())
            .output()
            .unwrap();
        if ready.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "agent did not recover: {}",
            text(&ready)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn attack_huge_or_slow_requests_are_answered_within_the_timeout() {
    if !root_or_skip("attack_huge_or_slow_requests_are_answered_within_the_timeout") {
        return;
    }
    let node = Node::start("atk-size", "", &["--read-timeout", "2"]);
    // The weft binary's `/cni` and the static shim's `/cni-call` alike.
    for path in ["/cni", "/cni-call"] {
        // A body announced as 1 TB: refused before reading it.
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: weft\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n{{\"env\":"
        );
        let (took, answer) = raw(&node.socket(), request.as_bytes(), Duration::from_secs(15));
        let (status, error) = parse_answer(&answer);
        assert_eq!(status, 413, "{path}: {error}");
        assert!(error["msg"].as_str().unwrap().contains("limit"), "{error}");
        assert!(took < Duration::from_secs(10), "took {took:?}");
        // A body that never arrives: answered at the read timeout.
        let request = format!("POST {path} HTTP/1.1\r\nHost: weft\r\nContent-Length: 100\r\n\r\n{{\"env\":");
        let (took, answer) = raw(&node.socket(), request.as_bytes(), Duration::from_secs(15));
        let (status, error) = parse_answer(&answer);
        assert_eq!(status, 408, "{path}: {error}");
        assert!(took < Duration::from_secs(10), "took {took:?}");
    }
    // A `/cni-call` body that is not a call: a complete CNI error the static shim can print.
    let (_, answer) = raw(
        &node.socket(),
        b"POST /cni-call HTTP/1.1\r\nHost: weft\r\nContent-Length: 7\r\nConnection: close\r\n\r\ngarbage",
        Duration::from_secs(15),
    );
    let (status, error) = parse_answer(&answer);
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["code"], 6, "{error}");
    assert_eq!(error["cniVersion"], "1.1.0", "{error}");
    // A head that never ends: the connection is closed at the read timeout.
    let (took, _) = raw(
        &node.socket(),
        b"POST /cni HTTP/1.1\r\nHost: we",
        Duration::from_secs(15),
    );
    assert!(
        took < Duration::from_secs(10),
        "idle head held the connection {took:?}"
    );
    // A 10 MB config through the shim: a size error naming the limit, not "unreachable".
    let mut conf = node.conf.clone();
    conf["padding"] = serde_json::Value::String("x".repeat(10 << 20));
    let pod = Netns::new("atk-size-pod");
    let add = shim_with(
        &node.bin,
        conf.to_string().as_bytes(),
        "ADD",
        &pod.path(),
        "p",
        &[],
    );
    let error = cni_error(&add);
    assert_eq!(error["code"], 7, "{error}");
    assert!(error["msg"].as_str().unwrap().contains("1048576"), "{error}");
    // The agent still serves.
    let (_, answer) = raw(
        &node.socket(),
        b"GET /healthz HTTP/1.1\r\nHost: weft\r\nConnection: close\r\n\r\n",
        Duration::from_secs(15),
    );
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn attack_metrics_on_a_network_address_are_refused_unless_meant() {
    if !root_or_skip("attack_metrics_on_a_network_address_are_refused_unless_meant") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let socket = state.join("weft.sock");
    let mut agent = spawn_agent_with(state, &socket, &["--metrics-addr", "0.0.0.0:0"]);
    assert!(!wait_exit(&mut agent.0, Duration::from_secs(20)).success());
    assert!(log(state).contains("not a loopback address"), "{}", log(state));
    assert!(!socket.exists());
}

/// A system user for attacks (created if missing): (uid, gid).
fn attacker(tag: &str) -> (String, String) {
    let name = format!("weft-attacker-{tag}");
    let id = |flag: &str| {
        let out = Command::new("id").arg(flag).arg(&name).output().unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    if id("-u").is_none() {
        let made = Command::new("useradd")
            .args(["-r", "-M", &name])
            .output()
            .unwrap();
        // A parallel test may have created it meanwhile.
        assert!(made.status.success() || id("-u").is_some(), "{}", text(&made));
    }
    (id("-u").unwrap(), id("-g").unwrap())
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn attack_unprivileged_flood_of_the_metrics_port_does_not_block_cni() {
    if !root_or_skip("attack_unprivileged_flood_of_the_metrics_port_does_not_block_cni") {
        return;
    }
    let (uid, gid) = attacker("agent");
    let node = Node::start(
        "atk-tcp",
        POD_P,
        &[
            "--metrics-addr",
            "127.0.0.1:9102",
            "--max-connections",
            "4",
            "--read-timeout",
            "120",
        ],
    );
    // An unprivileged user takes every connection slot of the TCP listener with idle connections.
    let (reuid, regid) = (format!("--reuid={uid}"), format!("--regid={gid}"));
    let _holders: Vec<KillOnDrop> = (0..4)
        .map(|_| {
            KillOnDrop(
                node.node
                    .command(&[
                        "setpriv",
                        &reuid,
                        &regid,
                        "--clear-groups",
                        "busybox",
                        "nc",
                        "127.0.0.1",
                        "9102",
                    ])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let established = node
            .node
            .exec(&["ss", "-Htn", "state", "established", "( sport = :9102 )"])
            .lines()
            .count();
        if established >= 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the attacker's connections did not open"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // More TCP connections are answered "busy" at once...
    let started = Instant::now();
    let metrics = node
        .node
        .command(&[
            "busybox",
            "wget",
            "-q",
            "-S",
            "-O",
            "-",
            "http://127.0.0.1:9102/metrics",
        ])
        .output()
        .unwrap();
    assert!(!metrics.status.success(), "{}", text(&metrics));
    assert!(
        String::from_utf8_lossy(&metrics.stderr).contains("503"),
        "{}",
        text(&metrics)
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // ...and CNI requests on the root-only socket are not affected.
    let pod = Netns::new("atk-tcp-pod");
    let add = node.shim("ADD", &pod.path(), "p", &[]);
    assert!(add.status.success(), "{}", text(&add));
    assert!(pod.has_link("eth0"));
    let del = node.shim("DEL", &pod.path(), "p", &[]);
    assert!(del.status.success(), "{}", text(&del));
}
