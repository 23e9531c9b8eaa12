//! One element of the `k8s.v1.cni.cncf.io/networks` annotation (NPWG NetworkSelectionElement).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A network a pod asks for. Field order and names are the wire format (Go struct order).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkSelectionElement {
    /// NAD name (an absent or empty name is accepted here, as by Multus, and rejected at lookup).
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// NAD namespace (defaults to the pod's).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub namespace: String,
    /// Requested IPs (CIDR or bare address).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ips: Vec<String>,
    /// Requested MAC.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub mac: String,
    /// Requested InfiniBand GUID.
    #[serde(
        rename = "infiniband-guid",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub infiniband_guid: String,
    /// Requested pod interface name.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub interface: String,
    /// Deprecated alias of `interface` (Multus before 3.2).
    #[serde(
        rename = "interfaceRequest",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub interface_request: String,
    /// Port mappings for this attachment.
    #[serde(
        rename = "portMappings",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub port_mappings: Vec<PortMapping>,
    /// Bandwidth limits for this attachment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    /// Extra CNI args merged into the delegate's `args.cni`.
    #[serde(rename = "cni-args", default, skip_serializing_if = "Option::is_none")]
    pub cni_args: Option<Map<String, Value>>,
    /// Gateways to make the default route (`[]` removes default routes).
    #[serde(rename = "default-route", default, skip_serializing_if = "Option::is_none")]
    pub default_route: Option<Vec<std::net::IpAddr>>,
    /// Device id (e.g. an SR-IOV VF PCI address).
    #[serde(
        rename = "deviceID",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub device_id: String,
    /// Name of the IPAMClaim holding this attachment's addresses.
    #[serde(
        rename = "ipam-claim-reference",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub ipam_claim_reference: String,
}

/// A port mapping request (`portMappings` capability).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortMapping {
    /// Port on the host.
    pub host_port: i32,
    /// Port in the pod.
    pub container_port: i32,
    /// `tcp`, `udp`, `sctp`.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub protocol: String,
    /// Host address to bind.
    #[serde(rename = "hostIP", default, skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

/// A bandwidth request (`bandwidth` capability), in bits per second and bits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bandwidth {
    /// Ingress rate.
    #[serde(default)]
    pub ingress_rate: i64,
    /// Ingress burst.
    #[serde(default)]
    pub ingress_burst: i64,
    /// Egress rate.
    #[serde(default)]
    pub egress_rate: i64,
    /// Egress burst.
    #[serde(default)]
    pub egress_burst: i64,
}

/// Go's `encoding/json` leaves a field untouched when the value is `null`; so do we.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}
