//! The sockets of a guest NIC's server: a packet socket on the guest's tap, where requests are
//! read with their Ethernet header and ingress interface (so [`crate::guard`] can check them),
//! and a UDP socket on the bridge, which sends the replies and keeps the port bound (a request
//! to a port nobody holds would make the kernel answer ICMP port unreachable) but receives
//! nothing itself (a drop-all socket filter).

use std::ffi::CString;
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::guard::Frame;

/// The sockets of one guest NIC's DHCP server, from [`bind_guest_v4`] or [`bind_guest_v6`].
#[derive(Debug)]
pub struct GuestSockets {
    /// Sends replies on the bridge; receives nothing.
    pub(crate) udp: UdpSocket,
    /// Receives the frames the guest sends into its tap (only DHCP ones pass the kernel filter).
    pub(crate) frames: OwnedFd,
    /// Interface index of the tap.
    pub(crate) tap_ifindex: i32,
    /// Interface index of the bridge (scope of DHCPv6 replies).
    pub(crate) bridge_ifindex: u32,
}

/// Interface index of `ifname` in the calling thread's network namespace.
pub fn ifindex(ifname: &str) -> io::Result<u32> {
    let name = CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        let error = io::Error::last_os_error();
        return Err(io::Error::new(
            error.kind(),
            format!("interface {ifname}: {error}"),
        ));
    }
    Ok(index)
}

/// One classic BPF instruction.
const fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_H_IND: u16 = 0x48;
const LDX_B_MSH: u16 = 0xb1;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
const ACCEPT: u32 = 0x0004_0000;

/// Kernel-side pre-filter for the tap's packet socket: IPv4, UDP, not a later fragment,
/// destination port 67. Only saves copies: [`crate::guard`] re-checks every field.
const FILTER_V4: [libc::sock_filter; 11] = [
    op(LD_H_ABS, 0, 0, 12),
    op(JEQ_K, 0, 8, 0x0800),
    op(LD_B_ABS, 0, 0, 23),
    op(JEQ_K, 0, 6, 17),
    op(LD_H_ABS, 0, 0, 20),
    op(JSET_K, 4, 0, 0x1fff),
    op(LDX_B_MSH, 0, 0, 14),
    op(LD_H_IND, 0, 0, 16),
    op(JEQ_K, 0, 1, 67),
    op(RET_K, 0, 0, ACCEPT),
    op(RET_K, 0, 0, 0),
];

/// The same for DHCPv6: IPv6, next header UDP, destination port 547.
const FILTER_V6: [libc::sock_filter; 8] = [
    op(LD_H_ABS, 0, 0, 12),
    op(JEQ_K, 0, 5, 0x86dd),
    op(LD_B_ABS, 0, 0, 20),
    op(JEQ_K, 0, 3, 17),
    op(LD_H_ABS, 0, 0, 56),
    op(JEQ_K, 0, 1, 547),
    op(RET_K, 0, 0, ACCEPT),
    op(RET_K, 0, 0, 0),
];

/// Router solicitations for [`crate::ra`]: IPv6, next header ICMPv6, type 133.
pub(crate) const FILTER_RS: [libc::sock_filter; 8] = [
    op(LD_H_ABS, 0, 0, 12),
    op(JEQ_K, 0, 5, 0x86dd),
    op(LD_B_ABS, 0, 0, 20),
    op(JEQ_K, 0, 3, 58),
    op(LD_B_ABS, 0, 0, 54),
    op(JEQ_K, 0, 1, 133),
    op(RET_K, 0, 0, ACCEPT),
    op(RET_K, 0, 0, 0),
];

const DROP_ALL: [libc::sock_filter; 1] = [op(RET_K, 0, 0, 0)];

/// `setsockopt(fd, SOL_SOCKET, option, value)`.
///
/// # Safety
/// `value` must be what the kernel expects for `option`, and every pointer in it valid for
/// the call (the kernel copies what it keeps).
unsafe fn set_socket_option<T>(fd: i32, option: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a valid `T` of the size given; the caller vouches for its meaning.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            std::ptr::from_ref(value).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn attach_filter(fd: i32, program: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: a sock_fprog pointing at `program`, alive for the call; the kernel copies it.
    unsafe { set_socket_option(fd, libc::SO_ATTACH_FILTER, &fprog) }
}

/// A packet socket (all protocols: a bridge port's frames reach protocol-specific packet
/// sockets only after the bridge consumed them, that is never) on `tap`, with `program`.
pub(crate) fn packet_socket(tap: &str, program: &[libc::sock_filter]) -> io::Result<(OwnedFd, i32)> {
    let index = ifindex(tap)? as i32;
    let protocol = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2); the fd is owned right away.
    let raw = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(protocol),
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh fd nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    attach_filter(fd.as_raw_fd(), program)?;
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid start.
    let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    address.sll_family = libc::AF_PACKET as u16;
    address.sll_protocol = protocol;
    address.sll_ifindex = index;
    // SAFETY: `address` is a valid sockaddr_ll of the size given.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const address).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        let error = io::Error::last_os_error();
        return Err(io::Error::new(
            error.kind(),
            format!("bind packet socket to {tap}: {error}"),
        ));
    }
    set_timeout(&fd, crate::server::POLL_INTERVAL)?;
    Ok((fd, index))
}

fn set_timeout(fd: &OwnedFd, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: SO_RCVTIMEO takes a timeval.
    unsafe { set_socket_option(fd.as_raw_fd(), libc::SO_RCVTIMEO, &tv) }
}

/// The DHCPv4 sockets of the server for the guest behind `tap` on `bridge`. Call it inside the
/// pod's network namespace (see [`crate::bind_in_netns`]).
pub fn bind_guest_v4(bridge: &str, tap: &str) -> io::Result<GuestSockets> {
    let udp = crate::server::bind_server_socket(bridge)?;
    bind_guest(bridge, udp, tap, &FILTER_V4)
}

/// The DHCPv6 sockets of the server for the guest behind `tap` on `bridge`. Call it inside the
/// pod's network namespace.
pub fn bind_guest_v6(bridge: &str, tap: &str) -> io::Result<GuestSockets> {
    let udp = crate::server::bind_server_socket_v6(bridge)?;
    bind_guest(bridge, udp, tap, &FILTER_V6)
}

/// A guest NIC's sockets around the server's UDP socket `udp` on `bridge` (made to receive
/// nothing) and a packet socket on `tap` that lets `filter`'s frames through.
fn bind_guest(
    bridge: &str,
    udp: UdpSocket,
    tap: &str,
    filter: &[libc::sock_filter],
) -> io::Result<GuestSockets> {
    attach_filter(udp.as_raw_fd(), &DROP_ALL)?;
    let (frames, tap_ifindex) = packet_socket(tap, filter)?;
    Ok(GuestSockets {
        udp,
        frames,
        tap_ifindex,
        bridge_ifindex: ifindex(bridge)?,
    })
}

/// Receives one frame into `buffer`: `Ok(None)` when the receive timeout passed.
pub(crate) fn recv_frame<'a>(fd: &OwnedFd, buffer: &'a mut [u8]) -> io::Result<Option<Frame<'a>>> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid start.
    let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `buffer` and `address` are valid for writes of the sizes given.
    let n = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            0,
            (&raw mut address).cast(),
            &mut len,
        )
    };
    if n < 0 {
        let error = io::Error::last_os_error();
        return match error.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(error),
        };
    }
    Ok(Some(Frame {
        ifindex: address.sll_ifindex,
        outgoing: address.sll_pkttype == libc::PACKET_OUTGOING,
        bytes: &buffer[..n as usize],
    }))
}
