//! The controller's reconcilers run in process against the memory store (no root, no API
//! server, no processes): each test drives the keys a watch change would give in order and
//! checks what the store holds after each step, so nothing waits or polls.
//! `cargo nextest run -p weft --bin weft -E 'test(controller::reconcile_tests)'`

use std::sync::Arc;

use serde_json::{Value, json};
use weft_ipam::IpamClaim;
use weft_netconf::NetworkAttachmentDefinition;
use weft_store::{Api, ListOptions, MemoryStore, Resource, Store};
use weft_vm::{VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceMigration};

use super::reconciler::{Key, reconcile_key};
use super::{Roles, launcher_pod};
use crate::kinds::{Node, Pod};

const NS: &str = "default";

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

async fn create<T: Resource + serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync>(
    store: &Arc<dyn Store>,
    namespaced: bool,
    object: Value,
) -> T {
    let object: T = typed(object);
    let api = if namespaced {
        Api::<T>::namespaced(store.clone(), NS)
    } else {
        Api::<T>::all(store.clone())
    };
    api.create(&object).await.unwrap()
}

/// A node, a NAD allowing persistent IPs (`blue`) and one that does not (`red`).
async fn cluster() -> Arc<dyn Store> {
    let store = MemoryStore::shared();
    create::<Node>(
        &store,
        false,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
    )
    .await;
    for (name, persistent) in [("blue", true), ("red", false)] {
        let config = json!({"cniVersion": "1.0.0", "name": name, "type": "bridge",
            "allowPersistentIPs": persistent,
            "ipam": {"type": "weft-ipam", "range": "10.77.0.0/24"}});
        create::<NetworkAttachmentDefinition>(
            &store,
            true,
            json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": name, "namespace": NS}, "spec": {"config": config.to_string()}}),
        )
        .await;
    }
    store
}

/// A VM with the pod network bound by `pod_binding` and secondaries on `blue` and `red`.
fn vm_json(name: &str, pod_binding: &str) -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"runStrategy": "Always", "template": {"spec": {
            "domain": {"devices": {"interfaces": [
                {"name": "default", pod_binding: {}},
                {"name": "b", "bridge": {}},
                {"name": "r", "bridge": {}}]}},
            "networks": [
                {"name": "default", "pod": {}},
                {"name": "b", "multus": {"networkName": "blue"}},
                {"name": "r", "multus": {"networkName": "red"}}]}}}})
}

async fn reconcile(store: &Arc<dyn Store>, key: Key) {
    reconcile_key(store, Roles::LOCAL, key).await.unwrap();
}

fn vm_key(name: &str) -> Key {
    Key::Vm(NS.into(), name.into())
}

fn vmi_key(name: &str) -> Key {
    Key::Vmi(NS.into(), name.into())
}

async fn vm(store: &Arc<dyn Store>, name: &str) -> VirtualMachine {
    Api::<VirtualMachine>::namespaced(store.clone(), NS)
        .get(name)
        .await
        .unwrap()
        .expect("the VM")
}

async fn vmi(store: &Arc<dyn Store>, name: &str) -> Option<VirtualMachineInstance> {
    Api::<VirtualMachineInstance>::namespaced(store.clone(), NS)
        .get(name)
        .await
        .unwrap()
}

async fn list<T: Resource + serde::de::DeserializeOwned + Clone + Send + Sync>(
    store: &Arc<dyn Store>,
) -> Vec<T> {
    Api::<T>::all(store.clone())
        .list(&ListOptions::default())
        .await
        .unwrap()
}

fn printable(vm: &VirtualMachine) -> (Option<&str>, Option<bool>) {
    let status = vm.status.as_ref();
    (
        status
            .and_then(|s| s.get("printableStatus"))
            .and_then(Value::as_str),
        status.and_then(|s| s.get("ready")).and_then(Value::as_bool),
    )
}

fn phase(vmi: &VirtualMachineInstance) -> &str {
    vmi.status.as_ref().map(|s| s.phase.as_str()).unwrap_or("")
}

async fn set_pod_phase(store: &Arc<dyn Store>, pod: &str, phase: &str) {
    Api::<Pod>::namespaced(store.clone(), NS)
        .modify_status(pod, |p| {
            p.status.phase = phase.into();
            true
        })
        .await
        .unwrap();
}

