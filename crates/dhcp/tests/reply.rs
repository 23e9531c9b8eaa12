//! The DHCPv4 reply decisions, and properties over arbitrary input.

use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, Message, MessageType, Opcode, OptionCode};
use proptest::prelude::*;
use weft_dhcp::{ServerConfig, reply, v4};

const MAC: [u8; 6] = [0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc];
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);

/// Decodes every option (the server's own decoder keeps only what it reads).
fn full_decode(bytes: &[u8]) -> Message {
    use dhcproto::Decodable;
    Message::from_bytes(bytes).unwrap()
}

fn config() -> ServerConfig {
    let mut config = ServerConfig::new("10.0.2.2/24".parse().unwrap(), SERVER);
    config.router = Some(SERVER);
    config.dns_servers = vec![Ipv4Addr::new(10, 96, 0, 10)];
    config.search_domains = vec!["default.svc.cluster.local".into(), "cluster.local".into()];
    config.hostname = "vm1".into();
    config.mtu = 1400;
    config.client_mac = Some(MAC);
    config
}

fn request(kind: MessageType, mac: &[u8]) -> Message {
    let mut message = Message::new_with_id(
        0x1234_5678,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        mac,
    );
    message.opts_mut().insert(DhcpOption::MessageType(kind));
    message
}

#[test]
fn discover_gets_an_offer_with_every_option() {
    let offer = reply(&request(MessageType::Discover, &MAC), &config()).unwrap();
    assert_eq!(offer.opcode(), Opcode::BootReply);
    assert_eq!(offer.xid(), 0x1234_5678);
    assert_eq!(offer.yiaddr(), CLIENT);
    assert_eq!(offer.siaddr(), SERVER);
    assert_eq!(offer.chaddr(), MAC);
    // Round trip through the wire, then read typed options back.
    let decoded = full_decode(&v4::encode(&offer).unwrap());
    let opts = decoded.opts();
    assert_eq!(opts.msg_type(), Some(MessageType::Offer));
    assert_eq!(
        opts.get(OptionCode::ServerIdentifier),
        Some(&DhcpOption::ServerIdentifier(SERVER))
    );
    assert_eq!(
        opts.get(OptionCode::AddressLeaseTime),
        Some(&DhcpOption::AddressLeaseTime(86_313_600))
    );
    assert_eq!(
        opts.get(OptionCode::SubnetMask),
        Some(&DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)))
    );
    assert_eq!(
        opts.get(OptionCode::Router),
        Some(&DhcpOption::Router(vec![SERVER]))
    );
    assert_eq!(
        opts.get(OptionCode::InterfaceMtu),
        Some(&DhcpOption::InterfaceMtu(1400))
    );
    assert_eq!(
        opts.get(OptionCode::Hostname),
        Some(&DhcpOption::Hostname("vm1".into()))
    );
    assert_eq!(
        opts.get(OptionCode::DomainName),
        Some(&DhcpOption::DomainName("default.svc.cluster.local".into()))
    );
    assert!(opts.get(OptionCode::DomainSearch).is_some());
    assert!(v4::encode(&offer).unwrap().len() >= 300);
}

#[test]
fn request_for_the_lease_is_acked_and_a_wrong_address_is_naked() {
    let config = config();
    let mut good = request(MessageType::Request, &MAC);
    good.opts_mut().insert(DhcpOption::RequestedIpAddress(CLIENT));
    good.opts_mut().insert(DhcpOption::ServerIdentifier(SERVER));
    let ack = reply(&good, &config).unwrap();
    assert_eq!(ack.opts().msg_type(), Some(MessageType::Ack));
    assert_eq!(ack.yiaddr(), CLIENT);

    let mut renew = request(MessageType::Request, &MAC);
    renew.set_ciaddr(CLIENT);
    assert_eq!(
        reply(&renew, &config).unwrap().opts().msg_type(),
        Some(MessageType::Ack)
    );

    let mut wrong = request(MessageType::Request, &MAC);
    wrong
        .opts_mut()
        .insert(DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 0, 2, 99)));
    let nak = reply(&wrong, &config).unwrap();
    assert_eq!(nak.opts().msg_type(), Some(MessageType::Nak));
    assert_eq!(nak.yiaddr(), Ipv4Addr::UNSPECIFIED);
    assert!(nak.opts().get(OptionCode::AddressLeaseTime).is_none());

    let nothing = request(MessageType::Request, &MAC);
    assert_eq!(
        reply(&nothing, &config).unwrap().opts().msg_type(),
        Some(MessageType::Nak)
    );
}

