//! Which requests a guest NIC's server may answer: only its own guest's, from its own tap.
//!
//! KubeVirt's servers listen on the launcher bridge and answer any client hardware address
//! (masquerade) or any frame whose `chaddr` matches (bridge binding), whatever the Ethernet
//! source and whichever bridge port it came in on. weft's server for a guest NIC knows the
//! guest's MAC and its tap, and answers a request only when it arrived on that tap, from that
//! MAC, and (DHCPv4) names that MAC as `chaddr` (DHCPv6: a DUID carrying a link-layer address
//! must carry that one; DUID-EN and DUID-UUID carry none and cannot be checked). Everything
//! else is dropped and counted. These are the pure decisions; [`crate::server`] applies them
//! to frames read from a packet socket on the tap.

use std::time::{Duration, Instant};

/// DHCPv4 server port.
const V4_SERVER_PORT: u16 = 67;
/// DHCPv6 server port.
const V6_SERVER_PORT: u16 = 547;
const ETH_HEADER: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPPROTO_UDP: u8 = 17;

/// Why a frame got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Dropped {
    /// It did not come in on the guest's tap (another port, or sent by this host).
    #[error("not received on the guest's tap")]
    WrongInterface,
    /// Not an unfragmented UDP datagram to the server port.
    #[error("not a DHCP request")]
    NotDhcp,
    /// The Ethernet source is not the guest's MAC.
    #[error("Ethernet source is not the guest's MAC")]
    ForeignSource,
    /// The DHCPv4 client hardware address is not the guest's MAC (or not Ethernet).
    #[error("chaddr is not the guest's MAC")]
    ForeignChaddr,
    /// The DHCPv6 client DUID carries a link-layer address that is not the guest's MAC.
    #[error("client DUID names another link-layer address")]
    ForeignDuid,
}

/// What one frame received on a packet socket is, as far as the filter needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Interface index it was received on.
    pub ifindex: i32,
    /// Whether the host sent it (packet type `PACKET_OUTGOING`) rather than received it.
    pub outgoing: bool,
    /// The whole Ethernet frame.
    pub bytes: &'a [u8],
}

/// The Ethernet source MAC of a frame.
pub fn ethernet_source(frame: &[u8]) -> Option<[u8; 6]> {
    frame.get(6..12)?.try_into().ok()
}

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

/// The UDP payload of an Ethernet frame carrying an unfragmented IPv4 UDP datagram to port 67.
pub fn dhcpv4_payload(frame: &[u8]) -> Option<&[u8]> {
    if be16(frame, 12)? != ETHERTYPE_IPV4 {
        return None;
    }
    let ip = frame.get(ETH_HEADER..)?;
    let version_ihl = *ip.first()?;
    let ihl = usize::from(version_ihl & 0x0f) * 4;
    if version_ihl >> 4 != 4 || ihl < 20 || *ip.get(9)? != IPPROTO_UDP {
        return None;
    }
    // More-fragments flag or a fragment offset: not a whole datagram.
    if be16(ip, 6)? & 0x3fff != 0 {
        return None;
    }
    let total = usize::from(be16(ip, 2)?);
    let ip = ip.get(..total)?;
    udp_payload(ip.get(ihl..)?, V4_SERVER_PORT)
}

/// The UDP payload of an Ethernet frame carrying an IPv6 UDP datagram (no extension headers)
/// to port 547.
pub fn dhcpv6_payload(frame: &[u8]) -> Option<&[u8]> {
    if be16(frame, 12)? != ETHERTYPE_IPV6 {
        return None;
    }
    let ip = frame.get(ETH_HEADER..)?;
    if *ip.first()? >> 4 != 6 || *ip.get(6)? != IPPROTO_UDP {
        return None;
    }
    let payload_len = usize::from(be16(ip, 4)?);
    udp_payload(ip.get(40..40 + payload_len)?, V6_SERVER_PORT)
}

fn udp_payload(udp: &[u8], port: u16) -> Option<&[u8]> {
    if be16(udp, 2)? != port {
        return None;
    }
    let len = usize::from(be16(udp, 4)?);
    if len < 8 {
        return None;
    }
    udp.get(8..len)
}

