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
    NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkBuffer, NetlinkMessage, NetlinkPayload,
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
        self.sequence = self.sequence.wrapping_add(1);
        let sequence = self.sequence;
        let mut request = NetlinkMessage::from(message);
        request.header.flags = NLM_F_REQUEST | flags;
        request.header.sequence_number = sequence;
        request.finalize();
        let mut bytes = vec![0; request.buffer_len()];
        request.serialize(&mut bytes);
        self.socket
            .send(&bytes, 0)
            .map_err(|e| HostError::os(op, object.to_string(), e))?;

        let mut replies = Vec::new();
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
                match reply.payload {
                    NetlinkPayload::InnerMessage(inner) => replies.push(inner),
                    NetlinkPayload::Error(error) => match error.code {
                        None => return Ok(replies),
                        Some(_) => return Err(HostError::os(op, object.to_string(), error.to_io())),
                    },
                    NetlinkPayload::Done(_) => return Ok(replies),
                    NetlinkPayload::Overrun(_) => {
                        return Err(protocol_error("receive buffer overrun".into()));
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Re-labels the error of a helper lookup (e.g. resolving a link name) with
/// the caller's operation and object.
fn relabel(error: HostError, op: &'static str, object: &str) -> HostError {
    match error {
        HostError::Os {
            object: inner,
            source,
            ..
        } => HostError::Os {
            op,
            object: format!("{object} (looking up {inner})"),
            source,
        },
        other => other,
    }
}
