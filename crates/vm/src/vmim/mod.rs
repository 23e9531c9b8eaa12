//! The `VirtualMachineInstanceMigration` phase machine: from what the controller observes (the
//! VMI's `status.migrationState`, the target pod, the clock) to the next phase and what the
//! controller does. Pure: the controller applies the [`MigrationStep`]. The node agents'
//! decisions are in [`node`] (re-exported here): [`target_action`] on the target node,
//! [`source_action`] on the source, and the `migrationState` changes each writes.
//!
//! Each pass moves at most one phase forward along KubeVirt's sequence (Pending, Scheduling,
//! Scheduled, PreparingTarget, TargetReady, Running, Succeeded), so every phase appears in
//! `phaseTransitionTimestamps`; `Failed` is reached from any phase.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

pub mod node;

pub use node::*;

use crate::api::{
    Condition, MigrationState, MigrationStatus, VirtualMachineInstance, VirtualMachineInstanceMigration,
    VmiStatus,
};

/// KubeVirt's `completionTimeoutPerGiB` default: a migration may run this long per GiB of
/// guest memory before it is cancelled.
pub const COMPLETION_TIMEOUT_PER_GIB: SignedDuration = SignedDuration::from_secs(150);
/// KubeVirt's catch-all pending timeout for the target pod (15 min).
pub const DEFAULT_PENDING_POD_TIMEOUT: SignedDuration = SignedDuration::from_secs(15 * 60);
/// VMIM annotation overriding the target pod pending timeout (seconds), as KubeVirt.
pub const PENDING_POD_TIMEOUT_ANNOTATION: &str = "kubevirt.io/migrationPendingPodTimeoutSeconds";
/// Label KubeVirt puts on a migration target pod: the migration's uid.
pub const MIGRATION_JOB_LABEL: &str = "kubevirt.io/migrationJobUID";
/// VMIM annotation where the source node writes `query-migrate` progress (KubeVirt exposes it
/// only as metrics): JSON (`status`, `transferredBytes`, `remainingBytes`, `totalBytes`, `dirtyPagesRate`, ...).
pub const MIGRATION_PROGRESS_ANNOTATION: &str = "weft.dev/migration-progress";
/// The only migration mode weft does.
pub const MODE_PRE_COPY: &str = "PreCopy";

/// A migration phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MigrationPhase {
    /// Accepted, nothing done yet.
    Pending,
    /// The target pod is created and starting.
    Scheduling,
    /// The target pod runs.
    Scheduled,
    /// The target node prepares the domain (QEMU waiting for the incoming state).
    PreparingTarget,
    /// The target listens: the source may send.
    TargetReady,
    /// The source sends.
    Running,
    /// The guest runs on the target.
    Succeeded,
    /// It did not work (the guest keeps running on the source).
    Failed,
}

impl MigrationPhase {
    /// Every phase, in order.
    pub const ALL: [Self; 8] = [
        Self::Pending,
        Self::Scheduling,
        Self::Scheduled,
        Self::PreparingTarget,
        Self::TargetReady,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
    ];

    /// KubeVirt's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Scheduling => "Scheduling",
            Self::Scheduled => "Scheduled",
            Self::PreparingTarget => "PreparingTarget",
            Self::TargetReady => "TargetReady",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
        }
    }

    /// Parses KubeVirt's spelling (`None` for `""` or anything else).
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == text)
    }

    /// Succeeded or Failed.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }

    fn next(self) -> Self {
        match self {
            Self::Pending => Self::Scheduling,
            Self::Scheduling => Self::Scheduled,
            Self::Scheduled => Self::PreparingTarget,
            Self::PreparingTarget => Self::TargetReady,
            Self::TargetReady => Self::Running,
            Self::Running => Self::Succeeded,
            other => other,
        }
    }
}

/// The target pod as the controller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetPod {
    /// `Pending`, `Running`, `Failed`, ...
    pub phase: String,
    /// Why it is in that phase.
    pub message: String,
}

