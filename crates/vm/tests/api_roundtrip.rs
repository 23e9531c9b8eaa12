//! The API types keep every field they do not model.

use serde_json::json;
use weft_object::{Object, Resource};
use weft_vm::api::{BindingKind, VirtualMachine, VirtualMachineInstance};

fn vmi_json() -> serde_json::Value {
    json!({
        "metadata": {"name": "vm1", "namespace": "ns", "annotations": {"a": "b"}, "generation": 2},
        "spec": {
            "domain": {
                "cpu": {"cores": 2},
                "devices": {
                    "disks": [{"name": "root"}],
                    "autoattachPodInterface": false,
                    "networkInterfaceMultiqueue": true,
                    "interfaces": [
                        {"name": "default", "masquerade": {}, "model": "virtio", "ports": [{"port": 80, "name": "http"}],
                         "bootOrder": 1, "pciAddress": "0000:01:00.0", "tag": "x", "acpiIndex": 3, "futureField": 1},
                        {"name": "red", "bridge": {}, "macAddress": "de:ad:00:00:be:af", "state": "down",
                         "dhcpOptions": {"bootFileName": "f", "ntpServers": ["1.2.3.4"], "privateOptions": [{"option": 240, "value": "v"}]}},
                        {"name": "blue", "binding": {"name": "passt"}}
                    ]
                }
            },
            "networks": [
                {"name": "default", "pod": {"vmNetworkCIDR": "10.1.0.0/24", "vmIPv6NetworkCIDR": "fd00::/120"}},
                {"name": "red", "multus": {"networkName": "ns2/red", "default": false, "x": 1}},
                {"name": "blue", "multus": {"networkName": "blue"}}
            ],
            "terminationGracePeriodSeconds": 0
        },
        "status": {
            "phase": "Running", "nodeName": "n1",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "interfaces": [{"name": "default", "ipAddress": "10.0.0.1", "ipAddresses": ["10.0.0.1"], "mac": "aa",
                            "podInterfaceName": "eth0", "infoSource": "domain", "queueCount": 1, "linkState": "up"}],
            "migrationTransport": "Unix"
        }
    })
}

#[test]
fn vmi_round_trip_loses_nothing() {
    let input = vmi_json();
    let vmi: VirtualMachineInstance = serde_json::from_value(input.clone()).unwrap();
    assert_eq!(
        vmi.spec.interfaces()[2].binding_kind(),
        BindingKind::Plugin("passt")
    );
    assert_eq!(vmi.spec.interfaces()[1].binding_kind(), BindingKind::Bridge);
    assert_eq!(vmi.status_interfaces()[0].pod_interface_name, "eth0");
    let mut back = serde_json::to_value(&vmi).unwrap();
    // `default: false` is Go's omitempty zero value: dropping it is the canonical form.
    let mut expected = input;
    expected["spec"]["networks"][1]["multus"]
        .as_object_mut()
        .unwrap()
        .remove("default");
    back["spec"]["networks"][1]["multus"]
        .as_object_mut()
        .unwrap()
        .remove("default");
    assert_eq!(back, expected);
}

#[test]
fn vmi_through_the_store_object() {
    let mut input = vmi_json();
    input["apiVersion"] = json!("kubevirt.io/v1");
    input["kind"] = json!("VirtualMachineInstance");
    let obj: Object = serde_json::from_value(input).unwrap();
    let vmi: VirtualMachineInstance = obj.to_typed().unwrap();
    let back = Object::from_typed(&vmi).unwrap();
    assert_eq!(back.kind, VirtualMachineInstance::KIND);
    assert_eq!(back.path("spec.domain.cpu.cores"), Some(json!(2)));
}

#[test]
fn vm_round_trip_keeps_template() {
    let input = json!({
        "metadata": {"name": "vm1", "namespace": "ns"},
        "spec": {"runStrategy": "Always", "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
            "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
            "networks": [{"name": "default", "pod": {}}]}}, "dataVolumeTemplates": []},
        "status": {"ready": true}
    });
    let vm: VirtualMachine = serde_json::from_value(input.clone()).unwrap();
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Always"));
    assert_eq!(vm.spec.template.spec.networks[0].name, "default");
    assert_eq!(serde_json::to_value(&vm).unwrap(), input);
}
