//! VMI interfaces → libvirt `<interface>` / `<hostdev>` (`virtwrap/converter/network/*`,
//! `pkg/network/domainspec/generators.go`, `hostdevice/sriov`): the converter's part, which
//! needs only the VMI spec, and the launcher's enrichment with what it found in the pod.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::xml::{
    Acpi, Address, Alias, Backend, Boot, Driver, HostDev, HostDevSource, Interface, InterfaceSource,
    InterfaceTarget, LinkState, Mac, Model, Mtu, PortForward, PortRange, Rom,
};

/// The alias prefix marking user-named devices.
pub const USER_ALIAS_PREFIX: &str = "ua-";
/// Most queues a virtio NIC gets.
pub const MAX_QUEUES: u32 = 256;
/// passt's log file inside the launcher.
pub const PASST_LOG_FILE: &str = "/var/run/kubevirt/passt.log";
/// Envoy's ports, excluded from passt's TCP forwarding when Istio is injected.
pub const ISTIO_RESERVED_PORTS: [u16; 10] = [
    15000, 15001, 15004, 15006, 15008, 15009, 15020, 15021, 15053, 15090,
];

/// Errors converting interfaces.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// A PCI address is not `DDDD:BB:SS.F` (hex).
    #[error("interface {interface}: invalid {field} {value:?}: expected DDDD:BB:SS.F in hex")]
    InvalidPciAddress {
        /// The VMI interface.
        interface: String,
        /// `pciAddress` or the SR-IOV device's host address.
        field: &'static str,
        /// The text given.
        value: String,
    },
    /// A MAC address is not six hex octets.
    #[error("interface {interface}: invalid {field} {value:?}: expected six hex octets")]
    InvalidMac {
        /// The VMI interface.
        interface: String,
        /// `macAddress` or the pod interface MAC.
        field: &'static str,
        /// The text given.
        value: String,
    },
    /// The launcher found no pod interface for a TAP-attached or passt interface.
    #[error("pod interface name not found for interface {0}")]
    MissingPodInterface(String),
}

/// How a VMI interface is bound (only what decides the domain XML).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum InterfaceBinding {
    /// `bridge: {}`.
    Bridge,
    /// `masquerade: {}`.
    Masquerade,
    /// `sriov: {}`: a `<hostdev>`, never an `<interface>`.
    Sriov,
    /// `passtBinding: {}`: `vhostuser` with the passt backend.
    Passt,
    /// `binding: {name: passt}`, KubeVirt's passt network binding plugin: its sidecar's
    /// `<interface type='user'>` with the passt backend ([`crate::passt`]).
    PasstPlugin,
    /// `binding: {name}`: an `<interface>` only when the plugin's domain attachment is
    /// `tap` or `managedTap`.
    Plugin {
        /// The plugin's `domainAttachmentType` is `tap` or `managedTap`.
        tap_attachment: bool,
    },
}

/// `state` of a VMI interface.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum InterfaceState {
    /// Link up (the default).
    #[default]
    Up,
    /// Link down.
    Down,
    /// Being hot-unplugged: not in the domain.
    Absent,
}

/// A declared port (passt).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    /// `TCP`/`UDP` (any case); empty means TCP.
    pub protocol: String,
    /// Port number.
    pub port: u16,
}

/// The fields of a VMI interface (`spec.domain.devices.interfaces[]`) the domain needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmiInterface {
    /// Interface (= network) name.
    pub name: String,
    /// Binding.
    pub binding: InterfaceBinding,
    /// Link state.
    pub state: InterfaceState,
    /// `model`; `None` is virtio.
    pub model: Option<String>,
    /// `macAddress`.
    pub mac_address: Option<String>,
    /// `pciAddress` (`0000:81:01.1`).
    pub pci_address: Option<String>,
    /// `acpiIndex`.
    pub acpi_index: Option<u32>,
    /// `bootOrder`.
    pub boot_order: Option<u32>,
    /// `ports` (passt forwards them).
    pub ports: Vec<Port>,
}

