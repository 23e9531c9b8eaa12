//! Root test, attack: a neighbour on the guest's bridge asks the DHCPv6 guest server
//! ([`weft_dhcp::spawn_guest_v6`]) for the guest's address.
//!
//! netns "pod": bridge wt-br0 (fd10:0:2::1/120, multicast snooping off so that every request
//! is flooded to the guest's port and reaches the server's guard, the worst case) with the
//! guest's port wt-v0 and an attacker's port wt-v1; netns "guest": eth0 (the guest's MAC) and
//! eth1 (the attacker's). The attacker solicits with its own DUID-LL and with the guest's
//! DUID-LL; the guest's port solicits with a DUID-LL naming another MAC. None is answered (each
//! counted as dropped, nothing received on the attacker's socket) while the guest's own SOLICIT
//! gets its ADVERTISE.

mod support;

use weft_testing as common;

use std::net::Ipv6Addr;
use std::sync::atomic::Ordering;

use common::can_run_root_test;
use dhcproto::Decodable;
use dhcproto::v6::{Message, MessageType};
use weft_dhcp::{V6Config, bind_guest_v6, bind_in_netns, spawn_guest_v6, v6};

const GUEST: [u8; 6] = [0x02, 0, 0, 0x0a, 0, 0x01];
const ATTACKER: [u8; 6] = [0x02, 0, 0, 0x0e, 0, 0x66];

/// A SOLICIT from a client whose DUID-LL names `client_mac` (IAID 7).
fn solicit(xid: [u8; 3], client_mac: [u8; 6]) -> Message {
    v6::solicit(xid, [&[0, 3, 0, 1][..], &client_mac].concat(), 7, false)
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn dhcpv6_neighbours_get_no_lease_and_the_guest_does() {
    if !can_run_root_test("dhcpv6_neighbours_get_no_lease_and_the_guest_does") {
        return;
    }
    let (pod, guest) = support::pod_and_guest_without_dad("s6");
    pod.ip(&["link", "add", "wt-br0", "type", "bridge", "mcast_snooping", "0"]);
    pod.ip(&["addr", "add", "fd10:0:2::1/120", "dev", "wt-br0"]);
    for (port, ifname, mac) in [("wt-v0", "eth0", GUEST), ("wt-v1", "eth1", ATTACKER)] {
        pod.add_veth(port, &guest, ifname);
        pod.ip(&["link", "set", port, "master", "wt-br0", "up"]);
        guest.ip(&["link", "set", ifname, "address", &support::mac_text(mac), "up"]);
    }
    pod.ip(&["link", "set", "wt-br0", "up"]);
    support::wait_for_link_local(&pod, "wt-br0");
    support::wait_for_link_local(&guest, "eth0");
    support::wait_for_link_local(&guest, "eth1");

    let guest_ip: Ipv6Addr = "fd10:0:2::2".parse().unwrap();
    let sockets = bind_in_netns(&pod.path(), || bind_guest_v6("wt-br0", "wt-v0")).unwrap();
    let server = spawn_guest_v6(sockets, V6Config::new(guest_ip), GUEST).unwrap();
    let (attacker, attacker_scope) = guest.enter(|| support::client_socket_v6("eth1"));
    let (client, scope) = guest.enter(|| support::client_socket_v6("eth0"));

    let mut drops = 0;
    for (n, client_mac) in [ATTACKER, GUEST].into_iter().enumerate() {
        support::send_to_servers(
            &attacker,
            attacker_scope,
            &solicit([0xa0, 0, n as u8], client_mac),
        );
        drops += 1;
        support::wait_dropped(&server, drops);
    }
    support::send_to_servers(&client, scope, &solicit([0xb0, 0, 0], ATTACKER));
    drops += 1;
    support::wait_dropped(&server, drops);
    assert_eq!(
        server.stats().replied.load(Ordering::Relaxed),
        0,
        "{:?}",
        server.stats()
    );

    // The guest's own SOLICIT is answered.
    support::send_to_servers(&client, scope, &solicit([0, 0, 1], GUEST));
    let mut buffer = [0u8; 1500];
    let reply = loop {
        let (len, _) = client.recv_from(&mut buffer).expect("an ADVERTISE for the guest");
        let message = Message::from_bytes(&buffer[..len]).unwrap();
        assert_ne!(message.xid(), [0xb0, 0, 0], "the foreign DUID was answered");
        if message.xid() == [0, 0, 1] {
            break message;
        }
    };
    assert_eq!(reply.msg_type(), MessageType::Advertise);
    // Nothing ever reached the attacker's socket.
    attacker.set_nonblocking(true).unwrap();
    assert!(
        attacker.recv_from(&mut buffer).is_err(),
        "the attacker got a reply"
    );
    server.stop().unwrap();
}