/// Checks where a frame came from: in on the guest's tap (`tap_ifindex`), from `guest_mac`.
pub fn check_origin(frame: &Frame<'_>, tap_ifindex: i32, guest_mac: [u8; 6]) -> Result<(), Dropped> {
    if frame.outgoing || frame.ifindex != tap_ifindex {
        return Err(Dropped::WrongInterface);
    }
    match ethernet_source(frame.bytes) {
        Some(source) if source == guest_mac => Ok(()),
        Some(_) => Err(Dropped::ForeignSource),
        None => Err(Dropped::NotDhcp),
    }
}

/// Admits a DHCPv4 request frame: origin as [`check_origin`], then the BOOTP header's htype 1,
/// hlen 6 and `chaddr` equal to `guest_mac`. Returns the DHCP message bytes.
pub fn admit_v4<'a>(frame: &Frame<'a>, tap_ifindex: i32, guest_mac: [u8; 6]) -> Result<&'a [u8], Dropped> {
    check_origin(frame, tap_ifindex, guest_mac)?;
    let message = dhcpv4_payload(frame.bytes).ok_or(Dropped::NotDhcp)?;
    // op(1) htype(1) hlen(1) hops(1) xid(4) secs(2) flags(2) ciaddr yiaddr siaddr giaddr(16) chaddr(16)
    let (htype, hlen) = (message.get(1), message.get(2));
    let chaddr = message.get(28..34).ok_or(Dropped::NotDhcp)?;
    if htype != Some(&1) || hlen != Some(&6) || chaddr != guest_mac {
        return Err(Dropped::ForeignChaddr);
    }
    Ok(message)
}

/// Admits a DHCPv6 request frame: origin as [`check_origin`]; when the client identifier is a
/// DUID-LLT (type 1) or DUID-LL (type 3) of hardware type Ethernet, its address must be
/// `guest_mac`. Returns the DHCPv6 message bytes.
pub fn admit_v6<'a>(frame: &Frame<'a>, tap_ifindex: i32, guest_mac: [u8; 6]) -> Result<&'a [u8], Dropped> {
    check_origin(frame, tap_ifindex, guest_mac)?;
    let message = dhcpv6_payload(frame.bytes).ok_or(Dropped::NotDhcp)?;
    match duid_link_layer(client_duid(message)) {
        Some(address) if address != guest_mac => Err(Dropped::ForeignDuid),
        _ => Ok(message),
    }
}

/// The client identifier (option 1) of a DHCPv6 client message, if any.
pub fn client_duid(message: &[u8]) -> Option<&[u8]> {
    let mut at = 4; // msg-type(1) transaction-id(3)
    while let (Some(code), Some(len)) = (be16(message, at), be16(message, at + 2)) {
        let body = message.get(at + 4..at + 4 + usize::from(len))?;
        if code == 1 {
            return Some(body);
        }
        at += 4 + usize::from(len);
    }
    None
}

/// The Ethernet address in a DUID-LLT or DUID-LL, if it is one of those with hardware type 1
/// and a 6-byte address; `None` for other DUIDs (enterprise, UUID), which name no address.
pub fn duid_link_layer(duid: Option<&[u8]>) -> Option<[u8; 6]> {
    let duid = duid?;
    let address = match (be16(duid, 0)?, be16(duid, 2)?) {
        (1, 1) => duid.get(8..)?,
        (3, 1) => duid.get(4..)?,
        _ => return None,
    };
    // A malformed LL DUID (wrong length) names an address that is not the guest's.
    Some(address.try_into().unwrap_or([0xff; 6]))
}

/// Rate limit for "dropped" log lines: at most one per `interval`, carrying how many drops it
/// stands for, so a flooding neighbour cannot flood the log.
#[derive(Debug, Clone)]
pub struct DropLog {
    interval: Duration,
    last: Option<Instant>,
    pending: u64,
}

