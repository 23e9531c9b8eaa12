//! Cluster IPAM: ranges, allocation over compare-and-swap reservations, IPAMClaims, GC.
//!
//! Layout, read as the design:
//! * [`config`]: the whereabouts-compatible `ipam` section (pure).
//! * [`range`]: which addresses of a range may be handed out, and in which order (pure).
//! * [`reservation`]: the `IPReservation` object, one per held address, and its naming (pure).
//! * [`claim`]: the `IPAMClaim` object and its status transitions (pure).
//! * [`request`]: what one plugin invocation asks for (pure).
//! * [`allocator`]: allocate / release / check / GC over the store's compare-and-swap.
//! * [`held`]: DEL without a search: release the addresses the DEL knows (`prevResult`, the
//!   agent's memory of the ADD) with one conditional delete each.
//! * [`persistent`]: claim lookup through the pod's networks annotation, claim status writes.
//! * [`plugin`]: [`handle`], the CNI verbs over any [`weft_store::Store`].
//! * [`reconcile`]: which reservations a reconciler may free (pure).
//! * [`vm_claim`]: the claim of a KubeVirt launcher pod's attachment without a claim reference (pure).

pub mod allocator;
pub mod check;
pub mod claim;
pub mod config;
mod error;
pub mod held;
pub mod journal;
pub mod persistent;
pub mod plugin;
pub mod range;
pub mod reconcile;
pub mod request;
pub mod reservation;
#[cfg(any(test, feature = "testing"))]
pub mod stress;
pub mod vm_claim;

pub use allocator::{Holder, Lease, allocate, release, release_claim};
pub use claim::IpamClaim;
pub use config::{ConfigError, IpamConfig, parse_network_config, persistent_claim_network};
pub use error::IpamError;
pub use held::HeldCache;
pub use plugin::{handle, handle_held};
pub use range::{AddressRange, RangeError};
pub use request::IpamRequest;
pub use reservation::IpReservation;