/// A running VM `name`: VM, VMI and launcher pod reconciled to `Running`. Returns the pod's name.
async fn running_vm(store: &Arc<dyn Store>, name: &str, pod_binding: &str) -> String {
    create::<VirtualMachine>(store, true, vm_json(name, pod_binding)).await;
    reconcile(store, vm_key(name)).await;
    reconcile(store, vmi_key(name)).await;
    let uid = vmi(store, name).await.expect("the VMI").metadata.uid.unwrap();
    let pod = list::<Pod>(store)
        .await
        .into_iter()
        .find(|p| p.metadata.label(launcher_pod::CREATED_BY_LABEL) == Some(uid.as_str()));
    let pod = pod.expect("the launcher pod").metadata.name;
    set_pod_phase(store, &pod, "Running").await;
    reconcile(store, vmi_key(name)).await;
    reconcile(store, vm_key(name)).await;
    pod
}

#[tokio::test]
async fn a_vm_gets_its_claims_its_vmi_a_launcher_pod_and_its_status_from_the_pod() {
    let store = cluster().await;
    let created = create::<VirtualMachine>(&store, true, vm_json("vm1", "masquerade")).await;

    // The VM: a claim for the persistent network only, owned by it; the VMI from its template.
    reconcile(&store, vm_key("vm1")).await;
    let claims = list::<IpamClaim>(&store).await;
    let names: Vec<&str> = claims.iter().map(|c| c.metadata.name.as_str()).collect();
    assert_eq!(
        names,
        ["vm1.b"],
        "one claim, for blue (red does not allow persistent IPs)"
    );
    let owner = &claims[0].metadata.owner_references[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("VirtualMachine", "vm1")
    );
    assert_eq!(owner.uid, created.metadata.uid.clone().unwrap());
    let vmi1 = vmi(&store, "vm1").await.expect("the VMI");
    assert_eq!(vmi1.metadata.owner_references[0].name, "vm1");
    assert_eq!(vmi1.spec.networks.len(), 3);
    assert_eq!(
        printable(&vm(&store, "vm1").await),
        (Some("Starting"), Some(false))
    );

    // The VMI: its launcher pod on the only node, naming the claim; phase Scheduling.
    reconcile(&store, vmi_key("vm1")).await;
    let pods = list::<Pod>(&store).await;
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    assert_eq!(pod.spec.node_name, "n1");
    let uid = vmi1.metadata.uid.clone().unwrap();
    assert_eq!(
        pod.metadata.label(launcher_pod::CREATED_BY_LABEL),
        Some(uid.as_str())
    );
    let networks = pod
        .metadata
        .annotation(weft_netconf::NETWORKS_ANNOTATION)
        .expect("the networks annotation");
    assert!(networks.contains("vm1.b"), "the claim is referenced: {networks}");
    assert_eq!(phase(&vmi(&store, "vm1").await.unwrap()), "Scheduling");

    // Reconciling again creates no second pod; the pod (Pending) makes it Scheduled on n1.
    reconcile(&store, vmi_key("vm1")).await;
    assert_eq!(list::<Pod>(&store).await.len(), 1);
    let scheduled = vmi(&store, "vm1").await.unwrap();
    let status = scheduled.status.clone().unwrap();
    assert_eq!(
        (status.phase.as_str(), status.node_name.as_str()),
        ("Scheduled", "n1")
    );
    reconcile(&store, vm_key("vm1")).await;
    assert_eq!(
        printable(&vm(&store, "vm1").await),
        (Some("Starting"), Some(false))
    );

    // The pod runs: the VMI runs, then the VM says Running and ready.
    set_pod_phase(&store, &pod.metadata.name, "Running").await;
    reconcile(&store, vmi_key("vm1")).await;
    assert_eq!(phase(&vmi(&store, "vm1").await.unwrap()), "Running");
    reconcile(&store, vm_key("vm1")).await;
    assert_eq!(printable(&vm(&store, "vm1").await), (Some("Running"), Some(true)));
    // Settled: another pass writes nothing (the resource versions stay).
    let (vm_rv, vmi_rv) = (
        vm(&store, "vm1").await.metadata.resource_version,
        vmi(&store, "vm1").await.unwrap().metadata.resource_version,
    );
    reconcile(&store, vmi_key("vm1")).await;
    reconcile(&store, vm_key("vm1")).await;
    assert_eq!(vm(&store, "vm1").await.metadata.resource_version, vm_rv);
    assert_eq!(
        vmi(&store, "vm1").await.unwrap().metadata.resource_version,
        vmi_rv
    );

    // The pod fails: so does the VMI, and the controller leaves a Failed VMI alone.
    set_pod_phase(&store, &pod.metadata.name, "Failed").await;
    reconcile(&store, vmi_key("vm1")).await;
    assert_eq!(phase(&vmi(&store, "vm1").await.unwrap()), "Failed");
    reconcile(&store, vmi_key("vm1")).await;
    assert_eq!(list::<Pod>(&store).await.len(), 1, "no new pod for a Failed VMI");
}

