//! Cluster IPAM: ranges, allocation over compare-and-swap reservations, IPAMClaims, GC.
//!
//! Layout, read as the design:
//! * [`config`]: the whereabouts-compatible `ipam` section (pure).
//! * [`range`]: which addresses of a range may be handed out, and in which order (pure).
//! * [`reservation`]: the `IPReservation` object, one per held address, and its naming (pure).
//! * [`claim`]: the `IPAMClaim` object and its status transitions (pure).
//! * [`allocator`]: allocate / release / check / GC over the store's compare-and-swap.

pub mod allocator;
pub mod claim;
pub mod config;
mod error;
pub mod range;
pub mod reservation;

pub use allocator::{Holder, Lease, allocate, release, release_claim};
pub use claim::IpamClaim;
pub use config::{ConfigError, IpamConfig, parse_network_config};
pub use error::IpamError;
pub use range::{AddressRange, RangeError};
pub use reservation::IpReservation;
