//! Launcher wiring: the guest side of a VM NIC inside the launcher pod's network namespace.
//!
//! Decisions are pure and live in their own modules:
//! - [`names`]: `tap*`, `k6t-*`, `*-nic` link names and the bridge binding's fake bridge address;
//! - [`addressing`]: the masquerade VM network's gateway and guest addresses;
//! - [`plan`]: the ordered, undoable [`plan::WiringPlan`] of the bridge and masquerade bindings,
//!   made of [`op::Op`]s;
//! - [`lease`]: what the DHCP server serves the guest ([`lease::GuestLease`]);
//! - [`nft`]: the masquerade NAT rule set and its `nft -f -` script.
//!
//! Effects are thin: [`exec`] applies a plan through a [`exec::NetnsBackend`] (rolling back on
//! failure) and tears it down collecting every error.

pub mod addressing;
pub mod exec;
pub mod lease;
pub mod mac;
pub mod names;
pub mod nft;
pub mod op;
pub mod plan;
pub mod pod_link;

pub use addressing::VmNetworkCidrs;
pub use lease::GuestLease;
pub use mac::MacAddress;
pub use names::LinkNames;
pub use nft::{NatOptions, NatRuleSet};
pub use plan::{Binding, Op, TapOwner, TapSettings, WiringPlan, WiringRequest, plan_wiring};
pub use pod_link::{PodLink, PodRoute};