#[tokio::test]
async fn stopping_and_deleting_a_vm_removes_its_vmi_pod_and_claims() {
    let store = cluster().await;
    let pod = running_vm(&store, "vm1", "masquerade").await;
    assert_eq!(printable(&vm(&store, "vm1").await).0, Some("Running"));

    // Stop: the VMI goes (Stopping while it was there), then Stopped.
    Api::<VirtualMachine>::namespaced(store.clone(), NS)
        .modify("vm1", |vm| {
            vm.spec.run_strategy = Some("Halted".into());
            true
        })
        .await
        .unwrap();
    reconcile(&store, vm_key("vm1")).await;
    assert!(vmi(&store, "vm1").await.is_none(), "the VMI is deleted");
    assert_eq!(
        printable(&vm(&store, "vm1").await),
        (Some("Stopping"), Some(false))
    );
    reconcile(&store, vm_key("vm1")).await;
    assert_eq!(
        printable(&vm(&store, "vm1").await),
        (Some("Stopped"), Some(false))
    );
    // The orphaned launcher pod goes with its VMI; the claim stays with the VM.
    reconcile(&store, Key::LauncherPod(NS.into(), pod.clone())).await;
    assert!(list::<Pod>(&store).await.is_empty());
    assert_eq!(list::<IpamClaim>(&store).await.len(), 1);

    // Delete the VM: each claim's own reconcile removes it (its VM is gone).
    let claims: Vec<String> = list::<IpamClaim>(&store)
        .await
        .iter()
        .map(|c| c.metadata.name.clone())
        .collect();
    Api::<VirtualMachine>::namespaced(store.clone(), NS)
        .delete("vm1")
        .await
        .unwrap();
    reconcile(&store, vm_key("vm1")).await;
    for claim in claims {
        reconcile(&store, Key::Claim(NS.into(), claim)).await;
    }
    assert!(list::<IpamClaim>(&store).await.is_empty(), "the claim is gone");
}

#[tokio::test]
async fn a_vmi_whose_vm_is_gone_is_deleted_and_beside_kubevirt_only_claims_are_made() {
    let store = cluster().await;
    running_vm(&store, "vm1", "masquerade").await;
    Api::<VirtualMachine>::namespaced(store.clone(), NS)
        .delete("vm1")
        .await
        .unwrap();
    reconcile(&store, vmi_key("vm1")).await;
    assert!(vmi(&store, "vm1").await.is_none(), "the orphaned VMI is deleted");

    // Beside KubeVirt (its VMIs and pods are KubeVirt's): the VM only gets its claims.
    create::<VirtualMachine>(&store, true, vm_json("vm2", "masquerade")).await;
    reconcile_key(&store, Roles::BESIDE_KUBEVIRT, vm_key("vm2"))
        .await
        .unwrap();
    let claims: Vec<String> = list::<IpamClaim>(&store)
        .await
        .into_iter()
        .map(|c| c.metadata.name)
        .collect();
    assert!(claims.contains(&"vm2.b".to_string()), "{claims:?}");
    assert!(vmi(&store, "vm2").await.is_none());
    assert!(
        !vm(&store, "vm2")
            .await
            .status
            .is_some_and(|s| s.contains_key("printableStatus"))
    );
}

