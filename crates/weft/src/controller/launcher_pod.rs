//! The virt-launcher pod of a VMI, as data: name, labels, annotations (from the vm crate's
//! decisions), IPAM claim references, node choice.

use std::collections::BTreeMap;

use serde_json::Value;
use weft_store::{ObjectMeta, OwnerReference, Resource};
use weft_vm::VirtualMachineInstance;

use crate::kinds::Pod;

/// Label KubeVirt puts on launcher pods.
pub const LAUNCHER_LABEL: (&str, &str) = ("kubevirt.io", "virt-launcher");
/// Label naming the VMI (uid) that created the pod.
pub const CREATED_BY_LABEL: &str = "kubevirt.io/created-by";
pub use crate::kinds::VM_NAME_LABEL;
/// Annotation naming the domain (the VMI) a launcher pod runs.
pub const DOMAIN_ANNOTATION: &str = "kubevirt.io/domain";

/// Name of the launcher pod of a VMI (stable for one VMI uid, new for a new VMI).
pub fn pod_name(vmi: &VirtualMachineInstance) -> String {
    let uid = vmi.metadata.uid.as_deref().unwrap_or("00000");
    let suffix: String = uid
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(5)
        .collect();
    format!("virt-launcher-{}-{suffix}", vmi.metadata.name)
}

/// Label every node carries with its name (what a `nodeSelector` usually names).
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The node a VMI's `spec.nodeSelector` pins it to, if it names one by hostname.
pub fn selected_node(vmi: &VirtualMachineInstance) -> Option<String> {
    vmi.spec
        .extra
        .get("nodeSelector")?
        .get(HOSTNAME_LABEL)?
        .as_str()
        .map(String::from)
}

/// The node with the fewest pods among those allowed (`pinned`, when set; ties: first by name).
pub fn choose_node<'a>(
    nodes: &'a [String],
    pods_per_node: &BTreeMap<String, usize>,
    pinned: Option<&str>,
) -> Option<&'a String> {
    nodes
        .iter()
        .filter(|n| pinned.is_none_or(|p| p == n.as_str()))
        .min_by_key(|n| (pods_per_node.get(*n).copied().unwrap_or(0), (*n).clone()))
}

/// Add `ipam-claim-reference` to every element of a networks annotation whose network has a
/// claim (`claims`: pod interface name → claim name), as KubeVirt's ipam-extensions webhook
/// does. Other elements and the key order are kept.
pub fn with_claim_references(networks: &str, claims: &BTreeMap<String, String>) -> String {
    let Ok(Value::Array(mut elements)) = serde_json::from_str::<Value>(networks) else {
        return networks.to_string();
    };
    for element in &mut elements {
        let interface = element
            .get("interface")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if let (Some(claim), Some(map)) = (claims.get(&interface), element.as_object_mut()) {
            map.insert("ipam-claim-reference".into(), Value::String(claim.clone()));
        }
    }
    serde_json::to_string(&elements).unwrap_or_else(|_| networks.to_string())
}

/// The launcher pod for `vmi` on `node` with the given annotations.
pub fn render(vmi: &VirtualMachineInstance, node: &str, annotations: BTreeMap<String, String>) -> Pod {
    let mut metadata = ObjectMeta::named(vmi.metadata.namespace.as_deref(), &pod_name(vmi));
    metadata
        .labels
        .insert(LAUNCHER_LABEL.0.into(), LAUNCHER_LABEL.1.into());
    metadata.labels.insert(
        CREATED_BY_LABEL.into(),
        vmi.metadata.uid.clone().unwrap_or_default(),
    );
    if let Some(vm) = vmi
        .metadata
        .labels
        .get(VM_NAME_LABEL)
        .or_else(|| vmi.metadata.owner_references.first().map(|o| &o.name))
    {
        metadata.labels.insert(VM_NAME_LABEL.into(), vm.clone());
    }
    metadata.annotations = annotations;
    metadata
        .annotations
        .insert(DOMAIN_ANNOTATION.into(), vmi.metadata.name.clone());
    metadata.owner_references.push(OwnerReference {
        api_version: VirtualMachineInstance::API_VERSION.into(),
        kind: VirtualMachineInstance::KIND.into(),
        name: vmi.metadata.name.clone(),
        uid: vmi.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        // KubeVirt's shape. Only the local cluster renders launcher pods (`Roles::kubevirt`);
        // on Kubernetes virt-controller does, with its own finalizer rights.
        block_owner_deletion: Some(true),
    });
    let mut pod = Pod {
        metadata,
        ..Default::default()
    };
    pod.spec.node_name = node.into();
    pod.spec.hostname = vmi.metadata.name.chars().take(63).collect();
    pod
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_references_are_added_only_where_allowed() {
        let networks = r#"[{"name":"data","namespace":"default","mac":"02:00:00:0a:00:01","interface":"pod6482e9630cd"},{"name":"other","namespace":"default","interface":"podx"}]"#;
        let mut claims = BTreeMap::new();
        claims.insert("pod6482e9630cd".to_string(), "vm1.data".to_string());
        let out = with_claim_references(networks, &claims);
        assert_eq!(
            out,
            r#"[{"name":"data","namespace":"default","mac":"02:00:00:0a:00:01","interface":"pod6482e9630cd","ipam-claim-reference":"vm1.data"},{"name":"other","namespace":"default","interface":"podx"}]"#
        );
    }

    #[test]
    fn least_loaded_node_wins() {
        let nodes = vec!["node1".to_string(), "node2".to_string()];
        let mut load = BTreeMap::new();
        load.insert("node1".to_string(), 2);
        assert_eq!(choose_node(&nodes, &load, None).unwrap(), "node2");
        assert_eq!(choose_node(&nodes, &load, Some("node1")).unwrap(), "node1");
        assert_eq!(choose_node(&nodes, &load, Some("node9")), None);
        assert_eq!(choose_node(&[], &load, None), None);
    }

    #[test]
    fn pod_name_is_stable_per_vmi() {
        let mut vmi = VirtualMachineInstance::default();
        vmi.metadata.name = "vm1".into();
        vmi.metadata.uid = Some("abc12-345".into());
        assert_eq!(pod_name(&vmi), "virt-launcher-vm1-abc12");
    }
}

#[cfg(test)]
mod selector_tests {
    use super::*;

    #[test]
    fn node_selector_by_hostname_pins_the_node() {
        let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "vm1", "namespace": "default"},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": "node2"}, "domain": {"devices": {}}}
        }))
        .unwrap();
        assert_eq!(selected_node(&vmi).as_deref(), Some("node2"));
    }
}
