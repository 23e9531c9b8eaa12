//! What the DHCP root tests share: the pod/guest namespace pair of the IPv6 tests, a DHCPv6
//! client socket, bounded waits (a link-local address, a server's drop counter) and MAC text.
#![allow(dead_code)]

use std::net::{Ipv6Addr, SocketAddrV6, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use weft_dhcp::{ServerHandle, v6};
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

/// A DHCPv6 client's UDP socket on `ifname` (port 546, 3 s read timeout) and the interface's
/// index (the scope of the servers' multicast address).
pub fn client_socket_v6(ifname: &str) -> (UdpSocket, u32) {
    let socket = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    socket.set_only_v6(true).unwrap();
    socket.bind_device(Some(ifname.as_bytes())).unwrap();
    socket
        .bind(&SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, v6::CLIENT_PORT, 0, 0).into())
        .unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    (socket.into(), weft_dhcp::tap::ifindex(ifname).unwrap())
}

/// Sends `message` from a client socket to the DHCPv6 servers on the link of index `scope`.
pub fn send_to_servers(socket: &UdpSocket, scope: u32, message: &dhcproto::v6::Message) {
    let servers = SocketAddrV6::new(v6::ALL_SERVERS, v6::SERVER_PORT, 0, scope);
    socket.send_to(&v6::encode(message).unwrap(), servers).unwrap();
}

/// Waits (bounded, 10 s) until `ifname` in `netns` has a usable (not tentative) link-local
/// address.
pub fn wait_for_link_local(netns: &Netns, ifname: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = netns.ip(&["-6", "addr", "show", "dev", ifname]);
        let text = String::from_utf8_lossy(&out.stdout);
        if text.contains("fe80") && !text.contains("tentative") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no link-local address on {ifname} in {}",
            netns.name
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `02:00:00:0e:00:66` for a MAC's bytes.
pub fn mac_text(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
