//! The libvirt domain XML elements weft generates, as serde structs for quick-xml. Field order is
//! the element order KubeVirt's Go structs produce (`virtwrap/api/schema.go`); empty elements are
//! written expanded (`<source></source>`) as Go's encoder does.

use serde::{Deserialize, Serialize};

/// Errors rendering or reading XML.
#[derive(Debug, thiserror::Error)]
pub enum XmlError {
    /// Serialization failed.
    #[error("rendering <{root}>: {source}")]
    Render {
        /// The root element.
        root: &'static str,
        /// The serializer's error.
        source: quick_xml::SeError,
    },
    /// Parsing failed.
    #[error("parsing <{root}>: {source}")]
    Parse {
        /// The root element.
        root: &'static str,
        /// The deserializer's error.
        source: quick_xml::DeError,
    },
}

/// Render `value` as the element `root`, empty elements expanded, attributes double-quoted.
pub fn to_xml<T: Serialize>(root: &'static str, value: &T) -> Result<String, XmlError> {
    let mut out = String::new();
    let mut serializer = quick_xml::se::Serializer::with_root(&mut out, Some(root))
        .map_err(|source| XmlError::Render { root, source })?;
    serializer.expand_empty_elements(true);
    value
        .serialize(serializer)
        .map_err(|source| XmlError::Render { root, source })?;
    Ok(out)
}

/// Parse an element rendered by [`to_xml`] (or by libvirt).
pub fn from_xml<T: for<'de> Deserialize<'de>>(root: &'static str, xml: &str) -> Result<T, XmlError> {
    quick_xml::de::from_str(xml).map_err(|source| XmlError::Parse { root, source })
}

/// `<interface>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    /// `type`: `ethernet` for TAP attachments, `vhostuser` for passt, empty in update XML.
    #[serde(rename = "@type")]
    pub kind: String,
    /// Guest PCI address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
    /// `<source>`: always written (empty for TAP attachments).
    #[serde(default)]
    pub source: InterfaceSource,
    /// `<target dev managed>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<InterfaceTarget>,
    /// `<model type>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<Model>,
    /// `<mac address>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac: Option<Mac>,
    /// `<mtu size>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<Mtu>,
    /// `<boot order>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<Boot>,
    /// `<link state>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkState>,
    /// `<alias name>` (`ua-<network>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    /// `<driver name queues iommu>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<Driver>,
    /// `<rom enabled>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rom: Option<Rom>,
    /// `<acpi index>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpi: Option<Acpi>,
    /// `<backend type logFile>` (passt).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// `<portForward>` elements (passt).
    #[serde(rename = "portForward", default, skip_serializing_if = "Vec::is_empty")]
    pub port_forward: Vec<PortForward>,
}

/// `<source>` of an interface.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceSource {
    /// `dev` (passt: the pod interface).
    #[serde(rename = "@dev", default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
}

/// `<target dev managed>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceTarget {
    /// The TAP name.
    #[serde(rename = "@dev")]
    pub dev: String,
    /// `no`: libvirt opens the existing TAP instead of creating one.
    #[serde(rename = "@managed", default, skip_serializing_if = "Option::is_none")]
    pub managed: Option<String>,
}

/// `<model type>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Model {
    /// `virtio-non-transitional`, `e1000`, …
    #[serde(rename = "@type")]
    pub kind: String,
}

/// `<mac address>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mac {
    /// The MAC, lowercase.
    #[serde(rename = "@address")]
    pub address: String,
}

/// `<mtu size>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mtu {
    /// The MTU.
    #[serde(rename = "@size")]
    pub size: u32,
}

/// `<boot order>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Boot {
    /// Boot order, from 1.
    #[serde(rename = "@order")]
    pub order: u32,
}

/// `<link state>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkState {
    /// `up` or `down`.
    #[serde(rename = "@state")]
    pub state: String,
}

/// `<alias name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alias {
    /// The alias (`ua-` + the user's name).
    #[serde(rename = "@name")]
    pub name: String,
}

/// `<driver>` of an interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Driver {
    /// `vhost` when queues are set.
    #[serde(rename = "@name", default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Queue count.
    #[serde(rename = "@queues", default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<u32>,
    /// `on` for SEV/PV launch security.
    #[serde(rename = "@iommu", default, skip_serializing_if = "Option::is_none")]
    pub iommu: Option<String>,
}

/// `<rom enabled>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rom {
    /// `no` disables the option ROM.
    #[serde(rename = "@enabled")]
    pub enabled: String,
}

/// `<acpi index>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acpi {
    /// ACPI index (> 0).
    #[serde(rename = "@index")]
    pub index: u32,
}

/// `<backend type logFile>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backend {
    /// `passt`.
    #[serde(rename = "@type")]
    pub kind: String,
    /// passt's log file.
    #[serde(rename = "@logFile", default, skip_serializing_if = "Option::is_none")]
    pub log_file: Option<String>,
}

/// `<portForward proto>` with its ranges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortForward {
    /// `tcp` or `udp`.
    #[serde(rename = "@proto")]
    pub proto: String,
    /// The host interface the ports are bound on (the passt plugin's sidecar: `eth0`).
    #[serde(rename = "@dev", default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// `<range>` elements; none forwards every port.
    #[serde(rename = "range", default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<PortRange>,
}

/// `<range start [end] [exclude]>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortRange {
    /// First port.
    #[serde(rename = "@start")]
    pub start: u16,
    /// Last port.
    #[serde(rename = "@end", default, skip_serializing_if = "Option::is_none")]
    pub end: Option<u16>,
    /// `yes` excludes the range from forwarding.
    #[serde(rename = "@exclude", default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<String>,
}

/// `<address type='pci' domain bus slot function>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Address {
    /// `pci` on device addresses; absent on a hostdev's source address, where libvirt's schema
    /// does not allow it.
    #[serde(rename = "@type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `0xDDDD`.
    #[serde(rename = "@domain")]
    pub domain: String,
    /// `0xBB`.
    #[serde(rename = "@bus")]
    pub bus: String,
    /// `0xSS`.
    #[serde(rename = "@slot")]
    pub slot: String,
    /// `0xF`.
    #[serde(rename = "@function")]
    pub function: String,
}

/// `<hostdev type='pci' managed='no'>` (SR-IOV VF).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostDev {
    /// `pci`.
    #[serde(rename = "@type")]
    pub kind: String,
    /// `no`: the VF is bound to vfio by the device plugin, not by libvirt.
    #[serde(rename = "@managed")]
    pub managed: String,
    /// The host VF.
    pub source: HostDevSource,
    /// `<boot order>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<Boot>,
    /// Guest PCI address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
    /// `<alias name>` (`ua-sriov-<network>`).
    pub alias: Alias,
}

/// `<source>` of a hostdev.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostDevSource {
    /// The host PCI address of the VF.
    pub address: Address,
}