/// What the controller observes about one migration.
#[derive(Clone, Debug)]
pub struct MigrationObservation<'a> {
    /// The migration's phase now (`None`: new).
    pub phase: Option<MigrationPhase>,
    /// When that phase was entered.
    pub since: Option<Timestamp>,
    /// Now.
    pub now: Timestamp,
    /// The VMI runs (phase Running).
    pub vmi_running: bool,
    /// The VMI cannot be migrated: why (KubeVirt's `verify_migratable`).
    pub not_migratable: Option<String>,
    /// The VMI's `migrationState`, when it is this migration's (same uid).
    pub state: Option<&'a MigrationState>,
    /// The target pod (labelled with this migration's uid), if it exists.
    pub target_pod: Option<TargetPod>,
    /// How long the target pod may stay Pending.
    pub pending_timeout: SignedDuration,
    /// How long the transfer may run ([`completion_timeout`]).
    pub completion_timeout: SignedDuration,
}

/// What the controller does on this pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigrationActions {
    /// Choose a target node, record the migration state on the VMI, create the target pod.
    pub create_target: bool,
    /// Set `migrationState.abortRequested` (the source cancels a running transfer).
    pub abort_source: bool,
    /// Delete the target pod.
    pub delete_target: bool,
    /// Mark `migrationState` failed (nothing was sent yet, so the controller does it).
    pub fail_state: bool,
    /// The guest runs on the target: delete the source pod, the target pod becomes the VMI's.
    pub hand_over: bool,
}

impl MigrationActions {
    /// The VMI's `migrationState` changes ([`step_state_change`]): an abort or a failure.
    pub fn changes_state(&self) -> bool {
        self.abort_source || self.fail_state
    }
}

/// The decision for one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationStep {
    /// The phase to record (unchanged when nothing happened).
    pub phase: MigrationPhase,
    /// Why it failed, when `phase` is Failed.
    pub reason: Option<String>,
    /// What to do.
    pub actions: MigrationActions,
}

fn failed(reason: String, state: Option<&MigrationState>, target_exists: bool) -> MigrationStep {
    let started = state.is_some_and(|s| s.start_timestamp.is_some());
    let open = state.is_some_and(|s| !s.is_final());
    MigrationStep {
        phase: MigrationPhase::Failed,
        reason: Some(reason),
        actions: MigrationActions {
            abort_source: started && open,
            fail_state: open && !started,
            delete_target: target_exists,
            ..Default::default()
        },
    }
}

/// KubeVirt's migration controller, one pass: the next phase and the actions.
pub fn migration_step(obs: &MigrationObservation) -> MigrationStep {
    let target_exists = obs.target_pod.is_some();
    let stay = |phase| MigrationStep {
        phase,
        reason: None,
        actions: MigrationActions::default(),
    };
    // A new migration is Pending and goes on in the same pass (its target is created now).
    let current = obs.phase.unwrap_or(MigrationPhase::Pending);
    if current.is_final() {
        // Failed: the target pod goes (again, until it is gone). Succeeded: nothing left.
        let mut step = stay(current);
        step.actions.delete_target = current == MigrationPhase::Failed && target_exists;
        return step;
    }
    let elapsed = obs
        .since
        .map(|since| obs.now.duration_since(since))
        .unwrap_or_default();
    let Some(state) = obs.state else {
        if !obs.vmi_running {
            return failed("the VMI is not running".into(), None, target_exists);
        }
        if let Some(why) = &obs.not_migratable {
            return failed(format!("the VMI is not migratable: {why}"), None, target_exists);
        }
        let mut step = stay(MigrationPhase::Scheduling);
        step.actions.create_target = true;
        return step;
    };
    if state.failed {
        let reason = Some(state.failure_reason.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "the migration failed".into());
        return failed(reason, Some(state), target_exists);
    }
    let observed = match &obs.target_pod {
        None if state.completed => MigrationPhase::Running,
        None => return failed("the target pod is gone".into(), Some(state), false),
        Some(pod) if pod.phase == "Failed" => {
            let why = Some(pod.message.as_str())
                .filter(|m| !m.is_empty())
                .unwrap_or("no reason given");
            return failed(format!("the target pod failed: {why}"), Some(state), true);
        }
        Some(pod) if pod.phase != "Running" => {
            if elapsed > obs.pending_timeout && current <= MigrationPhase::Scheduling {
                return failed(
                    format!(
                        "the target pod did not start within {}s",
                        obs.pending_timeout.as_secs()
                    ),
                    Some(state),
                    true,
                );
            }
            MigrationPhase::Scheduling
        }
        Some(_) if state.completed && state.target_node_domain_ready_timestamp.is_some() => {
            MigrationPhase::Succeeded
        }
        Some(_) if state.start_timestamp.is_some() || state.completed => MigrationPhase::Running,
        Some(_) if !state.target_node_address.is_empty() => MigrationPhase::TargetReady,
        Some(_) => MigrationPhase::PreparingTarget,
    };
    if current == MigrationPhase::Running && !state.completed && elapsed > obs.completion_timeout {
        return failed(
            format!(
                "the transfer did not complete within {}s (completionTimeoutPerGiB)",
                obs.completion_timeout.as_secs()
            ),
            Some(state),
            target_exists,
        );
    }
    // Straight to what is observed: every phase on the way is recorded ([`record_phases`]),
    // and nothing external is awaited between them.
    let phase = observed.max(current);
    let mut step = stay(phase);
    step.actions.hand_over = phase == MigrationPhase::Succeeded;
    step
}

