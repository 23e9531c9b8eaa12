//! `VirtualMachineInstanceMigration` (`vmim`) and the VMI's `status.migrationState`, with
//! KubeVirt's field names.

use serde::{Deserialize, Serialize};
use weft_object::ObjectMeta;

use super::vmi::Extra;

/// A `kubevirt.io/v1` VirtualMachineInstanceMigration: a request to live-migrate one VMI
/// (`virtctl migrate` creates one; deleting it before it finishes aborts the migration).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VirtualMachineInstanceMigration {
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What to migrate.
    #[serde(default)]
    pub spec: MigrationSpec,
    /// Progress (omitted until the controller first sees it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MigrationStatus>,
    /// Every other top-level field.
    #[serde(flatten)]
    pub extra: Extra,
}

kubevirt_resource!(
    VirtualMachineInstanceMigration,
    "VirtualMachineInstanceMigration",
    "virtualmachineinstancemigrations"
);

/// `spec` of a migration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationSpec {
    /// The VMI to migrate (same namespace).
    #[serde(default)]
    pub vmi_name: String,
    /// Extra node selector terms for the target pod (`virtctl migrate --addedNodeSelector`):
    /// `kubernetes.io/hostname: NODE` pins the target node.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub added_node_selector: std::collections::BTreeMap<String, String>,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One entry of `status.phaseTransitionTimestamps`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseTransition {
    /// The phase entered.
    pub phase: String,
    /// When (RFC 3339).
    pub phase_transition_timestamp: String,
}

/// `status` of a migration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    /// `Pending`, `Scheduling`, `Scheduled`, `PreparingTarget`, `TargetReady`, `Running`,
    /// `Succeeded` or `Failed`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Every phase entered, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phase_transition_timestamps: Vec<PhaseTransition>,
    /// A copy of the VMI's `status.migrationState` for this migration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_state: Option<MigrationState>,
    /// Conditions (a `Failed` migration carries its reason here too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<super::Condition>,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A VMI's `status.migrationState`, as KubeVirt writes it (the controller, the source and the
/// target node each write their part).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationState {
    /// The migration's uid (the VMIM's `metadata.uid`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub migration_uid: String,
    /// Node the VMI migrates from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_node: String,
    /// The source launcher pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_pod: String,
    /// Node the VMI migrates to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_node: String,
    /// The target launcher pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_pod: String,
    /// Where the target node's migration proxy listens (set by the target node: target ready).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_node_address: String,
    /// The target proxy's ports (`port → 0` for the main migration stream, as KubeVirt).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub target_direct_migration_node_ports: std::collections::BTreeMap<String, u16>,
    /// The target node has the domain (its QEMU waits for the incoming state).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub target_node_domain_detected: bool,
    /// When the target's guest ran (resumed and announced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_node_domain_ready_timestamp: Option<String>,
    /// When the source started sending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<String>,
    /// When the source finished (completed or failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_timestamp: Option<String>,
    /// The state transfer completed.
    #[serde(default)]
    pub completed: bool,
    /// The migration failed (or was aborted).
    #[serde(default)]
    pub failed: bool,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure_reason: String,
    /// The migration object was deleted: the source cancels.
    #[serde(default)]
    pub abort_requested: bool,
    /// `Succeeded` / `Failed` once an abort was handled.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub abort_status: String,
    /// `PreCopy` (weft does not do post-copy).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

impl MigrationState {
    /// Whether this migration is over (completed or failed).
    pub fn is_final(&self) -> bool {
        self.completed || self.failed
    }
}
