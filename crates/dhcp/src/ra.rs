//! Router advertisements for a guest NIC (RFC 4861 §4.2), sent straight into the guest's tap.
//!
//! KubeVirt's masquerade binding serves DHCPv6 but sends no router advertisement, so a guest
//! gets its IPv6 address and no default route (kubevirt #19193); its bridge binding serves no
//! IPv6 at all (kubevirt #7979). weft advertises, per guest NIC, the on-link prefix with the
//! managed (M) flag, so the guest asks DHCPv6 for its address and installs the on-link route,
//! and, when the launcher is the guest's router (masquerade), a non-zero router lifetime, so the
//! guest's default route points at the bridge.
//!
//! The advertisement is written as a whole Ethernet frame to a packet socket on the guest's tap,
//! not sent on the bridge: on a bridge-bound NIC the bridge is joined to the pod's L2 network,
//! and an advertisement sent there would reach every other host on it. The pure part
//! ([`RaConfig`], [`advertisement_frame`], [`is_router_solicitation`]) decides the bytes; the
//! thin loop ([`spawn_ra`]) sends one at start, one per router solicitation from the guest, and
//! one every [`RaConfig::interval`].

use std::io;
use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipnet::Ipv6Net;

use crate::guard::ethernet_source;

const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPPROTO_ICMPV6: u8 = 58;
/// ICMPv6 router solicitation.
pub const ROUTER_SOLICITATION: u8 = 133;
/// ICMPv6 router advertisement.
pub const ROUTER_ADVERTISEMENT: u8 = 134;
const FLAG_MANAGED: u8 = 0x80;
const PREFIX_ON_LINK: u8 = 0x80;

/// What one guest NIC's advertisement says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaConfig {
    /// The router's MAC (the bridge's): Ethernet source and source link-layer option.
    pub router_mac: [u8; 6],
    /// The guest's MAC: the frame's destination (only this guest gets it).
    pub guest_mac: [u8; 6],
    /// The on-link prefix (prefix information option, L set, A clear: the address comes from
    /// DHCPv6, which the M flag asks for).
    pub prefix: Ipv6Net,
    /// Router lifetime: non-zero makes the sender the guest's default router; zero advertises
    /// the prefix only.
    pub router_lifetime: u16,
    /// The link MTU (MTU option), when known.
    pub mtu: Option<u32>,
    /// How often an unsolicited advertisement is repeated.
    pub interval: Duration,
}

/// Default router lifetime of a launcher that is its guest's router (RFC 4861's maximum, 9000 s,
/// is not needed: advertisements repeat every [`DEFAULT_INTERVAL`]).
pub const DEFAULT_ROUTER_LIFETIME: u16 = 1800;
/// Default repeat interval of unsolicited advertisements.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// Valid and preferred lifetime of the advertised prefix: infinite, like the 999-day lease.
const INFINITE: u32 = u32::MAX;

impl RaConfig {
    /// The router's link-local source address: the modified EUI-64 of its MAC (what the kernel
    /// gives the bridge with the default `addr_gen_mode`), so that the guest's default route
    /// points at an address the bridge answers neighbour solicitations for.
    pub fn source(&self) -> Ipv6Addr {
        link_local(self.router_mac)
    }
}

/// `fe80::/64` with the modified EUI-64 interface identifier of `mac` (RFC 4291 appendix A).
pub fn link_local(mac: [u8; 6]) -> Ipv6Addr {
    let mut bytes = [0u8; 16];
    bytes[0] = 0xfe;
    bytes[1] = 0x80;
    bytes[8] = mac[0] ^ 0x02;
    bytes[9] = mac[1];
    bytes[10] = mac[2];
    bytes[11] = 0xff;
    bytes[12] = 0xfe;
    bytes[13] = mac[3];
    bytes[14] = mac[4];
    bytes[15] = mac[5];
    Ipv6Addr::from(bytes)
}

