//! The `<interface>` of KubeVirt's passt network binding plugin (`binding: {name: passt}`),
//! which the plugin's sidecar (`cmd/sidecars/network-passt-binding`) writes into the domain:
//! libvirt's user-mode interface with the passt backend, `type='user'`, its source the pod
//! interface, `<backend type='passt' logFile=…>` and the forwarded ports as `<portForward>`
//! bound to the pod interface (`dev='eth0'`). The core `passtBinding` is `vhostuser` instead
//! ([`crate::interface::convert_interface`]).

use crate::interface::{ConvertError, ConvertOptions, PASST_LOG_FILE, USER_ALIAS_PREFIX, VmiInterface};
use crate::interface::{model_name, passt_port_forwards, spec_address_and_mac};
use crate::xml::{Acpi, Alias, Backend, Interface, InterfaceSource, Model};

/// The pod interface the sidecar binds the forwarded ports to (`PrimaryPodInterfaceName`).
pub const PRIMARY_POD_INTERFACE: &str = "eth0";

/// The sidecar's `<interface type='user'>` for `iface`, its source `pod_iface` (the pod
/// interface found in the pod, `eth0`). Only a spec MAC is written (libvirt picks one
/// otherwise); no driver, ROM or MTU element, as the sidecar.
pub fn plugin_interface(
    iface: &VmiInterface,
    options: &ConvertOptions,
    pod_iface: &str,
) -> Result<Interface, ConvertError> {
    let (address, mac) = spec_address_and_mac(iface)?;
    let mut port_forward = passt_port_forwards(&iface.ports, options.istio);
    for forward in &mut port_forward {
        forward.dev = Some(PRIMARY_POD_INTERFACE.to_string());
    }
    Ok(Interface {
        kind: "user".to_string(),
        address,
        source: InterfaceSource {
            dev: Some(pod_iface.to_string()),
        },
        model: Some(Model {
            kind: model_name(iface.model.as_deref(), options.use_virtio_transitional),
        }),
        mac,
        alias: Some(Alias {
            name: format!("{USER_ALIAS_PREFIX}{}", iface.name),
        }),
        acpi: iface.acpi_index.filter(|i| *i > 0).map(|index| Acpi { index }),
        backend: Some(Backend {
            kind: "passt".to_string(),
            log_file: Some(PASST_LOG_FILE.to_string()),
        }),
        port_forward,
        ..Interface::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interface::{InterfaceBinding, Port};

    fn passt(ports: Vec<Port>) -> VmiInterface {
        let mut iface = VmiInterface::new("default", InterfaceBinding::PasstPlugin);
        iface.ports = ports;
        iface
    }

    #[test]
    fn no_ports_forward_all_tcp_and_udp_on_eth0() {
        let xml = plugin_interface(&passt(Vec::new()), &ConvertOptions::default(), "eth0")
            .unwrap()
            .to_xml()
            .unwrap();
        assert_eq!(
            xml,
            "<interface type=\"user\"><source dev=\"eth0\"></source>\
             <model type=\"virtio-non-transitional\"></model><alias name=\"ua-default\"></alias>\
             <backend type=\"passt\" logFile=\"/var/run/kubevirt/passt.log\"></backend>\
             <portForward proto=\"tcp\" dev=\"eth0\"></portForward>\
             <portForward proto=\"udp\" dev=\"eth0\"></portForward></interface>"
        );
    }

    #[test]
    fn listed_ports_and_spec_mac() {
        let mut iface = passt(vec![
            Port {
                protocol: String::new(),
                port: 8080,
            },
            Port {
                protocol: "UDP".into(),
                port: 53,
            },
        ]);
        iface.mac_address = Some("02:00:00:00:00:aa".into());
        let converted = plugin_interface(&iface, &ConvertOptions::default(), "ovn-udn1").unwrap();
        assert_eq!(converted.source.dev.as_deref(), Some("ovn-udn1"));
        assert_eq!(converted.mac.as_ref().unwrap().address, "02:00:00:00:00:aa");
        let forwards: Vec<(String, Vec<u16>)> = converted
            .port_forward
            .iter()
            .map(|f| (f.proto.clone(), f.ranges.iter().map(|r| r.start).collect()))
            .collect();
        assert_eq!(forwards, [("tcp".into(), vec![8080]), ("udp".into(), vec![53])]);
        iface.mac_address = Some("nope".into());
        assert!(matches!(
            plugin_interface(&iface, &ConvertOptions::default(), "eth0"),
            Err(ConvertError::InvalidMac { .. })
        ));
    }
}