impl DropLog {
    /// A limiter allowing one line per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: None,
            pending: 0,
        }
    }

    /// Records one drop at `now`; returns how many drops to report when a line is due.
    pub fn record(&mut self, now: Instant) -> Option<u64> {
        self.pending += 1;
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.interval => None,
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.pending))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUEST: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const OTHER: [u8; 6] = [2, 0, 0, 0, 0, 2];
    const TAP: i32 = 7;

    /// An Ethernet/IPv4/UDP frame to port 67 with a BOOTP header naming `chaddr`.
    pub(crate) fn v4_frame(source: [u8; 6], chaddr: [u8; 6]) -> Vec<u8> {
        let mut bootp = vec![0u8; 240];
        bootp[0] = 1;
        bootp[1] = 1;
        bootp[2] = 6;
        bootp[28..34].copy_from_slice(&chaddr);
        let mut udp = vec![0, 68, 0, 67];
        udp.extend_from_slice(&((8 + bootp.len()) as u16).to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(&bootp);
        let mut ip = vec![0x45, 0];
        ip.extend_from_slice(&((20 + udp.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0, 0, 0, 64, 17, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255]);
        ip.extend_from_slice(&udp);
        let mut frame = vec![0xff; 6];
        frame.extend_from_slice(&source);
        frame.extend_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(&ip);
        frame
    }

    fn v6_frame(source: [u8; 6], duid: &[u8]) -> Vec<u8> {
        let mut dhcp = vec![1, 0, 0, 1];
        dhcp.extend_from_slice(&[0, 1]);
        dhcp.extend_from_slice(&(duid.len() as u16).to_be_bytes());
        dhcp.extend_from_slice(duid);
        let mut udp = vec![2, 34, 2, 35];
        udp.extend_from_slice(&((8 + dhcp.len()) as u16).to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(&dhcp);
        let mut ip = vec![0x60, 0, 0, 0];
        ip.extend_from_slice(&(udp.len() as u16).to_be_bytes());
        ip.extend_from_slice(&[17, 1]);
        ip.extend_from_slice(&[0; 32]);
        ip.extend_from_slice(&udp);
        let mut frame = vec![0x33, 0x33, 0, 1, 0, 2];
        frame.extend_from_slice(&source);
        frame.extend_from_slice(&[0x86, 0xdd]);
        frame.extend_from_slice(&ip);
        frame
    }

    fn on_tap(bytes: &[u8]) -> Frame<'_> {
        Frame {
            ifindex: TAP,
            outgoing: false,
            bytes,
        }
    }

    #[test]
    fn only_the_guests_own_request_on_its_tap_is_admitted() {
        let good = v4_frame(GUEST, GUEST);
        assert_eq!(admit_v4(&on_tap(&good), TAP, GUEST).map(<[u8]>::len), Ok(240));
        let foreign_chaddr = v4_frame(GUEST, OTHER);
        assert_eq!(
            admit_v4(&on_tap(&foreign_chaddr), TAP, GUEST),
            Err(Dropped::ForeignChaddr)
        );
        let spoofed_chaddr = v4_frame(OTHER, GUEST);
        assert_eq!(
            admit_v4(&on_tap(&spoofed_chaddr), TAP, GUEST),
            Err(Dropped::ForeignSource)
        );
        let other_port = Frame {
            ifindex: TAP + 1,
            ..on_tap(&good)
        };
        assert_eq!(admit_v4(&other_port, TAP, GUEST), Err(Dropped::WrongInterface));
        let own_reply = Frame {
            outgoing: true,
            ..on_tap(&good)
        };
        assert_eq!(admit_v4(&own_reply, TAP, GUEST), Err(Dropped::WrongInterface));
    }

    #[test]
    fn non_dhcp_frames_are_not_requests() {
        let mut to_68 = v4_frame(GUEST, GUEST);
        to_68[14 + 20 + 3] = 68;
        assert_eq!(admit_v4(&on_tap(&to_68), TAP, GUEST), Err(Dropped::NotDhcp));
        let mut fragment = v4_frame(GUEST, GUEST);
        fragment[14 + 6] = 0x20; // more fragments
        assert_eq!(admit_v4(&on_tap(&fragment), TAP, GUEST), Err(Dropped::NotDhcp));
        let mut tcp = v4_frame(GUEST, GUEST);
        tcp[14 + 9] = 6;
        assert_eq!(admit_v4(&on_tap(&tcp), TAP, GUEST), Err(Dropped::NotDhcp));
        let truncated = v4_frame(GUEST, GUEST)[..60].to_vec();
        assert_eq!(admit_v4(&on_tap(&truncated), TAP, GUEST), Err(Dropped::NotDhcp));
        let mut htype = v4_frame(GUEST, GUEST);
        htype[14 + 20 + 8 + 1] = 6; // IEEE 802
        assert_eq!(admit_v4(&on_tap(&htype), TAP, GUEST), Err(Dropped::ForeignChaddr));
    }

    #[test]
    fn v6_checks_the_source_and_link_layer_duids() {
        let ll = |mac: [u8; 6]| [&[0, 3, 0, 1][..], &mac].concat();
        let llt = |mac: [u8; 6]| [&[0, 1, 0, 1, 1, 2, 3, 4][..], &mac].concat();
        let en = [0, 2, 0, 0, 0x7f, 0xff, 1, 2, 3];
        for duid in [ll(GUEST), llt(GUEST), en.to_vec()] {
            let frame = v6_frame(GUEST, &duid);
            assert!(admit_v6(&on_tap(&frame), TAP, GUEST).is_ok(), "{duid:?}");
        }
        for duid in [ll(OTHER), llt(OTHER), vec![0, 3, 0, 1, 2]] {
            let frame = v6_frame(GUEST, &duid);
            assert_eq!(
                admit_v6(&on_tap(&frame), TAP, GUEST),
                Err(Dropped::ForeignDuid),
                "{duid:?}"
            );
        }
        let frame = v6_frame(OTHER, &en);
        assert_eq!(admit_v6(&on_tap(&frame), TAP, GUEST), Err(Dropped::ForeignSource));
        let v4 = v4_frame(GUEST, GUEST);
        assert_eq!(admit_v6(&on_tap(&v4), TAP, GUEST), Err(Dropped::NotDhcp));
    }

    #[test]
    fn drop_log_is_rate_limited_and_counts() {
        let start = Instant::now();
        let mut log = DropLog::new(Duration::from_secs(10));
        assert_eq!(log.record(start), Some(1));
        for i in 1..1000 {
            assert_eq!(log.record(start + Duration::from_millis(i)), None);
        }
        assert_eq!(log.record(start + Duration::from_secs(10)), Some(1000));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever the bytes, source, chaddr and interface: admitted only when all three
            /// are the guest's; never a panic.
            #[test]
            fn admitted_only_when_everything_is_the_guests(
                source in any::<[u8; 6]>(),
                chaddr in any::<[u8; 6]>(),
                ifindex in 5i32..9,
                outgoing in any::<bool>(),
                flip in proptest::option::of((0usize..282, any::<u8>())),
            ) {
                let mut bytes = v4_frame(source, chaddr);
                if let Some((at, value)) = flip {
                    bytes[at] = value;
                }
                let frame = Frame { ifindex, outgoing, bytes: &bytes };
                if admit_v4(&frame, TAP, GUEST).is_ok() {
                    prop_assert!(!outgoing && ifindex == TAP);
                    prop_assert_eq!(&bytes[6..12], &GUEST);
                    prop_assert_eq!(&bytes[14 + 20 + 8 + 28..14 + 20 + 8 + 34], &GUEST);
                }
                if flip.is_none() && !outgoing && ifindex == TAP && source == GUEST && chaddr == GUEST {
                    prop_assert!(admit_v4(&frame, TAP, GUEST).is_ok());
                }
            }

            #[test]
            fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
                let frame = on_tap(&bytes);
                let _ = admit_v4(&frame, TAP, GUEST);
                let _ = admit_v6(&frame, TAP, GUEST);
            }
        }
    }
}