/// The ICMPv6 router advertisement body (checksum zero, see [`icmpv6_checksum`]).
pub fn advertisement(config: &RaConfig) -> Vec<u8> {
    let mut body = vec![ROUTER_ADVERTISEMENT, 0, 0, 0, 64, FLAG_MANAGED];
    body.extend_from_slice(&config.router_lifetime.to_be_bytes());
    body.extend_from_slice(&[0; 8]); // reachable time, retrans timer: unspecified
    // Source link-layer address (type 1, 8 bytes).
    body.extend_from_slice(&[1, 1]);
    body.extend_from_slice(&config.router_mac);
    if let Some(mtu) = config.mtu {
        // MTU (type 5, 8 bytes).
        body.extend_from_slice(&[5, 1, 0, 0]);
        body.extend_from_slice(&mtu.to_be_bytes());
    }
    // Prefix information (type 3, 32 bytes).
    body.extend_from_slice(&[3, 4, config.prefix.prefix_len(), PREFIX_ON_LINK]);
    body.extend_from_slice(&INFINITE.to_be_bytes());
    body.extend_from_slice(&INFINITE.to_be_bytes());
    body.extend_from_slice(&[0; 4]);
    body.extend_from_slice(&config.prefix.network().octets());
    body
}

/// The ICMPv6 checksum of `body` from `source` to `destination` (RFC 4443 §2.3, over the
/// IPv6 pseudo-header), with the checksum field taken as zero.
pub fn icmpv6_checksum(source: Ipv6Addr, destination: Ipv6Addr, body: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for chunk in bytes.chunks(2) {
            let word = u16::from_be_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]);
            sum += u32::from(word);
        }
    };
    add(&source.octets());
    add(&destination.octets());
    add(&(body.len() as u32).to_be_bytes());
    add(&[0, 0, 0, IPPROTO_ICMPV6]);
    let mut zeroed = body.to_vec();
    if zeroed.len() >= 4 {
        zeroed[2] = 0;
        zeroed[3] = 0;
    }
    add(&zeroed);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The whole Ethernet frame of the advertisement: to the guest's MAC and `ff02::1`, from the
/// router's MAC and link-local address, hop limit 255 (the guest drops any other).
pub fn advertisement_frame(config: &RaConfig) -> Vec<u8> {
    let source = config.source();
    let destination = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let mut body = advertisement(config);
    let checksum = icmpv6_checksum(source, destination, &body);
    body[2..4].copy_from_slice(&checksum.to_be_bytes());
    let mut frame = Vec::with_capacity(14 + 40 + body.len());
    frame.extend_from_slice(&config.guest_mac);
    frame.extend_from_slice(&config.router_mac);
    frame.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    frame.extend_from_slice(&[0x60, 0, 0, 0]);
    frame.extend_from_slice(&(body.len() as u16).to_be_bytes());
    frame.extend_from_slice(&[IPPROTO_ICMPV6, 255]);
    frame.extend_from_slice(&source.octets());
    frame.extend_from_slice(&destination.octets());
    frame.extend_from_slice(&body);
    frame
}

/// Whether `frame` is a router solicitation from `guest_mac` (Ethernet source, IPv6 without
/// extension headers, ICMPv6 type 133 code 0, hop limit 255 as RFC 4861 requires).
pub fn is_router_solicitation(frame: &[u8], guest_mac: [u8; 6]) -> bool {
    ethernet_source(frame) == Some(guest_mac)
        && frame.get(12..14) == Some(&ETHERTYPE_IPV6.to_be_bytes()[..])
        && frame.get(14).is_some_and(|b| b >> 4 == 6)
        && frame.get(20) == Some(&IPPROTO_ICMPV6)
        && frame.get(21) == Some(&255)
        && frame.get(54) == Some(&ROUTER_SOLICITATION)
        && frame.get(55) == Some(&0)
}

/// Counters of one advertiser.
#[derive(Debug, Default)]
pub struct RaStats {
    /// Advertisements sent.
    pub sent: AtomicU64,
    /// Router solicitations from the guest answered.
    pub solicited: AtomicU64,
    /// Sends that failed (logged at most once per interval).
    pub failed: AtomicU64,
}

