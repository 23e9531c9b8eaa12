//! Migration in the local cluster: a target launcher pod for the same VMI starts on another
//! node while the source still runs (both hold the VM's claimed addresses: two owners, as
//! during a KubeVirt live migration); once the target runs, the source pod goes and the VMI
//! moves. The guest is started afresh on the target (no memory state is transferred).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use serde_json::Value;
use weft_store::{Api, ListOptions, Store};
use weft_vm::VirtualMachineInstance;

use super::launcher_pod;
use crate::kinds::{Node, Pod};

/// VMI annotation requesting a migration (value: target node, or empty for any other node).
pub const MIGRATE_TO_ANNOTATION: &str = "weft.dev/migrate-to";
/// Label marking a migration target pod until it takes over.
pub const TARGET_LABEL: &str = "weft.dev/migration-target";

/// The pod the VMI runs in now: the one that is not a pending migration target.
pub fn active_pod<'a>(pods: &[&'a Pod]) -> Option<&'a Pod> {
    pods.iter()
        .copied()
        .find(|p| p.metadata.label(TARGET_LABEL).is_none())
        .or_else(|| pods.first().copied())
}

/// Drive a requested migration one step. Returns true while a migration is in progress.
pub async fn step(
    store: &Arc<dyn Store>,
    vmi: &VirtualMachineInstance,
    pods: &[&Pod],
) -> anyhow::Result<bool> {
    let Some(requested) = vmi.metadata.annotation(MIGRATE_TO_ANNOTATION).map(String::from) else {
        return Ok(false);
    };
    let ns = vmi.namespace().to_string();
    let source = active_pod(pods).context("migration: the VMI has no launcher pod")?;
    let target = pods
        .iter()
        .copied()
        .find(|p| p.metadata.label(TARGET_LABEL).is_some());
    let pods_api = Api::<Pod>::namespaced(store.clone(), &ns);
    match target {
        None => {
            let nodes: Vec<String> = Api::<Node>::all(store.clone())
                .list(&ListOptions::default())
                .await?
                .into_iter()
                .map(|n| n.metadata.name)
                .filter(|n| *n != source.spec.node_name)
                .collect();
            let pinned = (!requested.is_empty()).then_some(requested.as_str());
            let node = launcher_pod::choose_node(&nodes, &BTreeMap::new(), pinned)
                .with_context(|| format!("migration of {}: no other node to go to", vmi.metadata.name))?
                .clone();
            let mut pod = source.clone();
            let generation = migration_count(vmi) + 1;
            pod.metadata = weft_store::ObjectMeta {
                name: format!("{}-m{generation}", launcher_pod::pod_name(vmi)),
                namespace: Some(ns.clone()),
                labels: source.metadata.labels.clone(),
                annotations: source.metadata.annotations.clone(),
                owner_references: source.metadata.owner_references.clone(),
                ..Default::default()
            };
            pod.metadata.labels.insert(TARGET_LABEL.into(), "true".into());
            pod.metadata
                .annotations
                .remove(weft_netconf::NETWORK_STATUS_ANNOTATION);
            pod.metadata.annotations.remove(crate::claims::SANDBOX_ANNOTATION);
            pod.status = Default::default();
            pod.spec.node_name = node;
            pods_api.create(&pod).await?;
            set_migration_state(store, vmi, &source.spec.node_name, &pod.spec.node_name, false).await?;
            Ok(true)
        }
        Some(target) if target.status.phase == "Running" => {
            // Hand over: the source goes, the target becomes the VMI's pod.
            pods_api.delete(&source.metadata.name).await?;
            pods_api
                .modify(&target.metadata.name, |p| {
                    p.metadata.labels.remove(TARGET_LABEL).is_some()
                })
                .await?;
            let (from, to) = (source.spec.node_name.clone(), target.spec.node_name.clone());
            Api::<VirtualMachineInstance>::namespaced(store.clone(), &ns)
                .modify(&vmi.metadata.name, |v| {
                    v.metadata.annotations.remove(MIGRATE_TO_ANNOTATION);
                    v.metadata
                        .annotations
                        .insert(MIGRATIONS_ANNOTATION.into(), (migration_count(v) + 1).to_string());
                    true
                })
                .await?;
            set_migration_state(store, vmi, &from, &to, true).await?;
            Ok(false)
        }
        Some(_) => Ok(true),
    }
}

/// VMI annotation counting completed migrations (names the next target pod).
pub const MIGRATIONS_ANNOTATION: &str = "weft.dev/migrations";

fn migration_count(vmi: &VirtualMachineInstance) -> u32 {
    vmi.metadata
        .annotation(MIGRATIONS_ANNOTATION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn set_migration_state(
    store: &Arc<dyn Store>,
    vmi: &VirtualMachineInstance,
    from: &str,
    to: &str,
    completed: bool,
) -> anyhow::Result<()> {
    Api::<VirtualMachineInstance>::namespaced(store.clone(), vmi.namespace())
        .modify_status(&vmi.metadata.name, |v| {
            let status = v.status.get_or_insert_with(Default::default);
            let state = serde_json::json!({"sourceNode": from, "targetNode": to, "completed": completed});
            if status.extra.get("migrationState") == Some(&state) {
                return false;
            }
            status.extra.insert("migrationState".into(), state);
            if completed {
                status.node_name = to.to_string();
            }
            let _ = Value::Null;
            true
        })
        .await?;
    Ok(())
}
