//! IPAM claims for VMs (what kubevirt/ipam-extensions does, without a webhook): one IPAMClaim
//! `<vm>.<network>` per secondary network whose NAD allows persistent IPs, owned by the VM,
//! deleted (and its addresses released) when the VM goes away.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use weft_ipam::IpamClaim;
use weft_ipam::vm_claim::claim_name;
use weft_netconf::NetworkAttachmentDefinition;
use weft_store::{Api, ListOptions, OwnerReference, Resource, Store};
use weft_vm::api::Network;
use weft_vm::{VirtualMachine, VirtualMachineInstance};

/// Label on claims naming their VM (weft-ipam finds a launcher pod's claims by it).
pub const VM_LABEL: &str = weft_ipam::vm_claim::CLAIM_VM_LABEL;

/// The NAD's CNI network name if it allows persistent IPs (weft-ipam's decision:
/// [`weft_ipam::persistent_claim_network`]). A config that is not JSON, or whose flag is not a
/// boolean, gets no claims (its ADD fails with the config error) and a warning.
pub fn persistent_network_of(nad: &NetworkAttachmentDefinition) -> Option<String> {
    let name = &nad.metadata.name;
    if nad.spec.config.trim().is_empty() {
        return None;
    }
    let config: Value = match serde_json::from_str(&nad.spec.config) {
        Ok(config) => config,
        Err(e) => {
            tracing::warn!(nad = %name, "no IPAMClaims: spec.config is not JSON: {e}");
            return None;
        }
    };
    weft_ipam::persistent_claim_network(&config, name)
        .inspect_err(|e| tracing::warn!(nad = %name, "no IPAMClaims: {e}"))
        .ok()
        .flatten()
}

/// The NAD's CNI network name if it allows persistent IPs, read from the store.
async fn persistent_network(
    store: &Arc<dyn Store>,
    namespace: &str,
    network_name: &str,
) -> anyhow::Result<Option<String>> {
    let (ns, name) = weft_netconf::split_namespaced(network_name, namespace);
    Ok(Api::<NetworkAttachmentDefinition>::namespaced(store.clone(), ns)
        .get(name)
        .await?
        .as_ref()
        .and_then(persistent_network_of))
}

/// Create the claims a VM needs (idempotent).
/// Reads go through the controller's watch cache: nothing is requested for a VM whose claims
/// exist.
pub async fn ensure_for_vm(store: &Arc<dyn Store>, vm: &VirtualMachine) -> anyhow::Result<()> {
    let ns = vm.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let api = Api::<IpamClaim>::namespaced(store.clone(), &ns);
    for (name, network, nad) in candidate_claims(vm) {
        if api.get(&name).await?.is_some() {
            continue;
        }
        let Some(cni_network) = persistent_network(store, &ns, nad).await? else {
            continue;
        };
        match api.create(&claim_for(vm, network, &cni_network)).await {
            Err(e) if e.is_already_exists() => {}
            other => {
                other?;
                tracing::info!(claim = %name, vm = %vm.metadata.name, "IPAMClaim created");
            }
        }
    }
    Ok(())
}

/// The claim of VM network `network` (`<vm>.<network>`), owned by the VM without blocking its
/// deletion, recording the pod interface name KubeVirt gives the network (hashed scheme).
pub fn claim_for(vm: &VirtualMachine, network: &str, cni_network: &str) -> IpamClaim {
    let ns = vm.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let mut claim = IpamClaim::new(
        &ns,
        &format!("{}.{network}", vm.metadata.name),
        cni_network,
        &weft_vm::hashed_pod_interface_name(network),
    );
    claim
        .metadata
        .labels
        .insert(VM_LABEL.into(), vm.metadata.name.clone());
    claim.metadata.owner_references.push(OwnerReference {
        api_version: VirtualMachine::API_VERSION.into(),
        kind: VirtualMachine::KIND.into(),
        name: vm.metadata.name.clone(),
        uid: vm.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        // Not blocking: under OwnerReferencesPermissionEnforcement `true` needs update on
        // virtualmachines/finalizers, which weft-controller's role does not grant (docs/compat.md).
        block_owner_deletion: None,
    });
    claim
}

/// The names of the claims a VM may need (`<vm>.<network>` per secondary Multus network),
/// with the NAD each network names.
fn candidate_claims(vm: &VirtualMachine) -> impl Iterator<Item = (String, &str, &str)> {
    vm.spec.template.spec.networks.iter().filter_map(|network| {
        let multus = network.multus.as_ref().filter(|_| network.is_secondary())?;
        Some((
            claim_name(&vm.metadata.name, &network.name),
            network.name.as_str(),
            multus.network_name.as_str(),
        ))
    })
}

