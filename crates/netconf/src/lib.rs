//! NetworkAttachmentDefinitions, the networks selection annotation and network-status
//! (the NPWG/Multus wire formats).

mod annotation;
mod hwaddr;
mod nad;
mod selection;
mod status;

pub use annotation::{
    AnnotationError, is_dns1123_label, parse_default_network_annotation, parse_networks_annotation,
};
pub use hwaddr::parse_hardware_addr;
pub use nad::{NetworkAttachmentDefinition, NetworkAttachmentDefinitionSpec};
pub use selection::{Bandwidth, NetworkSelectionElement, PortMapping};
pub use status::NetworkStatus;

/// Pod annotation selecting secondary networks.
pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";
/// Pod annotation listing the attached networks (written by the meta-plugin).
pub const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";
/// Pod annotation replacing the cluster network.
pub const DEFAULT_NETWORK_ANNOTATION: &str = "v1.multus-cni.io/default-network";
/// NAD annotation naming a device-plugin resource.
pub const RESOURCE_NAME_ANNOTATION: &str = "k8s.v1.cni.cncf.io/resourceName";