/// Change a running VM's secondary NAD (`b`: blue → red): the pod still has blue, so the
/// migration evaluator says a migration is required. Returns the VMI after the reconcile.
async fn change_nad_of_running(store: &Arc<dyn Store>, name: &str, pod: &str) -> VirtualMachineInstance {
    let vmi1 = vmi(store, name).await.unwrap();
    let ifname = weft_vm::hashed_pod_interface_name("b");
    let status = json!([
        {"name": "k8s-pod-network", "interface": "eth0", "default": true},
        {"name": format!("{NS}/blue"), "interface": ifname}
    ]);
    Api::<Pod>::namespaced(store.clone(), NS)
        .modify(pod, |p| {
            p.metadata
                .annotations
                .insert(weft_netconf::NETWORK_STATUS_ANNOTATION.into(), status.to_string());
            true
        })
        .await
        .unwrap();
    reconcile(store, vmi_key(name)).await;
    Api::<VirtualMachineInstance>::namespaced(store.clone(), NS)
        .modify(&vmi1.metadata.name, |v| {
            for network in &mut v.spec.networks {
                if let Some(multus) = network.multus.as_mut().filter(|_| network.name == "b") {
                    multus.network_name = "red".into();
                }
            }
            true
        })
        .await
        .unwrap();
    reconcile(store, vmi_key(name)).await;
    vmi(store, name).await.unwrap()
}

fn migration_required(vmi: &VirtualMachineInstance) -> Option<&str> {
    weft_vm::migration::migration_required_condition(vmi).map(|c| c.status.as_str())
}

#[tokio::test]
async fn a_required_migration_is_created_only_for_a_migratable_vmi() {
    let store = cluster().await;
    // Masquerade on the pod network: migratable, the workload update creates a migration.
    let pod = running_vm(&store, "vm1", "masquerade").await;
    let changed = change_nad_of_running(&store, "vm1", &pod).await;
    assert_eq!(migration_required(&changed), Some("True"));
    let migrations = list::<VirtualMachineInstanceMigration>(&store).await;
    assert_eq!(migrations.len(), 1, "{migrations:?}");
    assert_eq!(migrations[0].spec.vmi_name, "vm1");

    // Bridge on the pod network: not migratable (verify_migratable), so no migration that
    // could only fail (and be created again after each failure), however often it reconciles.
    let pod = running_vm(&store, "vm2", "bridge").await;
    let changed = change_nad_of_running(&store, "vm2", &pod).await;
    assert_eq!(migration_required(&changed), Some("True"));
    for _ in 0..3 {
        reconcile(&store, vmi_key("vm2")).await;
    }
    let migrations = list::<VirtualMachineInstanceMigration>(&store).await;
    assert!(
        migrations.iter().all(|m| m.spec.vmi_name != "vm2"),
        "no migration for the non-migratable VMI: {migrations:?}"
    );
}

#[tokio::test]
async fn a_vmi_waits_in_pending_for_a_missing_nad_with_one_event_then_gets_its_pod() {
    let store = cluster().await;
    let mut vm = vm_json("vm1", "masquerade");
    vm["spec"]["template"]["spec"]["networks"][2]["multus"]["networkName"] = json!("green");
    create::<VirtualMachine>(&store, true, vm).await;
    reconcile(&store, vm_key("vm1")).await;
    for _ in 0..2 {
        reconcile(&store, vmi_key("vm1")).await;
    }
    let waiting = vmi(&store, "vm1").await.unwrap();
    assert_eq!(phase(&waiting), "Pending");
    let synchronized = waiting
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Synchronized"))
        .expect("the Synchronized condition");
    assert_eq!(synchronized.status, "False");
    assert!(synchronized.message.contains("green"), "{}", synchronized.message);
    assert!(
        list::<Pod>(&store).await.is_empty(),
        "no launcher pod while the NAD is missing"
    );
    let events = list::<crate::kinds::Event>(&store).await;
    let failed: Vec<_> = events
        .iter()
        .filter(|e| e.reason == synchronized.reason)
        .collect();
    assert_eq!(failed.len(), 1, "{events:?}");
    assert_eq!(failed[0].count, 1, "announced once, not per reconcile");

    // The NAD arrives: the condition goes and the pod is created.
    let config = json!({"cniVersion": "1.0.0", "name": "green", "type": "bridge"});
    create::<NetworkAttachmentDefinition>(
        &store,
        true,
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "green", "namespace": NS}, "spec": {"config": config.to_string()}}),
    )
    .await;
    reconcile(&store, vmi_key("vm1")).await;
    let scheduling = vmi(&store, "vm1").await.unwrap();
    assert_eq!(phase(&scheduling), "Scheduling");
    assert!(
        scheduling
            .status
            .as_ref()
            .is_some_and(|s| s.conditions.iter().all(|c| c.type_ != "Synchronized"))
    );
    assert_eq!(list::<Pod>(&store).await.len(), 1);
}