/// Pod interface name → claim name, for the VMI's networks that have a claim.
pub async fn claim_names_for_vmi(
    store: &Arc<dyn Store>,
    vmi: &VirtualMachineInstance,
) -> anyhow::Result<BTreeMap<String, String>> {
    let ns = vmi.namespace().to_string();
    let vm = vmi
        .metadata
        .label(crate::kinds::VM_NAME_LABEL)
        .unwrap_or(&vmi.metadata.name);
    let api = Api::<IpamClaim>::namespaced(store.clone(), &ns);
    let mut out = BTreeMap::new();
    for network in vmi.spec.networks.iter().filter(|n| n.is_secondary()) {
        let name = claim_name(vm, &network.name);
        if api.get(&name).await?.is_some() {
            out.insert(weft_vm::hashed_pod_interface_name(&network.name), name);
        }
    }
    Ok(out)
}

/// Delete claim `ns/name` if its VM is gone (no VM of the owner's name, or one with another
/// uid: deleted and created again), releasing its addresses. One claim at a time, read through
/// the controller's watch cache: at 10,000 VMs a scan of every claim per change would copy
/// every VM and claim each time.
pub async fn collect_if_orphan(store: &Arc<dyn Store>, ns: &str, name: &str) -> anyhow::Result<()> {
    let Some(claim) = Api::<IpamClaim>::namespaced(store.clone(), ns).get(name).await? else {
        return Ok(());
    };
    let Some(owner) = claim
        .metadata
        .owner_references
        .iter()
        .find(|o| o.kind == VirtualMachine::KIND)
    else {
        return Ok(());
    };
    let vm = match Api::<VirtualMachine>::namespaced(store.clone(), ns)
        .get(&owner.name)
        .await
    {
        // No VirtualMachine CRD: no claim can be told orphaned.
        Err(e) if e.is_not_served() => return Ok(()),
        other => other?,
    };
    if vm.is_some_and(|vm| vm.metadata.uid.as_deref() == Some(owner.uid.as_str())) {
        return Ok(());
    }
    delete_and_release(store, &claim).await
}

/// The claims a VM object may have (`<vm>.<network>` per secondary Multus network of its
/// template), read from the raw object as a watch delivered it (pure). Each network is
/// parsed on its own: one that does not parse has no claim, the others keep theirs (this
/// runs when the VM is deleted, to release its claims).
pub fn claim_names_of_vm_object(vm: &weft_store::Object) -> Vec<String> {
    let networks = vm
        .data
        .get("spec")
        .and_then(|spec| spec.pointer("/template/spec/networks"))
        .and_then(Value::as_array);
    networks
        .into_iter()
        .flatten()
        .filter_map(|n| Network::deserialize(n).ok())
        .filter(|n| n.is_secondary())
        .map(|n| claim_name(&vm.metadata.name, &n.name))
        .collect()
}

/// Delete an orphaned claim, then release its addresses.
async fn delete_and_release(store: &Arc<dyn Store>, claim: &IpamClaim) -> anyhow::Result<()> {
    let ns = claim.metadata.namespace.clone().unwrap_or_default();
    // Delete the claim first: an ADD racing with us can then no longer allocate for it.
    Api::<IpamClaim>::namespaced(store.clone(), &ns)
        .delete(&claim.metadata.name)
        .await?;
    weft_ipam::release_claim(
        store,
        &weft_ipam::claim::claim_reference(&ns, &claim.metadata.name),
    )
    .await?;
    tracing::info!(claim = %claim.metadata.name, "VM gone: claim deleted, addresses released");
    Ok(())
}

/// Grace period before an unowned reservation is freed (a pod's ADD may still be writing it).
pub const RECONCILE_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// Free reservations whose pod and container are gone (whereabouts' ip-reconciler, without its
/// races: pods are matched by uid and sandbox, young reservations are left alone).
pub async fn reconcile_reservations(store: &Arc<dyn Store>) -> anyhow::Result<usize> {
    let pods = Api::<crate::kinds::Pod>::all(store.clone())
        .list(&ListOptions::default())
        .await?;
    let live = live_pods(&pods);
    let freed =
        weft_ipam::reconcile::reconcile(store, &live, jiff::Timestamp::now(), RECONCILE_GRACE).await?;
    for decision in &freed {
        tracing::info!("freed a leaked reservation: {decision:?}");
    }
    Ok(freed.len())
}

