//! Live migration, the controller's part (KubeVirt's migration controller): for each
//! `VirtualMachineInstanceMigration` it observes the VMI's `status.migrationState` and the
//! target pod, asks the pure phase machine ([`weft_vm::vmim::migration_step`]) what comes
//! next, and applies it: the target launcher pod (for the same VMI, on another node, holding
//! the VM's claimed addresses too: two owners while both pods exist), the abort of a deleted
//! migration, the target's removal after a failure, and the hand-over once the guest runs on
//! the target. The node agents move the running guest (`crate::agent::local::migration`).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use weft_store::{Api, ListOptions, Store};
use weft_vm::api::MigrationState;
use weft_vm::vmim::{self, MigrationObservation, OrphanedStateStep, TargetPod};
use weft_vm::{VirtualMachineInstance, VirtualMachineInstanceMigration};

use super::launcher_pod;
use crate::kinds::{Node, Pod};

/// Label marking a migration target pod (its value: the migration's uid) until it takes over.
pub const TARGET_LABEL: &str = vmim::MIGRATION_JOB_LABEL;
/// Label KubeVirt's workload updater puts on the migrations it creates.
pub const WORKLOAD_UPDATE_LABEL: &str = "kubevirt.io/workloadUpdateMigration";
/// Guest memory of the local guests (for the completion timeout).
const GUEST_MEMORY_MIB: u64 = 256;

/// The pod the VMI runs in now: the one that is not a pending migration target.
pub fn active_pod<'a>(pods: &[&'a Pod]) -> Option<&'a Pod> {
    pods.iter()
        .copied()
        .find(|p| p.metadata.label(TARGET_LABEL).is_none())
        .or_else(|| pods.first().copied())
}

/// The migrations of `vmi`, oldest first.
async fn migrations_of(
    store: &Arc<dyn Store>,
    vmi: &VirtualMachineInstance,
) -> anyhow::Result<Vec<VirtualMachineInstanceMigration>> {
    let mut all: Vec<VirtualMachineInstanceMigration> =
        Api::<VirtualMachineInstanceMigration>::namespaced(store.clone(), vmi.namespace())
            .list(&ListOptions::default())
            .await?
            .into_iter()
            .filter(|m| m.spec.vmi_name == vmi.metadata.name && m.metadata.deletion_timestamp.is_none())
            .collect();
    vmim::sort_migrations(&mut all);
    Ok(all)
}

