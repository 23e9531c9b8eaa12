//! The Linux edge of weft: network namespaces, netlink links / addresses /
//! routes, TAP devices and network sysctls.
//!
//! Every effectful part of weft goes through this crate:
//!
//! - [`Netns`]: open, create and delete (named) network namespaces, run a
//!   closure inside one on a fresh OS thread ([`Netns::run_in`]) and spawn
//!   processes inside one ([`Netns::spawn`], [`Netns::enter_on_exec`]);
//! - [`Netlink`]: one synchronous rtnetlink socket per namespace, for links
//!   ([`link`]), addresses ([`address`]) and routes ([`route`]);
//! - [`create_tap`]: persistent TAP devices for QEMU;
//! - [`read_sysctl`] / [`write_sysctl`]: `/proc/sys/net` of the calling thread.
//!
//! Nothing here ever changes the namespace of the caller's thread.
//! Errors are one [`HostError`] naming the operation, the object and the errno.

pub mod error;
pub mod mac;
pub mod netlink;
pub mod netns;
pub mod sysctl;
pub mod tap;

pub use error::{HostError, Result};
pub use mac::MacAddr;
pub use netlink::Netlink;
pub use netlink::address::{self, Address, IpFamily};
pub use netlink::fdb::{self, FLOOD_MAC, FdbEntry};
pub use netlink::link::{self, Link, LinkId, MacvlanMode, OperState, Vxlan};
pub use netlink::route::{self, MAIN_TABLE, Route};
pub use netns::{Netns, run_in};
pub use sysctl::{read_sysctl, write_sysctl};
pub use tap::{TapOptions, create_tap};
