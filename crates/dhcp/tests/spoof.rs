//! Root test, attack: a neighbour on the guest's bridge asks for the guest's lease.
//!
//! netns "pod": bridge wt-br0 (masquerade-like, 10.0.2.1/24) with the guest's port wt-v0 and an
//! attacker's port wt-v1; bridge wt-br1 (bridge-binding-like, 169.254.75.11/32) with the
//! guest's port wt-v2 and an attacker's port wt-v3 (in real life: the pod interface, i.e. the
//! whole pod network). One guest server per bridge ([`weft_dhcp::spawn_guest`]), reading its
//! guest's port. netns "guest": eth0..eth3, the far ends.
//!
//! The attacker sends raw DISCOVERs and REQUESTs with its own chaddr, with the guest's chaddr
//! from its own Ethernet source, and with the guest's chaddr *and* source from its own port;
//! the guest port also sends one with the guest's chaddr but a foreign source. None gets an
//! answer (sniffed on the attacker's side, and counted as dropped by the server), while busybox
//! udhcpc on the guest's port gets its lease afterwards, and udhcpc on the attacker's port with
//! the guest's MAC gets none.

mod support;

use weft_testing as common;

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;

use common::{Netns, can_run_root_test};
use dhcproto::v4::{DhcpOption, Message, MessageType};
use weft_dhcp::{ServerConfig, bind_guest_v4, bind_in_netns, spawn_guest};

const GUEST_MASQ: [u8; 6] = [0x02, 0, 0, 0x0a, 0, 0x01];
const GUEST_BRIDGE: [u8; 6] = [0x02, 0, 0, 0x0b, 0, 0x01];
const ATTACKER: [u8; 6] = [0x02, 0, 0, 0x0e, 0, 0x66];

fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A broadcast DHCP request frame from `source` naming `chaddr`, as a client without an
/// address sends it (0.0.0.0:68 → 255.255.255.255:67, UDP checksum 0).
fn request_frame(
    source: [u8; 6],
    chaddr: [u8; 6],
    kind: MessageType,
    xid: u32,
    server: Ipv4Addr,
    ip: Ipv4Addr,
) -> Vec<u8> {
    use dhcproto::Encodable;
    let mut message = Message::new_with_id(
        xid,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        &chaddr,
    );
    message.opts_mut().insert(DhcpOption::MessageType(kind));
    if kind == MessageType::Request {
        message.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
        message.opts_mut().insert(DhcpOption::ServerIdentifier(server));
    }
    let bootp = message.to_vec().unwrap();
    let mut udp = vec![0, 68, 0, 67];
    udp.extend_from_slice(&((8 + bootp.len()) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(&bootp);
    let mut ip_header = vec![0x45, 0x10];
    ip_header.extend_from_slice(&((20 + udp.len()) as u16).to_be_bytes());
    ip_header.extend_from_slice(&[0, 0, 0, 0, 64, 17, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255]);
    let sum = checksum(&ip_header);
    ip_header[10..12].copy_from_slice(&sum.to_be_bytes());
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&source);
    frame.extend_from_slice(&[0x08, 0x00]);
    frame.extend_from_slice(&ip_header);
    frame.extend_from_slice(&udp);
    frame
}

/// A packet socket on `ifname` in the calling thread's netns (all protocols), non-blocking.
fn packet_socket(ifname: &str) -> OwnedFd {
    let protocol = (libc::ETH_P_ALL as u16).to_be();
    let index = weft_dhcp::tap::ifindex(ifname).unwrap() as i32;
    // SAFETY: plain socket(2), owned right away.
    let fd = unsafe {
        OwnedFd::from_raw_fd(libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            i32::from(protocol),
        ))
    };
    // SAFETY: plain data, then a valid sockaddr_ll of the size given.
    let rc = unsafe {
        let mut address: libc::sockaddr_ll = std::mem::zeroed();
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_protocol = protocol;
        address.sll_ifindex = index;
        libc::bind(
            fd.as_raw_fd(),
            (&raw const address).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    assert_eq!(
        rc,
        0,
        "bind packet socket {ifname}: {}",
        std::io::Error::last_os_error()
    );
    fd
}

fn send_frame(fd: &OwnedFd, frame: &[u8]) {
    // SAFETY: `frame` is valid for reads of its length.
    let n = unsafe { libc::send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
    assert_eq!(n, frame.len() as isize, "{}", std::io::Error::last_os_error());
}

/// The xids of every DHCP reply (UDP to port 68) queued on a sniffing packet socket.
fn reply_xids(fd: &OwnedFd) -> Vec<u32> {
    let mut buffer = vec![0u8; 4096];
    let mut xids = Vec::new();
    loop {
        // SAFETY: `buffer` is valid for writes of its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len(), 0) };
        if n < 0 {
            break;
        }
        let frame = &buffer[..n as usize];
        if frame.len() > 14 + 20 + 8 + 8 && frame[12..14] == [0x08, 0x00] && frame[14 + 9] == 17 {
            let ihl = usize::from(frame[14] & 0x0f) * 4;
            let udp = &frame[14 + ihl..];
            if udp[2..4] == [0, 68] && udp.len() >= 16 {
                xids.push(u32::from_be_bytes(udp[12..16].try_into().unwrap()));
            }
        }
    }
    xids
}

fn udhcpc_leases(guest: &Netns, ifname: &str, tries: &str) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n[ \"$1\" = bound ] && echo \"$ip\" > {}/ip\nexit 0\n",
            dir.path().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let _ = guest
        .command(&["busybox", "udhcpc", "-f", "-q", "-n", "-t", tries, "-T", "1"])
        .args(["-i", ifname, "-s", script.to_str().unwrap()])
        .output()
        .unwrap();
    std::fs::read_to_string(dir.path().join("ip"))
        .ok()
        .map(|ip| ip.trim().to_string())
}

struct Case {
    bridge: &'static str,
    server_ip: Ipv4Addr,
    lease: &'static str,
    guest_if: &'static str,
    guest_mac: [u8; 6],
    attacker_if: &'static str,
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn neighbours_spoofing_the_guest_get_no_lease_and_the_guest_does() {
    if !can_run_root_test("neighbours_spoofing_the_guest_get_no_lease_and_the_guest_does") {
        return;
    }
    let pod = Netns::new("sp");
    let guest = Netns::new("sg");
    for (bridge, addr) in [("wt-br0", "10.0.2.1/24"), ("wt-br1", "169.254.75.11/32")] {
        pod.ip(&["link", "add", bridge, "type", "bridge"]);
        pod.ip(&["addr", "add", addr, "dev", bridge]);
        pod.ip(&["link", "set", bridge, "up"]);
    }
    for (bridge, port, ifname, mac) in [
        ("wt-br0", "wt-v0", "eth0", GUEST_MASQ),
        ("wt-br0", "wt-v1", "eth1", ATTACKER),
        ("wt-br1", "wt-v2", "eth2", GUEST_BRIDGE),
        ("wt-br1", "wt-v3", "eth3", ATTACKER),
    ] {
        pod.add_veth(port, &guest, ifname);
        pod.ip(&["link", "set", port, "master", bridge, "up"]);
        guest.ip(&["link", "set", ifname, "address", &support::mac_text(mac), "up"]);
    }
    let cases = [
        Case {
            bridge: "wt-br0",
            server_ip: Ipv4Addr::new(10, 0, 2, 1),
            lease: "10.0.2.2/24",
            guest_if: "eth0",
            guest_mac: GUEST_MASQ,
            attacker_if: "eth1",
        },
        Case {
            bridge: "wt-br1",
            server_ip: Ipv4Addr::new(169, 254, 75, 11),
            lease: "192.168.10.5/24",
            guest_if: "eth2",
            guest_mac: GUEST_BRIDGE,
            attacker_if: "eth3",
        },
    ];
    let netns = pod.path();
    let mut servers = Vec::new();
    for (case, tap) in cases.iter().zip(["wt-v0", "wt-v2"]) {
        let mut config = ServerConfig::new(case.lease.parse().unwrap(), case.server_ip);
        config.router = Some(case.server_ip);
        config.client_mac = Some(case.guest_mac);
        let bridge = case.bridge;
        let sockets = bind_in_netns(&netns, move || bind_guest_v4(bridge, tap)).unwrap();
        servers.push(spawn_guest(sockets, config).unwrap());
    }

    for (case, server) in cases.iter().zip(&servers) {
        let ip: Ipv4Addr = case.lease.split('/').next().unwrap().parse().unwrap();
        let (attacker_if, guest_if, guest_mac, server_ip) =
            (case.attacker_if, case.guest_if, case.guest_mac, case.server_ip);
        // The attacker's port: its own chaddr; the guest's chaddr from its own source; the
        // guest's chaddr and source (a cloned MAC) from its own port. The guest's port: the
        // guest's chaddr from a foreign source.
        let attacks = [
            (attacker_if, ATTACKER, ATTACKER),
            (attacker_if, ATTACKER, guest_mac),
            (attacker_if, guest_mac, guest_mac),
            (guest_if, ATTACKER, guest_mac),
        ];
        let sniffer = guest.enter(move || packet_socket(attacker_if));
        let mut xids = Vec::new();
        let mut expected_drops = server.stats().dropped.load(Ordering::Relaxed);
        for (n, (port, source, chaddr)) in attacks.into_iter().enumerate() {
            for kind in [MessageType::Discover, MessageType::Request] {
                let xid = 0x5000_0000 + (n as u32) * 16 + u32::from(u8::from(kind));
                xids.push(xid);
                let frame = request_frame(source, chaddr, kind, xid, server_ip, ip);
                guest.enter(move || send_frame(&packet_socket(port), &frame));
                // Each attack frame reaches the guest server's port (in, or flooded out) once.
                expected_drops += 1;
                support::wait_dropped(server, expected_drops);
            }
        }
        assert_eq!(
            server.stats().replied.load(Ordering::Relaxed),
            0,
            "{:?}",
            server.stats()
        );

        // The guest itself still gets its lease; its replies reach the sniffer (broadcast),
        // which shows the sniffer would have seen a reply to the attacks, sent before.
        let leased = udhcpc_leases(&guest, guest_if, "5");
        assert_eq!(
            leased.as_deref(),
            Some(ip.to_string().as_str()),
            "{}",
            case.bridge
        );
        let seen = reply_xids(&sniffer);
        assert!(
            !seen.is_empty(),
            "the sniffer on {attacker_if} saw no reply at all"
        );
        for xid in &xids {
            assert!(
                !seen.contains(xid),
                "attack {xid:#x} on {} was answered",
                case.bridge
            );
        }

        // udhcpc on the attacker's port with the guest's MAC cloned: no lease.
        guest.ip(&[
            "link",
            "set",
            attacker_if,
            "address",
            &support::mac_text(guest_mac),
        ]);
        assert_eq!(udhcpc_leases(&guest, attacker_if, "2"), None, "{}", case.bridge);
        guest.ip(&[
            "link",
            "set",
            attacker_if,
            "address",
            &support::mac_text(ATTACKER),
        ]);
    }
    for server in servers {
        server.stop().unwrap();
    }
}
