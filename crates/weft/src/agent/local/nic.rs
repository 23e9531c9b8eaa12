//! A guest NIC as the domain has it: the leaf type the launcher records, the domain renders
//! and the guest boots with.

use serde::{Deserialize, Serialize};

/// One guest NIC as the domain has it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainNic {
    /// Network (and interface) name.
    pub name: String,
    /// Guest MAC.
    pub mac: String,
    /// TAP device.
    pub tap: String,
    /// MTU.
    pub mtu: u32,
    /// The passt this NIC connects to (passt binding), instead of `tap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passt: Option<crate::agent::local::passt::PasstNic>,
}
