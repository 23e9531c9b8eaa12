//! The libvirt domain of a local guest: what KubeVirt would define, written next to the guest
//! (QEMU runs it directly in the local cluster; `virt-xml-validate` accepts the document).

use std::collections::BTreeMap;

use anyhow::Context;

use weft_domain::{
    ConvertOptions, DirectKernelBoot, InterfaceBinding, InterfaceState, PodInterface, VmiInterface,
};
use weft_guest::GuestSpec;
use weft_vm::VirtualMachineInstance;
use weft_vm::api::BindingKind;

use crate::agent::local::nic::DomainNic;

/// The VMI's interfaces as the domain crate takes them.
pub fn vmi_interfaces(vmi: &VirtualMachineInstance) -> Vec<VmiInterface> {
    vmi.spec
        .interfaces()
        .iter()
        .map(|i| {
            let binding = match i.binding_kind() {
                BindingKind::Masquerade => InterfaceBinding::Masquerade,
                BindingKind::Sriov => InterfaceBinding::Sriov,
                BindingKind::PasstBinding => InterfaceBinding::Passt,
                BindingKind::Plugin(weft_launcher::passt::PASST_PLUGIN_NAME) => InterfaceBinding::PasstPlugin,
                BindingKind::Plugin(_) => InterfaceBinding::Plugin {
                    tap_attachment: false,
                },
                _ => InterfaceBinding::Bridge,
            };
            let mut out = VmiInterface::new(&i.name, binding);
            out.state = match i.state.as_str() {
                weft_vm::api::STATE_DOWN => InterfaceState::Down,
                weft_vm::api::STATE_ABSENT => InterfaceState::Absent,
                _ => InterfaceState::Up,
            };
            out.model = Some(i.model.clone()).filter(|m| !m.is_empty());
            out.mac_address = Some(i.mac_address.clone()).filter(|m| !m.is_empty());
            out.boot_order = i.boot_order;
            out.ports = i
                .ports
                .iter()
                .filter_map(|p| {
                    Some(weft_domain::interface::Port {
                        protocol: p.protocol.clone(),
                        port: u16::try_from(p.port).ok()?,
                    })
                })
                .collect();
            out
        })
        .collect()
}

/// The domain XML of a local guest with `nics` (tap, MAC, MTU from the launcher wiring).
pub fn render(vmi: &VirtualMachineInstance, nics: &[DomainNic], spec: &GuestSpec) -> anyhow::Result<String> {
    let pods: BTreeMap<String, PodInterface> = nics
        .iter()
        .map(|nic| {
            (
                nic.name.clone(),
                PodInterface {
                    pod_iface: nic
                        .passt
                        .as_ref()
                        .map_or_else(|| nic.name.clone(), |p| p.pod_iface.clone()),
                    tap: Some(nic.tap.clone()),
                    mac: nic.mac.clone(),
                    mtu: nic.mtu,
                },
            )
        })
        .collect();
    let options = ConvertOptions {
        vcpus: 1,
        ..Default::default()
    };
    let interfaces = match weft_domain::domain_interfaces(&vmi_interfaces(vmi), &options, &pods) {
        Ok(interfaces) => interfaces,
        Err(e) => return Err(e).context("render the domain's <interface> elements"),
    };
    let boot = DirectKernelBoot {
        name: format!("{}_{}", vmi.namespace(), vmi.metadata.name),
        uuid: vmi.metadata.uid.clone(),
        memory_mib: u64::from(spec.memory_mib),
        vcpus: 1,
        kernel: spec.kernel.display().to_string(),
        initrd: Some(spec.initrd.display().to_string()),
        cmdline: spec.cmdline(),
        serial_log: Some(spec.serial_log().display().to_string()),
        emulator: Some("/usr/bin/qemu-system-x86_64".into()),
    };
    let mut domain = boot.domain(interfaces, Vec::new());
    if spec.guest_agent {
        domain
            .devices
            .channels
            .push(weft_domain::document::guest_agent_channel(
                &spec.qga_socket().display().to_string(),
            ));
    }
    domain.to_xml().context("serialize the domain XML")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubevirt_bindings_and_states_map_to_the_domains() {
        let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "default"},
            "spec": {"domain": {"devices": {"interfaces": [
                {"name": "a", "masquerade": {}},
                {"name": "b", "bridge": {}, "state": "down", "macAddress": "02:00:00:00:00:02",
                 "model": "e1000", "bootOrder": 2, "ports": [{"port": 80, "protocol": "TCP"}, {"port": 70000}]},
                {"name": "c", "sriov": {}, "state": "absent"},
                {"name": "d", "passtBinding": {}},
                {"name": "e", "binding": {"name": "passt"}},
                {"name": "f", "binding": {"name": "slirp-ish"}},
                {"name": "g"}
            ]}}}
        }))
        .unwrap();
        let got = vmi_interfaces(&vmi);
        let bindings: Vec<(&str, &InterfaceBinding, &InterfaceState)> = got
            .iter()
            .map(|i| (i.name.as_str(), &i.binding, &i.state))
            .collect();
        use InterfaceBinding::*;
        use InterfaceState::*;
        assert_eq!(
            bindings,
            [
                ("a", &Masquerade, &Up),
                ("b", &Bridge, &Down),
                ("c", &Sriov, &Absent),
                ("d", &Passt, &Up),
                ("e", &PasstPlugin, &Up),
                (
                    "f",
                    &Plugin {
                        tap_attachment: false
                    },
                    &Up
                ),
                // No binding: KubeVirt's default, bridge.
                ("g", &Bridge, &Up),
            ]
        );
        let b = &got[1];
        assert_eq!(b.model.as_deref(), Some("e1000"));
        assert_eq!(b.mac_address.as_deref(), Some("02:00:00:00:00:02"));
        assert_eq!(b.boot_order, Some(2));
        // A port out of range is dropped, not wrapped.
        assert_eq!(b.ports.len(), 1);
        assert_eq!((b.ports[0].protocol.as_str(), b.ports[0].port), ("TCP", 80));
        assert_eq!((got[0].model.as_ref(), got[0].mac_address.as_ref()), (None, None));
    }
}
