//! The passt binding plugin's `<interface type='user'>` in a whole domain: libvirt's schema
//! (`virt-xml-validate`) accepts it, with every port form and with a masquerade NIC next to it.

mod common;

use std::collections::BTreeMap;

use weft_domain::interface::Port;
use weft_domain::{ConvertOptions, InterfaceBinding, PodInterface, VmiInterface, domain_interfaces};

fn pod(name: &str) -> PodInterface {
    PodInterface {
        pod_iface: name.into(),
        tap: None,
        mac: "0a:58:0a:f4:00:05".into(),
        mtu: 1450,
    }
}

fn port(protocol: &str, port: u16) -> Port {
    Port {
        protocol: protocol.into(),
        port,
    }
}

#[test]
fn passt_plugin_domains_validate() {
    let cases: Vec<(Vec<Port>, bool)> = vec![
        (Vec::new(), false),
        (vec![port("", 8080), port("TCP", 22)], false),
        (vec![port("udp", 53)], false),
        (vec![port("tcp", 80), port("udp", 5353)], true),
    ];
    for (ports, istio) in cases {
        let mut iface = VmiInterface::new("default", InterfaceBinding::PasstPlugin);
        iface.ports = ports.clone();
        iface.mac_address = Some("02:00:00:0a:00:09".into());
        iface.pci_address = Some("0000:00:06.0".into());
        let options = ConvertOptions {
            istio,
            ..ConvertOptions::default()
        };
        let pods = BTreeMap::from([("default".to_string(), pod("eth0"))]);
        let interfaces = domain_interfaces(&[iface], &options, &pods).unwrap();
        assert_eq!(interfaces.len(), 1);
        let xml = common::guest()
            .domain(interfaces.clone(), Vec::new())
            .to_xml()
            .unwrap();
        assert!(
            xml.contains("<interface type=\"user\"><address type=\"pci\""),
            "{xml}"
        );
        assert!(
            xml.contains("<backend type=\"passt\" logFile=\"/var/run/kubevirt/passt.log\"></backend>"),
            "{xml}"
        );
        assert!(xml.contains("dev=\"eth0\""), "{xml}");
        common::validate_in_domain(interfaces, Vec::new());
    }
}

#[test]
fn passt_plugin_without_pod_interface_is_an_error() {
    let iface = VmiInterface::new("default", InterfaceBinding::PasstPlugin);
    let err = domain_interfaces(&[iface], &ConvertOptions::default(), &BTreeMap::new()).unwrap_err();
    assert!(err.to_string().contains("default"), "{err}");
}
