//! Rules tying interfaces to networks: states, bindings, 1:1 naming (KubeVirt `admit.go`,
//! `binding.go`).

use std::collections::HashSet;

use super::{Cause, CauseType};
use crate::api::{Interface, Network, VmiSpec};
use crate::config::ClusterConfig;
use crate::names::RESERVED_BRIDGE_MAC;

fn iface_path(root: &str, i: usize) -> String {
    format!("{root}.domain.devices.interfaces[{i}]")
}

pub(super) fn states(root: &str, spec: &VmiSpec, causes: &mut Vec<Cause>) {
    let default_network = spec.networks.iter().find(|n| n.is_primary());
    for (i, iface) in spec.interfaces().iter().enumerate() {
        let field = format!("{}.state", iface_path(root, i));
        let state = iface.state.as_str();
        if !matches!(state, "" | "absent" | "down" | "up") {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                field.clone(),
                format!(
                    "logical {} interface state value is unsupported: {state}",
                    iface.name
                ),
            ));
        }
        if iface.sriov.is_some() && matches!(state, "up" | "down") {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                field.clone(),
                format!(
                    "\"{}\" interface's state \"{state}\" is not supported for SR-IOV NICs",
                    iface.name
                ),
            ));
        }
        if iface.is_absent() && iface.bridge.is_none() {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                field.clone(),
                format!(
                    "\"{}\" interface's state \"absent\" is supported only for bridge binding",
                    iface.name
                ),
            ));
        }
        if iface.is_absent() && default_network.is_some_and(|n| n.name == iface.name) {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                field,
                format!(
                    "\"{}\" interface's state \"absent\" is not supported on default networks",
                    iface.name
                ),
            ));
        }
    }
}

fn binding_count(iface: &Interface) -> usize {
    [
        iface.bridge.is_some(),
        iface.masquerade.is_some(),
        iface.sriov.is_some(),
        iface.passt_binding.is_some(),
        iface.binding.is_some(),
    ]
    .into_iter()
    .filter(|set| *set)
    .count()
}

pub(super) fn bindings(root: &str, spec: &VmiSpec, config: &ClusterConfig, causes: &mut Vec<Cause>) {
    let no_network = Network::default();
    for (i, iface) in spec.interfaces().iter().enumerate() {
        let path = iface_path(root, i);
        let net = spec
            .networks
            .iter()
            // KubeVirt indexes networks by name in a map: the last duplicate wins.
            .rfind(|n| n.name == iface.name)
            .unwrap_or(&no_network);
        let on_pod = net.pod.is_some();
        if binding_count(iface) != 1 {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                path.clone(),
                format!(
                    "logical {} interface must have exactly one binding method or binding plugin",
                    iface.name
                ),
            ));
        }
        if iface.masquerade.is_some() && !on_pod {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                format!("{path}.name"),
                "Masquerade interface only implemented with pod network",
            ));
        }
        if iface.masquerade.is_some() && iface.mac_address == RESERVED_BRIDGE_MAC {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                format!("{path}.macAddress"),
                "The requested MAC address is reserved for the in-pod bridge. Please choose another one.",
            ));
        }
        if iface.bridge.is_some() && on_pod && !config.permit_bridge_interface_on_pod_network {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                format!("{path}.name"),
                "Bridge on pod network configuration is not enabled under kubevirt-config",
            ));
        }
        if iface.passt_binding.is_some() {
            if !config.gates.passt_binding {
                causes.push(Cause::new(
                    CauseType::FieldValueInvalid,
                    format!("{path}.name"),
                    "PasstBinding feature gate is not enabled",
                ));
            }
            if !on_pod {
                causes.push(Cause::new(
                    CauseType::FieldValueInvalid,
                    format!("{path}.name"),
                    "PasstBinding interface only implemented with pod network",
                ));
            }
        }
    }
}

pub(super) fn unique_names(root: &str, spec: &VmiSpec, causes: &mut Vec<Cause>) {
    let mut seen = HashSet::new();
    for (i, iface) in spec.interfaces().iter().enumerate() {
        if !seen.insert(iface.name.as_str()) {
            causes.push(Cause::new(
                CauseType::FieldValueDuplicate,
                format!("{}.name", iface_path(root, i)),
                "Only one interface can be connected to one specific network",
            ));
        }
    }
}

pub(super) fn every_interface_has_network(root: &str, spec: &VmiSpec, causes: &mut Vec<Cause>) {
    for (i, iface) in spec.interfaces().iter().enumerate() {
        if !spec.networks.iter().any(|n| n.name == iface.name) {
            let field = format!("{}.name", iface_path(root, i));
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                field.clone(),
                format!("{field} '{}' not found.", iface.name),
            ));
        }
    }
}
