//! Root tests for network namespaces (real kernel; self-skip when not root).

mod common;

use std::process::Command;

use common::TestNs;
use weft_host::{HostError, Netns};
use weft_testing::root_or_skip;

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn create_list_open_delete_named_namespace() {
    if !root_or_skip("create_list_open_delete_named_namespace") {
        return;
    }
    let test = TestNs::new();
    assert!(Netns::list_named().unwrap().contains(&test.name));
    let reopened = Netns::open_named(&test.name).unwrap();
    assert_eq!(reopened.inode().unwrap(), test.ns.inode().unwrap());
    assert_ne!(
        test.ns.inode().unwrap(),
        Netns::current_thread().unwrap().inode().unwrap()
    );
    // `ip netns` sees it exactly like one of its own.
    let listed = Command::new("ip").args(["-j", "netns", "list"]).output().unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|ns| ns["name"] == test.name.as_str()),
        "{listed}"
    );

    let err = Netns::create_named(&test.name).unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    assert_eq!(
        err.to_string(),
        format!("create netns {}: File exists (os error 17)", test.name)
    );

    Netns::delete_named(&test.name).unwrap();
    assert!(!Netns::list_named().unwrap().contains(&test.name));
    Netns::delete_named(&test.name).expect("deleting twice is fine");
    let err = Netns::open_named(&test.name).unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn run_in_uses_a_fresh_thread_and_leaves_the_caller_alone() {
    if !root_or_skip("run_in_uses_a_fresh_thread_and_leaves_the_caller_alone") {
        return;
    }
    let test = TestNs::new();
    let caller_ns = Netns::current_thread().unwrap().inode().unwrap();
    let caller_thread = std::thread::current().id();
    let (inside_ns, inside_thread) = test
        .ns
        .run_in(|| {
            (
                Netns::current_thread().unwrap().inode().unwrap(),
                std::thread::current().id(),
            )
        })
        .unwrap();
    assert_eq!(inside_ns, test.ns.inode().unwrap());
    assert_ne!(inside_thread, caller_thread);
    assert_eq!(Netns::current_thread().unwrap().inode().unwrap(), caller_ns);
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn sockets_created_inside_stay_in_the_namespace() {
    if !root_or_skip("sockets_created_inside_stay_in_the_namespace") {
        return;
    }
    let test = TestNs::new();
    let mut netlink = test.netlink();
    // Only loopback exists in a fresh namespace, and it is down.
    let links = netlink.links().unwrap();
    assert_eq!(links.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(), ["lo"]);
    netlink.set_up("lo").unwrap();
    // A UDP socket bound inside lives on the namespace's loopback.
    let socket = test
        .ns
        .run_in(|| std::net::UdpSocket::bind("127.0.0.1:0"))
        .unwrap()
        .unwrap();
    let port = socket.local_addr().unwrap().port();
    let sender = test
        .ns
        .run_in(|| std::net::UdpSocket::bind("127.0.0.1:0"))
        .unwrap()
        .unwrap();
    sender.send_to(b"ping", ("127.0.0.1", port)).unwrap();
    let mut buffer = [0u8; 8];
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    let (len, _) = socket.recv_from(&mut buffer).unwrap();
    assert_eq!(&buffer[..len], b"ping");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn panics_inside_run_in_reach_the_caller() {
    if !root_or_skip("panics_inside_run_in_reach_the_caller") {
        return;
    }
    let test = TestNs::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test.ns.run_in(|| panic!("boom"))));
    assert!(result.is_err());
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn processes_are_spawned_inside_the_namespace() {
    if !root_or_skip("processes_are_spawned_inside_the_namespace") {
        return;
    }
    let test = TestNs::new();
    let expected = test.ns.inode().unwrap().to_string();
    let link_of_child = |output: std::process::Output| {
        assert!(output.status.success());
        String::from_utf8(output.stdout).unwrap()
    };
    // From a thread inside the namespace.
    let child = test
        .ns
        .spawn(
            Command::new("readlink")
                .arg("/proc/self/ns/net")
                .stdout(std::process::Stdio::piped()),
        )
        .unwrap();
    let via_thread = link_of_child(child.wait_with_output().unwrap());
    assert!(via_thread.contains(&expected), "{via_thread}");
    // Through a pre-exec setns hook.
    let mut command = Command::new("readlink");
    command.arg("/proc/self/ns/net");
    test.ns.enter_on_exec(&mut command).unwrap();
    let via_hook = link_of_child(command.output().unwrap());
    assert!(via_hook.contains(&expected), "{via_hook}");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn errors_name_the_namespace() {
    if !root_or_skip("errors_name_the_namespace") {
        return;
    }
    let err: HostError = Netns::open("/run/netns/wt-host-does-not-exist").unwrap_err();
    assert_eq!(
        err.to_string(),
        "open netns /run/netns/wt-host-does-not-exist: No such file or directory (os error 2)"
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn parallel_creators_do_not_trip_over_each_other() {
    if !root_or_skip("parallel_creators_do_not_trip_over_each_other") {
        return;
    }
    let namespaces: Vec<TestNs> = std::thread::scope(|s| {
        (0..8)
            .map(|_| s.spawn(TestNs::new))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect()
    });
    let listed = Netns::list_named().unwrap();
    let mut inodes = std::collections::HashSet::new();
    for test in &namespaces {
        assert!(listed.contains(&test.name));
        assert!(
            inodes.insert(test.ns.inode().unwrap()),
            "two names share one namespace"
        );
    }
}

/// On a fresh machine `/run/netns` does not exist: the first creation makes
/// it a shared mount point, like `ip netns add`. Checked in a private mount
/// namespace (this thread only) with an empty tmpfs over `/run`.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn first_creation_makes_run_netns_a_shared_mount_point() {
    if !root_or_skip("first_creation_makes_run_netns_a_shared_mount_point") {
        return;
    }
    use nix::mount::{MsFlags, mount};
    let name = format!("{}{}-fresh", common::PREFIX, std::process::id());
    std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).unwrap();
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .unwrap();
        mount(
            Some("tmpfs"),
            "/run",
            Some("tmpfs"),
            MsFlags::empty(),
            None::<&str>,
        )
        .unwrap();
        assert!(!std::path::Path::new("/run/netns").exists());

        let ns = Netns::create_named(&name).unwrap();
        let mountinfo = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap();
        // The last mount on /run/netns is the visible one (the host's copy lies
        // hidden below the tmpfs).
        let run_netns = mountinfo
            .lines()
            .rfind(|l| l.split(' ').nth(4) == Some("/run/netns"))
            .expect("/run/netns mounted");
        assert!(run_netns.contains("shared:"), "{run_netns}");
        assert!(
            mountinfo
                .lines()
                .any(|l| l.split(' ').nth(4) == Some(&format!("/run/netns/{name}") as &str))
        );
        assert_ne!(
            ns.inode().unwrap(),
            Netns::current_thread().unwrap().inode().unwrap()
        );
        Netns::delete_named(&name).unwrap();
        assert!(Netns::list_named().unwrap().is_empty());
    })
    .join()
    .unwrap();
}