impl VmiInterface {
    /// A bridge-bound interface named `name` with every optional field unset.
    pub fn new(name: &str, binding: InterfaceBinding) -> Self {
        VmiInterface {
            name: name.to_string(),
            binding,
            state: InterfaceState::Up,
            model: None,
            mac_address: None,
            pci_address: None,
            acpi_index: None,
            boot_order: None,
            ports: Vec::new(),
        }
    }
}

/// CPU architecture of the guest (ROM tuning is supported on amd64 and arm64).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// x86_64.
    #[default]
    Amd64,
    /// aarch64.
    Arm64,
    /// Anything else (no ROM tuning).
    Other,
}

/// VMI-wide settings that shape every interface.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConvertOptions {
    /// Guest architecture.
    pub arch: Arch,
    /// `spec.domain.devices.useVirtioTransitional`.
    pub use_virtio_transitional: bool,
    /// `spec.domain.devices.networkInterfaceMultiqueue`.
    pub network_interface_multiqueue: bool,
    /// Requested vCPUs (sockets × cores × threads).
    pub vcpus: u32,
    /// SEV/PV launch security (forces `iommu='on'` and keeps the ROM disabled).
    pub launch_security: bool,
    /// The VMI has `sidecar.istio.io/inject: "true"`.
    pub istio: bool,
}

/// What the launcher found in the pod for one interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodInterface {
    /// The pod interface name (`eth0`, `pod<hash>`).
    pub pod_iface: String,
    /// The TAP, when it exists (`tap0`, `tap<hash>`); `None` targets the pod interface (legacy).
    pub tap: Option<String>,
    /// MAC of the pod interface (for the bridge binding: its original MAC).
    pub mac: String,
    /// MTU of the pod interface.
    pub mtu: u32,
}

/// The domain model name for a VMI model (`virtio` → `virtio-non-transitional`).
pub fn model_name(model: Option<&str>, use_virtio_transitional: bool) -> String {
    match model.unwrap_or("virtio") {
        "virtio" if use_virtio_transitional => "virtio-transitional".to_string(),
        "virtio" => "virtio-non-transitional".to_string(),
        other => other.to_string(),
    }
}

fn is_virtio(iface: &VmiInterface) -> bool {
    iface.model.as_deref().unwrap_or("virtio") == "virtio"
}

/// Queue count of a virtio NIC: `min(vcpus, 256)` with multiqueue, else 0.
pub fn queue_count(options: &ConvertOptions) -> u32 {
    if options.network_interface_multiqueue {
        options.vcpus.min(MAX_QUEUES)
    } else {
        0
    }
}

/// Parse `DDDD:BB:SS.F` into a libvirt PCI `<address>`.
pub fn pci_address(text: &str) -> Option<Address> {
    let (domain, rest) = text.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (slot, function) = rest.split_once('.')?;
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !(hex(domain, 4) && hex(bus, 2) && hex(slot, 2) && hex(function, 1)) {
        return None;
    }
    Some(Address {
        kind: Some("pci".to_string()),
        domain: format!("0x{domain}"),
        bus: format!("0x{bus}"),
        slot: format!("0x{slot}"),
        function: format!("0x{function}"),
    })
}

/// Whether the interface becomes a TAP-attached `<interface type='ethernet'>`.
pub fn is_tap_attachment(binding: &InterfaceBinding) -> bool {
    match binding {
        InterfaceBinding::Bridge | InterfaceBinding::Masquerade => true,
        InterfaceBinding::Plugin { tap_attachment } => *tap_attachment,
        InterfaceBinding::Sriov | InterfaceBinding::Passt | InterfaceBinding::PasstPlugin => false,
    }
}

/// The interface's spec `pciAddress` and `macAddress` as domain elements (each `None` when
/// unset), or the error naming the field that does not parse.
pub fn spec_address_and_mac(iface: &VmiInterface) -> Result<(Option<Address>, Option<Mac>), ConvertError> {
    let address = match &iface.pci_address {
        Some(text) => Some(pci_address(text).ok_or_else(|| ConvertError::InvalidPciAddress {
            interface: iface.name.clone(),
            field: "pciAddress",
            value: text.clone(),
        })?),
        None => None,
    };
    let mac = match &iface.mac_address {
        Some(text) if !weft_cni::mac::is_colon_mac(text) => {
            return Err(ConvertError::InvalidMac {
                interface: iface.name.clone(),
                field: "macAddress",
                value: text.clone(),
            });
        }
        Some(text) => Some(Mac {
            address: text.clone(),
        }),
        None => None,
    };
    Ok((address, mac))
}

