//! The pure DHCPv6 reply for the masquerade binding (KubeVirt `serverv6`): one address, no
//! prefix delegation, no router advertisements.

use std::net::Ipv6Addr;

use dhcproto::v6::{DhcpOption, IAAddr, IANA, Message, MessageType, OptionCode};

use crate::config::INFINITE_LEASE_SECONDS;

/// KubeVirt's masquerade bridge MAC, the link-layer address of the server DUID.
pub const DEFAULT_SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0];

/// DHCPv6 client port.
pub const CLIENT_PORT: u16 = 546;

/// DHCPv6 server port.
pub const SERVER_PORT: u16 = 547;

/// All_DHCP_Relay_Agents_and_Servers, where clients send.
pub const ALL_SERVERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2);

/// The single lease a DHCPv6 server hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V6Config {
    /// The guest's address (IA_NA).
    pub client_ip: Ipv6Addr,
    /// The MAC in the server's DUID-LL.
    pub server_mac: [u8; 6],
    /// DNS servers (option 23), sent when non-empty.
    pub dns_servers: Vec<Ipv6Addr>,
    /// Preferred and valid lifetime of the address.
    pub lease_seconds: u32,
}

impl V6Config {
    /// KubeVirt's defaults for `client_ip`: DUID-LL of `02:00:00:00:00:00`, 999-day lifetimes.
    pub fn new(client_ip: Ipv6Addr) -> Self {
        Self {
            client_ip,
            server_mac: DEFAULT_SERVER_MAC,
            dns_servers: Vec::new(),
            lease_seconds: INFINITE_LEASE_SECONDS,
        }
    }

    /// The server's DUID-LL: type 3, hardware type 1 (Ethernet), the MAC.
    pub fn server_duid(&self) -> Vec<u8> {
        let mut duid = vec![0, 3, 0, 1];
        duid.extend_from_slice(&self.server_mac);
        duid
    }
}

/// Decides the reply to `request`: SOLICIT → ADVERTISE, or REPLY with rapid commit when the
/// client asked for it; REQUEST, CONFIRM, RENEW, REBIND, RELEASE, INFORMATION-REQUEST → REPLY;
/// anything else, or a message naming another server, → nothing.
pub fn reply(request: &Message, config: &V6Config) -> Option<Message> {
    let opts = request.opts();
    let kind = match request.msg_type() {
        MessageType::Solicit if opts.get(OptionCode::RapidCommit).is_some() => MessageType::Reply,
        MessageType::Solicit => MessageType::Advertise,
        MessageType::Request
        | MessageType::Confirm
        | MessageType::Renew
        | MessageType::Rebind
        | MessageType::Release
        | MessageType::InformationRequest => MessageType::Reply,
        _ => return None,
    };
    let duid = config.server_duid();
    if let Some(DhcpOption::ServerId(server)) = opts.get(OptionCode::ServerId)
        && *server != duid
    {
        return None;
    }
    let mut response = Message::new_with_id(kind, request.xid());
    let out = response.opts_mut();
    if let Some(DhcpOption::ClientId(client)) = opts.get(OptionCode::ClientId) {
        out.insert(DhcpOption::ClientId(client.clone()));
    }
    out.insert(DhcpOption::ServerId(duid));
    if request.msg_type() == MessageType::Solicit && kind == MessageType::Reply {
        out.insert(DhcpOption::RapidCommit);
    }
    let iaid = match opts.get(OptionCode::IANA) {
        Some(DhcpOption::IANA(iana)) => iana.id,
        _ => 0,
    };
    let mut address = dhcproto::v6::DhcpOptions::new();
    address.insert(DhcpOption::IAAddr(IAAddr {
        addr: config.client_ip,
        preferred_life: config.lease_seconds,
        valid_life: config.lease_seconds,
        opts: dhcproto::v6::DhcpOptions::new(),
    }));
    out.insert(DhcpOption::IANA(IANA {
        id: iaid,
        t1: 0,
        t2: 0,
        opts: address,
    }));
    if !config.dns_servers.is_empty() {
        out.insert(DhcpOption::DomainNameServers(config.dns_servers.clone()));
    }
    Some(response)
}

/// Options a decision reads, with their valid lengths: 1 client id, 2 server id (1–130 bytes),
/// 3 IA_NA (at least IAID, T1, T2), 14 rapid commit (empty).
fn keep(code: u16, len: usize) -> bool {
    match code {
        1 | 2 => (1..=130).contains(&len),
        3 => len >= 12,
        14 => len == 0,
        _ => false,
    }
}

/// Decodes a request, keeping only what [`reply`] reads (IA_NA reduced to its IAID): dhcproto
/// 0.15 underflows lengths on several malformed options, and a guest must not crash the server.
pub fn decode(bytes: &[u8]) -> Result<Message, dhcproto::error::DecodeError> {
    use dhcproto::Decodable;
    let Some(header) = bytes.get(..4) else {
        return Err(dhcproto::error::DecodeError::NotEnoughBytes);
    };
    let mut sanitized = header.to_vec();
    let mut seen = Vec::new();
    let mut at = 4;
    while let Some(head) = bytes.get(at..at + 4) {
        let code = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        let Some(value) = bytes.get(at + 4..at + 4 + len) else {
            break;
        };
        if keep(code, len) && !seen.contains(&code) {
            seen.push(code);
            let value = if code == 3 { &value[..12] } else { value };
            sanitized.extend_from_slice(&code.to_be_bytes());
            sanitized.extend_from_slice(&(value.len() as u16).to_be_bytes());
            sanitized.extend_from_slice(value);
        }
        at += 4 + len;
    }
    Message::from_bytes(&sanitized)
}

