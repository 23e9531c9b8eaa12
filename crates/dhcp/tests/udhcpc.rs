//! Root test: busybox udhcpc, a real DHCP client, leases from our server across a bridge.
//!
//! netns "pod": bridges wt-br0 (10.0.2.1/24, masquerade-like, MAC filter) and wt-br1
//! (169.254.75.11/32, bridge-binding-like), one server per bridge; netns "guest": eth0 and eth1
//! on wt-br0 (only eth0's MAC is served), eth2 on wt-br1.

use weft_testing as common;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;

use common::{Netns, can_run_root_test};
use weft_dhcp::{ClasslessRoute, ServerConfig, bind_in_netns, bind_server_socket, spawn};

const MAC_SERVED: &str = "02:00:00:0a:00:01";
const MAC_OTHER: &str = "02:00:00:0a:00:02";
const MAC_BRIDGE: &str = "02:00:00:0b:00:01";

fn mac_bytes(mac: &str) -> [u8; 6] {
    let parts: Vec<u8> = mac
        .split(':')
        .map(|p| u8::from_str_radix(p, 16).unwrap())
        .collect();
    parts.try_into().unwrap()
}

/// A veth from bridge `bridge` in `pod` to `ifname` (with `mac`) in `guest`.
fn plug(pod: &Netns, guest: &Netns, bridge: &str, host_side: &str, ifname: &str, mac: &str) {
    pod.add_veth(host_side, guest, ifname);
    pod.ip(&["link", "set", host_side, "master", bridge, "up"]);
    guest.ip(&["link", "set", ifname, "address", mac, "up"]);
}

/// Runs udhcpc once on `ifname`; returns the env its script saw on `bound`, if it got a lease.
fn udhcpc(guest: &Netns, ifname: &str, dir: &Path, tries: &str) -> Option<BTreeMap<String, String>> {
    let script = dir.join("script.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nenv > {}/$1.$interface\n", dir.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = script.to_str().unwrap();
    let _ = guest
        .command(&["busybox", "udhcpc", "-f", "-q", "-n", "-t", tries, "-T", "1"])
        .args(["-i", ifname, "-s", script])
        .args([
            "-O",
            "mtu",
            "-O",
            "staticroutes",
            "-O",
            "search",
            "-O",
            "hostname",
            "-O",
            "domain",
        ])
        .output()
        .unwrap();
    let env = std::fs::read_to_string(dir.join(format!("bound.{ifname}"))).ok()?;
    Some(
        env.lines()
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn udhcpc_gets_the_kubevirt_lease_and_other_macs_are_ignored() {
    if !can_run_root_test("udhcpc_gets_the_kubevirt_lease_and_other_macs_are_ignored") {
        return;
    }
    let pod = Netns::new("dp");
    let guest = Netns::new("dg");
    for (bridge, addr) in [("wt-br0", "10.0.2.1/24"), ("wt-br1", "169.254.75.11/32")] {
        pod.ip(&["link", "add", bridge, "type", "bridge"]);
        pod.ip(&["addr", "add", addr, "dev", bridge]);
        pod.ip(&["link", "set", bridge, "up"]);
    }
    plug(&pod, &guest, "wt-br0", "wt-v0", "eth0", MAC_SERVED);
    plug(&pod, &guest, "wt-br0", "wt-v1", "eth1", MAC_OTHER);
    plug(&pod, &guest, "wt-br1", "wt-v2", "eth2", MAC_BRIDGE);

    let mut masquerade = ServerConfig::new("10.0.2.2/24".parse().unwrap(), Ipv4Addr::new(10, 0, 2, 1));
    masquerade.router = Some(Ipv4Addr::new(10, 0, 2, 1));
    masquerade.dns_servers = vec![Ipv4Addr::new(10, 96, 0, 10), Ipv4Addr::new(10, 96, 0, 11)];
    masquerade.search_domains = vec!["default.svc.cluster.local".into(), "cluster.local".into()];
    masquerade.hostname = "vm1".into();
    masquerade.mtu = 1400;
    masquerade.client_mac = Some(mac_bytes(MAC_SERVED));

    let mut bridged = ServerConfig::new(
        "192.168.10.5/24".parse().unwrap(),
        Ipv4Addr::new(169, 254, 75, 11),
    );
    bridged.routes = vec![
        ClasslessRoute {
            destination: None,
            gateway: Some(Ipv4Addr::new(192, 168, 10, 1)),
        },
        ClasslessRoute {
            destination: Some("198.51.100.0/24".parse().unwrap()),
            gateway: Some(Ipv4Addr::new(192, 168, 10, 1)),
        },
    ];
    bridged.router = Some(Ipv4Addr::new(192, 168, 10, 1));
    bridged.hostname = "vm1".into();
    bridged.client_mac = Some(mac_bytes(MAC_BRIDGE));

    let netns = std::path::PathBuf::from(format!("/run/netns/{}", pod.name));
    let socket0 = bind_in_netns(&netns, || bind_server_socket("wt-br0")).unwrap();
    let socket1 = bind_in_netns(&netns, || bind_server_socket("wt-br1")).unwrap();
    let server0 = spawn(socket0, masquerade).unwrap();
    let server1 = spawn(socket1, bridged).unwrap();

    // Garbage from the guest side first: the server must count it and keep serving.
    guest.enter(|| {
        let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        socket.set_broadcast(true).unwrap();
        socket2::SockRef::from(&socket)
            .bind_device(Some(b"eth0"))
            .unwrap();
        let mut seed = 0x2545_f491_u32;
        for len in 0..200usize {
            let bytes: Vec<u8> = (0..len * 3)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed as u8
                })
                .collect();
            socket.send_to(&bytes, "255.255.255.255:67").unwrap();
        }
    });

    let dir = tempfile::tempdir().unwrap();
    let lease = udhcpc(&guest, "eth0", dir.path(), "5").expect("eth0 leased");
    assert_eq!(lease["ip"], "10.0.2.2");
    assert_eq!(lease["mask"], "24");
    assert_eq!(lease["router"], "10.0.2.1");
    assert_eq!(lease["serverid"], "10.0.2.1");
    assert_eq!(lease["mtu"], "1400");
    assert_eq!(lease["dns"].trim(), "10.96.0.10 10.96.0.11");
    assert_eq!(lease["search"].trim(), "default.svc.cluster.local cluster.local");
    assert_eq!(lease["domain"], "default.svc.cluster.local");
    assert_eq!(lease["hostname"], "vm1");
    assert_eq!(lease["lease"], "86313600");
    assert!(!lease.contains_key("staticroutes"));

    let lease = udhcpc(&guest, "eth2", dir.path(), "5").expect("eth2 leased");
    assert_eq!(lease["ip"], "192.168.10.5");
    assert_eq!(lease["serverid"], "169.254.75.11");
    assert_eq!(
        lease["staticroutes"].trim(),
        "198.51.100.0/24 192.168.10.1 0.0.0.0/0 192.168.10.1"
    );

    assert!(
        udhcpc(&guest, "eth1", dir.path(), "2").is_none(),
        "a foreign MAC must get no lease"
    );
    let stats = server0.stats();
    assert!(stats.replied.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    // The garbage reached the server (UDP may drop some), got no reply, and it kept serving.
    assert!(
        stats.malformed.load(std::sync::atomic::Ordering::Relaxed) >= 40,
        "{stats:?}"
    );
    server0.stop().unwrap();
    server1.stop().unwrap();
}
