//! `VirtualMachineInstance` and the network-related parts of its spec and status.
//!
//! Only the fields weft decides on are typed; every other field of every struct is kept in an
//! `extra` map (`#[serde(flatten)]`), so a VMI read and written back loses nothing.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weft_object::ObjectMeta;

/// Every other JSON field of a struct, kept verbatim.
pub type Extra = Map<String, Value>;

/// A binding or network-source marker such as `bridge: {}`; any content is kept.
pub type Marker = Map<String, Value>;

/// A `kubevirt.io/v1` VirtualMachineInstance.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VirtualMachineInstance {
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Desired state.
    #[serde(default)]
    pub spec: VmiSpec,
    /// Observed state (omitted when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VmiStatus>,
    /// Every other top-level field (apiVersion, kind, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

kubevirt_resource!(
    VirtualMachineInstance,
    "VirtualMachineInstance",
    "virtualmachineinstances"
);

impl VirtualMachineInstance {
    /// The VMI's namespace (`""` when unset).
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("")
    }
    /// The status, created empty if absent.
    pub fn status_mut(&mut self) -> &mut VmiStatus {
        self.status.get_or_insert_with(VmiStatus::default)
    }
    /// `status.interfaces`, empty when there is no status.
    pub fn status_interfaces(&self) -> &[InterfaceStatus] {
        self.status
            .as_ref()
            .map(|s| s.interfaces.as_slice())
            .unwrap_or(&[])
    }
}

/// `spec` of a VMI (also the VM template's spec).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmiSpec {
    /// Domain (devices live here).
    #[serde(default)]
    pub domain: DomainSpec,
    /// Networks the VM attaches to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<Network>,
    /// Guest hostname.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Guest DNS subdomain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    /// Dynamic resource allocation claims (only `name` is read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claims: Option<Vec<Value>>,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

impl VmiSpec {
    /// The interfaces (`spec.domain.devices.interfaces`).
    pub fn interfaces(&self) -> &[Interface] {
        &self.domain.devices.interfaces
    }
    /// The interfaces, mutable.
    pub fn interfaces_mut(&mut self) -> &mut Vec<Interface> {
        &mut self.domain.devices.interfaces
    }
}

/// `spec.domain`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DomainSpec {
    /// Devices.
    #[serde(default)]
    pub devices: Devices,
    /// Every other field (cpu, memory, resources, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.domain.devices`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Devices {
    /// Network interfaces (vNICs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    /// `false` disables the automatic `default` pod interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoattach_pod_interface: Option<bool>,
    /// Multi-queue virtio-net.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_interface_multiqueue: Option<bool>,
    /// Transitional virtio models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_virtio_transitional: Option<bool>,
    /// Every other field (disks, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

/// One entry of `spec.networks`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    /// Logical network name (equals an interface name).
    #[serde(default)]
    pub name: String,
    /// The pod's primary (cluster) network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodNetwork>,
    /// A NetworkAttachmentDefinition reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multus: Option<MultusNetwork>,
    /// A DRA network (alpha).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim: Option<ResourceClaimNetwork>,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

impl Network {
    /// `{name: "default", pod: {}}`, KubeVirt's `DefaultPodNetwork()`.
    pub fn default_pod() -> Self {
        Self {
            name: "default".into(),
            pod: Some(PodNetwork::default()),
            ..Default::default()
        }
    }
    /// A secondary Multus network (multus, not `default: true`).
    pub fn is_secondary(&self) -> bool {
        self.multus.as_ref().is_some_and(|m| !m.default)
    }
    /// The primary network: `pod`, or multus with `default: true`.
    pub fn is_primary(&self) -> bool {
        self.pod.is_some() || self.multus.as_ref().is_some_and(|m| m.default)
    }
}