#[test]
fn ignores_other_servers_other_macs_and_other_types() {
    let config = config();
    let mut elsewhere = request(MessageType::Request, &MAC);
    elsewhere
        .opts_mut()
        .insert(DhcpOption::RequestedIpAddress(CLIENT));
    elsewhere
        .opts_mut()
        .insert(DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 0, 2, 254)));
    assert!(reply(&elsewhere, &config).is_none());

    assert!(reply(&request(MessageType::Discover, &[2, 0, 0, 0, 0, 9]), &config).is_none());
    let mut unfiltered = config.clone();
    unfiltered.client_mac = None;
    assert!(reply(&request(MessageType::Discover, &[2, 0, 0, 0, 0, 9]), &unfiltered).is_some());

    for kind in [
        MessageType::Release,
        MessageType::Inform,
        MessageType::Decline,
        MessageType::Offer,
    ] {
        assert!(reply(&request(kind, &MAC), &config).is_none(), "{kind:?}");
    }
    let mut reply_op = request(MessageType::Discover, &MAC);
    reply_op.set_opcode(Opcode::BootReply);
    assert!(reply(&reply_op, &config).is_none());
}

#[test]
fn invalid_search_domains_are_rejected_by_validate() {
    let mut config = config();
    config.search_domains.push("Bad Domain".into());
    assert!(config.validate().is_err());
}

fn arb_config() -> impl Strategy<Value = ServerConfig> {
    (
        any::<[u8; 4]>(),
        0u8..=32,
        any::<Option<[u8; 4]>>(),
        any::<u16>(),
        "[a-z]{0,12}",
        any::<bool>(),
    )
        .prop_map(|(client, prefix, router, mtu, hostname, filter)| {
            let mut config = ServerConfig::new(
                ipnet::Ipv4Net::new(Ipv4Addr::from(client), prefix).unwrap(),
                Ipv4Addr::new(169, 254, 75, 10),
            );
            config.router = router.map(Ipv4Addr::from);
            config.mtu = mtu.max(68);
            config.hostname = hostname;
            config.client_mac = filter.then_some(MAC);
            config
        })
}

proptest! {
    #[test]
    fn decoder_and_reply_never_panic_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        config in arb_config(),
    ) {
        if let Ok(message) = v4::decode(&bytes) {
            let first = reply(&message, &config);
            let second = reply(&message, &config);
            prop_assert_eq!(&first, &second);
            if let Some(answer) = first {
                prop_assert!(v4::encode(&answer).is_ok());
            }
        }
    }

    #[test]
    fn corrupted_real_requests_never_panic(
        flips in proptest::collection::vec((0usize..300, any::<u8>()), 1..8),
        config in arb_config(),
    ) {
        let mut wire = v4::encode(&request(MessageType::Discover, &MAC)).unwrap();
        for (at, value) in flips {
            let at = at % wire.len();
            wire[at] = value;
        }
        if let Ok(message) = v4::decode(&wire) {
            prop_assert_eq!(reply(&message, &config), reply(&message, &config));
        }
    }

    #[test]
    fn every_offer_leases_the_configured_address(config in arb_config(), xid in any::<u32>()) {
        let mut discover = request(MessageType::Discover, &MAC);
        discover.set_xid(xid);
        let offer = reply(&discover, &config).unwrap();
        prop_assert_eq!(offer.yiaddr(), config.client_ip);
        prop_assert_eq!(offer.xid(), xid);
        let decoded = full_decode(&v4::encode(&offer).unwrap());
        prop_assert_eq!(decoded.opts().msg_type(), Some(MessageType::Offer));
    }
}