/// The converter's `<interface>` for one VMI interface, before the launcher enriches it;
/// `None` for interfaces that are not in the domain as `<interface>` (absent, SR-IOV, plugins
/// without a TAP attachment).
pub fn convert_interface(
    iface: &VmiInterface,
    options: &ConvertOptions,
) -> Result<Option<Interface>, ConvertError> {
    let passt = iface.binding == InterfaceBinding::Passt;
    if iface.state == InterfaceState::Absent || !(passt || is_tap_attachment(&iface.binding)) {
        return Ok(None);
    }
    let (address, mac) = spec_address_and_mac(iface)?;
    let queues = if is_virtio(iface) { queue_count(options) } else { 0 };
    let driver = (is_virtio(iface) && (queues > 0 || options.launch_security)).then(|| Driver {
        name: (queues > 0).then(|| "vhost".to_string()),
        queues: (queues > 0).then_some(queues),
        iommu: options.launch_security.then(|| "on".to_string()),
    });
    let mut interface = Interface {
        address,
        model: Some(Model {
            kind: model_name(iface.model.as_deref(), options.use_virtio_transitional),
        }),
        mac,
        alias: Some(Alias {
            name: format!("{USER_ALIAS_PREFIX}{}", iface.name),
        }),
        driver,
        acpi: iface.acpi_index.filter(|i| *i > 0).map(|index| Acpi { index }),
        ..Interface::default()
    };
    if passt {
        interface.kind = "vhostuser".to_string();
        interface.backend = Some(Backend {
            kind: "passt".to_string(),
            log_file: Some(PASST_LOG_FILE.to_string()),
        });
        interface.port_forward = passt_port_forwards(&iface.ports, options.istio);
        return Ok(Some(interface));
    }
    interface.kind = "ethernet".to_string();
    interface.boot = iface.boot_order.map(|order| Boot { order });
    let rom_tuning = matches!(options.arch, Arch::Amd64 | Arch::Arm64);
    if rom_tuning && (iface.boot_order.is_none() || options.launch_security) {
        interface.rom = Some(Rom {
            enabled: "no".to_string(),
        });
    }
    if iface.state == InterfaceState::Down {
        interface.link = Some(LinkState {
            state: "down".to_string(),
        });
    }
    Ok(Some(interface))
}

pub(crate) fn passt_port_forwards(ports: &[Port], istio: bool) -> Vec<PortForward> {
    let excluded: Vec<PortRange> = if istio {
        ISTIO_RESERVED_PORTS
            .iter()
            .map(|&start| PortRange {
                start,
                end: None,
                exclude: Some("yes".to_string()),
            })
            .collect()
    } else {
        Vec::new()
    };
    let range = |p: &Port| PortRange {
        start: p.port,
        end: None,
        exclude: None,
    };
    let is_tcp = |p: &&Port| p.protocol.is_empty() || p.protocol.eq_ignore_ascii_case("tcp");
    if ports.is_empty() {
        return vec![
            PortForward {
                proto: "tcp".to_string(),
                dev: None,
                ranges: excluded,
            },
            PortForward {
                proto: "udp".to_string(),
                dev: None,
                ranges: Vec::new(),
            },
        ];
    }
    let tcp: Vec<PortRange> = excluded
        .into_iter()
        .chain(ports.iter().filter(is_tcp).map(range))
        .collect();
    let udp: Vec<PortRange> = ports.iter().filter(|p| !is_tcp(p)).map(range).collect();
    let mut forwards = Vec::new();
    if !tcp.is_empty() {
        forwards.push(PortForward {
            proto: "tcp".to_string(),
            dev: None,
            ranges: tcp,
        });
    }
    if !udp.is_empty() {
        forwards.push(PortForward {
            proto: "udp".to_string(),
            dev: None,
            ranges: udp,
        });
    }
    forwards
}