/// `pod: {}` network source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodNetwork {
    /// IPv4 CIDR for masquerade (default `10.0.2.0/24`).
    #[serde(rename = "vmNetworkCIDR", default, skip_serializing_if = "Option::is_none")]
    pub vm_network_cidr: Option<String>,
    /// IPv6 CIDR for masquerade (default `fd10:0:2::/120`).
    #[serde(
        rename = "vmIPv6NetworkCIDR",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub vm_ipv6_network_cidr: Option<String>,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `multus: {...}` network source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MultusNetwork {
    /// `name` or `namespace/name` of the NAD.
    #[serde(default)]
    pub network_name: String,
    /// Replace the pod's cluster network with this one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `resourceClaim: {...}` network source (DRA).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimNetwork {
    /// Name of an entry of `spec.resourceClaims`.
    #[serde(default)]
    pub claim_name: String,
    /// Request within the claim.
    #[serde(default)]
    pub request_name: String,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `binding: {name}`: a registered network binding plugin.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginBinding {
    /// Plugin name (a key of the KubeVirt CR's `network.binding`).
    #[serde(default)]
    pub name: String,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One entry of `spec.domain.devices.interfaces`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interface {
    /// Logical name (equals a network name).
    #[serde(default)]
    pub name: String,
    /// NIC model; empty means virtio.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// Bridge binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<Marker>,
    /// Masquerade (NAT) binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masquerade: Option<Marker>,
    /// SR-IOV binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sriov: Option<Marker>,
    /// Core passt binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passt_binding: Option<Marker>,
    /// Network binding plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<PluginBinding>,
    /// Discontinued slirp binding (parsed so admission can reject it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slirp: Option<Marker>,
    /// Discontinued macvtap binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub macvtap: Option<Marker>,
    /// Discontinued passt binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passt: Option<Marker>,
    /// Ports exposed (masquerade forwards only these when set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Port>,
    /// Port ranges (alpha, masquerade only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_ranges: Vec<PortRange>,
    /// Guest MAC address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac_address: String,
    /// Boot order (> 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_order: Option<u32>,
    /// Guest PCI address `DDDD:BB:SS.F`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pci_address: String,
    /// Extra DHCP options served to the guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhcp_options: Option<DhcpOptions>,
    /// Device-role tag for config-drive metadata.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tag: String,
    /// ACPI index (1..16383).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acpi_index: Option<i64>,
    /// Link state: `""` (up), `up`, `down`, `absent`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The binding method of an interface, as far as decisions care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingKind<'a> {
    /// `bridge: {}`.
    Bridge,
    /// `masquerade: {}`.
    Masquerade,
    /// `sriov: {}`.
    Sriov,
    /// `passtBinding: {}`.
    PasstBinding,
    /// `binding: {name}`.
    Plugin(&'a str),
    /// None of the above (invalid or discontinued only).
    None,
}

/// `state: absent`.
pub const STATE_ABSENT: &str = "absent";
/// `state: down`.
pub const STATE_DOWN: &str = "down";
/// `state: up`.
pub const STATE_UP: &str = "up";

impl Interface {
    /// An interface with a name and a bridge binding.
    pub fn bridge(name: &str) -> Self {
        Self {
            name: name.into(),
            bridge: Some(Marker::new()),
            ..Default::default()
        }
    }
    /// An interface with a name and a masquerade binding.
    pub fn masquerade(name: &str) -> Self {
        Self {
            name: name.into(),
            masquerade: Some(Marker::new()),
            ..Default::default()
        }
    }
    /// The first binding set, in KubeVirt's precedence order.
    pub fn binding_kind(&self) -> BindingKind<'_> {
        if self.bridge.is_some() {
            BindingKind::Bridge
        } else if self.masquerade.is_some() {
            BindingKind::Masquerade
        } else if self.sriov.is_some() {
            BindingKind::Sriov
        } else if self.passt_binding.is_some() {
            BindingKind::PasstBinding
        } else if let Some(b) = &self.binding {
            BindingKind::Plugin(&b.name)
        } else {
            BindingKind::None
        }
    }
    /// `state: absent` (hot-unplug requested).
    pub fn is_absent(&self) -> bool {
        self.state == STATE_ABSENT
    }
}

/// A port exposed by an interface.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Port {
    /// IANA service name (optional).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `TCP` (default) or `UDP`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// Port number.
    #[serde(default)]
    pub port: i64,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A port range exposed by a masquerade interface.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PortRange {
    /// `TCP` or `UDP`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// First port.
    #[serde(default)]
    pub start: i64,
    /// Last port.
    #[serde(default)]
    pub end: i64,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `dhcpOptions` of an interface.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DhcpOptions {
    /// Option 67.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub boot_file_name: String,
    /// Option 66.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tftp_server_name: String,
    /// Option 42 (IPv4 only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ntp_servers: Vec<String>,
    /// Private options 224..254.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub private_options: Vec<DhcpPrivateOption>,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A private DHCP option.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DhcpPrivateOption {
    /// Option code (224..254).
    #[serde(default)]
    pub option: i64,
    /// Raw string value.
    #[serde(default)]
    pub value: String,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `status` of a VMI (the parts weft reads or writes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmiStatus {
    /// Phase (`Pending`, `Scheduling`, `Scheduled`, `Running`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Node the VMI runs on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Interfaces as observed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStatus>,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A VMI condition.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. `MigrationRequired`.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub status: String,
    /// Last probe time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Value>,
    /// Last transition time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Value>,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One entry of `status.interfaces`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStatus {
    /// First of `ipAddresses`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip_address: String,
    /// MAC address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// Network name; empty for guest-only interfaces.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// All addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_addresses: Vec<String>,
    /// Interface name in the launcher pod (controller-owned).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_interface_name: String,
    /// Interface name inside the guest (guest agent).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interface_name: String,
    /// Comma-separated sources (`domain`, `guest-agent`, `multus-status`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub info_source: String,
    /// virtio queue count.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub queue_count: i32,
    /// `up` or `down`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub link_state: String,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}