/// What the controller does for a VMI `migrationState` whose migration object was deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrphanedStateStep {
    /// Nothing (over, or an abort already asked for and the source still answering).
    Nothing,
    /// Ask the source to cancel (`abortRequested`).
    RequestAbort,
    /// Nothing was sent: mark the state failed and aborted, delete the target pod.
    AbortUnstarted,
    /// The abort was handled: delete the target pod (when one is left).
    CleanUp,
}

/// KubeVirt's handling of a deleted migration object (the abort).
pub fn orphaned_state_step(state: &MigrationState, target_exists: bool) -> OrphanedStateStep {
    if state.completed {
        return OrphanedStateStep::Nothing;
    }
    if state.failed {
        return if target_exists {
            OrphanedStateStep::CleanUp
        } else {
            OrphanedStateStep::Nothing
        };
    }
    if state.start_timestamp.is_none() {
        return OrphanedStateStep::AbortUnstarted;
    }
    if state.abort_requested {
        OrphanedStateStep::Nothing
    } else {
        OrphanedStateStep::RequestAbort
    }
}

/// The transfer's time budget: [`COMPLETION_TIMEOUT_PER_GIB`] per GiB of guest memory (at
/// least one GiB's worth, so a small guest on a loaded machine is not cut short).
pub fn completion_timeout(memory_mib: u64) -> SignedDuration {
    let gib = memory_mib.div_ceil(1024).max(1);
    COMPLETION_TIMEOUT_PER_GIB * i32::try_from(gib).unwrap_or(i32::MAX)
}

/// The pending-pod timeout of a migration (its annotation, or [`DEFAULT_PENDING_POD_TIMEOUT`]).
pub fn pending_pod_timeout(vmim: &VirtualMachineInstanceMigration) -> SignedDuration {
    vmim.metadata
        .annotation(PENDING_POD_TIMEOUT_ANNOTATION)
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|s| *s > 0)
        .map(SignedDuration::from_secs)
        .unwrap_or(DEFAULT_PENDING_POD_TIMEOUT)
}

/// The VMI's `status.migrationState`, if it has one that parses.
pub fn vmi_migration_state(vmi: &VirtualMachineInstance) -> Option<MigrationState> {
    let value = vmi.status.as_ref()?.extra.get("migrationState")?;
    serde_json::from_value(value.clone()).ok()
}

