//! Leak check, run after the other root test binaries (cargo runs test
//! targets in name order): no `wt-host-<pid>-<n>` namespace may outlive the
//! test process `<pid>` that created it. Namespaces of processes still
//! running (a parallel run) are not leaks.

use weft_host::Netns;

const PREFIX: &str = "wt-host-";

fn creator_pid(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()
}

#[test]
fn no_test_namespace_outlives_its_test_process() {
    let leaked: Vec<String> = Netns::list_named()
        .unwrap()
        .into_iter()
        .filter(|name| {
            creator_pid(name).is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
        })
        .collect();
    assert!(leaked.is_empty(), "leaked test namespaces: {leaked:?}");
}

#[test]
fn creator_pid_is_read_from_the_name() {
    assert_eq!(creator_pid("wt-host-1234-7"), Some(1234));
    assert_eq!(creator_pid("wt-dhcp-1234-7"), None);
    assert_eq!(creator_pid("wt-host-x-7"), None);
}
