//! The `KubeVirt` CR: the cluster-wide network configuration and feature gates.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_object::ObjectMeta;

use super::vmi::{Extra, Marker};

/// A `kubevirt.io/v1` KubeVirt object (only `spec.configuration` is read).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KubeVirt {
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Spec.
    #[serde(default)]
    pub spec: KubeVirtSpec,
    /// Every other top-level field (status, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

kubevirt_resource!(KubeVirt, "KubeVirt", "kubevirts");

/// `spec` of the KubeVirt CR.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KubeVirtSpec {
    /// Cluster configuration.
    #[serde(default)]
    pub configuration: KubeVirtConfiguration,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.configuration`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeVirtConfiguration {
    /// Network configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkConfiguration>,
    /// Feature gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub developer_configuration: Option<DeveloperConfiguration>,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.configuration.network`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfiguration {
    /// `bridge` (KubeVirt's default), `masquerade` or `slirp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_network_interface: Option<String>,
    /// Allow bridge binding on the pod network (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit_bridge_interface_on_pod_network: Option<bool>,
    /// Deprecated slirp switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit_slirp_interface: Option<bool>,
    /// Registered network binding plugins by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub binding: BTreeMap<String, InterfaceBindingPlugin>,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A registered network binding plugin.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceBindingPlugin {
    /// Sidecar hook image.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sidecar_image: String,
    /// NAD (`name` or `ns/name`) whose CNI the plugin needs in the pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub network_attachment_definition: String,
    /// `tap` or `managedTap`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain_attachment_type: String,
    /// Migration support (`{method: link-refresh}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<Marker>,
    /// `device-info` to get the network-info downward API.
    #[serde(rename = "downwardAPI", default, skip_serializing_if = "String::is_empty")]
    pub downward_api: String,
    /// Extra compute resources for the launcher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_resource_overhead: Option<Value>,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.configuration.developerConfiguration`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeveloperConfiguration {
    /// Gates explicitly enabled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feature_gates: Vec<String>,
    /// Gates explicitly disabled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled_feature_gates: Vec<String>,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}