/// The launcher's enrichment of a converted TAP-attached interface: MAC (spec MAC, else the pod
/// interface's), MTU, and the TAP target (`managed='no'`); without a TAP the target is the pod
/// interface (legacy). For passt the source is the pod interface.
pub fn enrich(
    interface: &mut Interface,
    iface: &VmiInterface,
    pod: &PodInterface,
) -> Result<(), ConvertError> {
    if iface.binding == InterfaceBinding::Passt {
        interface.source = InterfaceSource {
            dev: Some(pod.pod_iface.clone()),
        };
        return Ok(());
    }
    if interface.mac.is_none() {
        if !weft_cni::mac::is_colon_mac(&pod.mac) {
            return Err(ConvertError::InvalidMac {
                interface: iface.name.clone(),
                field: "pod interface mac",
                value: pod.mac.clone(),
            });
        }
        interface.mac = Some(Mac {
            address: pod.mac.clone(),
        });
    }
    interface.mtu = Some(Mtu { size: pod.mtu });
    interface.target = Some(match &pod.tap {
        Some(tap) => InterfaceTarget {
            dev: tap.clone(),
            managed: Some("no".to_string()),
        },
        None => InterfaceTarget {
            dev: pod.pod_iface.clone(),
            managed: Some("no".to_string()),
        },
    });
    Ok(())
}

/// All `<interface>` elements of a VMI, in spec order, converted and enriched with the pod side
/// (`pods` is keyed by interface name).
pub fn domain_interfaces(
    ifaces: &[VmiInterface],
    options: &ConvertOptions,
    pods: &BTreeMap<String, PodInterface>,
) -> Result<Vec<Interface>, ConvertError> {
    let mut out = Vec::new();
    for iface in ifaces {
        if iface.binding == InterfaceBinding::PasstPlugin && iface.state != InterfaceState::Absent {
            // What the plugin's sidecar adds to the domain (KubeVirt's converter skips it).
            let pod = pods
                .get(&iface.name)
                .ok_or_else(|| ConvertError::MissingPodInterface(iface.name.clone()))?;
            out.push(crate::passt::plugin_interface(iface, options, &pod.pod_iface)?);
            continue;
        }
        let Some(mut interface) = convert_interface(iface, options)? else {
            continue;
        };
        let pod = pods
            .get(&iface.name)
            .ok_or_else(|| ConvertError::MissingPodInterface(iface.name.clone()))?;
        enrich(&mut interface, iface, pod)?;
        out.push(interface);
    }
    Ok(out)
}

/// The `<hostdev>` of an SR-IOV interface whose VF is at `host_pci_address` (from the
/// network-info pool).
pub fn sriov_hostdev(iface: &VmiInterface, host_pci_address: &str) -> Result<HostDev, ConvertError> {
    let invalid = |field: &'static str, value: &str| ConvertError::InvalidPciAddress {
        interface: iface.name.clone(),
        field,
        value: value.to_string(),
    };
    let mut source =
        pci_address(host_pci_address).ok_or_else(|| invalid("SR-IOV host pci-address", host_pci_address))?;
    // KubeVirt writes type='pci' here too; libvirt ignores it but its schema rejects it.
    source.kind = None;
    let address = match &iface.pci_address {
        Some(text) => Some(pci_address(text).ok_or_else(|| invalid("pciAddress", text))?),
        None => None,
    };
    Ok(HostDev {
        kind: "pci".to_string(),
        managed: "no".to_string(),
        source: HostDevSource { address: source },
        boot: iface.boot_order.map(|order| Boot { order }),
        address,
        alias: Alias {
            name: format!("{USER_ALIAS_PREFIX}sriov-{}", iface.name),
        },
    })
}

/// The `<interface>` used to change the link state of a running guest's NIC (`UpdateDeviceFlags`).
pub fn link_state_update(name: &str, state: InterfaceState) -> Interface {
    let state = if state == InterfaceState::Down {
        "down"
    } else {
        "up"
    };
    Interface {
        link: Some(LinkState {
            state: state.to_string(),
        }),
        alias: Some(Alias {
            name: format!("{USER_ALIAS_PREFIX}{name}"),
        }),
        ..Interface::default()
    }
}

impl Interface {
    /// The element as XML.
    pub fn to_xml(&self) -> Result<String, crate::xml::XmlError> {
        crate::xml::to_xml("interface", self)
    }
}

