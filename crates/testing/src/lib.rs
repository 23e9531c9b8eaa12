//! Test support shared by the root tests of several crates: throwaway network namespaces and
//! commands run in them.

pub mod agent;
pub mod real_apiserver;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// True when the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The variable `scripts/test.sh` sets when it runs the suite as root: then a root test that
/// cannot run fails instead of skipping, since a skip there hides a broken environment.
pub const REQUIRE_ROOT_TESTS_ENV: &str = "WEFT_REQUIRE_ROOT_TESTS";

/// Test `name` cannot run because of `why`: returns false after saying so, or panics when the
/// run requires every root test ([`REQUIRE_ROOT_TESTS_ENV`]). Root tests are also marked
/// `#[ignore = "needs root: ..."]`, so that a run as another user shows them as skipped;
/// `scripts/test.sh` runs them (`--run-ignored all`) as root.
pub fn skip(name: &str, why: &str) -> bool {
    if std::env::var_os(REQUIRE_ROOT_TESTS_ENV).is_some_and(|v| v == "1") {
        panic!("{name} cannot run: {why} ({REQUIRE_ROOT_TESTS_ENV}=1: every root test must run here)");
    }
    eprintln!("skipping {name}: {why}");
    false
}

/// True when the test `name` runs as root and may create namespaces; otherwise says why it skips.
pub fn root_or_skip(name: &str) -> bool {
    if !is_root() {
        return skip(name, "needs root (CAP_NET_ADMIN)");
    }
    true
}

/// True when the test `name` may create namespaces and run busybox in them; otherwise says why it
/// skips.
pub fn can_run_root_test(name: &str) -> bool {
    if !root_or_skip(name) {
        return false;
    }
    if Command::new("busybox").arg("true").output().is_err() {
        return skip(name, "busybox not installed");
    }
    true
}

/// Where the reference CNI plugins (containernetworking/plugins: bridge, host-local, macvlan...)
/// are installed.
pub const REFERENCE_PLUGIN_DIR: &str = "/usr/lib/cni";

/// True when the reference CNI plugins are installed in [`REFERENCE_PLUGIN_DIR`]; otherwise
/// says why test `name` skips (see [`skip`]).
pub fn reference_plugins_or_skip(name: &str) -> bool {
    std::path::Path::new(REFERENCE_PLUGIN_DIR).join("bridge").exists()
        || skip(
            name,
            &format!("reference CNI plugins not installed in {REFERENCE_PLUGIN_DIR}"),
        )
}

/// `<pid>-<n>`: unique within this machine's running tests, for names of links, bridges and
/// directories a test creates.
pub fn unique() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs a command, panicking with its output when it fails.
pub fn run(args: &[&str]) -> Output {
    let output = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        output.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// `ip -j ARGS...` parsed as JSON (an empty array when `ip` prints nothing); panics when it fails.
pub fn ip_json(args: &[&str]) -> serde_json::Value {
    let mut full = vec!["ip", "-j"];
    full.extend_from_slice(args);
    let output = run(&full);
    let text = String::from_utf8_lossy(&output.stdout);
    if text.trim().is_empty() {
        serde_json::Value::Array(Vec::new())
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{full:?} printed no JSON ({e}): {text}"))
    }
}

/// A network namespace named `wt-<tag><pid>-<n>`, deleted on drop.
pub struct Netns {
    /// Its name under /run/netns.
    pub name: String,
}

impl Netns {
    /// Creates a fresh namespace with loopback up.
    pub fn new(tag: &str) -> Self {
        let name = format!("wt-{tag}{}", unique());
        run(&["ip", "netns", "add", &name]);
        let netns = Self { name };
        netns.ip(&["link", "set", "lo", "up"]);
        netns
    }

    /// Its bind mount, `/run/netns/<name>`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// `ip -n <name> ARGS...`
    pub fn ip(&self, args: &[&str]) -> Output {
        let mut full = vec!["ip", "-n", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    /// `ip -j -n <name> ARGS...` parsed as JSON, as [`ip_json`].
    pub fn ip_json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = vec!["-n", &self.name];
        full.extend_from_slice(args);
        ip_json(&full)
    }

    /// Creates a veth pair: `name` in this namespace, its peer `peer_name` in `peer`.
    pub fn add_veth(&self, name: &str, peer: &Netns, peer_name: &str) {
        self.ip(&[
            "link", "add", name, "type", "veth", "peer", "name", peer_name, "netns", &peer.name,
        ]);
    }

    /// `ip -j -d link` inside: every link, with details.
    pub fn link_details(&self) -> Vec<serde_json::Value> {
        self.ip_json(&["-d", "link"])
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Names of the links inside.
    pub fn links(&self) -> Vec<String> {
        self.link_details()
            .iter()
            .filter_map(|l| l["ifname"].as_str().map(String::from))
            .collect()
    }

    /// Whether a link named `dev` exists in this namespace.
    pub fn has_link(&self, dev: &str) -> bool {
        Command::new("ip")
            .args(["-n", &self.name, "link", "show", "dev", dev])
            .output()
            .unwrap()
            .status
            .success()
    }

    /// The command `ip netns exec <name> ARGS...` (ARGS starting with the program), not yet run:
    /// for a program in the background, on stdin, or allowed to fail.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).args(args);
        command
    }

    /// Runs ARGS (starting with the program) in this namespace, panicking with its output when
    /// it fails; returns its stdout.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        String::from_utf8_lossy(&run(&full).stdout).into_owned()
    }

    /// Runs `f` on a short-lived thread that has entered this namespace.
    pub fn enter<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let file = File::open(self.path()).unwrap();
        std::thread::spawn(move || {
            // SAFETY: setns on this dedicated thread only; the fd is valid for the call.
            assert_eq!(
                unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) },
                0,
                "setns"
            );
            f()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}
