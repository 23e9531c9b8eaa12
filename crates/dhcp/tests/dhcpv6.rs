//! Root test: a DHCPv6 client in a "guest" netns gets the masquerade IPv6 lease from our server
//! on the pod bridge (SOLICIT→ADVERTISE→REQUEST→REPLY, and rapid commit).

mod support;

use weft_testing as common;

use std::net::{Ipv6Addr, UdpSocket};

use common::can_run_root_test;
use dhcproto::Decodable;
use dhcproto::v6::{DhcpOption, Message, MessageType, OptionCode};
use weft_dhcp::{V6Config, bind_server_socket_v6, spawn_v6, v6};

fn exchange(socket: &UdpSocket, scope: u32, request: &Message) -> Message {
    support::send_to_servers(socket, scope, request);
    let mut buffer = [0u8; 1500];
    loop {
        let (len, _) = socket.recv_from(&mut buffer).expect("a DHCPv6 reply");
        let message = Message::from_bytes(&buffer[..len]).unwrap();
        if message.xid() == request.xid() {
            return message;
        }
    }
}

/// This test's client: DUID-LL of 02:00:00:0a:00:01, IAID 7.
fn solicit(xid: [u8; 3], rapid: bool) -> Message {
    v6::solicit(xid, vec![0, 3, 0, 1, 2, 0, 0, 0x0a, 0, 1], 7, rapid)
}

fn leased_address(message: &Message) -> Ipv6Addr {
    let Some(DhcpOption::IANA(iana)) = message.opts().get(OptionCode::IANA) else {
        panic!("no IA_NA")
    };
    assert_eq!(iana.id, 7, "IAID echoed");
    let Some(DhcpOption::IAAddr(addr)) = iana.opts.get(OptionCode::IAAddr) else {
        panic!("no IAADDR")
    };
    addr.addr
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn dhcpv6_client_gets_the_masquerade_address() {
    if !can_run_root_test("dhcpv6_client_gets_the_masquerade_address") {
        return;
    }
    let (pod, guest) = support::pod_and_guest_without_dad("d6");
    pod.ip(&["link", "add", "wt-br0", "type", "bridge"]);
    pod.ip(&["addr", "add", "fd10:0:2::1/120", "dev", "wt-br0"]);
    pod.add_veth("wt-v0", &guest, "eth0");
    pod.ip(&["link", "set", "wt-v0", "master", "wt-br0", "up"]);
    pod.ip(&["link", "set", "wt-br0", "up"]);
    guest.ip(&["link", "set", "eth0", "up"]);
    support::wait_for_link_local(&pod, "wt-br0");
    support::wait_for_link_local(&guest, "eth0");

    let guest_ip: Ipv6Addr = "fd10:0:2::2".parse().unwrap();
    let mut config = V6Config::new(guest_ip);
    config.dns_servers = vec!["fd00::10".parse().unwrap()];
    let socket = pod.enter(|| bind_server_socket_v6("wt-br0")).unwrap();
    let server = spawn_v6(socket, config.clone()).unwrap();
    let (client, scope) = guest.enter(|| support::client_socket_v6("eth0"));

    let advertise = exchange(&client, scope, &solicit([0, 0, 1], false));
    assert_eq!(advertise.msg_type(), MessageType::Advertise);
    assert_eq!(leased_address(&advertise), guest_ip);
    let Some(DhcpOption::ServerId(duid)) = advertise.opts().get(OptionCode::ServerId) else {
        panic!("no server id")
    };
    assert_eq!(duid, &vec![0, 3, 0, 1, 2, 0, 0, 0, 0, 0]);

    let mut request = solicit([0, 0, 2], false);
    request.set_msg_type(MessageType::Request);
    request.opts_mut().insert(DhcpOption::ServerId(duid.clone()));
    let reply = exchange(&client, scope, &request);
    assert_eq!(reply.msg_type(), MessageType::Reply);
    assert_eq!(leased_address(&reply), guest_ip);
    assert_eq!(
        reply.opts().get(OptionCode::DomainNameServers),
        Some(&DhcpOption::DomainNameServers(config.dns_servers.clone()))
    );

    let rapid = exchange(&client, scope, &solicit([0, 0, 3], true));
    assert_eq!(rapid.msg_type(), MessageType::Reply);
    assert!(rapid.opts().get(OptionCode::RapidCommit).is_some());
    server.stop().unwrap();
}
