//! Attacks on weft-ipam's embedded store through the installed plugin (the static client,
//! which runs the full plugin when no agent answers), as a node runs it: an unprivileged local
//! user holding or opening the writers' lock, a config naming a state directory through a link
//! or outside the node's roots, a store someone else owns or can write, an emptied or damaged
//! store, and configs that are invalid or claim every address.
//!
//! No network namespaces: an IPAM plugin never enters CNI_NETNS. The tests that need another
//! user or `chown` need root.

mod common;

use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{text, weft};
use serde_json::{Value, json};

/// The unprivileged local user of these tests.
const ATTACKER: &str = "weft-attacker-store";

/// A node's CNI bin dir with weft's plugins, and the root under which configs may name stores.
struct Node {
    dir: tempfile::TempDir,
}

/// What one plugin process answered: exit code, and the parsed stdout.
struct Answer {
    code: Option<i32>,
    stdout: Value,
    raw: String,
}

impl Answer {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }
    /// The CNI error's code and `msg` + `details`.
    fn error(&self) -> (u64, String) {
        assert_ne!(self.code, Some(0), "expected a CNI error: {}", self.raw);
        let code = self.stdout["code"]
            .as_u64()
            .unwrap_or_else(|| panic!("no CNI error: {}", self.raw));
        let msg = format!(
            "{} / {}",
            self.stdout["msg"].as_str().unwrap_or_default(),
            self.stdout["details"].as_str().unwrap_or_default()
        );
        (code, msg)
    }
}

impl Node {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        common::install_plugins(&dir.path().join("bin"));
        Self { dir }
    }

    /// The allowed root (`WEFT_IPAM_STATE_ROOTS`).
    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn state(&self) -> PathBuf {
        self.root().join("state")
    }

    fn config(&self, state: &Path, range: &str) -> Value {
        json!({"cniVersion": "1.0.0", "name": "blue", "type": "bridge",
               "ipam": {"type": "weft-ipam", "range": range, "stateDir": state}})
    }

    fn run(&self, verb: &str, container: &str, config: &Value) -> Answer {
        self.run_with_args(verb, container, "", config)
    }

    fn run_with_args(&self, verb: &str, container: &str, cni_args: &str, config: &Value) -> Answer {
        let bin = self.dir.path().join("bin");
        std::fs::create_dir_all(self.root()).unwrap();
        let mut child = Command::new(bin.join("weft-ipam"))
            .env("CNI_COMMAND", verb)
            .env("CNI_CONTAINERID", container)
            .env("CNI_IFNAME", "net1")
            .env("CNI_NETNS", "/var/run/netns/not-entered")
            .env("CNI_PATH", &bin)
            .env("CNI_ARGS", cni_args)
            .env("WEFT_IPAM_STATE_ROOTS", self.root())
            .env("WEFT_IPAM_KUBECONFIG_ROOTS", self.root().join("creds"))
            .env_remove("WEFT_STATE_DIR")
            .env_remove("WEFT_NODE_NAME")
            .env_remove("WEFT_IPAM_SOCKET")
            .env_remove("WEFT_IPAM_DEFAULT_STORE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn weft-ipam");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(config.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let raw = String::from_utf8_lossy(&out.stdout).into_owned();
        Answer {
            code: out.status.code(),
            stdout: serde_json::from_str(&raw).unwrap_or(Value::Null),
            raw: format!("{raw}\n--- stderr\n{}", String::from_utf8_lossy(&out.stderr)),
        }
    }

    /// ADD `n` attachments `<prefix>-<i>` on the node's store.
    fn fill(&self, prefix: &str, n: usize) {
        let config = self.config(&self.state(), "10.60.0.0/16");
        for i in 0..n {
            let answer = self.run("ADD", &format!("{prefix}-{i}"), &config);
            assert!(answer.ok(), "ADD {prefix}-{i}: {}", answer.raw);
        }
    }
}

