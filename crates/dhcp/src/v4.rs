//! The pure DHCPv4 reply: one request in, at most one reply out.

use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, HType, Message, MessageType, Opcode, OptionCode, UnknownOption};

use crate::config::ServerConfig;
use crate::options;

/// Decides the reply to `request` (KubeVirt's `ServeDHCP` over krolaw/dhcp4's `ReplyPacket`):
/// DISCOVER → OFFER, REQUEST for the configured address → ACK, REQUEST for another address →
/// NAK, a REQUEST that names another server → nothing; every other message type, non-Ethernet
/// requests and (with a MAC filter) other clients → nothing.
pub fn reply(request: &Message, config: &ServerConfig) -> Option<Message> {
    if request.opcode() != Opcode::BootRequest || request.htype() != HType::Eth || request.hlen() != 6 {
        return None;
    }
    if let Some(mac) = config.client_mac
        && request.chaddr() != mac
    {
        return None;
    }
    match request.opts().msg_type()? {
        MessageType::Discover => Some(lease_reply(request, config, MessageType::Offer)),
        MessageType::Request => {
            if let Some(DhcpOption::ServerIdentifier(server)) =
                request.opts().get(OptionCode::ServerIdentifier)
                && *server != config.server_ip
            {
                return None;
            }
            let requested = match request.opts().get(OptionCode::RequestedIpAddress) {
                Some(DhcpOption::RequestedIpAddress(ip)) => *ip,
                _ => request.ciaddr(),
            };
            if requested == config.client_ip && !requested.is_unspecified() {
                Some(lease_reply(request, config, MessageType::Ack))
            } else {
                Some(nak(request, config))
            }
        }
        _ => None,
    }
}

/// The reply skeleton shared by OFFER, ACK and NAK.
fn base_reply(request: &Message, config: &ServerConfig, yiaddr: Ipv4Addr) -> Message {
    let mut message = Message::new_with_id(
        request.xid(),
        Ipv4Addr::UNSPECIFIED,
        yiaddr,
        config.server_ip,
        request.giaddr(),
        request.chaddr(),
    );
    message
        .set_opcode(Opcode::BootReply)
        .set_htype(HType::Eth)
        .set_flags(request.flags());
    message
}

fn nak(request: &Message, config: &ServerConfig) -> Message {
    let mut message = base_reply(request, config, Ipv4Addr::UNSPECIFIED);
    message.set_siaddr(Ipv4Addr::UNSPECIFIED);
    let opts = message.opts_mut();
    opts.insert(DhcpOption::MessageType(MessageType::Nak));
    opts.insert(DhcpOption::ServerIdentifier(config.server_ip));
    message
}

fn lease_reply(request: &Message, config: &ServerConfig, kind: MessageType) -> Message {
    let mut message = base_reply(request, config, config.client_ip);
    let opts = message.opts_mut();
    opts.insert(DhcpOption::MessageType(kind));
    opts.insert(DhcpOption::ServerIdentifier(config.server_ip));
    opts.insert(DhcpOption::AddressLeaseTime(config.lease_seconds));
    for option in lease_options(config) {
        opts.insert(option);
    }
    message
}

/// The lease options, sent whatever the parameter request list asks for (as KubeVirt does).
pub fn lease_options(config: &ServerConfig) -> Vec<DhcpOption> {
    let raw = |code: OptionCode, data: Vec<u8>| DhcpOption::Unknown(UnknownOption::new(code, data));
    let mut out = Vec::new();
    if let Some(mask) = config.subnet_mask() {
        out.push(DhcpOption::SubnetMask(mask));
    }
    if let Some(router) = config.router {
        out.push(DhcpOption::Router(vec![router]));
    }
    // KubeVirt sends 6 and 12 even when empty; zero-length options are invalid (RFC 2132), so
    // empty ones are left out (docs/compat.md).
    if !config.dns_servers.is_empty() {
        out.push(DhcpOption::DomainNameServer(config.dns_servers.clone()));
    }
    if !config.hostname.is_empty() {
        out.push(raw(OptionCode::Hostname, config.hostname.as_bytes().to_vec()));
    }
    out.push(DhcpOption::InterfaceMtu(config.mtu));
    if let Ok(search) = options::search_domains(&config.search_domains)
        && !search.is_empty()
    {
        out.push(raw(OptionCode::DomainSearch, search));
    }
    if let Some(domain) = options::domain_name(&config.search_domains) {
        out.push(raw(OptionCode::DomainName, domain.as_bytes().to_vec()));
    }
    if !config.routes.is_empty() {
        out.push(raw(
            OptionCode::ClasslessStaticRoute,
            options::classless_routes(&config.routes),
        ));
    }
    if !config.ntp_servers.is_empty() {
        out.push(DhcpOption::NtpServers(config.ntp_servers.clone()));
    }
    if let Some(tftp) = &config.tftp_server {
        out.push(raw(OptionCode::TFTPServerName, tftp.as_bytes().to_vec()));
    }
    if let Some(bootfile) = &config.bootfile {
        out.push(raw(OptionCode::BootfileName, bootfile.as_bytes().to_vec()));
    }
    for (code, value) in &config.private_options {
        out.push(raw(OptionCode::from(*code), value.as_bytes().to_vec()));
    }
    out
}

/// Encodes a reply for the wire, zero-padded to the 300-byte BOOTP minimum some clients expect.
pub fn encode(message: &Message) -> Result<Vec<u8>, dhcproto::error::EncodeError> {
    use dhcproto::Encodable;
    let mut bytes = message.to_vec()?;
    if bytes.len() < dhcproto::v4::MIN_PACKET_SIZE {
        bytes.resize(dhcproto::v4::MIN_PACKET_SIZE, 0);
    }
    Ok(bytes)
}

/// Size of the fixed BOOTP header plus the magic cookie.
const HEADER_LEN: usize = 240;

/// Options a server decision reads: 53 message type, 50 requested address, 54 server id, with
/// the only length each may have.
const SERVED_OPTIONS: [(u8, usize); 3] = [(53, 1), (50, 4), (54, 4)];

/// Decodes a request from the wire, keeping only the options [`reply`] reads.
///
/// The options are filtered before dhcproto sees them: dhcproto 0.15 debug-asserts (panics in
/// debug builds) on several options with unexpected lengths, and a packet from a guest must
/// never take the server down.
pub fn decode(bytes: &[u8]) -> Result<Message, dhcproto::error::DecodeError> {
    use dhcproto::Decodable;
    if bytes.len() < HEADER_LEN {
        return Err(dhcproto::error::DecodeError::NotEnoughBytes);
    }
    let mut sanitized = bytes[..HEADER_LEN].to_vec();
    let mut seen = Vec::new();
    let mut at = HEADER_LEN;
    while let Some(&code) = bytes.get(at) {
        match code {
            0 => at += 1,
            255 => break,
            code => {
                let Some(&len) = bytes.get(at + 1) else { break };
                let end = at + 2 + usize::from(len);
                if end > bytes.len() {
                    break;
                }
                // First occurrence wins; RFC 3396 concatenation is not needed for these options.
                if SERVED_OPTIONS.contains(&(code, usize::from(len))) && !seen.contains(&code) {
                    seen.push(code);
                    sanitized.extend_from_slice(&bytes[at..end]);
                }
                at = end;
            }
        }
    }
    sanitized.push(255);
    Message::from_bytes(&sanitized)
}