/// Write `state` as the VMI's `status.migrationState`; returns whether it changed.
pub fn set_vmi_migration_state(vmi: &mut VirtualMachineInstance, state: &MigrationState) -> bool {
    let value = serde_json::to_value(state).unwrap_or(Value::Null);
    let status = vmi.status.get_or_insert_with(Default::default);
    if status.extra.get("migrationState") == Some(&value) {
        return false;
    }
    status.extra.insert("migrationState".into(), value);
    true
}

/// The target node a migration pins (`spec.addedNodeSelector["kubernetes.io/hostname"]`).
pub fn pinned_target_node(vmim: &VirtualMachineInstanceMigration) -> Option<&str> {
    vmim.spec
        .added_node_selector
        .get("kubernetes.io/hostname")
        .map(String::as_str)
}

/// The phases a migration in phase `from` (`None`: new) passes through to reach `to`, in
/// order, each recorded in `phaseTransitionTimestamps` as KubeVirt's controller walks them:
/// `Pending` first for a new one, every phase in between, `Failed` straight from anywhere.
pub fn phases_to(from: Option<MigrationPhase>, to: MigrationPhase) -> Vec<MigrationPhase> {
    let mut phases = Vec::new();
    let mut current = match from {
        Some(phase) => phase,
        None => {
            phases.push(MigrationPhase::Pending);
            MigrationPhase::Pending
        }
    };
    if to == MigrationPhase::Failed {
        if current != to {
            phases.push(to);
        }
        return phases;
    }
    while current < to && !current.is_final() {
        current = current.next();
        phases.push(current);
    }
    phases
}

/// Record the transitions from `status`'s phase to `phase` at `now` ([`phases_to`]); false
/// when already there.
pub fn record_phases(status: &mut crate::api::MigrationStatus, phase: MigrationPhase, now: &str) -> bool {
    let from = MigrationPhase::parse(&status.phase);
    let mut changed = false;
    for step in phases_to(from, phase) {
        changed |= record_phase(status, step, now);
    }
    changed
}

/// Record the transition to `phase` at `now` in `status` (no-op when already there).
pub fn record_phase(status: &mut crate::api::MigrationStatus, phase: MigrationPhase, now: &str) -> bool {
    if status.phase == phase.as_str() {
        return false;
    }
    status.phase = phase.as_str().into();
    status
        .phase_transition_timestamps
        .push(crate::api::PhaseTransition {
            phase: phase.as_str().into(),
            phase_transition_timestamp: now.into(),
        });
    true
}

/// Record one pass on the migration object's status: the phase transitions to `phase`
/// ([`record_phases`]), the `Failed` condition with `failure` as its message (once: a later
/// reason does not replace the first), and `state` (the VMI's `migrationState`, when it is
/// this migration's) as the status copy when it differs. Returns whether anything changed.
pub fn record_migration(
    status: &mut MigrationStatus,
    phase: MigrationPhase,
    failure: Option<&str>,
    state: Option<&MigrationState>,
    now: &str,
) -> bool {
    let mut changed = record_phases(status, phase, now);
    if let Some(reason) = failure
        && !status.conditions.iter().any(|c| c.type_ == "Failed")
    {
        status.conditions.push(Condition {
            type_: "Failed".into(),
            status: "True".into(),
            reason: "MigrationFailed".into(),
            message: reason.into(),
            last_transition_time: Some(now.into()),
            ..Default::default()
        });
        changed = true;
    }
    // No copy (the VMI's state is gone or another migration's): the last one stays.
    if let Some(state) = state
        && status.migration_state.as_ref() != Some(state)
    {
        status.migration_state = Some(state.clone());
        changed = true;
    }
    changed
}

/// Mark `state` failed at `now` for `reason` (`failed`, `failureReason`, `endTimestamp`): the
/// migration is over and the guest runs on at the source.
pub fn fail_state(state: &mut MigrationState, reason: &str, now: &str) {
    state.failed = true;
    state.failure_reason = reason.into();
    state.end_timestamp = Some(now.into());
}

