//! Rules on `spec.networks` (KubeVirt `netsource.go`, `dra.go` and the name checks).

use std::collections::HashSet;

use super::{Cause, CauseType};
use crate::api::VmiSpec;
use crate::config::ClusterConfig;

pub(super) fn single_pod_network(root: &str, spec: &VmiSpec, causes: &mut Vec<Cause>) {
    let pods = spec.networks.iter().filter(|n| n.pod.is_some()).count();
    let multus_defaults = spec
        .networks
        .iter()
        .filter(|n| n.multus.as_ref().is_some_and(|m| m.default))
        .count();
    if pods > 1 {
        causes.push(Cause::new(
            CauseType::FieldValueDuplicate,
            format!("{root}.interfaces"),
            format!("more than one interface is connected to a pod network in {root}.interfaces"),
        ));
    }
    if multus_defaults > 1 {
        causes.push(Cause::new(
            CauseType::FieldValueInvalid,
            format!("{root}.networks"),
            "Multus CNI should only have one default network",
        ));
    }
    if pods > 0 && multus_defaults > 0 {
        causes.push(Cause::new(
            CauseType::FieldValueInvalid,
            format!("{root}.networks"),
            "Pod network cannot be defined when Multus default network is defined",
        ));
    }
}

pub(super) fn single_network_source(root: &str, spec: &VmiSpec, causes: &mut Vec<Cause>) {
    for (i, net) in spec.networks.iter().enumerate() {
        let sources = usize::from(net.pod.is_some())
            + usize::from(net.multus.is_some())
            + usize::from(net.resource_claim.is_some());
        let message = match sources {
            0 => "should have a network type",
            1 => continue,
            _ => "should have only one network type",
        };
        causes.push(Cause::new(
            CauseType::FieldValueRequired,
            format!("{root}.networks[{i}]"),
            message,
        ));
    }
}

pub(super) fn multus_network_name(root: &str, spec: &VmiSpec, causes: &mut Vec<Cause>) {
    if let Some(i) = spec
        .networks
        .iter()
        .position(|n| n.multus.as_ref().is_some_and(|m| m.network_name.is_empty()))
    {
        causes.push(Cause::new(
            CauseType::FieldValueRequired,
            format!("{root}.networks[{i}]"),
            "CNI delegating plugin must have a networkName",
        ));
    }
}

pub(super) fn unique_names(root: &str, spec: &VmiSpec, causes: &mut Vec<Cause>) {
    let mut seen = HashSet::new();
    for (i, net) in spec.networks.iter().enumerate() {
        if !seen.insert(net.name.as_str()) {
            causes.push(Cause::new(
                CauseType::FieldValueDuplicate,
                format!("{root}.networks[{i}].name"),
                format!(
                    "Network with name \"{}\" already exists, every network must have a unique name",
                    net.name
                ),
            ));
        }
    }
}

pub(super) fn dra(root: &str, spec: &VmiSpec, config: &ClusterConfig, causes: &mut Vec<Cause>) {
    if !spec.networks.iter().any(|n| n.resource_claim.is_some()) {
        return;
    }
    if !config.gates.network_devices_with_dra {
        causes.push(Cause::new(
            CauseType::FieldValueInvalid,
            format!("{root}.networks"),
            "vmi.spec.networks contains DRA networks but NetworkDevicesWithDRA feature gate is not enabled",
        ));
        return;
    }
    if spec.networks.iter().any(|n| n.multus.is_some()) {
        causes.push(Cause::new(
            CauseType::FieldValueInvalid,
            format!("{root}.networks"),
            "mixing Multus and DRA resourceClaim networks in the same VMI is not supported",
        ));
        return;
    }
    let claims: Vec<&str> = spec
        .resource_claims
        .iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(|n| n.as_str()))
        .collect();
    let mut seen = HashSet::new();
    for (i, net) in spec.networks.iter().enumerate() {
        let Some(claim) = &net.resource_claim else {
            continue;
        };
        let path = format!("{root}.networks[{i}]");
        if let Some(iface) = spec.interfaces().iter().find(|x| x.name == net.name)
            && iface.sriov.is_none()
            && iface.binding.is_none()
        {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                format!("{root}.domain.devices.interfaces"),
                format!(
                    "DRA network \"{}\" requires an SR-IOV or binding plugin interface",
                    net.name
                ),
            ));
        }
        if claim.claim_name.is_empty() {
            causes.push(Cause::new(
                CauseType::FieldValueRequired,
                format!("{path}.resourceClaim.claimName"),
                "claimName is required for DRA network",
            ));
        }
        if claim.request_name.is_empty() {
            causes.push(Cause::new(
                CauseType::FieldValueRequired,
                format!("{path}.resourceClaim.requestName"),
                "requestName is required for DRA network",
            ));
        }
        if claim.claim_name.is_empty() || claim.request_name.is_empty() {
            continue;
        }
        if !claims.contains(&claim.claim_name.as_str()) {
            causes.push(Cause::new(
                CauseType::FieldValueNotFound,
                format!("{path}.resourceClaim.claimName"),
                format!(
                    "network references resourceClaim \"{}\" which is not defined in spec.resourceClaims",
                    claim.claim_name
                ),
            ));
        }
        let key = format!("{}/{}", claim.claim_name, claim.request_name);
        if !seen.insert(key.clone()) {
            causes.push(Cause::new(
                CauseType::FieldValueDuplicate,
                path,
                format!("duplicate claimName/requestName combination \"{key}\""),
            ));
        }
    }
}

pub(super) fn every_network_has_interface(root: &str, spec: &VmiSpec, causes: &mut Vec<Cause>) {
    for (i, net) in spec.networks.iter().enumerate() {
        if !spec.interfaces().iter().any(|x| x.name == net.name) {
            let path = format!("{root}.networks[{i}].name");
            causes.push(Cause::new(
                CauseType::FieldValueRequired,
                path.clone(),
                format!("{path} '{}' not found.", net.name),
            ));
        }
    }
}