fn mode_and_owner(path: &Path) -> (u32, u32) {
    let meta = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (meta.mode() & 0o7777, meta.uid())
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The attacker's uid and gid, creating the user when missing.
fn attacker() -> (u32, u32) {
    let id = |flag: &str| Command::new("id").args([flag, ATTACKER]).output().unwrap();
    if !id("-u").status.success() {
        let made = Command::new("useradd")
            .args(["-r", "-M", ATTACKER])
            .output()
            .unwrap();
        assert!(made.status.success(), "useradd: {}", text(&made));
    }
    let number = |flag: &str| {
        String::from_utf8_lossy(&id(flag).stdout)
            .trim()
            .parse::<u32>()
            .unwrap()
    };
    (number("-u"), number("-g"))
}

/// `args` run as the attacker.
fn as_attacker(args: &[&str]) -> std::process::Output {
    let (uid, gid) = attacker();
    Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--clear-groups",
        ])
        .args(args)
        .output()
        .unwrap()
}

/// Finding 1: the writers' lock was 0644, so any local user could open it and hold it forever.
/// It is now 0600 and root's, in a 0700 directory: the attacker cannot even open it (nor read
/// the store), even when the node's administrator made the state directory traversable.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn an_unprivileged_user_cannot_take_the_writer_lock() {
    if !common::root_or_skip("an_unprivileged_user_cannot_take_the_writer_lock") {
        return;
    }
    let node = Node::new();
    node.fill("a", 1);
    let state = node.state();
    let lock = state.join("store.db-writer.lock");
    for file in ["store.db", "store.db-wal", "store.db-shm", "store.db-writer.lock"] {
        assert_eq!(mode_and_owner(&state.join(file)), (0o600, 0), "{file}");
    }
    assert_eq!(mode_and_owner(&state), (0o700, 0));
    // Let the attacker reach the files, as a 0755 /var/lib/weft would.
    for dir in [node.dir.path(), &node.root(), &state] {
        std::fs::set_permissions(dir, PermissionsExt::from_mode(0o755)).unwrap();
    }
    let lock_arg = lock.to_str().unwrap();
    let out = as_attacker(&["flock", "-s", "-n", lock_arg, "true"]);
    assert!(
        !out.status.success(),
        "the attacker took the lock: {}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{}",
        text(&out)
    );
    let out = as_attacker(&["cat", state.join("store.db").to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "the attacker read the store: {}",
        text(&out)
    );
    // The store still works for root.
    node.fill("b", 1);
}

