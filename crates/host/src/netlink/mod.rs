//! A small synchronous rtnetlink client bound to one network namespace.
//!
//! A [`Netlink`] socket talks to the namespace it was *opened* in, from any
//! thread, for its whole life: open it once per namespace (inside
//! [`Netns::run_in`](crate::Netns::run_in), or with [`Netlink::open_in`]) and
//! keep it. Each request is one send and a few receives, no process spawn.
//!
//! The operations live next to the kernel object they manage: [`link`]
//! (links, bridge ports, namespace moves), [`address`], [`route`], [`fdb`]
//! (VXLAN forwarding entries).

pub mod address;
pub mod fdb;
pub mod link;
pub mod route;

use netlink_packet_core::{
    NLA_TYPE_MASK, NLM_F_ACK, NLM_F_CAPPED, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST, NetlinkBuffer,
    NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

use crate::error::{HostError, Result};
use crate::netns::Netns;

/// Receive buffer size: a dump datagram from the kernel is at most 32 KiB.
const RECV_BUFFER_BYTES: usize = 64 * 1024;

/// An rtnetlink (`NETLINK_ROUTE`) socket in one network namespace.
#[derive(Debug)]
pub struct Netlink {
    socket: Socket,
    sequence: u32,
    recv_buffer: Vec<u8>,
    /// Names the namespace in errors of whole-namespace operations (dumps).
    netns: String,
}

impl Netlink {
    /// Opens a socket in the network namespace of the calling thread.
    pub fn open() -> Result<Self> {
        const OP: &str = "open netlink socket";
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(|e| HostError::os(OP, "NETLINK_ROUTE", e))?;
        socket
            .bind_auto()
            .map_err(|e| HostError::os(OP, "NETLINK_ROUTE", e))?;
        // Strict checking makes the kernel reject malformed requests and honour
        // the header filters of dump requests instead of ignoring them.
        socket
            .set_netlink_get_strict_chk(true)
            .map_err(|e| HostError::os(OP, "NETLINK_ROUTE", e))?;
        // Extended ACKs: errors carry the kernel's explanation, and only the
        // header of the failed request is echoed back.
        socket
            .set_ext_ack(true)
            .map_err(|e| HostError::os(OP, "NETLINK_ROUTE", e))?;
        socket
            .set_cap_ack(true)
            .map_err(|e| HostError::os(OP, "NETLINK_ROUTE", e))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| HostError::os(OP, "NETLINK_ROUTE", e))?;
        Ok(Netlink {
            socket,
            sequence: 0,
            recv_buffer: Vec::with_capacity(RECV_BUFFER_BYTES),
            netns: "in the current netns".into(),
        })
    }

    /// Opens a socket in `ns` (on a short-lived thread inside it).
    pub fn open_in(ns: &Netns) -> Result<Self> {
        let mut netlink = ns.run_in(Self::open)??;
        netlink.netns = format!("in netns {}", ns.label());
        Ok(netlink)
    }

    /// Sends a request that changes something and waits for the kernel's ACK.
    fn execute(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
        op: &'static str,
        object: &dyn std::fmt::Display,
    ) -> Result<()> {
        self.exchange(message, flags | NLM_F_ACK, op, object).map(drop)
    }

    /// Sends a single-object query (answered by one message, then the ACK).
    fn query(
        &mut self,
        message: RouteNetlinkMessage,
        op: &'static str,
        object: &dyn std::fmt::Display,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        self.exchange(message, NLM_F_ACK, op, object)
    }

    /// Sends a dump request and collects every reply up to `NLMSG_DONE`.
    fn dump(
        &mut self,
        message: RouteNetlinkMessage,
        op: &'static str,
        object: &dyn std::fmt::Display,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        self.exchange(message, NLM_F_DUMP, op, object)
    }

    fn exchange(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
        op: &'static str,
        object: &dyn std::fmt::Display,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        // A dump interrupted by a concurrent change may be inconsistent:
        // the kernel flags it, and asking again is the documented remedy.
        for _ in 0..DUMP_ATTEMPTS - 1 {
            match self.exchange_once(&message, flags, op, object)? {
                Reply::Complete(replies) => return Ok(replies),
                Reply::Interrupted => continue,
            }
        }
        match self.exchange_once(&message, flags, op, object)? {
            Reply::Complete(replies) => Ok(replies),
            Reply::Interrupted => Err(HostError::Protocol {
                op,
                object: object.to_string(),
                reason: format!("dump interrupted by concurrent changes {DUMP_ATTEMPTS} times"),
            }),
        }
    }

    fn exchange_once(
        &mut self,
        message: &RouteNetlinkMessage,
        flags: u16,
        op: &'static str,
        object: &dyn std::fmt::Display,
    ) -> Result<Reply> {
        self.sequence = self.sequence.wrapping_add(1);
        let sequence = self.sequence;
        let mut request = NetlinkMessage::from(message.clone());
        request.header.flags = NLM_F_REQUEST | flags;
        request.header.sequence_number = sequence;
        request.finalize();
        let mut bytes = vec![0; request.buffer_len()];
        request.serialize(&mut bytes);
        self.socket
            .send(&bytes, 0)
            .map_err(|e| HostError::os(op, object.to_string(), e))?;

        let mut replies = Vec::new();
        let mut interrupted = false;
        loop {
            self.recv_buffer.clear();
            let received = self
                .socket
                .recv(&mut self.recv_buffer, 0)
                .map_err(|e| HostError::os(op, object.to_string(), e))?;
            let datagram = &self.recv_buffer[..received.min(self.recv_buffer.len())];
            let mut offset = 0;
            while offset < datagram.len() {
                let protocol_error = |reason: String| HostError::Protocol {
                    op,
                    object: object.to_string(),
                    reason,
                };
                let length = NetlinkBuffer::new_checked(&datagram[offset..])
                    .map_err(|e| protocol_error(e.to_string()))?
                    .length() as usize;
                let reply =
                    NetlinkMessage::<RouteNetlinkMessage>::deserialize(&datagram[offset..offset + length])
                        .map_err(|e| protocol_error(e.to_string()))?;
                offset += (length + 3) & !3;
                if reply.header.sequence_number != sequence {
                    // A late reply to an earlier, abandoned request.
                    continue;
                }
                interrupted |= reply.header.flags & NLM_F_DUMP_INTR != 0;
                let capped = reply.header.flags & NLM_F_CAPPED != 0;
                match reply.payload {
                    NetlinkPayload::InnerMessage(inner) => replies.push(inner),
                    NetlinkPayload::Error(error) => match error.code {
                        None => return Ok(Reply::Complete(replies)),
                        Some(_) => {
                            return Err(HostError::Os {
                                op,
                                object: object.to_string(),
                                source: error.to_io(),
                                kernel_message: extended_ack_message(&error.header, capped),
                            });
                        }
                    },
                    NetlinkPayload::Done(_) if interrupted => return Ok(Reply::Interrupted),
                    NetlinkPayload::Done(_) => return Ok(Reply::Complete(replies)),
                    NetlinkPayload::Overrun(_) => {
                        return Err(protocol_error("receive buffer overrun".into()));
                    }
                    _ => {}
                }
            }
        }
    }
}