/// Encodes a reply for the wire.
pub fn encode(message: &Message) -> Result<Vec<u8>, dhcproto::error::EncodeError> {
    use dhcproto::Encodable;
    message.to_vec()
}

/// A client's SOLICIT: transaction `xid`, client DUID `client_id`, one IA_NA `iaid` and, when
/// `rapid_commit`, Rapid Commit. What [`reply`] answers; for the tests and benchmarks that
/// play the client.
pub fn solicit(xid: [u8; 3], client_id: Vec<u8>, iaid: u32, rapid_commit: bool) -> Message {
    let mut message = Message::new_with_id(MessageType::Solicit, xid);
    let opts = message.opts_mut();
    opts.insert(DhcpOption::ClientId(client_id));
    opts.insert(DhcpOption::IANA(IANA {
        id: iaid,
        t1: 0,
        t2: 0,
        opts: Default::default(),
    }));
    if rapid_commit {
        opts.insert(DhcpOption::RapidCommit);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> V6Config {
        let mut config = V6Config::new("fd10:0:2::2".parse().unwrap());
        config.dns_servers = vec!["fd00::10".parse().unwrap()];
        config
    }

    fn sample_solicit(rapid: bool) -> Message {
        solicit([1, 2, 3], vec![0, 3, 0, 1, 2, 0, 0, 0, 0, 9], 0xabcd, rapid)
    }

    fn leased(message: &Message) -> (u32, Ipv6Addr, u32) {
        let Some(DhcpOption::IANA(iana)) = message.opts().get(OptionCode::IANA) else {
            panic!("no IA_NA")
        };
        let Some(DhcpOption::IAAddr(addr)) = iana.opts.get(OptionCode::IAAddr) else {
            panic!("no IAADDR")
        };
        (iana.id, addr.addr, addr.valid_life)
    }

    #[test]
    fn solicit_is_advertised_and_rapid_commit_replied() {
        let config = config();
        let advertise = reply(&sample_solicit(false), &config).unwrap();
        assert_eq!(advertise.msg_type(), MessageType::Advertise);
        assert_eq!(advertise.xid(), [1, 2, 3]);
        assert_eq!(leased(&advertise), (0xabcd, config.client_ip, 86_313_600));
        assert_eq!(
            advertise.opts().get(OptionCode::ServerId),
            Some(&DhcpOption::ServerId(vec![0, 3, 0, 1, 2, 0, 0, 0, 0, 0]))
        );
        assert!(advertise.opts().get(OptionCode::RapidCommit).is_none());
        let rapid = reply(&sample_solicit(true), &config).unwrap();
        assert_eq!(rapid.msg_type(), MessageType::Reply);
        assert!(rapid.opts().get(OptionCode::RapidCommit).is_some());
        assert!(rapid.opts().get(OptionCode::DomainNameServers).is_some());
    }

    #[test]
    fn request_is_replied_unless_for_another_server() {
        let config = config();
        let mut request = sample_solicit(false);
        request.set_msg_type(MessageType::Request);
        request
            .opts_mut()
            .insert(DhcpOption::ServerId(config.server_duid()));
        let answer = reply(&request, &config).unwrap();
        assert_eq!(answer.msg_type(), MessageType::Reply);
        let wire = encode(&answer).unwrap();
        assert_eq!(
            leased(&decode_full(&wire)),
            (0xabcd, config.client_ip, 86_313_600)
        );

        request.opts_mut().remove(OptionCode::ServerId);
        request
            .opts_mut()
            .insert(DhcpOption::ServerId(vec![0, 3, 0, 1, 9, 9, 9, 9, 9, 9]));
        assert!(reply(&request, &config).is_none());
        let mut advertise = sample_solicit(false);
        advertise.set_msg_type(MessageType::Advertise);
        assert!(reply(&advertise, &config).is_none());
    }

    fn decode_full(bytes: &[u8]) -> Message {
        use dhcproto::Decodable;
        Message::from_bytes(bytes).unwrap()
    }

    #[test]
    fn sanitized_decode_keeps_what_reply_reads() {
        let wire = encode(&sample_solicit(true)).unwrap();
        let decoded = decode(&wire).unwrap();
        assert_eq!(decoded.msg_type(), MessageType::Solicit);
        assert!(decoded.opts().get(OptionCode::RapidCommit).is_some());
        assert_eq!(leased(&reply(&decoded, &config()).unwrap()).0, 0xabcd);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_is_deterministic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            if let Ok(message) = decode(&bytes) {
                let config = config();
                proptest::prop_assert_eq!(reply(&message, &config), reply(&message, &config));
            }
        }
    }
}