/// Finding 1, the wait: whoever holds the lock (here a stuck root process) no longer stops
/// writers forever; the ADD ends after the busy timeout (10 s) with a CNI error naming the lock.
#[test]
fn a_held_writer_lock_ends_the_add_with_an_error_naming_it() {
    let node = Node::new();
    node.fill("a", 1);
    let lock = node.state().join("store.db-writer.lock");
    // flock holds the lock (`-o`: not its child) until the child's stdin closes.
    let mut holder = Command::new("flock")
        .args(["-o", "-x"])
        .arg(&lock)
        .args(["sh", "-c", "echo locked; read line"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    let started = Instant::now();
    let answer = node.run("ADD", "b-0", &node.config(&node.state(), "10.60.0.0/16"));
    let waited = started.elapsed();
    drop(holder.stdin.take());
    holder.wait().unwrap();
    let (code, msg) = answer.error();
    assert_eq!(code, 11, "{msg}");
    assert!(
        msg.contains(&format!(
            "store writer lock {} held by another process for 10 s",
            lock.display()
        )),
        "{msg}"
    );
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(30),
        "{waited:?}"
    );
    // The lock free again, the same ADD succeeds.
    node.fill("b", 1);
}

/// Finding 2: `stateDir` through a link made root create files and directories wherever the
/// link pointed (/etc). Refused now, and nothing is created at the target.
#[test]
fn a_state_dir_through_a_link_is_refused_and_nothing_is_created() {
    let node = Node::new();
    let target = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(node.root()).unwrap();
    symlink(target.path(), node.root().join("etc")).unwrap();
    for state in [node.root().join("etc"), node.root().join("etc/new/dir/tree")] {
        let (code, msg) = node.run("ADD", "a", &node.config(&state, "10.60.0.0/16")).error();
        assert_eq!(code, 5, "{msg}");
        assert!(msg.contains("symbolic link"), "{msg}");
        assert!(
            entries(target.path()).is_empty(),
            "created at the link's target: {:?}",
            entries(target.path())
        );
    }
}

/// Finding 2: `stateDir` may only name a directory under a root the node chose.
#[test]
fn a_state_dir_outside_the_allowed_roots_is_refused() {
    let node = Node::new();
    let outside = tempfile::tempdir().unwrap();
    let escape = format!("{}/../{}", node.root().display(), outside.path().display());
    for state in [
        outside.path().join("store"),
        PathBuf::from(escape),
        PathBuf::from("relative/dir"),
    ] {
        let (code, msg) = node.run("ADD", "a", &node.config(&state, "10.60.0.0/16")).error();
        assert_eq!(code, 7, "{msg}");
        assert!(msg.contains("ipam.stateDir"), "{msg}");
    }
    assert!(entries(outside.path()).is_empty());
}

/// Finding 2's sibling: a NAD's `ipam.kubernetes.kubeconfig` made root read credentials from any
/// path. It must be a regular file root owns and only root writes, under the directories the
/// node keeps credentials in (or the administrator's `WEFT_IPAM_KUBECONFIG_ROOTS`).
#[test]
fn a_kubeconfig_from_a_nad_must_be_a_root_file_where_the_node_keeps_credentials() {
    let node = Node::new();
    let config = |path: &Path| {
        json!({"cniVersion": "1.0.0", "name": "blue", "type": "bridge",
               "ipam": {"type": "weft-ipam", "range": "10.60.0.0/16", "kubernetes": {"kubeconfig": path}}})
    };
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        outside.path().join("kubeconfig"),
        "apiVersion: v1
",
    )
    .unwrap();
    for path in [
        PathBuf::from("/root/.kube/config"),
        outside.path().join("kubeconfig"),
        node.root().join("creds/../../etc/passwd"),
    ] {
        let (code, msg) = node.run("ADD", "a", &config(&path)).error();
        assert_eq!(code, 7, "{msg}");
        assert!(msg.contains("ipam.kubernetes.kubeconfig"), "{msg}");
    }
    let creds = node.root().join("creds");
    std::fs::create_dir_all(&creds).unwrap();
    symlink(outside.path().join("kubeconfig"), creds.join("link")).unwrap();
    let (code, msg) = node.run("ADD", "a", &config(&creds.join("link"))).error();
    assert_eq!(code, 5, "{msg}");
    assert!(msg.contains("symbolic link"), "{msg}");
    std::fs::write(
        creds.join("open"),
        "apiVersion: v1
",
    )
    .unwrap();
    std::fs::set_permissions(creds.join("open"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, msg) = node.run("ADD", "a", &config(&creds.join("open"))).error();
    assert_eq!(code, 5, "{msg}");
    assert!(msg.contains("writable by others"), "{msg}");
}

/// Finding 2: a store (or state directory) someone else owns or can write was trusted, so its
/// owner could delete reservations and have the victim's address handed out again.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_store_another_user_owns_or_can_write_is_refused() {
    if !common::root_or_skip("a_store_another_user_owns_or_can_write_is_refused") {
        return;
    }
    let (uid, _) = attacker();
    let node = Node::new();
    node.fill("a", 2);
    let state = node.state();
    let store = state.join("store.db");
    let config = node.config(&state, "10.60.0.0/16");
    let refused = |expect: &str| {
        let (code, msg) = node.run("ADD", "b", &config).error();
        assert_eq!(code, 5, "{msg}");
        assert!(msg.contains(expect), "{msg}");
    };
    std::os::unix::fs::chown(&store, Some(uid), None).unwrap();
    refused(&format!("owned by uid {uid}"));
    std::os::unix::fs::chown(&store, Some(0), None).unwrap();
    std::fs::set_permissions(&store, PermissionsExt::from_mode(0o666)).unwrap();
    refused("writable by group or others");
    std::fs::set_permissions(&store, PermissionsExt::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&state, Some(uid), None).unwrap();
    refused(&format!("owned by uid {uid}"));
    std::os::unix::fs::chown(&state, Some(0), None).unwrap();
    std::fs::set_permissions(&state, PermissionsExt::from_mode(0o777)).unwrap();
    refused("writable by group or others");
    std::fs::set_permissions(&state, PermissionsExt::from_mode(0o700)).unwrap();
    node.fill("c", 1);
}