/// Drive the VMI's migrations one step. Returns true while one is in progress.
pub async fn step(
    store: &Arc<dyn Store>,
    vmi: &VirtualMachineInstance,
    pods: &[&Pod],
) -> anyhow::Result<bool> {
    let migrations = migrations_of(store, vmi).await?;
    let state = vmim::vmi_migration_state(vmi);
    let target_of = |uid: &str| {
        pods.iter()
            .copied()
            .find(|p| p.metadata.label(TARGET_LABEL) == Some(uid))
    };
    // Failed migrations: their target pods go.
    for uid in vmim::failed_migration_uids(&migrations) {
        if let Some(pod) = target_of(uid) {
            delete_pod(store, pod).await?;
        }
    }
    // A migration whose object was deleted: the abort.
    if let Some(state) = vmim::orphaned_state(state.as_ref(), &migrations) {
        let target = target_of(&state.migration_uid);
        let now = weft_store::now_rfc3339();
        match vmim::orphaned_state_step(state, target.is_some()) {
            OrphanedStateStep::Nothing => {}
            OrphanedStateStep::RequestAbort => {
                update_state(store, vmi, &state.migration_uid, |s| s.abort_requested = true).await?;
            }
            OrphanedStateStep::AbortUnstarted => {
                update_state(store, vmi, &state.migration_uid, |s| {
                    vmim::abort_unstarted(s, &now)
                })
                .await?;
                if let Some(pod) = target {
                    delete_pod(store, pod).await?;
                }
            }
            OrphanedStateStep::CleanUp => {
                if let Some(pod) = target {
                    delete_pod(store, pod).await?;
                }
            }
        }
        if !state.is_final() {
            return Ok(true);
        }
    }
    let Some(vmim) = vmim::driven_migration(&migrations) else {
        return Ok(false);
    };
    let uid = vmim.metadata.uid.clone().unwrap_or_default();
    let own_state = state.as_ref().filter(|s| s.migration_uid == uid);
    let target = target_of(&uid);
    let phase = vmim::migration_phase(vmim);
    let since = vmim
        .status
        .as_ref()
        .and_then(|s| s.phase_transition_timestamps.last())
        .and_then(|t| t.phase_transition_timestamp.parse().ok());
    let running = vmi.status.as_ref().is_some_and(|s| s.phase == "Running");
    // The KubeVirt CR's binding plugins: one declaring `migration` (passt's `link-refresh`)
    // makes its VMIs migratable.
    let config = super::config::load(store).await?;
    let observation = MigrationObservation {
        phase,
        since,
        now: jiff::Timestamp::now(),
        vmi_running: running,
        not_migratable: weft_vm::verify_migratable(vmi, &config)
            .err()
            .map(|e| e.to_string()),
        state: own_state,
        target_pod: target.map(|p| TargetPod {
            phase: p.status.phase.clone(),
            message: p.status.message.clone(),
        }),
        pending_timeout: vmim::pending_pod_timeout(vmim),
        completion_timeout: vmim::completion_timeout(GUEST_MEMORY_MIB),
    };
    let mut decision = vmim::migration_step(&observation);
    let now = weft_store::now_rfc3339();
    if decision.actions.create_target
        && let Err(e) = create_target(store, vmi, vmim, pods).await
    {
        decision = vmim::target_creation_failed(format!("{e:#}"));
    }
    if decision.actions.changes_state() {
        update_state(store, vmi, &uid, |s| vmim::step_state_change(s, &decision, &now)).await?;
    }
    if decision.actions.delete_target
        && let Some(pod) = target
    {
        delete_pod(store, pod).await?;
    }
    if decision.actions.hand_over
        && let (Some(target), Some(state)) = (target, own_state)
    {
        hand_over(store, vmi, state, target).await?;
    }
    record(store, vmim, &decision, &now).await?;
    Ok(!decision.phase.is_final())
}

/// Record the phase (and its transition), the failure reason and a copy of the VMI's
/// `migrationState` on the migration object.
async fn record(
    store: &Arc<dyn Store>,
    vmim: &VirtualMachineInstanceMigration,
    decision: &vmim::MigrationStep,
    now: &str,
) -> anyhow::Result<()> {
    let api = Api::<VirtualMachineInstanceMigration>::namespaced(
        store.clone(),
        vmim.metadata.namespace.as_deref().unwrap_or("default"),
    );
    let vmi = Api::<VirtualMachineInstance>::namespaced(
        store.clone(),
        vmim.metadata.namespace.as_deref().unwrap_or("default"),
    )
    .get(&vmim.spec.vmi_name)
    .await?;
    let uid = vmim.metadata.uid.clone().unwrap_or_default();
    let copy = vmi
        .as_ref()
        .and_then(vmim::vmi_migration_state)
        .filter(|s| s.migration_uid == uid);
    // A migration deleted meanwhile has nothing left to record.
    api.modify_status_if_exists(&vmim.metadata.name, |m| {
        vmim::record_migration(
            m.status.get_or_insert_with(Default::default),
            decision.phase,
            decision.reason.as_deref(),
            copy.as_ref(),
            now,
        )
    })
    .await?;
    Ok(())
}

/// Plan the target ([`launcher_pod::plan_target`]: node, pod, `migrationState`) from the nodes
/// and their pods, record the migration on the VMI, create the target pod.
async fn create_target(
    store: &Arc<dyn Store>,
    vmi: &VirtualMachineInstance,
    vmim: &VirtualMachineInstanceMigration,
    pods: &[&Pod],
) -> anyhow::Result<()> {
    let ns = vmi.namespace().to_string();
    let uid = vmim.metadata.uid.clone().unwrap_or_default();
    let source = active_pod(pods).context("the VMI has no launcher pod")?;
    let nodes: Vec<String> = Api::<Node>::all(store.clone())
        .list(&ListOptions::default())
        .await?
        .into_iter()
        .map(|n| n.metadata.name)
        .collect();
    let pinned = vmim::pinned_target_node(vmim);
    let mut load = BTreeMap::new();
    for pod in Api::<Pod>::all(store.clone())
        .list(&ListOptions::default())
        .await?
    {
        *load.entry(pod.spec.node_name.clone()).or_insert(0usize) += 1;
    }
    let plan = launcher_pod::plan_target(vmi, &uid, source, &nodes, &load, pinned)?;
    Api::<VirtualMachineInstance>::namespaced(store.clone(), &ns)
        .modify_status(&vmi.metadata.name, |v| {
            vmim::set_vmi_migration_state(v, &plan.state)
        })
        .await?;
    Api::<Pod>::namespaced(store.clone(), &ns)
        .create(&plan.pod)
        .await?;
    Ok(())
}

