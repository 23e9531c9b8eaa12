//! Launcher wiring: the guest side of a VM NIC inside the launcher pod's network namespace.
//!
//! Decisions are pure and live in their own modules:
//! - [`names`]: `tap*`, `k6t-*`, `*-nic` link names and the bridge binding's fake bridge address;
//! - [`addressing`]: the masquerade VM network's gateway and guest addresses;
//! - [`plan`]: the ordered, undoable [`plan::WiringPlan`] of the bridge and masquerade bindings,
//!   made of [`op::Op`]s;
//! - [`lease`]: what the DHCP server serves the guest ([`lease::GuestLease`]);
//! - [`nft`]: the masquerade NAT rule set and its `nft -f -` script;
//! - [`passt`]: the passt binding's user-mode process (argv, socket, forwarded ports);
//! - [`quiet`]: the rule set that keeps a live-migration target's pod kernel silent.
//!
//! Effects are thin: [`exec`] applies a plan through a [`exec::NetnsBackend`] (rolling back on
//! failure) and tears it down collecting every error.
//!
//! Typical use (sync; call it from a blocking task, never from an async worker):
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use weft_launcher::exec::{NetlinkBackend, NetnsBackend, apply, teardown};
//! use weft_launcher::{Binding, NatOptions, TapOwner, TapSettings, VmNetworkCidrs, WiringRequest, plan_wiring};
//!
//! let mut netns = NetlinkBackend::open("/run/netns/launcher-pod")?;
//! let pod_link = netns.discover("eth0")?.ok_or("pod link (eth0) is missing")?;
//! let plan = plan_wiring(&WiringRequest {
//!     binding: Binding::Masquerade(NatOptions::default()),
//!     pod_iface: "eth0".into(),
//!     primary: true,
//!     interface_index: 0,
//!     pod_link,
//!     guest_mac: None,
//!     vm_cidrs: VmNetworkCidrs::default(),
//!     tap: TapSettings { owner: TapOwner { uid: 107, gid: 107 }, queues: 1 },
//! })?;
//! // Persist the plan (it is serde) before applying: teardown from it works after a crash at
//! // any step, and after a restart.
//! apply(&mut netns, &plan)?;
//! // … serve plan.lease over DHCP, put plan.names.tap / plan.guest_mac / plan.mtu in the domain …
//! teardown(&mut netns, &plan)?;
//! # Ok(())
//! # }
//! ```

pub mod addressing;
pub mod exec;
pub mod lease;
pub mod mac;
pub mod names;
pub mod nft;
pub mod op;
pub mod passt;
pub mod plan;
pub mod pod_link;
pub mod quiet;

pub use addressing::VmNetworkCidrs;
pub use lease::GuestLease;
pub use mac::MacAddr;
pub use names::LinkNames;
pub use nft::{NatOptions, NatRuleSet};
pub use plan::{Binding, Op, TapOwner, TapSettings, WiringPlan, WiringRequest, plan_wiring};
pub use pod_link::{PodLink, PodRoute};
