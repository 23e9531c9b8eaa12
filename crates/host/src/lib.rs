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
//!
//! ```no_run
//! use weft_host::{Netlink, Netns, Route, TapOptions};
//!
//! # fn main() -> Result<(), weft_host::HostError> {
//! let pod = Netns::open("/run/netns/pod-1")?;
//! let mut nl = Netlink::open_in(&pod)?; // keep it: one socket per namespace
//! nl.create_bridge("k6t-eth0")?;
//! pod.run_in(|| weft_host::create_tap("tap0", &TapOptions::default()))??;
//! nl.set_master("tap0", "k6t-eth0")?;
//! for link in ["k6t-eth0", "tap0"] {
//!     nl.set_up(link)?;
//! }
//! nl.add_address("k6t-eth0", "10.0.2.1/24".parse().unwrap())?;
//! let eth0 = nl.link("eth0")?;
//! nl.add_route(&Route::default_via("10.0.2.254".parse().unwrap()).dev(eth0.index))?;
//! pod.run_in(|| weft_host::write_sysctl("net.ipv4.ip_forward", "1"))??;
//! # Ok(())
//! # }
//! ```
//! Errors are one [`HostError`] naming the operation, the object and the errno.

pub mod error;
/// Ethernet (MAC) addresses: the tree's one type is `weft_cni::mac`.
pub use weft_cni::mac;
pub mod netlink;
pub mod netns;
pub mod sysctl;
pub mod tap;

pub use error::{HostError, Result};
pub use netlink::Netlink;
pub use netlink::address::{self, Address, IpFamily};
pub use netlink::fdb::{self, FLOOD_MAC, FdbEntry};
pub use netlink::link::{self, Link, LinkId, MacvlanMode, OperState, Vxlan};
pub use netlink::route::{self, MAIN_TABLE, Route};
pub use netns::{Netns, NsId, forbidden_netns, run_in};
pub use sysctl::{read_sysctl, write_sysctl};
pub use tap::{TapOptions, create_tap};
pub use weft_cni::MacAddr;

#[cfg(test)]
mod tests {
    /// Handles are stored in shared state and moved between threads.
    #[test]
    fn handles_are_send_and_sync() {
        fn shareable<T: Send + Sync>() {}
        shareable::<crate::Netns>();
        shareable::<crate::Netlink>();
        shareable::<crate::HostError>();
    }
}
