//! The controller: VirtualMachine → VirtualMachineInstance → virt-launcher pod, IPAM claims,
//! and VMI status from the pod. Level-triggered per object: [`reconciler`] watches the kinds,
//! maps each change to the objects it touches and runs their reconcile (below) from the cache.
//! Which of these run depends on the backend ([`Roles::for_backend`]): beside KubeVirt on
//! Kubernetes only the claims and the reservation garbage collection.

pub mod config;
pub mod launcher_pod;
pub mod migration;
pub mod projection;
#[cfg(test)]
mod reconcile_tests;
pub mod reconciler;
pub mod roles;

pub use roles::Roles;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use serde_json::Value;
use weft_netconf::NetworkAttachmentDefinition;
use weft_store::{Api, ListOptions, Object, ObjectMeta, OwnerReference, Resource, Store};
use weft_vm::status::VmAction;
use weft_vm::{VirtualMachine, VirtualMachineInstance};

use crate::kinds::{Node, Pod};

/// `weft controller` with `roles`: watch-driven reconcilers (see [`reconciler`]).
pub async fn run(state: &Path, roles: Roles) -> anyhow::Result<i32> {
    let store = crate::cluster::open_store(state, crate::cluster::Component::Controller).await?;
    tracing::info!(?roles, "controller roles");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    reconciler::serve(store, reconciler::Options::from_env(), roles, shutdown).await?;
    Ok(0)
}

pub use weft_vm::wants_running;

/// Check manifests before anything is created: VMs/VMIs validate, and every NAD they name is
/// among the manifests (or already in the store, checked later by the controller).
pub fn validate_manifests(objects: &[Object]) -> anyhow::Result<()> {
    let nads: BTreeSet<(String, String)> = objects
        .iter()
        .filter(|o| o.kind == NetworkAttachmentDefinition::KIND)
        .map(|o| {
            (
                o.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
                o.metadata.name.clone(),
            )
        })
        .collect();
    for object in objects {
        let label = format!("{} {}", object.kind, object.key());
        let spec = match object.kind.as_str() {
            "VirtualMachine" => {
                let vm: VirtualMachine = object.to_typed().with_context(|| label.clone())?;
                vm.spec.template.spec
            }
            "VirtualMachineInstance" => {
                let vmi: VirtualMachineInstance = object.to_typed().with_context(|| label.clone())?;
                vmi.spec
            }
            "NetworkAttachmentDefinition" => {
                let nad: NetworkAttachmentDefinition = object.to_typed().with_context(|| label.clone())?;
                if !nad.spec.config.trim().is_empty() {
                    serde_json::from_str::<Value>(&nad.spec.config)
                        .with_context(|| format!("{label}: spec.config is not valid JSON"))?;
                }
                continue;
            }
            _ => continue,
        };
        let namespace = object
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let mut vmi = VirtualMachineInstance {
            spec,
            ..Default::default()
        };
        vmi.metadata = ObjectMeta::named(Some(&namespace), &object.metadata.name);
        let config = weft_vm::ClusterConfig::default();
        weft_vm::apply_network_defaults(&mut vmi.spec, &config).with_context(|| label.clone())?;
        let root = if object.kind == "VirtualMachine" {
            "spec.template.spec"
        } else {
            "spec"
        };
        let causes = weft_vm::validate_create(root, &vmi.spec, &config);
        if let Some(cause) = causes.first() {
            anyhow::bail!("{label}: {cause}");
        }
        for (index, network) in vmi.spec.networks.iter().enumerate() {
            if let Some(multus) = &network.multus {
                let (ns, name) = weft_netconf::split_namespaced(&multus.network_name, &namespace);
                if !nads.contains(&(ns.to_string(), name.to_string())) {
                    anyhow::bail!(
                        "{label}: {root}.networks[{index}].multus.networkName: NetworkAttachmentDefinition {ns}/{name} does not exist"
                    );
                }
            }
        }
    }
    Ok(())
}

