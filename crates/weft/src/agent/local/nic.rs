//! A guest NIC as the domain has it: the leaf type the launcher records, the domain renders
//! and the guest boots with.

use std::path::PathBuf;

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
    pub passt: Option<PasstNic>,
}

/// A running passt, as the launcher record keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PasstNic {
    /// The pod interface passt serves the guest from.
    pub pod_iface: String,
    /// The socket QEMU connects to.
    pub socket: PathBuf,
    /// The socket's directory (removed on stop).
    pub dir: PathBuf,
    /// passt's pid.
    pub pid: u32,
    /// Its start time (with the pid, names the process).
    pub start_time: u64,
    /// Its entry in the processes registry (`run/passt-….pid`).
    pub record: PathBuf,
}
