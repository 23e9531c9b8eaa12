//! VM → VMI propagation of network changes (hot-plug, hot-unplug, link state, NAD live update)
//! and whether a VM change needs a restart.

use serde_json::{Value, json};

use crate::api::{BindingKind, Interface, Network, VirtualMachineInstance, VmiSpec};
use crate::names::has_ordinal_secondary_ifaces;

/// VMI condition type telling whether the VMI can live-migrate.
pub const LIVE_MIGRATABLE: &str = "LiveMigratable";

/// The outcome of syncing a VM's template networks into its running VMI.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HotplugSync {
    /// The VMI's new networks and interfaces, when they changed.
    pub vmi: Option<(Vec<Network>, Vec<Interface>)>,
    /// The VM template's new networks and interfaces, when they changed (detached interfaces
    /// cleaned up).
    pub vm_template: Option<(Vec<Network>, Vec<Interface>)>,
}

/// Whether the VMI has `LiveMigratable=True`.
pub fn is_live_migratable(vmi: &VirtualMachineInstance) -> bool {
    vmi.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == LIVE_MIGRATABLE && c.status == "True")
    })
}

fn hotpluggable(iface: &Interface) -> bool {
    matches!(iface.binding_kind(), BindingKind::Bridge | BindingKind::Sriov)
}

/// KubeVirt's network `VMController.Sync`: propagate the VM template's interfaces to the VMI.
pub fn sync_vm_to_vmi(template: &VmiSpec, vmi: &VirtualMachineInstance) -> HotplugSync {
    let status = vmi.status_interfaces();
    let has_ordinal = has_ordinal_secondary_ifaces(&vmi.spec.networks, status);
    let mut networks = vmi.spec.networks.clone();
    let mut interfaces = vmi.spec.interfaces().to_vec();

    for vm_iface in template.interfaces() {
        match interfaces.iter_mut().find(|i| i.name == vm_iface.name) {
            None => {
                if vm_iface.is_absent() || !hotpluggable(vm_iface) {
                    continue;
                }
                if let Some(net) = template.networks.iter().find(|n| n.name == vm_iface.name) {
                    networks.push(net.clone());
                }
                interfaces.push(vm_iface.clone());
            }
            Some(vmi_iface) => {
                if vm_iface.state != vmi_iface.state
                    && !vmi_iface.is_absent()
                    && !(has_ordinal && vm_iface.is_absent())
                {
                    vmi_iface.state = vm_iface.state.clone();
                }
            }
        }
    }

    let detached = |iface: &Interface| iface.is_absent() && !status.iter().any(|s| s.name == iface.name);
    let gone: Vec<String> = interfaces
        .iter()
        .filter(|i| detached(i))
        .map(|i| i.name.clone())
        .collect();
    interfaces.retain(|i| !gone.contains(&i.name));
    networks.retain(|n| !gone.contains(&n.name));

    if is_live_migratable(vmi) {
        for net in networks.iter_mut() {
            if let (Some(multus), Some(vm_multus)) = (
                net.multus.as_mut(),
                template
                    .networks
                    .iter()
                    .find(|n| n.name == net.name)
                    .and_then(|n| n.multus.as_ref()),
            ) {
                multus.network_name = vm_multus.network_name.clone();
            }
        }
    }

    let vmi_changed = networks != vmi.spec.networks || interfaces.as_slice() != vmi.spec.interfaces();
    let stale = |iface: &Interface| {
        iface.is_absent()
            && !interfaces.iter().any(|i| i.name == iface.name)
            && !status.iter().any(|s| s.name == iface.name)
    };
    let stale_names: Vec<&str> = template
        .interfaces()
        .iter()
        .filter(|i| stale(i))
        .map(|i| i.name.as_str())
        .collect();
    let vm_template = (!stale_names.is_empty()).then(|| {
        (
            template
                .networks
                .iter()
                .filter(|n| !stale_names.contains(&n.name.as_str()))
                .cloned()
                .collect(),
            template
                .interfaces()
                .iter()
                .filter(|i| !stale_names.contains(&i.name.as_str()))
                .cloned()
                .collect(),
        )
    });
    HotplugSync {
        vmi: vmi_changed.then_some((networks, interfaces)),
        vm_template,
    }
}

/// The JSON patch KubeVirt sends to update a VMI's networks and interfaces (test-and-set).
pub fn vmi_network_patch(old: &VmiSpec, new_networks: &[Network], new_interfaces: &[Interface]) -> Value {
    json!([
        {"op": "test", "path": "/spec/networks", "value": old.networks},
        {"op": "add", "path": "/spec/networks", "value": new_networks},
        {"op": "test", "path": "/spec/domain/devices/interfaces", "value": old.interfaces()},
        {"op": "add", "path": "/spec/domain/devices/interfaces", "value": new_interfaces},
    ])
}

/// KubeVirt's `IsRestartRequired` for networks: a VM template change that cannot be applied
/// to the running VMI.
pub fn is_restart_required(template: &VmiSpec, vmi: &VirtualMachineInstance) -> bool {
    let migratable = is_live_migratable(vmi);
    for vmi_iface in vmi.spec.interfaces() {
        let Some(vm_iface) = template.interfaces().iter().find(|i| i.name == vmi_iface.name) else {
            return true;
        };
        let (mut a, mut b) = (vm_iface.clone(), vmi_iface.clone());
        a.state.clear();
        b.state.clear();
        if a != b {
            return true;
        }
    }
    let vmi_has_pod = vmi.spec.networks.iter().any(|n| n.pod.is_some());
    if !vmi_has_pod && template.networks.iter().any(|n| n.pod.is_some()) {
        return true;
    }
    for vmi_net in &vmi.spec.networks {
        let Some(vm_net) = template.networks.iter().find(|n| n.name == vmi_net.name) else {
            return true;
        };
        let (mut a, mut b) = (vm_net.clone(), vmi_net.clone());
        if migratable && let (Some(ma), Some(mb)) = (a.multus.as_mut(), b.multus.as_mut()) {
            ma.network_name.clear();
            mb.network_name.clear();
        }
        if a != b {
            return true;
        }
    }
    false
}