/// The guest runs on the target: the source pod goes (its node releases its attachments),
/// the target pod becomes the VMI's, the VMI moves.
async fn hand_over(
    store: &Arc<dyn Store>,
    vmi: &VirtualMachineInstance,
    state: &MigrationState,
    target: &Pod,
) -> anyhow::Result<()> {
    let ns = vmi.namespace().to_string();
    let pods_api = Api::<Pod>::namespaced(store.clone(), &ns);
    pods_api
        .modify(&target.metadata.name, |p| {
            p.metadata.labels.remove(TARGET_LABEL).is_some()
        })
        .await?;
    if let Err(e) = pods_api.delete(&state.source_pod).await
        && !e.is_not_found()
    {
        return Err(e.into());
    }
    let to = target.spec.node_name.clone();
    Api::<VirtualMachineInstance>::namespaced(store.clone(), &ns)
        .modify_status(&vmi.metadata.name, |v| {
            vmim::hand_over_status(v.status.get_or_insert_with(Default::default), &to)
        })
        .await?;
    Ok(())
}

async fn delete_pod(store: &Arc<dyn Store>, pod: &Pod) -> anyhow::Result<()> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    match Api::<Pod>::namespaced(store.clone(), &ns)
        .delete(&pod.metadata.name)
        .await
    {
        Err(e) if !e.is_not_found() => Err(e.into()),
        _ => Ok(()),
    }
}

async fn update_state(
    store: &Arc<dyn Store>,
    vmi: &VirtualMachineInstance,
    uid: &str,
    change: impl Fn(&mut MigrationState),
) -> anyhow::Result<()> {
    Api::<VirtualMachineInstance>::namespaced(store.clone(), vmi.namespace())
        .modify_status(&vmi.metadata.name, |v| {
            vmim::update_vmi_migration_state(v, uid, &change)
        })
        .await?;
    Ok(())
}

/// KubeVirt's workload updater with `workloadUpdateMethods: [LiveMigrate]`: a running VMI
/// whose `MigrationRequired` condition is `True` (the migration evaluator's decision), that can
/// migrate ([`weft_vm::migration::workload_migration_due`]) and that has no migration in
/// progress gets one.
pub async fn ensure_required_migration(
    store: &Arc<dyn Store>,
    vmi: &VirtualMachineInstance,
    config: &weft_vm::ClusterConfig,
) -> anyhow::Result<()> {
    if !weft_vm::migration::workload_migration_due(vmi, config) {
        return Ok(());
    }
    let migrations = migrations_of(store, vmi).await?;
    if vmim::driven_migration(&migrations).is_some() {
        return Ok(());
    }
    let mut vmim = new_migration(vmi.namespace(), &vmi.metadata.name, "kubevirt-workload-update-");
    vmim.metadata
        .labels
        .insert(WORKLOAD_UPDATE_LABEL.into(), String::new());
    Api::<VirtualMachineInstanceMigration>::namespaced(store.clone(), vmi.namespace())
        .create(&vmim)
        .await?;
    tracing::info!(vmi = %vmi.metadata.name, migration = %vmim.metadata.name, "migration required: created");
    Ok(())
}

/// A new migration of VMI `vmi` named `prefix` + 5 random characters (as `generateName`).
pub fn new_migration(namespace: &str, vmi: &str, prefix: &str) -> VirtualMachineInstanceMigration {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rand::random::<u8>() as usize % ALPHABET.len()] as char)
        .collect();
    VirtualMachineInstanceMigration {
        metadata: weft_store::ObjectMeta::named(Some(namespace), &format!("{prefix}{suffix}")),
        spec: weft_vm::api::MigrationSpec {
            vmi_name: vmi.to_string(),
            ..Default::default()
        },
        ..Default::default()
    }
}
