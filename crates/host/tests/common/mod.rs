//! Shared helpers of the root tests: throwaway named namespaces made through
//! our API, and `ip -j` as an independent oracle. (Self-skipping when not
//! root is `weft_testing::root_or_skip`.)

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};

use weft_host::{Netlink, Netns};

/// Prefix of every namespace these tests create: `wt-host-<pid>-<n>`.
pub const PREFIX: &str = "wt-host-";

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
        let mut full = vec!["-n", &self.name];
        full.extend_from_slice(args);
        weft_testing::ip_json(&full)
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