/// How often a dump interrupted by concurrent changes is attempted.
const DUMP_ATTEMPTS: usize = 3;

/// The outcome of one request/reply exchange.
enum Reply {
    Complete(Vec<RouteNetlinkMessage>),
    Interrupted,
}

/// The kernel's explanation (`NLMSGERR_ATTR_MSG`) in the payload of an
/// error reply: after the echoed request (only its header when `capped`)
/// come attributes, when extended ACKs are on.
fn extended_ack_message(payload: &[u8], capped: bool) -> Option<String> {
    const NLMSGERR_ATTR_MSG: u16 = 1;
    const HEADER_LEN: usize = 16;
    let echoed = if capped {
        HEADER_LEN
    } else {
        u32::from_ne_bytes(payload.get(..4)?.try_into().ok()?) as usize
    };
    let mut attributes = payload.get((echoed + 3) & !3..)?;
    while attributes.len() >= 4 {
        let length = usize::from(u16::from_ne_bytes([attributes[0], attributes[1]]));
        let kind = u16::from_ne_bytes([attributes[2], attributes[3]]) & NLA_TYPE_MASK;
        if length < 4 || length > attributes.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let text = &attributes[4..length];
            let text = text.split(|&b| b == 0).next().unwrap_or_default();
            return Some(String::from_utf8_lossy(text).into_owned()).filter(|t| !t.is_empty());
        }
        attributes = attributes.get((length + 3) & !3..).unwrap_or_default();
    }
    None
}

/// Re-labels the error of a helper lookup (e.g. resolving a link name) with
/// the caller's operation and object.
fn relabel(error: HostError, op: &'static str, object: &str) -> HostError {
    match error {
        HostError::Os {
            object: inner,
            source,
            kernel_message,
            ..
        } => HostError::Os {
            op,
            object: format!("{object} (looking up {inner})"),
            source,
            kernel_message,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attribute(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(value);
        bytes.resize((bytes.len() + 3) & !3, 0);
        bytes
    }

    #[test]
    fn extended_ack_message_follows_the_echoed_header() {
        let mut payload = vec![0u8; 16];
        payload[..4].copy_from_slice(&40u32.to_ne_bytes());
        payload.extend(attribute(4, &7u32.to_ne_bytes()));
        payload.extend(attribute(1, b"Invalid prefix for given prefix length\0"));
        assert_eq!(
            extended_ack_message(&payload, true).as_deref(),
            Some("Invalid prefix for given prefix length")
        );
    }

    #[test]
    fn extended_ack_message_skips_an_uncapped_request() {
        let mut payload = vec![0u8; 22];
        payload[..4].copy_from_slice(&22u32.to_ne_bytes());
        payload.resize(24, 0);
        payload.extend(attribute(1, b"Unknown device type\0"));
        assert_eq!(
            extended_ack_message(&payload, false).as_deref(),
            Some("Unknown device type")
        );
    }

    #[test]
    fn plain_errors_and_garbage_have_no_message() {
        assert_eq!(extended_ack_message(&[0u8; 16], true), None);
        assert_eq!(extended_ack_message(&[], true), None);
        let mut truncated = vec![0u8; 16];
        truncated.extend([200, 0, 1, 0, b'x']);
        assert_eq!(extended_ack_message(&truncated, true), None);
    }
}
