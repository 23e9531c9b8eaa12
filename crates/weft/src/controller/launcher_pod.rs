//! The virt-launcher pod of a VMI, as data: name, labels, annotations (from the vm crate's
//! decisions), IPAM claim references, node choice, a migration's target pod.

use std::collections::BTreeMap;

use serde_json::Value;
use weft_store::{ObjectMeta, OwnerReference, Resource};
use weft_vm::VirtualMachineInstance;
use weft_vm::api::MigrationState;
use weft_vm::vmim::{MIGRATION_JOB_LABEL, MODE_PRE_COPY};

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

/// Why a migration target cannot be planned.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    /// The source pod does not run (nothing to migrate from).
    #[error("the source pod {0} is not running")]
    SourceNotRunning(String),
    /// The migration pins a node that does not exist or is the source's.
    #[error("no node {0} to migrate to (other than the source node)")]
    NoPinnedNode(String),
    /// The source's node is the only one.
    #[error("no other node to migrate to")]
    NoOtherNode,
}

/// A migration target: its launcher pod and the VMI's first `migrationState`.
#[derive(Clone, Debug)]
pub struct TargetPlan {
    /// The target launcher pod.
    pub pod: Pod,
    /// The VMI's `migrationState` naming both sides.
    pub state: MigrationState,
}

/// The target of migration `uid` of `vmi` running in `source`: the least loaded node other
/// than the source's ([`choose_node`]; `pinned`, when the migration names one) among `nodes`,
/// and a copy of the source pod there (same networks annotation and claims, so the target
/// holds the VM's addresses too) labelled with the migration's uid, without the source's
/// network-status and sandbox (the target's own CNI ADD writes them) or status.
pub fn plan_target(
    vmi: &VirtualMachineInstance,
    uid: &str,
    source: &Pod,
    nodes: &[String],
    pods_per_node: &BTreeMap<String, usize>,
    pinned: Option<&str>,
) -> Result<TargetPlan, TargetError> {
    if source.status.phase != "Running" {
        return Err(TargetError::SourceNotRunning(source.metadata.name.clone()));
    }
    let others: Vec<String> = nodes
        .iter()
        .filter(|n| **n != source.spec.node_name)
        .cloned()
        .collect();
    let node = choose_node(&others, pods_per_node, pinned)
        .ok_or_else(|| match pinned {
            Some(node) => TargetError::NoPinnedNode(node.to_string()),
            None => TargetError::NoOtherNode,
        })?
        .clone();
    let suffix: String = uid.chars().filter(char::is_ascii_alphanumeric).take(5).collect();
    let mut pod = source.clone();
    pod.metadata = ObjectMeta {
        name: format!("{}-t{suffix}", pod_name(vmi)),
        namespace: Some(vmi.namespace().to_string()),
        labels: source.metadata.labels.clone(),
        annotations: source.metadata.annotations.clone(),
        owner_references: source.metadata.owner_references.clone(),
        ..Default::default()
    };
    pod.metadata.labels.insert(MIGRATION_JOB_LABEL.into(), uid.into());
    pod.metadata
        .annotations
        .remove(weft_netconf::NETWORK_STATUS_ANNOTATION);
    pod.metadata.annotations.remove(crate::claims::SANDBOX_ANNOTATION);
    pod.status = Default::default();
    pod.spec.node_name = node.clone();
    let state = MigrationState {
        migration_uid: uid.into(),
        source_node: source.spec.node_name.clone(),
        source_pod: source.metadata.name.clone(),
        target_node: node,
        target_pod: pod.metadata.name.clone(),
        mode: MODE_PRE_COPY.into(),
        ..Default::default()
    };
    Ok(TargetPlan { pod, state })
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

    fn source_pod() -> Pod {
        let mut pod = Pod {
            metadata: ObjectMeta::named(Some("ns"), "virt-launcher-vm1-abc12"),
            ..Default::default()
        };
        pod.metadata
            .labels
            .insert("kubevirt.io".into(), "virt-launcher".into());
        for (key, value) in [
            ("k8s.v1.cni.cncf.io/networks", "[]"),
            (weft_netconf::NETWORK_STATUS_ANNOTATION, "[]"),
            (crate::claims::SANDBOX_ANNOTATION, "sb"),
        ] {
            pod.metadata.annotations.insert(key.into(), value.into());
        }
        pod.metadata.uid = Some("pod-uid".into());
        pod.spec.node_name = "node1".into();
        pod.status.phase = "Running".into();
        pod
    }

    #[test]
    fn a_migration_target_copies_the_source_pod_to_another_node() {
        let mut vmi = VirtualMachineInstance {
            metadata: ObjectMeta::named(Some("ns"), "vm1"),
            ..Default::default()
        };
        vmi.metadata.uid = Some("abc12-345".into());
        let source = source_pod();
        let nodes: Vec<String> = ["node1", "node2", "node3"].map(String::from).into();
        let mut load = BTreeMap::new();
        load.insert("node2".to_string(), 3);
        let plan = plan_target(&vmi, "m-ig-r8", &source, &nodes, &load, None).unwrap();
        // Not the source's node even though it has fewer pods; then the least loaded.
        assert_eq!(plan.pod.spec.node_name, "node3");
        assert_eq!(plan.pod.metadata.name, "virt-launcher-vm1-abc12-tmigr8");
        assert_eq!(plan.pod.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(plan.pod.metadata.uid, None);
        assert_eq!(plan.pod.metadata.label(MIGRATION_JOB_LABEL), Some("m-ig-r8"));
        assert_eq!(plan.pod.metadata.label("kubevirt.io"), Some("virt-launcher"));
        assert_eq!(
            plan.pod.metadata.annotation("k8s.v1.cni.cncf.io/networks"),
            Some("[]")
        );
        assert_eq!(
            plan.pod
                .metadata
                .annotation(weft_netconf::NETWORK_STATUS_ANNOTATION),
            None
        );
        assert_eq!(
            plan.pod.metadata.annotation(crate::claims::SANDBOX_ANNOTATION),
            None
        );
        assert_eq!(plan.pod.status.phase, "");
        assert_eq!(plan.state.migration_uid, "m-ig-r8");
        assert_eq!(plan.state.source_node, "node1");
        assert_eq!(plan.state.source_pod, "virt-launcher-vm1-abc12");
        assert_eq!(plan.state.target_node, "node3");
        assert_eq!(plan.state.target_pod, plan.pod.metadata.name);
        assert_eq!(plan.state.mode, MODE_PRE_COPY);
        // Pinned.
        let pinned = plan_target(&vmi, "u", &source, &nodes, &load, Some("node2")).unwrap();
        assert_eq!(pinned.pod.spec.node_name, "node2");
        assert_eq!(
            plan_target(&vmi, "u", &source, &nodes, &load, Some("node1")).unwrap_err(),
            TargetError::NoPinnedNode("node1".into())
        );
        assert_eq!(
            plan_target(&vmi, "u", &source, &nodes[..1], &load, None).unwrap_err(),
            TargetError::NoOtherNode
        );
        let mut stopped = source.clone();
        stopped.status.phase = "Pending".into();
        assert_eq!(
            plan_target(&vmi, "u", &stopped, &nodes, &load, None)
                .unwrap_err()
                .to_string(),
            "the source pod virt-launcher-vm1-abc12 is not running"
        );
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
