//! Persistent TAP devices through `/dev/net/tun` (netlink cannot create
//! them; `ip tuntap add` uses these same ioctls).
//!
//! The TAP is created in the network namespace of the calling thread: call
//! [`create_tap`] inside [`Netns::run_in`](crate::Netns::run_in) for another
//! namespace. Delete it like any link ([`Netlink::delete_link`](crate::Netlink::delete_link)).

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;

use crate::error::{HostError, Result};
use crate::netlink::link::validate_link_name;

/// How to create a TAP ([`create_tap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapOptions {
    /// Several queues (QEMU `queues=N`, `IFF_MULTI_QUEUE`).
    pub multi_queue: bool,
    /// Frames carry a virtio-net header (`IFF_VNET_HDR`), as QEMU expects.
    pub vnet_hdr: bool,
    /// User allowed to attach without CAP_NET_ADMIN (e.g. qemu, uid 107).
    pub owner: Option<u32>,
    /// Group allowed to attach without CAP_NET_ADMIN.
    pub group: Option<u32>,
}

impl Default for TapOptions {
    /// Single queue, with a virtio-net header, owned by root only.
    fn default() -> Self {
        TapOptions {
            multi_queue: false,
            vnet_hdr: true,
            owner: None,
            group: None,
        }
    }
}

/// The `ifr_flags` for `options`: always a TAP without packet information.
pub fn tap_flags(options: &TapOptions) -> libc::c_short {
    let mut flags = libc::IFF_TAP | libc::IFF_NO_PI;
    if options.vnet_hdr {
        flags |= libc::IFF_VNET_HDR;
    }
    if options.multi_queue {
        flags |= libc::IFF_MULTI_QUEUE;
    }
    // All IFF_* tun flags fit in the 16-bit ifr_flags field.
    flags as libc::c_short
}

/// Creates the persistent TAP `name` in the calling thread's namespace,
/// down, like `ip tuntap add NAME mode tap [multi_queue] [user U] [group G]`.
///
/// Like `ip tuntap`, an existing, detached TAP with the same name and flags
/// is reused; one with other flags fails with `EINVAL`.
pub fn create_tap(name: &str, options: &TapOptions) -> Result<()> {
    const OP: &str = "create tap";
    validate_link_name(name).map_err(|reason| HostError::invalid(OP, name, reason))?;
    let tun = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|e| HostError::os(OP, format!("{name} (open /dev/net/tun)"), e))?;
    let fd = tun.as_raw_fd();
    let request = ifreq(name, tap_flags(options));
    let step = |what: &str, result: nix::Result<libc::c_int>| {
        result
            .map(drop)
            .map_err(|e| HostError::os(OP, format!("{name} ({what})"), e))
    };
    // SAFETY (all four calls): `fd` is an open /dev/net/tun descriptor that
    // outlives the calls; TUNSETIFF reads a fully initialised `ifreq` through
    // a pointer valid for the call; the others take plain integers.
    step("TUNSETIFF", unsafe { ioctl::set_iff(fd, &request) })?;
    if let Some(owner) = options.owner {
        step("TUNSETOWNER", unsafe {
            ioctl::set_owner(fd, owner as libc::c_ulong)
        })?;
    }
    if let Some(group) = options.group {
        step("TUNSETGROUP", unsafe {
            ioctl::set_group(fd, group as libc::c_ulong)
        })?;
    }
    // Until this succeeds, closing `tun` destroys the device again.
    step("TUNSETPERSIST", unsafe { ioctl::set_persist(fd, 1) })?;
    Ok(())
}

fn ifreq(name: &str, flags: libc::c_short) -> libc::ifreq {
    // SAFETY: `ifreq` is a plain C struct/union of integers and byte arrays,
    // for which all-zero bytes are a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    // The name was validated: at most 15 bytes, so a NUL terminator remains.
    for (slot, byte) in request.ifr_name.iter_mut().zip(name.bytes()) {
        *slot = byte as libc::c_char;
    }
    request.ifr_ifru.ifru_flags = flags;
    request
}

/// The TUN/TAP ioctls (`include/uapi/linux/if_tun.h`): `TUNSETIFF` takes a
/// `struct ifreq *`, the others an unsigned long (flag, uid, gid).
mod ioctl {
    nix::ioctl_write_ptr_bad!(set_iff, libc::TUNSETIFF, libc::ifreq);
    nix::ioctl_write_int!(set_persist, b'T', 203);
    nix::ioctl_write_int!(set_owner, b'T', 204);
    nix::ioctl_write_int!(set_group, b'T', 206);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_tap_without_packet_info() {
        let plain = TapOptions {
            vnet_hdr: false,
            ..TapOptions::default()
        };
        assert_eq!(tap_flags(&plain) as libc::c_int, libc::IFF_TAP | libc::IFF_NO_PI);
        let qemu = TapOptions {
            multi_queue: true,
            ..TapOptions::default()
        };
        assert_eq!(
            tap_flags(&qemu) as libc::c_int,
            libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR | libc::IFF_MULTI_QUEUE
        );
    }

    #[test]
    fn ifreq_carries_name_and_flags() {
        let request = ifreq("tap0", 0x1002);
        let name: Vec<u8> = request
            .ifr_name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        assert_eq!(name, b"tap0");
        // SAFETY: the flags member was the one written.
        assert_eq!(unsafe { request.ifr_ifru.ifru_flags }, 0x1002);
    }
}
