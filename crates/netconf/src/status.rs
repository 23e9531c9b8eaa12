//! One entry of the `k8s.v1.cni.cncf.io/network-status` annotation.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_cni::Dns;

/// An attached network as reported on the pod. Field order is the wire format.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkStatus {
    /// `<namespace>/<nad>` for NAD-backed attachments, else the CNI network name.
    pub name: String,
    /// Pod interface name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interface: String,
    /// Addresses, without prefix length.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// MAC of the interface.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// MTU (omitted when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: u32,
    /// True only for the cluster (default) network.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    /// DNS from the result; always written, possibly `{}`.
    #[serde(default)]
    pub dns: Dns,
    /// Device info (device-info-spec), as reported.
    #[serde(rename = "device-info", default, skip_serializing_if = "Option::is_none")]
    pub device_info: Option<Value>,
    /// Gateways of default routes in the delegate result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateway: Vec<String>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}
