//! DHCPv4/DHCPv6 server for guests: pure reply logic and the socket loop.
//!
//! KubeVirt semantics (reference: docs/upstream/kubevirt-network.md §10): one server per guest NIC,
//! bound to the launcher bridge, answering DISCOVER with OFFER and REQUEST with ACK (or NAK) for
//! exactly one lease, with an "infinite" 999-day lease time.
//!
//! Layout: [`config`] is the lease a server hands out, [`options`] the byte encodings of the
//! options with non-trivial wire formats (119, 121), [`resolv`] turns a launcher's
//! `/etc/resolv.conf` into DNS servers and search domains, [`v4`] is the pure reply function,
//! [`server`] the thin socket loop that runs it, and [`v6`] the DHCPv6 counterpart for
//! masquerade. [`guard`] decides which requests a guest NIC's server may answer at all (only
//! its guest's MAC, on its tap; KubeVirt answers any), and [`tap`] holds the sockets that let
//! the loop see a request's Ethernet source and ingress interface ([`spawn_guest`]). [`ra`]
//! sends router advertisements into a guest's tap (KubeVirt sends none).

pub mod config;
pub mod guard;
pub mod options;
pub mod ra;
pub mod resolv;
pub mod server;
pub mod tap;
pub mod v4;
pub mod v6;

pub use config::{ClasslessRoute, ConfigError, ServerConfig, masquerade_addresses};
pub use ra::{RaConfig, RaHandle, bind_ra, spawn_ra};
pub use server::{
    ServerHandle, bind_in_netns, bind_server_socket, bind_server_socket_v6, serve, serve_v6, spawn,
    spawn_guest, spawn_guest_v6, spawn_v6,
};
pub use tap::{GuestSockets, bind_guest_v4, bind_guest_v6};
pub use v4::reply;
pub use v6::V6Config;
