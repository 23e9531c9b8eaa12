//! The controller's part of `status.interfaces`: pod interface names and the `multus-status`
//! source, from the launcher pod's network-status.

use weft_netconf::NetworkStatus;

use crate::api::{InterfaceStatus, Network};
use crate::infosource::{self, MULTUS_STATUS};
use crate::names::{primary_pod_interface_name, scheme_from_network_statuses};

/// KubeVirt's `UpdateVMIStatus`: the new `status.interfaces` from the spec networks, the
/// current status and the pod's network-status entries.
///
/// Order: the primary network, secondary Multus networks in spec order (only those attached
/// or already reported), then kept entries of DRA networks and of guest-only interfaces.
pub fn controller_status_interfaces(
    networks: &[Network],
    current: &[InterfaceStatus],
    pod_statuses: &[NetworkStatus],
) -> Vec<InterfaceStatus> {
    let mut result = Vec::with_capacity(current.len().max(networks.len()));
    let find = |name: &str| current.iter().find(|s| s.name == name);

    if let Some(primary) = networks.iter().find(|n| n.is_primary()) {
        let pod_iface = primary_pod_interface_name(pod_statuses);
        let mut entry = find(&primary.name).cloned().unwrap_or_else(|| InterfaceStatus {
            name: primary.name.clone(),
            ..Default::default()
        });
        entry.pod_interface_name = pod_iface;
        result.push(entry);
    }

    let names = scheme_from_network_statuses(networks, pod_statuses);
    for net in networks.iter().filter(|n| n.is_secondary()) {
        let Some(pod_iface) = names.get(&net.name) else {
            continue;
        };
        let attached = pod_statuses.iter().any(|s| &s.interface == pod_iface);
        let entry = match (attached, find(&net.name)) {
            (true, None) => InterfaceStatus {
                name: net.name.clone(),
                info_source: MULTUS_STATUS.into(),
                pod_interface_name: pod_iface.clone(),
                ..Default::default()
            },
            (true, Some(existing)) => {
                let mut entry = existing.clone();
                entry.info_source = infosource::add(&entry.info_source, MULTUS_STATUS);
                entry.pod_interface_name = pod_iface.clone();
                entry
            }
            (false, Some(existing)) => {
                let mut entry = existing.clone();
                entry.info_source = infosource::remove(&entry.info_source, MULTUS_STATUS);
                entry.pod_interface_name = pod_iface.clone();
                entry
            }
            (false, None) => continue,
        };
        result.push(entry);
    }

    let dra_networks = |name: &str| {
        networks
            .iter()
            .any(|n| n.name == name && n.resource_claim.is_some())
    };
    result.extend(current.iter().filter(|s| dra_networks(&s.name)).cloned());
    result.extend(
        current
            .iter()
            .filter(|s| !networks.iter().any(|n| n.name == s.name))
            .cloned(),
    );
    result
}
