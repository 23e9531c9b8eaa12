//! Leak check: no test namespace may outlive the test process that created it. Every root test
//! names its namespaces after its process: `wt-host-<pid>-<n>` (weft-host's own tests) and
//! `wt-<tag><pid>-<n>` (weft-testing's `Netns`, used by every other crate). Namespaces of
//! processes still running (a parallel run) are not leaks.
//!
//! `scripts/test.sh` runs this binary alone, after every other test has finished (nextest runs
//! test binaries in parallel, so no name order can make it last); in the main run it is
//! filtered out.

use weft_host::Netns;

/// The pid of the test process that named namespace `name`, when it is a test namespace.
fn creator_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("wt-")?;
    let (head, counter) = rest.rsplit_once('-')?;
    counter.parse::<u32>().ok()?;
    // `host-<pid>` or `<tag><pid>`: the pid is the run of digits at the end of `head`.
    let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    head[head.len() - digits..].parse().ok()
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
    assert_eq!(creator_pid("wt-ak-node1234-0"), Some(1234));
    assert_eq!(creator_pid("wt-pod99-12"), Some(99));
    assert_eq!(creator_pid("wt-host-x-7"), None);
    assert_eq!(creator_pid("weft-node1"), None);
    assert_eq!(creator_pid("wt-br0"), None);
}
