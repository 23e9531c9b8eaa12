//! The roles the node agent runs in the local cluster (`weft agent --local`): the kubelet
//! (pod sandboxes), the launcher (guest wiring, DHCP, QEMU), guests and their agent, passt,
//! and live migration. `weft up`/`down` themselves are [`crate::local`].

pub mod context;
pub mod domain;
pub mod guest;
pub mod guest_agent;
pub mod guest_v6;
pub mod incoming;
pub mod kubelet;
pub mod launcher;
pub mod migration;
pub mod migration_proxy;
pub mod migration_quiet;
pub mod nic;
pub mod passt;
pub mod pods;
pub mod sandbox;