pub(super) async fn reconcile_vm(
    store: &Arc<dyn Store>,
    vm: &VirtualMachine,
    vmis: &[VirtualMachineInstance],
) -> anyhow::Result<()> {
    let ns = vm.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let api = Api::<VirtualMachineInstance>::namespaced(store.clone(), &ns);
    let existing = vmis
        .iter()
        .find(|v| v.metadata.namespace.as_deref() == Some(&ns) && v.metadata.name == vm.metadata.name);
    match weft_vm::status::vm_action(vm, existing) {
        VmAction::CreateVmi => {
            // The VMI goes through the admission every VMI write gets; a template it denies
            // gives the VM a Failure condition instead of a VMI (and no error loop).
            let mut vmi = vmi_from_template(vm);
            let decision = weft_vm::admission::admit_vmi(
                &vmi.spec,
                weft_vm::admission::Operation::Create,
                &config::load(store).await?,
            );
            if !decision.allowed() {
                let failure = vmi_denied_message(&vmi.metadata.name, &decision.causes);
                set_vm_failure(store, vm, Some(failure)).await?;
                return Ok(());
            }
            crate::claims::ensure_for_vm(store, vm).await?;
            vmi.spec = decision.spec;
            api.create(&vmi).await?;
            set_vm_failure(store, vm, None).await?;
        }
        VmAction::DeleteVmi(vmi) => {
            api.delete(&vmi.metadata.name).await?;
        }
        VmAction::SyncVmi(vmi) => sync_template_changes(store, vm, vmi).await?,
        VmAction::Nothing => {}
    }
    // The VM's status from the VMI as this reconcile found it (the VMI's own changes bring
    // the VM back: reconciler::keys_for).
    if let Some(update) = weft_vm::plan_vm_status(vm, existing) {
        Api::<VirtualMachine>::namespaced(store.clone(), &ns)
            .modify_status(&vm.metadata.name, |vm| {
                update.apply(vm.status.get_or_insert_with(Default::default));
                true
            })
            .await?;
    }
    Ok(())
}

/// Propagate VM template interface changes to the running VMI (hot-plug, unplug via
/// `state: absent`, link state, NAD changes) and clean detached interfaces from the template.
async fn sync_template_changes(
    store: &Arc<dyn Store>,
    vm: &VirtualMachine,
    vmi: &VirtualMachineInstance,
) -> anyhow::Result<()> {
    let sync = weft_vm::sync_vm_to_vmi(&vm.spec.template.spec, vmi);
    let ns = vmi.namespace().to_string();
    if let Some((networks, interfaces)) = sync.vmi {
        // The hot-plug patch is a VMI update: admitted like any other.
        let mut next = vmi.spec.clone();
        next.networks = networks.clone();
        *next.interfaces_mut() = interfaces.clone();
        let decision = weft_vm::admission::admit_vmi(
            &next,
            weft_vm::admission::Operation::Update,
            &config::load(store).await?,
        );
        if !decision.allowed() {
            let failure = vmi_denied_message(&vmi.metadata.name, &decision.causes);
            set_vm_failure(store, vm, Some(failure)).await?;
            return Ok(());
        }
        Api::<VirtualMachineInstance>::namespaced(store.clone(), &ns)
            .modify(&vmi.metadata.name, |v| {
                v.spec.networks = networks.clone();
                *v.spec.interfaces_mut() = interfaces.clone();
                true
            })
            .await?;
        crate::claims::ensure_for_vm(store, vm).await?;
    }
    if let Some((networks, interfaces)) = sync.vm_template {
        Api::<VirtualMachine>::namespaced(store.clone(), &ns)
            .modify(&vm.metadata.name, |v| {
                v.spec.template.spec.networks = networks.clone();
                *v.spec.template.spec.interfaces_mut() = interfaces.clone();
                true
            })
            .await?;
    }
    Ok(())
}

/// The VM's `Failure` condition message when admission denies its VMI write.
fn vmi_denied_message(name: &str, causes: &[weft_vm::admission::Cause]) -> String {
    format!(
        "Error creating virtual machine instance: {}",
        crate::admission::invalid_lines(VirtualMachineInstance::KIND, name, causes).join("; ")
    )
}

/// Set (`Some(message)`: `Failure=True`, reason `FailedCreate`) or clear the VM's `Failure`
/// condition, as KubeVirt's VM controller does when it cannot create or patch the VMI.
async fn set_vm_failure(
    store: &Arc<dyn Store>,
    vm: &VirtualMachine,
    failure: Option<String>,
) -> anyhow::Result<()> {
    use weft_vm::admission::decision::{FAILED_CREATE, VM_FAILURE};
    let wanted = failure.map(|message| weft_vm::api::Condition {
        type_: VM_FAILURE.into(),
        status: "True".into(),
        reason: FAILED_CREATE.into(),
        message,
        ..Default::default()
    });
    let current = vm_conditions(vm);
    let mut probe = current.clone();
    if !weft_vm::admission::replace_condition(&mut probe, VM_FAILURE, wanted.clone(), "") {
        return Ok(());
    }
    let now = weft_store::now_rfc3339();
    let ns = vm.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    Api::<VirtualMachine>::namespaced(store.clone(), &ns)
        .modify_status(&vm.metadata.name, |vm| {
            let mut conditions = vm_conditions(vm);
            let changed =
                weft_vm::admission::replace_condition(&mut conditions, VM_FAILURE, wanted.clone(), &now);
            if changed {
                vm.status.get_or_insert_with(Default::default).insert(
                    "conditions".into(),
                    serde_json::to_value(&conditions).unwrap_or_default(),
                );
            }
            changed
        })
        .await?;
    Ok(())
}