/// The pods as the reconciler sees them (uid, sandbox, terminating).
pub fn live_pods(pods: &[crate::kinds::Pod]) -> Vec<weft_ipam::reconcile::LivePod> {
    pods.iter()
        .map(|p| weft_ipam::reconcile::LivePod {
            namespace: p.metadata.namespace.clone().unwrap_or_default(),
            name: p.metadata.name.clone(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
            container_ids: p
                .metadata
                .annotation(SANDBOX_ANNOTATION)
                .map(|id| vec![id.to_string()])
                .unwrap_or_default(),
            terminating: p.metadata.deletion_timestamp.is_some(),
        })
        .collect()
}

/// Pod annotation naming the sandbox (container) id the local runtime created for it.
pub const SANDBOX_ANNOTATION: &str = "weft.dev/sandbox-id";

#[cfg(test)]
mod tests {
    use super::*;

    fn nad(name: &str, config: Value) -> NetworkAttachmentDefinition {
        let mut nad = NetworkAttachmentDefinition {
            metadata: weft_store::ObjectMeta::named(Some("default"), name),
            ..Default::default()
        };
        nad.spec.config = config.to_string();
        nad
    }

    #[test]
    fn only_nads_allowing_persistent_ips_get_claims_named_by_their_cni_network() {
        use serde_json::json;
        let blue = nad("blue-nad", json!({"name": "blue", "allowPersistentIPs": true}));
        assert_eq!(persistent_network_of(&blue).as_deref(), Some("blue"));
        let unnamed = nad("red", json!({"allowPersistentIPs": true}));
        assert_eq!(persistent_network_of(&unnamed).as_deref(), Some("red"));
        assert_eq!(persistent_network_of(&nad("x", json!({"name": "x"}))), None);
        assert_eq!(
            persistent_network_of(&nad("y", json!({"allowPersistentIPs": "yes"}))),
            None
        );
        let mut broken = nad("z", json!({}));
        broken.spec.config = "{not json".into();
        assert_eq!(persistent_network_of(&broken), None);
        // A conflist whose plugin entry allows them (what that plugin's ADD sees).
        let list = nad(
            "l",
            json!({"name": "green", "plugins": [{"type": "bridge", "allowPersistentIPs": true}]}),
        );
        assert_eq!(persistent_network_of(&list).as_deref(), Some("green"));
    }

    #[test]
    fn a_vm_object_may_have_a_claim_per_secondary_multus_network() {
        let object = |networks: Value| weft_store::Object {
            api_version: "kubevirt.io/v1".into(),
            kind: "VirtualMachine".into(),
            metadata: weft_store::ObjectMeta::named(Some("ns"), "vm1"),
            data: serde_json::json!({"spec": {"template": {"spec": {"networks": networks}}}})
                .as_object()
                .unwrap()
                .clone(),
        };
        let vm = object(serde_json::json!([
            {"name": "default", "pod": {}},
            {"name": "blue", "multus": {"networkName": "tenant-blue"}},
            {"name": "primary", "multus": {"networkName": "x", "default": true}},
            {"name": "red", "multus": {"networkName": "ns2/red"}},
            {"name": 7, "multus": {"networkName": "broken"}},
            {"name": "green", "multus": {"networkName": "g", "default": "not a bool"}}
        ]));
        assert_eq!(
            claim_names_of_vm_object(&vm),
            ["vm1.blue", "vm1.red"],
            "an entry that does not parse costs only its own claim"
        );
        assert!(claim_names_of_vm_object(&object(serde_json::json!("not a list"))).is_empty());
        assert!(claim_names_of_vm_object(&object(Value::Null)).is_empty());
    }

    #[test]
    fn a_claim_is_owned_by_its_vm_without_blocking_its_deletion() {
        let mut vm = VirtualMachine {
            metadata: weft_store::ObjectMeta::named(Some("ns"), "vm1"),
            ..Default::default()
        };
        vm.metadata.uid = Some("uid-1".into());
        let claim = claim_for(&vm, "blue", "tenant-blue");
        assert_eq!(claim.metadata.name, "vm1.blue");
        assert_eq!(claim.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(claim.spec.network, "tenant-blue");
        assert_eq!(claim.spec.interface, "pod16477688c0e");
        assert_eq!(claim.metadata.label(VM_LABEL), Some("vm1"));
        let owner = &claim.metadata.owner_references[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("VirtualMachine", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, None);
    }
}
