//! What the controller's watch caches keep of each object beside KubeVirt (pure): only what
//! the claims and the reservation sweep read. At 10,000 VMs × 2 networks the whole objects
//! held 520–650 MiB
//! (docs/benchmarks.md, "Controller at 10,000 VMs"). The local cluster's roles read (and
//! write) whole VMs, VMIs and pods, so they cache them whole.

use std::collections::HashMap;

use serde_json::{Map, Value};
use weft_ipam::{IpReservation, IpamClaim};
use weft_netconf::NetworkAttachmentDefinition;
use weft_store::{Object, Projection, Resource, ResourceType};
use weft_vm::VirtualMachine;

use super::Roles;
use crate::kinds::Pod;

/// A VM as the claims role reads it: identity and the Multus networks of
/// `spec.template.spec.networks` (the claims' names and NADs); no labels, annotations,
/// status, pod network or the rest of the template. (A one-entry label map alone costs about
/// 540 bytes: B-tree nodes hold 11.)
pub fn vm_for_claims(vm: &mut Object) {
    vm.metadata.labels.clear();
    vm.metadata.annotations.clear();
    vm.metadata.extra.clear();
    let networks = vm
        .data
        .get_mut("spec")
        .and_then(|spec| spec.pointer_mut("/template/spec/networks"))
        .and_then(Value::as_array_mut)
        .map(|networks| {
            Value::Array(
                networks
                    .iter_mut()
                    .filter(|n| n.get("multus").is_some())
                    .map(Value::take)
                    .collect(),
            )
        });
    vm.data.clear();
    if let Some(networks) = networks {
        let mut spec = Map::new();
        spec.insert("networks".into(), networks);
        let mut template = Map::new();
        template.insert("spec".into(), Value::Object(spec));
        let mut outer = Map::new();
        outer.insert("template".into(), Value::Object(template));
        vm.data.insert("spec".into(), Value::Object(outer));
    }
}

/// An IPAMClaim as the claims role reads it: whether it exists and its owner (the VM it
/// belongs to); no labels, spec or status.
pub fn claim_for_owner(claim: &mut Object) {
    claim.data.clear();
    claim.metadata.labels.clear();
    claim.metadata.annotations.clear();
    claim.metadata.extra.clear();
    claim.metadata.finalizers.clear();
}

/// A pod as the reservation sweep reads it: namespace, name, uid, whether it is terminating
/// and the sandbox annotation; no spec, status, labels or other annotations.
pub fn pod_for_sweep(pod: &mut Object) {
    pod.data.clear();
    pod.metadata.extra.clear();
    pod.metadata.labels.clear();
    pod.metadata.owner_references.clear();
    pod.metadata
        .annotations
        .retain(|key, _| key == crate::claims::SANDBOX_ANNOTATION);
}

