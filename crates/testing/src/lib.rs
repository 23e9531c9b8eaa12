//! Test support shared by the root tests of several crates: throwaway network namespaces and
//! commands run in them.

pub mod agent;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// True when the test may create namespaces; otherwise says why it skips.
pub fn can_run_root_test(name: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping {name}: needs root (CAP_NET_ADMIN)");
        return false;
    }
    if Command::new("busybox").arg("true").output().is_err() {
        eprintln!("skipping {name}: busybox not installed");
        return false;
    }
    true
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

/// A network namespace named `wt-<tag><pid>-<n>`, deleted on drop.
pub struct Netns {
    /// Its name under /run/netns.
    pub name: String,
}

impl Netns {
    /// Creates a fresh namespace with loopback up.
    pub fn new(tag: &str) -> Self {
        let name = format!(
            "wt-{tag}{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        run(&["ip", "netns", "add", &name]);
        let netns = Self { name };
        netns.ip(&["link", "set", "lo", "up"]);
        netns
    }

    /// `ip -n <name> ARGS...`
    pub fn ip(&self, args: &[&str]) -> Output {
        let mut full = vec!["ip", "-n", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    /// Runs `f` on a short-lived thread that has entered this namespace.
    pub fn enter<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let file = File::open(format!("/run/netns/{}", self.name)).unwrap();
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