/// A VM's `status.conditions` (the VM status is kept as plain JSON).
fn vm_conditions(vm: &VirtualMachine) -> Vec<weft_vm::api::Condition> {
    vm.status
        .as_ref()
        .and_then(|s| s.get("conditions"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default()
}

/// The VMI a VM creates: its template, named after the VM, owned by it.
pub fn vmi_from_template(vm: &VirtualMachine) -> VirtualMachineInstance {
    let mut vmi = VirtualMachineInstance {
        spec: vm.spec.template.spec.clone(),
        ..Default::default()
    };
    vmi.metadata = ObjectMeta::named(vm.metadata.namespace.as_deref(), &vm.metadata.name);
    if let Some(meta) = &vm.spec.template.metadata {
        for (field, target) in [
            ("labels", &mut vmi.metadata.labels),
            ("annotations", &mut vmi.metadata.annotations),
        ] {
            if let Some(map) = meta.get(field).and_then(Value::as_object) {
                for (k, v) in map {
                    if let Some(v) = v.as_str() {
                        target.insert(k.clone(), v.into());
                    }
                }
            }
        }
    }
    vmi.metadata
        .labels
        .insert(launcher_pod::VM_NAME_LABEL.into(), vm.metadata.name.clone());
    vmi.metadata.owner_references.push(OwnerReference {
        api_version: VirtualMachine::API_VERSION.into(),
        kind: VirtualMachine::KIND.into(),
        name: vm.metadata.name.clone(),
        uid: vm.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    });
    vmi
}

pub(super) async fn reconcile_vmi(
    store: &Arc<dyn Store>,
    vmi: &VirtualMachineInstance,
    pods: &[Pod],
) -> anyhow::Result<()> {
    let ns = vmi.namespace().to_string();
    let uid = vmi.metadata.uid.clone().unwrap_or_default();
    let api = Api::<VirtualMachineInstance>::namespaced(store.clone(), &ns);
    let config = config::load(store).await?;
    let own: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.label(launcher_pod::CREATED_BY_LABEL) == Some(uid.as_str()))
        .collect();
    let phase = vmi.status.as_ref().map(|s| s.phase.clone()).unwrap_or_default();
    if phase == "Failed" || vmi.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let migrating = phase == "Running" && migration::step(store, vmi, &own).await?;
    let pod = migration::active_pod(&own);
    let Some(pod) = pod else {
        let mut defaulted = vmi.clone();
        weft_vm::apply_network_defaults(&mut defaulted.spec, &config)?;
        let causes = weft_vm::validate("spec", &defaulted.spec, &config);
        if !causes.is_empty() {
            let message = weft_vm::admission::causes_message(&causes);
            let now = weft_store::now_rfc3339();
            api.modify_status(&vmi.metadata.name, |v| {
                let status = v.status.get_or_insert_with(Default::default);
                weft_vm::status::mark_vmi_failed(status, &message, None, &now)
            })
            .await?;
            return Ok(());
        }
        // KubeVirt cannot render the launcher pod while a NAD is missing: the VMI waits in
        // Pending with Synchronized=False (FailedCreate) until the NAD exists.
        let nads = Api::<NetworkAttachmentDefinition>::all(store.clone())
            .list(&ListOptions::default())
            .await?;
        let missing = weft_vm::admission::missing_nad_condition(&ns, &defaulted.spec, |nad_ns, name| {
            nads.iter()
                .any(|n| n.metadata.namespace.as_deref() == Some(nad_ns) && n.metadata.name == name)
        })
        .or_else(|| weft_vm::admission::unknown_plugin_condition(&defaulted.spec, &config));
        let now = weft_store::now_rfc3339();
        let waiting = missing.is_some();
        let mut newly_missing = false;
        api.modify_status(&vmi.metadata.name, |v| {
            let status = v.status.get_or_insert_with(Default::default);
            let update = weft_vm::status::lifecycle::set_vmi_waiting(status, missing.clone(), &now);
            newly_missing = update.newly_blocked;
            update.changed
        })
        .await?;
        if let Some(condition) = missing.as_ref().filter(|_| newly_missing) {
            // As KubeVirt's VMI controller: a Warning `FailedCreate` Event on the VMI.
            let object = crate::kinds::ObjectReference {
                api_version: "kubevirt.io/v1".into(),
                kind: "VirtualMachineInstance".into(),
                namespace: ns.clone(),
                name: vmi.metadata.name.clone(),
            };
            if let Err(e) = crate::events::emit(
                store,
                &object,
                crate::events::WARNING,
                &condition.reason,
                &condition.message,
                "weft-controller",
            )
            .await
            {
                tracing::warn!(vmi = %vmi.metadata.name, "event: {e}");
            }
        }
        if waiting {
            return Ok(());
        }
        if defaulted.spec != vmi.spec {
            api.modify(&vmi.metadata.name, |v| {
                v.spec = defaulted.spec.clone();
                true
            })
            .await?;
        }
        // The VM's claims before its launcher pod, whose ADD needs them: the VM's own reconcile
        // may have run before its NADs reached the watch cache (then it made none); here they
        // are known (the wait above), and a claim that exists costs a cache read.
        if let Some(vm) = vmi.metadata.label(launcher_pod::VM_NAME_LABEL) {
            let vm = Api::<VirtualMachine>::namespaced(store.clone(), &ns)
                .get(vm)
                .await?;
            if let Some(vm) = vm.filter(|vm| vm.metadata.deletion_timestamp.is_none()) {
                crate::claims::ensure_for_vm(store, &vm).await?;
            }
        }
        create_launcher_pod(store, &defaulted).await?;
        api.modify_status(&vmi.metadata.name, |v| {
            weft_vm::status::lifecycle::set_vmi_scheduling(v.status.get_or_insert_with(Default::default))
        })
        .await?;
        return Ok(());
    };
    let ready = pod.status.phase == "Running";
    let now = jiff::Timestamp::now();
    let view = weft_vm::PodView {
        annotations: &pod.metadata.annotations,
        ready,
        phase: &pod.status.phase,
        node: &pod.spec.node_name,
    };
    // One plan per reconcile, made from the VMI as the write sees it (the node agent writes
    // the interfaces' domain and guest parts concurrently): its status part is written, its
    // pod annotations patched below.
    let mut planned = None;
    let updated = api
        .modify_status(&vmi.metadata.name, |v| {
            let plan = weft_vm::plan_vmi_sync(v, view, migrating, &config, now);
            let changed = plan.apply(v.status.get_or_insert_with(Default::default));
            planned = Some(plan);
            changed
        })
        .await?;
    let Some(plan) = planned else {
        return Ok(());
    };
    if !migrating && plan.phase == "Running" {
        migration::ensure_required_migration(store, &updated, &config).await?;
    }
    // Hot-plug/unplug: the running pod's networks annotation follows the VMI's interfaces.
    if !plan.pod_annotations.is_empty() {
        let claims = crate::claims::claim_names_for_vmi(store, vmi).await?;
        let mut patch = plan.pod_annotations;
        if let Some(networks) = patch.get_mut(weft_netconf::NETWORKS_ANNOTATION) {
            *networks = launcher_pod::with_claim_references(networks, &claims);
        }
        let changed = patch
            .iter()
            .any(|(k, v)| pod.metadata.annotation(k) != Some(v.as_str()));
        if changed {
            Api::<Pod>::namespaced(store.clone(), &ns)
                .modify(&pod.metadata.name, |p| {
                    p.metadata.annotations.extend(patch.clone());
                    true
                })
                .await?;
        }
    }
    Ok(())
}

async fn create_launcher_pod(store: &Arc<dyn Store>, vmi: &VirtualMachineInstance) -> anyhow::Result<()> {
    let ns = vmi.namespace().to_string();
    let nodes: Vec<String> = Api::<Node>::all(store.clone())
        .list(&ListOptions::default())
        .await?
        .into_iter()
        .map(|n| n.metadata.name)
        .collect();
    let mut load = BTreeMap::new();
    for pod in Api::<Pod>::all(store.clone())
        .list(&ListOptions::default())
        .await?
    {
        *load.entry(pod.spec.node_name.clone()).or_insert(0usize) += 1;
    }
    let pinned = launcher_pod::selected_node(vmi);
    let node = launcher_pod::choose_node(&nodes, &load, pinned.as_deref())
        .with_context(|| match &pinned {
            Some(node) => format!("spec.nodeSelector: node {node} does not exist"),
            None => "no node to run the VM on".to_string(),
        })?
        .clone();
    let mut annotations = weft_vm::launcher_pod_annotations(vmi, &config::load(store).await?)?;
    let claims = crate::claims::claim_names_for_vmi(store, vmi).await?;
    if let Some(networks) = annotations.get_mut(weft_netconf::NETWORKS_ANNOTATION) {
        *networks = launcher_pod::with_claim_references(networks, &claims);
    }
    let pod = launcher_pod::render(vmi, &node, annotations);
    match Api::<Pod>::namespaced(store.clone(), &ns).create(&pod).await {
        Err(e) if e.is_already_exists() => Ok(()),
        other => other.map(|_| ()).map_err(Into::into),
    }
}