/// The projections of the controller's caches for `roles`: beside KubeVirt VMs and pods are
/// VMs, IPAMClaims and pods are projected (the controller only creates and deletes claims and
/// never writes VMs or pods there), every kind loses its managedFields.
pub fn for_roles(roles: Roles) -> HashMap<ResourceType, Projection> {
    let mut projections: HashMap<ResourceType, Projection> = [
        NetworkAttachmentDefinition::resource_type(),
        IpamClaim::resource_type(),
        IpReservation::resource_type(),
    ]
    .into_iter()
    .map(|ty| (ty, Projection::WITHOUT_MANAGED_FIELDS))
    .collect();
    // Beside KubeVirt these three kinds are cached by the ten thousand and read one at a time
    // (a change's VM, a claim's owner): held as compact JSON text (weft_store's `packed`).
    if !roles.kubevirt {
        projections.insert(
            VirtualMachine::resource_type(),
            Projection {
                project: vm_for_claims,
                writable: false,
                packed: true,
            },
        );
        projections.insert(
            IpamClaim::resource_type(),
            Projection {
                project: claim_for_owner,
                writable: false,
                packed: true,
            },
        );
        projections.insert(
            Pod::resource_type(),
            Projection {
                project: pod_for_sweep,
                writable: false,
                packed: true,
            },
        );
    }
    projections
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(value: Value) -> Object {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_projected_vm_still_names_its_claims_and_owns_them() {
        let mut vm = obj(json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm1", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"runStrategy": "Always", "template": {"metadata": {"labels": {"a": "b"}},
                "spec": {"domain": {"devices": {"interfaces": [{"name": "blue", "bridge": {}}]}},
                    "networks": [{"name": "default", "pod": {}},
                                 {"name": "blue", "multus": {"networkName": "blue-nad"}}]}}},
            "status": {"printableStatus": "Running"}}));
        let whole: VirtualMachine = vm.to_typed().unwrap();
        vm_for_claims(&mut vm);
        assert_eq!(
            serde_json::to_value(&vm).unwrap(),
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": {"name": "vm1", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
                "spec": {"template": {"spec": {"networks": [
                    {"name": "blue", "multus": {"networkName": "blue-nad"}}]}}}})
        );
        let projected: VirtualMachine = vm.to_typed().unwrap();
        assert_eq!(
            crate::claims::claim_for(&projected, "blue", "blue"),
            crate::claims::claim_for(&whole, "blue", "blue"),
            "the claims made from the projection are the ones the whole VM gets"
        );
        assert_eq!(
            projected.spec.template.spec.networks[..],
            whole.spec.template.spec.networks[1..]
        );
        assert_eq!(
            crate::claims::claim_names_of_vm_object(&vm),
            vec!["vm1.blue".to_string()]
        );
    }

    #[test]
    fn a_projected_claim_keeps_its_owner_and_its_name() {
        let mut claim = obj(
            json!({"apiVersion": "k8s.cni.cncf.io/v1alpha1", "kind": "IPAMClaim",
            "metadata": {"name": "vm1.blue", "namespace": "ns", "uid": "c1",
                "labels": {"kubevirt.io/vm": "vm1"},
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "name": "vm1", "uid": "u1", "controller": true}]},
            "spec": {"network": "blue", "interface": "pod16477688c0e"},
            "status": {"ips": ["10.0.0.5/24"]}}),
        );
        claim_for_owner(&mut claim);
        assert_eq!(
            serde_json::to_value(&claim).unwrap(),
            json!({"apiVersion": "k8s.cni.cncf.io/v1alpha1", "kind": "IPAMClaim",
                "metadata": {"name": "vm1.blue", "namespace": "ns", "uid": "c1",
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "name": "vm1", "uid": "u1", "controller": true}]}})
        );
        let change = weft_store::reconcile::Change {
            ty: IpamClaim::resource_type(),
            event: weft_store::WatchEvent::Deleted(claim),
        };
        use super::super::reconciler::{Key, keys_for};
        assert_eq!(
            keys_for(&change, &|_| Vec::new()),
            vec![
                Key::Vm("ns".into(), "vm1".into()),
                Key::Vmi("ns".into(), "vm1".into())
            ],
            "the projected claim still maps to its VM"
        );
    }

    #[test]
    fn a_projected_pod_keeps_what_the_sweep_reads() {
        let mut pod = obj(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1",
                "deletionTimestamp": "2026-12-02T05:00:00Z",
                "labels": {"app": "web"},
                "annotations": {(crate::claims::SANDBOX_ANNOTATION): "c1",
                                "k8s.v1.cni.cncf.io/network-status": "[...]"},
                "managedFields": [{"manager": "kubelet"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}}));
        let whole: Pod = pod.to_typed().unwrap();
        pod_for_sweep(&mut pod);
        let projected: Pod = pod.to_typed().unwrap();
        assert_eq!(
            crate::claims::live_pods(&[projected]),
            crate::claims::live_pods(&[whole])
        );
        assert!(pod.data.is_empty());
        assert_eq!(pod.metadata.annotations.len(), 1);
    }

    #[test]
    fn beside_kubevirt_vms_and_pods_are_projected_read_only_and_locally_whole() {
        let beside = for_roles(Roles::BESIDE_KUBEVIRT);
        assert!(!beside[&VirtualMachine::resource_type()].writable);
        assert!(!beside[&Pod::resource_type()].writable);
        assert!(!beside[&IpamClaim::resource_type()].writable);
        assert!(beside[&IpReservation::resource_type()].writable);
        let local = for_roles(Roles::LOCAL);
        assert!(!local.contains_key(&VirtualMachine::resource_type()));
        assert!(!local.contains_key(&Pod::resource_type()));
    }
}
