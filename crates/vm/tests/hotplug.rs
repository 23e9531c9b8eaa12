//! `hotplug_vm_controller.json`: its cases are prose, so each is spelled out here.

use serde_json::{Value, json};
use weft_vm::api::{
    Condition, Interface, InterfaceStatus, Network, VirtualMachineInstance, VmiSpec, VmiStatus,
};
use weft_vm::names::hashed_pod_interface_name;
use weft_vm::{is_restart_required, sync_vm_to_vmi, vmi_network_patch};

fn spec(networks: Value, interfaces: Value) -> VmiSpec {
    let mut spec = VmiSpec {
        networks: serde_json::from_value(networks).unwrap(),
        ..Default::default()
    };
    spec.domain.devices.interfaces = serde_json::from_value(interfaces).unwrap();
    spec
}

fn vmi(spec: VmiSpec, status: Value, migratable: Option<&str>) -> VirtualMachineInstance {
    let conditions = migratable
        .map(|s| {
            vec![Condition {
                type_: "LiveMigratable".into(),
                status: s.into(),
                ..Default::default()
            }]
        })
        .unwrap_or_default();
    VirtualMachineInstance {
        spec,
        status: Some(VmiStatus {
            interfaces: serde_json::from_value::<Vec<InterfaceStatus>>(status).unwrap(),
            conditions,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn base_networks(extra: Option<Value>) -> Value {
    let mut nets = vec![json!({"name": "default", "pod": {}})];
    nets.extend(extra);
    json!(nets)
}

fn base_interfaces(extra: Option<Value>) -> Value {
    let mut ifaces = vec![json!({"name": "default", "masquerade": {}})];
    ifaces.extend(extra);
    json!(ifaces)
}

fn sec_net(nad: &str) -> Value {
    json!({"name": "sec", "multus": {"networkName": nad}})
}

#[test]
fn hotplugs_bridge_and_sriov_appending_at_the_end() {
    for binding in ["bridge", "sriov"] {
        for state in [None, Some("up"), Some("down")] {
            let mut new_iface = json!({"name": "sec", binding: {}});
            if let Some(s) = state {
                new_iface["state"] = json!(s);
            }
            let template = spec(
                base_networks(Some(sec_net("nad"))),
                base_interfaces(Some(new_iface)),
            );
            let vmi = vmi(spec(base_networks(None), base_interfaces(None)), json!([]), None);
            let sync = sync_vm_to_vmi(&template, &vmi);
            let (nets, ifaces) = sync.vmi.clone().expect("VMI patched");
            assert_eq!(nets, template.networks);
            assert_eq!(ifaces, template.interfaces());
            assert_eq!(sync.vm_template, None, "VM unchanged");
            let patch = vmi_network_patch(&vmi.spec, &nets, &ifaces);
            let ops: Vec<&str> = patch
                .as_array()
                .unwrap()
                .iter()
                .map(|op| op["op"].as_str().unwrap())
                .collect();
            assert_eq!(ops, ["test", "add", "test", "add"]);
            assert_eq!(patch[1]["path"], "/spec/networks");
            assert_eq!(patch[3]["path"], "/spec/domain/devices/interfaces");
        }
    }
}

#[test]
fn other_bindings_are_not_hotplugged() {
    let template = spec(
        base_networks(Some(json!({"name": "sec", "pod": {}}))),
        base_interfaces(Some(json!({"name": "sec", "masquerade": {}}))),
    );
    let vmi = vmi(spec(base_networks(None), base_interfaces(None)), json!([]), None);
    assert_eq!(sync_vm_to_vmi(&template, &vmi).vmi, None);
}

#[test]
fn absent_new_iface_is_not_plugged_and_is_cleaned_from_the_vm() {
    let template = spec(
        base_networks(Some(sec_net("nad"))),
        base_interfaces(Some(json!({"name": "sec", "bridge": {}, "state": "absent"}))),
    );
    let vmi = vmi(spec(base_networks(None), base_interfaces(None)), json!([]), None);
    let sync = sync_vm_to_vmi(&template, &vmi);
    assert_eq!(sync.vmi, None);
    let (nets, ifaces) = sync.vm_template.expect("VM template cleaned");
    assert_eq!(nets.len(), 1);
    assert_eq!(ifaces.len(), 1);
}

#[test]
fn unplug_is_propagated_for_hashed_names_only() {
    let template = spec(
        base_networks(Some(sec_net("nad"))),
        base_interfaces(Some(json!({"name": "sec", "bridge": {}, "state": "absent"}))),
    );
    let vmi_spec = spec(
        base_networks(Some(sec_net("nad"))),
        base_interfaces(Some(json!({"name": "sec", "bridge": {}}))),
    );
    let hashed = vmi(
        vmi_spec.clone(),
        json!([{"name": "default", "podInterfaceName": "eth0"},
               {"name": "sec", "podInterfaceName": hashed_pod_interface_name("sec")}]),
        None,
    );
    let (_, ifaces) = sync_vm_to_vmi(&template, &hashed).vmi.expect("patched");
    assert_eq!(ifaces[1].state, "absent");

    let ordinal = vmi(
        vmi_spec,
        json!([{"name": "default", "podInterfaceName": "eth0"}, {"name": "sec", "podInterfaceName": "net1"}]),
        None,
    );
    assert_eq!(sync_vm_to_vmi(&template, &ordinal).vmi, None);
}

#[test]
fn absent_is_final_and_link_state_is_copied() {
    for vm_state in ["up", "down", ""] {
        let template = spec(
            base_networks(Some(sec_net("nad"))),
            base_interfaces(Some(json!({"name": "sec", "bridge": {}, "state": vm_state}))),
        );
        let vmi_spec = spec(
            base_networks(Some(sec_net("nad"))),
            base_interfaces(Some(json!({"name": "sec", "bridge": {}, "state": "absent"}))),
        );
        let v = vmi(
            vmi_spec,
            json!([{"name": "default"}, {"name": "sec", "podInterfaceName": "podx"}]),
            None,
        );
        assert_eq!(sync_vm_to_vmi(&template, &v).vmi, None);
    }
    let template = spec(
        base_networks(Some(sec_net("nad"))),
        base_interfaces(Some(json!({"name": "sec", "bridge": {}, "state": "down"}))),
    );
    let vmi_spec = spec(
        base_networks(Some(sec_net("nad"))),
        base_interfaces(Some(json!({"name": "sec", "bridge": {}, "state": "up"}))),
    );
    let v = vmi(vmi_spec, json!([{"name": "default"}, {"name": "sec"}]), None);
    let (_, ifaces) = sync_vm_to_vmi(&template, &v).vmi.unwrap();
    assert_eq!(ifaces[1].state, "down");
}

#[test]
fn nad_live_update_needs_live_migratable() {
    let template = spec(
        base_networks(Some(sec_net("updated"))),
        base_interfaces(Some(json!({"name": "sec", "bridge": {}}))),
    );
    let vmi_spec = spec(
        base_networks(Some(sec_net("original"))),
        base_interfaces(Some(json!({"name": "sec", "bridge": {}}))),
    );
    let status = json!([{"name": "default"}, {"name": "sec"}]);
    let migratable = vmi(vmi_spec.clone(), status.clone(), Some("True"));
    let (nets, _) = sync_vm_to_vmi(&template, &migratable).vmi.unwrap();
    assert_eq!(nets[1].multus.as_ref().unwrap().network_name, "updated");
    let not_migratable = vmi(vmi_spec, status, Some("False"));
    assert_eq!(sync_vm_to_vmi(&template, &not_migratable).vmi, None);
}

#[test]
fn detached_interfaces_are_cleared_from_vmi_and_vm() {
    let template = spec(
        base_networks(Some(sec_net("nad"))),
        base_interfaces(Some(json!({"name": "sec", "bridge": {}, "state": "absent"}))),
    );
    let vmi_spec = spec(
        base_networks(Some(sec_net("nad"))),
        base_interfaces(Some(json!({"name": "sec", "bridge": {}, "state": "absent"}))),
    );
    let v = vmi(vmi_spec, json!([{"name": "default"}]), None);
    let sync = sync_vm_to_vmi(&template, &v);
    let (nets, ifaces) = sync.vmi.unwrap();
    assert_eq!(ifaces, vec![Interface::masquerade("default")]);
    assert_eq!(nets, vec![Network::default_pod()]);
    assert_eq!(
        sync.vm_template.unwrap().1,
        vec![Interface::masquerade("default")]
    );
}

#[test]
fn restart_required() {
    let v = |networks: Value, interfaces: Value, migratable: Option<&str>| {
        vmi(spec(networks, interfaces), json!([]), migratable)
    };
    // Binding changed.
    let template = spec(base_networks(None), base_interfaces(None));
    assert!(is_restart_required(
        &template,
        &v(
            base_networks(None),
            json!([{"name": "default", "bridge": {}}]),
            None
        )
    ));
    // State is normalised away.
    let t = spec(
        base_networks(None),
        json!([{"name": "default", "masquerade": {}, "state": "down"}]),
    );
    assert!(!is_restart_required(
        &t,
        &v(
            base_networks(None),
            json!([{"name": "default", "masquerade": {}, "state": "up"}]),
            None
        )
    ));
    // Adding to the VM is fine.
    let t = spec(
        base_networks(Some(sec_net("n"))),
        base_interfaces(Some(json!({"name": "sec", "bridge": {}}))),
    );
    assert!(!is_restart_required(
        &t,
        &v(base_networks(None), base_interfaces(None), None)
    ));
    // Removing from the VM is not.
    assert!(is_restart_required(
        &template,
        &v(
            base_networks(Some(sec_net("n"))),
            base_interfaces(Some(json!({"name": "sec", "bridge": {}}))),
            None
        )
    ));
    // Pod network added to a VMI without one.
    let t = spec(json!([{"name": "default", "pod": {}}]), json!([]));
    assert!(is_restart_required(&t, &v(json!([]), json!([]), None)));
    // NAD name changed: fine only when live-migratable.
    let t = spec(
        base_networks(Some(sec_net("new"))),
        base_interfaces(Some(json!({"name": "sec", "bridge": {}}))),
    );
    let nets = base_networks(Some(sec_net("old")));
    let ifaces = base_interfaces(Some(json!({"name": "sec", "bridge": {}})));
    assert!(!is_restart_required(
        &t,
        &v(nets.clone(), ifaces.clone(), Some("True"))
    ));
    assert!(is_restart_required(
        &t,
        &v(nets.clone(), ifaces.clone(), Some("False"))
    ));
    assert!(is_restart_required(&t, &v(nets, ifaces, None)));
}