/// A migration object's phase (`None`: new, or a phase weft does not know).
pub fn migration_phase(vmim: &VirtualMachineInstanceMigration) -> Option<MigrationPhase> {
    MigrationPhase::parse(vmim.status.as_ref().map(|s| s.phase.as_str()).unwrap_or(""))
}

/// Order a VMI's migrations oldest first: by `creationTimestamp`, then `resourceVersion`
/// (numeric; one that does not parse counts as 0).
pub fn sort_migrations(migrations: &mut [VirtualMachineInstanceMigration]) {
    migrations.sort_by_key(|m| {
        let rv: u64 = m
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or("0")
            .parse()
            .unwrap_or(0);
        (m.metadata.creation_timestamp.clone(), rv)
    });
}

/// The migration the controller drives among `migrations` (oldest first): the first that is
/// not over. None: no migration in progress.
pub fn driven_migration(
    migrations: &[VirtualMachineInstanceMigration],
) -> Option<&VirtualMachineInstanceMigration> {
    migrations
        .iter()
        .find(|m| !migration_phase(m).is_some_and(MigrationPhase::is_final))
}

/// The uids of the `Failed` migrations among `migrations`: their target pods go.
pub fn failed_migration_uids(migrations: &[VirtualMachineInstanceMigration]) -> Vec<&str> {
    migrations
        .iter()
        .filter(|m| migration_phase(m) == Some(MigrationPhase::Failed))
        .filter_map(|m| m.metadata.uid.as_deref())
        .collect()
}

/// The VMI's `migrationState` when its migration object is gone (none of `migrations` has its
/// uid): the abort ([`orphaned_state_step`]).
pub fn orphaned_state<'a>(
    state: Option<&'a MigrationState>,
    migrations: &[VirtualMachineInstanceMigration],
) -> Option<&'a MigrationState> {
    state.filter(|s| {
        !migrations
            .iter()
            .any(|m| m.metadata.uid.as_deref() == Some(s.migration_uid.as_str()))
    })
}

/// Why an unstarted migration whose object was deleted failed.
pub const ABORTED_BY_DELETION: &str = "aborted: the migration object was deleted";

/// [`OrphanedStateStep::AbortUnstarted`]'s change at `now`: the abort asked for and answered
/// (nothing was sent), the state failed ([`end_source_state`] of a cancelled transfer).
pub fn abort_unstarted(state: &mut MigrationState, now: &str) {
    state.abort_requested = true;
    let aborted = SourceOutcome::Failed {
        reason: ABORTED_BY_DELETION.into(),
        aborted: true,
    };
    end_source_state(state, &aborted, now);
}

/// The step of a migration whose target could not be created (`error`): Failed, and the
/// VMI's `migrationState` marked failed when it was written before the pod's creation failed
/// (a state that is this migration's; none is left alone). No pod exists to delete.
pub fn target_creation_failed(error: String) -> MigrationStep {
    MigrationStep {
        phase: MigrationPhase::Failed,
        reason: Some(error),
        actions: MigrationActions {
            fail_state: true,
            ..Default::default()
        },
    }
}

/// `step`'s change to the VMI's `migrationState` at `now`: `abortRequested` for
/// [`MigrationActions::abort_source`], [`fail_state`] with the step's reason for
/// [`MigrationActions::fail_state`] (the controller writes it when
/// [`MigrationActions::changes_state`]).
pub fn step_state_change(state: &mut MigrationState, step: &MigrationStep, now: &str) {
    if step.actions.abort_source {
        state.abort_requested = true;
    }
    if step.actions.fail_state {
        fail_state(state, step.reason.as_deref().unwrap_or_default(), now);
    }
}

/// The hand-over's change to the VMI's status: it runs on `node`, and (the target having the
/// networks the VMI asks for) no migration is required any more. Returns whether it changed.
pub fn hand_over_status(status: &mut VmiStatus, node: &str) -> bool {
    let before = status.clone();
    status.node_name = node.into();
    status
        .conditions
        .retain(|c| c.type_ != crate::migration::MIGRATION_REQUIRED);
    *status != before
}

#[cfg(test)]
mod tests;