/// An advertiser running on its own thread; dropping it stops it.
#[derive(Debug)]
pub struct RaHandle {
    stop: Arc<AtomicBool>,
    stats: Arc<RaStats>,
    thread: Option<JoinHandle<()>>,
}

impl RaHandle {
    /// The advertiser's counters.
    pub fn stats(&self) -> &RaStats {
        &self.stats
    }
}

impl Drop for RaHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The packet socket of an advertiser on the guest's `tap`. Call it inside the pod's network
/// namespace (see [`crate::bind_in_netns`]).
pub fn bind_ra(tap: &str) -> io::Result<OwnedFd> {
    crate::tap::packet_socket(tap, &crate::tap::FILTER_RS).map(|(fd, _)| fd)
}

/// Advertises `config` into the tap of `socket` (from [`bind_ra`]) from a new thread: once at
/// start, once per router solicitation of the guest, and every `config.interval`.
pub fn spawn_ra(socket: OwnedFd, config: RaConfig) -> io::Result<RaHandle> {
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(RaStats::default());
    let thread = std::thread::Builder::new().name("weft-ra".into()).spawn({
        let (stop, stats) = (stop.clone(), stats.clone());
        move || run_ra(&socket, &config, &stop, &stats)
    })?;
    Ok(RaHandle {
        stop,
        stats,
        thread: Some(thread),
    })
}

