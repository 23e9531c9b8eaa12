//! The quiet tables of a live-migration target's pod netns: the script's snapshot, and (as root)
//! the attack they stop: a peer on the link probes the address the quiet netns owns (ARP, ping,
//! TCP SYN) and gets nothing back, not even a reset, and the quiet kernel's own IPv6 chatter
//! (DAD, MLD, router solicitations from the guest's MAC) never reaches the peer; once removed,
//! the same probes are answered.

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use weft_launcher::quiet::{install_script, remove_script};
use weft_testing::{Netns, root_or_skip};

#[test]
fn quiet_script_snapshots() {
    insta::assert_snapshot!("quiet_install", install_script());
    insta::assert_snapshot!("quiet_remove", remove_script());
}

fn nft(ns: &Netns, script: &str) {
    let mut child = ns
        .command(&["nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft -f -: {}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Frames the peer's end of the link received.
fn rx_packets(ns: &Netns, dev: &str) -> u64 {
    ns.ip_json(&["-s", "link", "show", "dev", dev])[0]["stats64"]["rx"]["packets"]
        .as_u64()
        .unwrap()
}

/// A TCP connect from inside `ns` to a port nobody listens on: `Ok(true)` refused (a reset came
/// back), `Ok(false)` timed out (nothing came back).
fn refused(ns: &Netns, to: SocketAddr) -> bool {
    ns.enter(
        move || match TcpStream::connect_timeout(&to, Duration::from_millis(1500)) {
            Ok(_) => panic!("something listens on {to}"),
            Err(e) => match e.kind() {
                std::io::ErrorKind::ConnectionRefused => true,
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => false,
                _ => panic!("connect {to}: {e}"),
            },
        },
    )
}

fn ping(ns: &Netns, to: &str) -> bool {
    ns.command(&["busybox", "ping", "-c", "1", "-W", "1", to])
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn quiet_tables_keep_a_target_pod_kernel_silent_until_removed() {
    if !root_or_skip("quiet_tables_keep_a_target_pod_kernel_silent_until_removed") {
        return;
    }
    if std::process::Command::new("nft")
        .arg("--version")
        .output()
        .is_err()
        && !weft_testing::skip(
            "quiet_tables_keep_a_target_pod_kernel_silent_until_removed",
            "nft is missing (scripts/install-deps.sh)",
        )
    {
        return;
    }
    let target = Netns::new("quiet");
    let peer = Netns::new("qpeer");
    target.add_veth("eth1", &peer, "peer0");
    // Quiet before the link comes up, as the sandbox does before CNI ADD.
    nft(&target, &install_script());
    // The guest's MAC and IP on the target's interface, as the bridge plugin sets them.
    target.ip(&["link", "set", "eth1", "address", "02:00:00:0a:00:01"]);
    target.ip(&["addr", "add", "192.168.77.10/24", "dev", "eth1"]);
    target.ip(&["link", "set", "eth1", "up"]);
    peer.ip(&["addr", "add", "192.168.77.20/24", "dev", "peer0"]);
    peer.ip(&["link", "set", "peer0", "up"]);
    let guest: SocketAddr = "192.168.77.10:5000".parse().unwrap();

    // The attack: probe the guest's address through the target for a few seconds (long enough
    // for the target's IPv6 DAD, MLD and router solicitation after link up).
    let started = Instant::now();
    assert!(!ping(&peer, "192.168.77.10"), "the quiet target answered a ping");
    assert!(!refused(&peer, guest), "the quiet target reset a TCP connection");
    while started.elapsed() < Duration::from_secs(3) {
        assert!(!ping(&peer, "192.168.77.10"), "the quiet target answered a ping");
    }
    assert_eq!(
        rx_packets(&peer, "peer0"),
        0,
        "a frame left the quiet target (ARP reply, RST, DAD, MLD or RS)"
    );
    let neigh = peer.ip_json(&["neigh", "show", "dev", "peer0"]);
    assert!(
        !neigh.to_string().contains("02:00:00:0a:00:01"),
        "the peer learnt the guest's MAC from the quiet target: {neigh}"
    );

    // Removed (the guest resumed there): the same probes are answered.
    nft(&target, &remove_script());
    nft(&target, &remove_script()); // idempotent
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ping(&peer, "192.168.77.10") {
        assert!(
            Instant::now() < deadline,
            "no ping reply after the quiet tables went"
        );
    }
    assert!(
        refused(&peer, guest),
        "no reset from the target once it is not quiet"
    );
    assert!(rx_packets(&peer, "peer0") > 0);
    let tables = target.exec(&["nft", "list", "tables"]);
    assert!(!tables.contains("weft-migration-quiet"), "{tables}");
}
