//! Cluster IPAM: ranges, allocation over compare-and-swap reservations, IPAMClaims, GC.
//!
//! Layout, read as the design:
//! * [`config`]: the whereabouts-compatible `ipam` section (pure).
//! * [`range`]: which addresses of a range may be handed out, and in which order (pure).

pub mod config;
pub mod range;

pub use config::{ConfigError, IpamConfig, parse_network_config};
pub use range::{AddressRange, RangeError};
