//! Shared helpers of the root tests: self-skipping, throwaway named
//! namespaces, and `ip -j` as an independent oracle.

#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use weft_host::{Netlink, Netns};

/// Prefix of every namespace these tests create: `wt-host-<pid>-<n>`.
pub const PREFIX: &str = "wt-host-";

/// True when the test can touch the kernel; prints why not otherwise.
pub fn root_or_skip() -> bool {
    if nix::unistd::geteuid().is_root() {
        true
    } else {
        eprintln!("skipped: needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)");
        false
    }
}

/// A named namespace that is deleted when dropped (also on panic).
pub struct TestNs {
    pub name: String,
    pub ns: Netns,
}

impl TestNs {
    pub fn new() -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let ns = Netns::create_named(&name).unwrap_or_else(|e| panic!("{e}"));
        TestNs { name, ns }
    }

    pub fn netlink(&self) -> Netlink {
        Netlink::open_in(&self.ns).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `ip -j -n NAME ARGS...` parsed as JSON.
    pub fn ip_json(&self, args: &[&str]) -> serde_json::Value {
        let output = Command::new("ip")
            .args(["-j", "-n", &self.name])
            .args(args)
            .output()
            .expect("run ip");
        assert!(
            output.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8_lossy(&output.stdout);
        if text.trim().is_empty() {
            serde_json::Value::Array(Vec::new())
        } else {
            serde_json::from_str(&text).expect("ip -j output is JSON")
        }
    }

    /// `ip -j -n NAME link show DEV` as one JSON object.
    pub fn ip_link(&self, dev: &str) -> serde_json::Value {
        self.ip_json(&["-d", "link", "show", "dev", dev])[0].clone()
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        if let Err(e) = Netns::delete_named(&self.name) {
            eprintln!("cleanup: {e}");
        }
    }
}