#[test]
fn a_vmi_from_the_template_keeps_its_metadata_names_its_vm_and_is_owned_by_it() {
    let mut vm: VirtualMachine = typed(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm1", "namespace": "ns", "uid": "uid-1", "labels": {"on-the-vm": "only"}},
        "spec": {"running": true, "template": {
            "metadata": {"labels": {"app": "web", "n": 1}, "annotations": {"a": "b"}},
            "spec": {"networks": [{"name": "default", "pod": {}}],
                     "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}}}}}
    }));
    let vmi = super::vmi_from_template(&vm);
    assert_eq!(vmi.metadata.name, "vm1");
    assert_eq!(vmi.metadata.namespace.as_deref(), Some("ns"));
    assert_eq!(vmi.spec, vm.spec.template.spec);
    assert_eq!(vmi.metadata.label("app"), Some("web"));
    assert_eq!(
        vmi.metadata.label("n"),
        None,
        "a label that is not a string is not copied"
    );
    assert_eq!(
        vmi.metadata.label("on-the-vm"),
        None,
        "the VM's own labels are not the VMI's"
    );
    assert_eq!(vmi.metadata.annotation("a"), Some("b"));
    assert_eq!(vmi.metadata.label(crate::kinds::VM_NAME_LABEL), Some("vm1"));
    let owner = &vmi.metadata.owner_references[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("VirtualMachine", "vm1", "uid-1")
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    // A template without metadata: only the VM's name label.
    vm.spec.template.metadata = None;
    let bare = super::vmi_from_template(&vm);
    assert_eq!(bare.metadata.labels.len(), 1);
    assert!(bare.metadata.annotations.is_empty());
}

#[test]
fn manifests_are_checked_before_anything_is_created() {
    let object = |value: Value| -> weft_store::Object { typed(value) };
    let nad = |name: &str, config: &str| {
        object(
            json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"config": config}}),
        )
    };
    let vm = |network: &str| {
        object(json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm1", "namespace": "default"},
            "spec": {"running": true, "template": {"spec": {
                "networks": [{"name": "default", "pod": {}}, {"name": "data", "multus": {"networkName": network}}],
                "domain": {"devices": {"interfaces": [
                    {"name": "default", "masquerade": {}}, {"name": "data", "bridge": {}}]}}}}}}))
    };
    let good = nad("data", r#"{"cniVersion":"1.0.0","type":"bridge"}"#);
    super::validate_manifests(&[good.clone(), vm("data")]).unwrap();
    super::validate_manifests(&[good.clone(), vm("default/data")]).unwrap();
    let missing = super::validate_manifests(&[good.clone(), vm("nope")]).unwrap_err();
    assert_eq!(
        format!("{missing:#}"),
        "VirtualMachine default/vm1: spec.template.spec.networks[1].multus.networkName: NetworkAttachmentDefinition default/nope does not exist"
    );
    let other_ns = super::validate_manifests(&[good.clone(), vm("other/data")]).unwrap_err();
    assert!(
        format!("{other_ns:#}").contains("other/data does not exist"),
        "{other_ns:#}"
    );
    let broken = super::validate_manifests(&[nad("data", "{not json"), vm("data")]).unwrap_err();
    assert!(
        format!("{broken:#}").contains("spec.config is not valid JSON"),
        "{broken:#}"
    );
    // An interface without a network: KubeVirt's admission message, the manifest named.
    let mut lonely = vm("data");
    lonely.data["spec"]["template"]["spec"]["networks"]
        .as_array_mut()
        .unwrap()
        .pop();
    let denied = super::validate_manifests(&[good, lonely]).unwrap_err();
    assert!(
        format!("{denied:#}").starts_with("VirtualMachine default/vm1: "),
        "{denied:#}"
    );
    // Other kinds pass untouched.
    super::validate_manifests(&[object(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"}}))])
    .unwrap();
}
