//! NetworkAttachmentDefinitions, the networks selection annotation and network-status
//! (the NPWG/Multus wire formats).

mod annotation;
mod delegate_config;
mod hwaddr;
mod nad;
mod reference;
mod selection;
mod status;
mod status_annotation;

pub use annotation::{
    AnnotationError, is_dns1123_label, parse_default_network_annotation, parse_networks_annotation,
};
pub use delegate_config::{
    ConfDirError, DelegateConfig, DelegateConfigError, DelegateKind, META_PLUGIN_TYPE, NadConfigError,
    delegate_config_from_nad, find_config_in_dir, inject_network_name,
};
pub use hwaddr::parse_hardware_addr;
pub use nad::{NetworkAttachmentDefinition, NetworkAttachmentDefinitionSpec};
pub use reference::split_namespaced;
pub use selection::{Bandwidth, NetworkSelectionElement, PortMapping};
pub use status::NetworkStatus;
pub use status_annotation::{
    StatusAnnotationError, default_gateways, format_network_status_annotation, network_status,
    network_statuses, parse_network_status_annotation, read_network_status_annotation,
};

/// Pod annotation selecting secondary networks.
pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";
/// Pod annotation listing the attached networks (written by the meta-plugin).
pub const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";
/// The plural key Multus 3.x also wrote (same value); readers may fall back to it.
pub const LEGACY_NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks-status";
/// Pod annotation replacing the cluster network.
pub const DEFAULT_NETWORK_ANNOTATION: &str = "v1.multus-cni.io/default-network";
/// NAD annotation naming a device-plugin resource.
pub const RESOURCE_NAME_ANNOTATION: &str = "k8s.v1.cni.cncf.io/resourceName";