/// Finding 3: a store truncated to 0 bytes was re-created empty, and new ADDs got addresses
/// running pods still held. Now the ADD is refused and the file is left as it is.
#[test]
fn an_emptied_store_is_refused_and_left_untouched() {
    let node = Node::new();
    node.fill("a", 5);
    let store = node.state().join("store.db");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&store)
        .unwrap()
        .set_len(0)
        .unwrap();
    let (code, msg) = node
        .run("ADD", "b", &node.config(&node.state(), "10.60.0.0/16"))
        .error();
    assert_eq!(code, 5, "{msg}");
    assert!(msg.contains("is empty (0 bytes)"), "{msg}");
    assert_eq!(
        std::fs::metadata(&store).unwrap().len(),
        0,
        "the store was touched"
    );
    let out = weft(&node.state(), &["ipam", "list"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is empty (0 bytes)"),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::metadata(&store).unwrap().len(),
        0,
        "the store was touched"
    );
}

/// Everything of the store at `path` into its main file: a long-lived open (the last connection
/// to close checkpoints and removes the WAL), then wait for the WAL to be gone.
fn checkpoint(path: &Path) {
    drop(weft_store::SqliteStore::open(path).unwrap());
    let wal = path.with_file_name("store.db-wal");
    let deadline = Instant::now() + Duration::from_secs(10);
    while wal.exists() {
        assert!(Instant::now() < deadline, "the WAL of {} stayed", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Random bytes over pages `pages` (4 KiB each) of `path`.
fn scribble(path: &Path, pages: std::ops::Range<u64>) {
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    for page in pages {
        file.seek(SeekFrom::Start(page * 4096)).unwrap();
        let noise: Vec<u8> = (0..4096u64)
            .map(|i| ((i + page).wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        file.write_all(&noise).unwrap();
    }
}

/// Finding 3: random bytes over middle pages: ADD used to succeed while `ipam list` said the
/// image is malformed. Now every long-lived open (the CLI, the agent) refuses the store after
/// its integrity check; the plugin, which skips that scan to stay fast, fails clearly on the
/// first damaged page it reads, and never treats one as data.
#[test]
fn damaged_pages_fail_clearly() {
    let node = Node::new();
    node.fill("a", 250);
    let store = node.state().join("store.db");
    checkpoint(&store);
    let pages = std::fs::metadata(&store).unwrap().len() / 4096;
    assert!(pages >= 40, "store of {pages} pages");
    scribble(&store, pages * 2 / 5..pages * 3 / 5);
    for args in [&["ipam", "list"][..], &["ipam", "check"][..]] {
        let out = weft(&node.state(), args);
        assert!(!out.status.success(), "{args:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("failed its integrity check"),
            "{args:?}: {}",
            text(&out)
        );
    }
    // Every page after the schema's: the ADD's own lookups meet the damage.
    scribble(&store, 1..pages);
    let before = std::fs::read(&store).unwrap();
    let (code, msg) = node
        .run("ADD", "b", &node.config(&node.state(), "10.60.0.0/16"))
        .error();
    assert_eq!(code, 5, "{msg}");
    assert!(msg.contains("damaged"), "{msg}");
    assert_eq!(
        std::fs::read(&store).unwrap(),
        before,
        "the damaged store was written to"
    );
}

/// Finding 9: an invalid config created the store before being refused, and `range: 0.0.0.0/0`
/// handed out addresses of every network. Both are refused before any store exists.
#[test]
fn invalid_configs_are_refused_before_any_store_exists() {
    let node = Node::new();
    let state = node.root().join("fresh");
    for (range, field) in [
        ("10.0.0.0/33", "ipam.range"),
        ("0.0.0.0/0", "ipam.range"),
        ("::/0", "ipam.range"),
        ("10.0.0.0/4", "ipam.range"),
    ] {
        for verb in ["ADD", "DEL", "CHECK"] {
            let (code, msg) = node.run(verb, "a", &node.config(&state, range)).error();
            assert_eq!(code, 7, "{verb} {range}: {msg}");
            assert!(msg.starts_with(&format!("{field}: ")), "{verb} {range}: {msg}");
        }
    }
    assert!(
        !state.exists(),
        "a store directory was created: {:?}",
        entries(&state)
    );
    assert_eq!(entries(&node.root()), Vec::<String>::new());
}

/// `weft ipam check` after a store lost a reservation (the state a truncated store restored
/// from a backup leaves): it names the address a running pod holds without a reservation, and
/// says nothing of addresses outside weft-ipam pools; on a consistent store it says ok.
#[test]
fn ipam_check_names_addresses_held_without_a_reservation() {
    let node = Node::new();
    let config = node.config(&node.state(), "10.61.0.0/24");
    let add = |pod: &str| {
        let answer = node.run_with_args(
            "ADD",
            &format!("c-{pod}"),
            &format!("K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod}"),
            &config,
        );
        assert!(answer.ok(), "{}", answer.raw);
        answer.stdout["ips"][0]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string()
    };
    let (ip_a, ip_b) = (add("a"), add("b"));
    // The cluster as the check sees it: the NAD, and the pods with their network-status.
    let objects: Vec<weft_store::Object> = [
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"name": "blue", "namespace": "default"},
               "spec": {"config": config.to_string()}}),
        pod_with_status("a", "c-a", &[&ip_a]),
        pod_with_status("b", "c-b", &[&ip_b, "192.168.9.9"]),
    ]
    .into_iter()
    .map(|o| serde_json::from_value(o).unwrap())
    .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = weft_store::SqliteStore::open(node.state().join("store.db")).unwrap();
        for obj in objects {
            let ty = match obj.kind.as_str() {
                "Pod" => weft_store::ResourceType::new("v1", "Pod", "pods", true),
                _ => weft_store::ResourceType::new(
                    "k8s.cni.cncf.io/v1",
                    "NetworkAttachmentDefinition",
                    "network-attachment-definitions",
                    true,
                ),
            };
            weft_store::Store::create(&store, &ty, obj).await.unwrap();
        }
    });
    let out = weft(&node.state(), &["ipam", "check"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout.contains("passed its integrity check"), "{stdout}");
    assert!(stdout.contains("ok: nothing to repair"), "{stdout}");
    // b's reservation is lost while b still runs with the address.
    let answer = node.run_with_args("DEL", "c-b", "K8S_POD_NAMESPACE=default;K8S_POD_NAME=b", &config);
    assert!(answer.ok(), "{}", answer.raw);
    for args in [&["ipam", "check"][..], &["ipam", "check", "--repair"][..]] {
        let out = weft(&node.state(), args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(
            stdout.contains(&format!(
                "unreserved: {ip_b} is held by default/b with no reservation"
            )),
            "{stdout}"
        );
        assert!(
            !stdout.contains("192.168.9.9") && !stdout.contains(&format!("{ip_a} ")),
            "{stdout}"
        );
    }
}

fn pod_with_status(name: &str, sandbox: &str, ips: &[&str]) -> Value {
    let status = json!([{"name": "default/blue", "interface": "net1", "ips": ips, "dns": {}}]);
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                        "annotations": {"weft.dev/sandbox-id": sandbox,
                                        "k8s.v1.cni.cncf.io/network-status": status.to_string()}},
           "spec": {"nodeName": "n1"}})
}