impl HostDev {
    /// The element as XML.
    pub fn to_xml(&self) -> Result<String, crate::xml::XmlError> {
        crate::xml::to_xml("hostdev", self)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::xml::from_xml;

    #[test]
    fn models_and_queues() {
        assert_eq!(model_name(None, false), "virtio-non-transitional");
        assert_eq!(model_name(Some("virtio"), true), "virtio-transitional");
        assert_eq!(model_name(Some("e1000e"), true), "e1000e");
        let opts = ConvertOptions {
            network_interface_multiqueue: true,
            vcpus: 300,
            ..ConvertOptions::default()
        };
        assert_eq!(queue_count(&opts), 256);
        assert_eq!(
            queue_count(&ConvertOptions {
                vcpus: 8,
                ..ConvertOptions::default()
            }),
            0
        );
    }

    #[test]
    fn launch_security_forces_iommu_and_rom_off() {
        let opts = ConvertOptions {
            launch_security: true,
            ..ConvertOptions::default()
        };
        let mut iface = VmiInterface::new("default", InterfaceBinding::Masquerade);
        iface.boot_order = Some(1);
        let converted = convert_interface(&iface, &opts).unwrap().unwrap();
        let driver = converted.driver.unwrap();
        assert_eq!(
            (driver.name, driver.queues, driver.iommu.as_deref()),
            (None, None, Some("on"))
        );
        assert_eq!(converted.rom.unwrap().enabled, "no");
    }

    #[test]
    fn passt_with_istio_excludes_envoy_ports() {
        let iface = VmiInterface::new("default", InterfaceBinding::Passt);
        let opts = ConvertOptions {
            istio: true,
            ..ConvertOptions::default()
        };
        let converted = convert_interface(&iface, &opts).unwrap().unwrap();
        assert_eq!(converted.kind, "vhostuser");
        let tcp = &converted.port_forward[0];
        assert_eq!(tcp.ranges.len(), 10);
        assert!(tcp.ranges.iter().all(|r| r.exclude.as_deref() == Some("yes")));
        assert!(
            converted.port_forward[1].ranges.is_empty(),
            "udp forwards everything"
        );
    }

    proptest! {
        #[test]
        fn pci_addresses_round_trip(d in 0u16.., b in 0u8.., s in 0u8..32, f in 0u8..8) {
            let text = format!("{d:04x}:{b:02x}:{s:02x}.{f:x}");
            let address = pci_address(&text).unwrap();
            let back = format!(
                "{}:{}:{}.{}",
                &address.domain[2..], &address.bus[2..], &address.slot[2..], &address.function[2..]
            );
            prop_assert_eq!(back, text);
        }

        #[test]
        fn pci_address_parser_never_panics(text in ".{0,20}") {
            let _ = pci_address(&text);
        }

        /// Every converted interface renders to XML that parses back to the same element.
        #[test]
        fn interface_xml_round_trips(
            name in "[a-z][a-z0-9-]{0,20}",
            boot in proptest::option::of(1u32..10),
            acpi in proptest::option::of(0u32..10),
            down in any::<bool>(),
            multiqueue in any::<bool>(),
            vcpus in 1u32..512,
            mtu in 68u32..9000,
        ) {
            let mut iface = VmiInterface::new(&name, InterfaceBinding::Bridge);
            iface.boot_order = boot;
            iface.acpi_index = acpi;
            iface.state = if down { InterfaceState::Down } else { InterfaceState::Up };
            let opts = ConvertOptions { network_interface_multiqueue: multiqueue, vcpus, ..ConvertOptions::default() };
            let pods = BTreeMap::from([(name.clone(), PodInterface {
                pod_iface: "pod16477688c0e".to_string(),
                tap: Some("tap16477688c0e".to_string()),
                mac: "02:00:00:00:00:01".to_string(),
                mtu,
            })]);
            let interface = domain_interfaces(&[iface], &opts, &pods).unwrap().remove(0);
            let xml = interface.to_xml().unwrap();
            prop_assert_eq!(from_xml::<Interface>("interface", &xml).unwrap(), interface);
        }
    }
}