fn send_frame(socket: &OwnedFd, frame: &[u8]) -> io::Result<()> {
    // SAFETY: `frame` is valid for reads of its length; the socket is bound to the tap.
    let n = unsafe { libc::send(socket.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn run_ra(socket: &OwnedFd, config: &RaConfig, stop: &AtomicBool, stats: &RaStats) {
    let frame = advertisement_frame(config);
    let mut buffer = vec![0u8; 1500];
    let mut next = Instant::now();
    let mut log = crate::guard::DropLog::new(config.interval);
    while !stop.load(Ordering::Relaxed) {
        let mut due = Instant::now() >= next;
        match crate::tap::recv_frame(socket, &mut buffer) {
            Ok(Some(received))
                if !received.outgoing && is_router_solicitation(received.bytes, config.guest_mac) =>
            {
                stats.solicited.fetch_add(1, Ordering::Relaxed);
                due = true;
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "router advertisements: receive failed, stopping");
                return;
            }
        }
        if !due {
            continue;
        }
        next = Instant::now() + config.interval;
        match send_frame(socket, &frame) {
            Ok(()) => {
                stats.sent.fetch_add(1, Ordering::Relaxed);
            }
            // The tap has no reader yet (QEMU not started): the next round retries.
            Err(error) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                if let Some(count) = log.record(Instant::now()) {
                    tracing::debug!(%error, count, "router advertisement not sent");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTER: [u8; 6] = [0x02, 0, 0, 0, 0, 0];
    const GUEST: [u8; 6] = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];

    fn config() -> RaConfig {
        RaConfig {
            router_mac: ROUTER,
            guest_mac: GUEST,
            prefix: "fd10:0:2::2/120".parse().unwrap(),
            router_lifetime: DEFAULT_ROUTER_LIFETIME,
            mtu: Some(1500),
            interval: DEFAULT_INTERVAL,
        }
    }

    #[test]
    fn link_local_is_modified_eui64() {
        assert_eq!(link_local(ROUTER), "fe80::ff:fe00:0".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            link_local([0x52, 0x54, 0, 0x12, 0x34, 0x56]),
            "fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap()
        );
    }

    #[test]
    fn advertisement_carries_managed_flag_lifetime_mtu_and_on_link_prefix() {
        let body = advertisement(&config());
        assert_eq!(body[0], ROUTER_ADVERTISEMENT);
        assert_eq!(body[5], FLAG_MANAGED, "M set, O clear");
        assert_eq!(u16::from_be_bytes([body[6], body[7]]), 1800);
        // source link-layer option
        assert_eq!(&body[16..18], &[1, 1]);
        assert_eq!(&body[18..24], &ROUTER);
        // MTU option
        assert_eq!(&body[24..28], &[5, 1, 0, 0]);
        assert_eq!(u32::from_be_bytes(body[28..32].try_into().unwrap()), 1500);
        // prefix information: /120, on-link, not autonomous, the network address
        assert_eq!(&body[32..36], &[3, 4, 120, PREFIX_ON_LINK]);
        assert_eq!(
            Ipv6Addr::from(<[u8; 16]>::try_from(&body[48..64]).unwrap()),
            "fd10:0:2::".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(body.len(), 64);

        let mut prefix_only = config();
        prefix_only.router_lifetime = 0;
        prefix_only.mtu = None;
        let body = advertisement(&prefix_only);
        assert_eq!(&body[6..8], &[0, 0], "not a default router");
        assert_eq!(body[24], 3, "no MTU option");
    }

    #[test]
    fn frame_is_addressed_to_the_guest_with_a_valid_checksum() {
        let config = config();
        let frame = advertisement_frame(&config);
        assert_eq!(&frame[0..6], &GUEST);
        assert_eq!(&frame[6..12], &ROUTER);
        assert_eq!(&frame[12..14], &[0x86, 0xdd]);
        assert_eq!(frame[20], IPPROTO_ICMPV6);
        assert_eq!(frame[21], 255, "hop limit 255");
        let body = &frame[54..];
        assert_eq!(
            usize::from(u16::from_be_bytes([frame[18], frame[19]])),
            body.len()
        );
        // Summing the whole message with its checksum over the pseudo-header gives 0xffff.
        let source = Ipv6Addr::from(<[u8; 16]>::try_from(&frame[22..38]).unwrap());
        let destination = Ipv6Addr::from(<[u8; 16]>::try_from(&frame[38..54]).unwrap());
        assert_eq!(source, config.source());
        assert_eq!(destination, "ff02::1".parse::<Ipv6Addr>().unwrap());
        let stored = u16::from_be_bytes([body[2], body[3]]);
        assert_eq!(icmpv6_checksum(source, destination, body), stored);
        assert_ne!(stored, 0);
    }

    /// A known vector: the checksum of an RFC 4861 router solicitation from `fe80::1` to
    /// `ff02::2` with no options, worked out by hand.
    #[test]
    fn checksum_of_a_router_solicitation() {
        let body = [ROUTER_SOLICITATION, 0, 0, 0, 0, 0, 0, 0];
        let source: Ipv6Addr = "fe80::1".parse().unwrap();
        let destination: Ipv6Addr = "ff02::2".parse().unwrap();
        // fe80 + 1 + ff02 + 2 + 8 (length) + 3a (next header) + 8500 = 0x282c7, folded 0x82c9
        assert_eq!(icmpv6_checksum(source, destination, &body), !0x82c9u16);
    }

    fn solicitation(source: [u8; 6], hop_limit: u8) -> Vec<u8> {
        let mut frame = vec![0x33, 0x33, 0, 0, 0, 2];
        frame.extend_from_slice(&source);
        frame.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, IPPROTO_ICMPV6, hop_limit]);
        frame.extend_from_slice(&[0; 32]);
        frame.extend_from_slice(&[ROUTER_SOLICITATION, 0, 0, 0, 0, 0, 0, 0]);
        frame
    }

    #[test]
    fn only_the_guests_own_solicitations_count() {
        assert!(is_router_solicitation(&solicitation(GUEST, 255), GUEST));
        assert!(!is_router_solicitation(&solicitation(ROUTER, 255), GUEST));
        assert!(!is_router_solicitation(&solicitation(GUEST, 64), GUEST));
        assert!(!is_router_solicitation(&advertisement_frame(&config()), GUEST));
        assert!(!is_router_solicitation(&[], GUEST));
    }
}
