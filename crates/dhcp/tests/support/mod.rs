//! What the DHCP root tests share: the pod/guest namespace pair of the IPv6 tests and the bounded
//! wait on a server's drop counter.
#![allow(dead_code)]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use weft_dhcp::ServerHandle;
use weft_testing::Netns;

/// Namespaces `<tag>p` (the pod) and `<tag>g` (the guest) with IPv6 duplicate address detection
/// off, so static and leased addresses are usable at once (no tentative state to wait out).
pub fn pod_and_guest_without_dad(tag: &str) -> (Netns, Netns) {
    let pod = Netns::new(&format!("{tag}p"));
    let guest = Netns::new(&format!("{tag}g"));
    for netns in [&pod, &guest] {
        for scope in ["all", "default"] {
            netns.exec(&["sysctl", "-qw", &format!("net.ipv6.conf.{scope}.accept_dad=0")]);
        }
    }
    (pod, guest)
}

/// Waits (bounded, 10 s) until `server` counted `at_least` dropped requests.
pub fn wait_dropped(server: &ServerHandle, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.stats().dropped.load(Ordering::Relaxed) < at_least {
        assert!(
            Instant::now() < deadline,
            "server never dropped: {:?}",
            server.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
