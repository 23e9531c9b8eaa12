//! The `VirtualMachineInstanceMigration` phase machine: from what the controller observes (the
//! VMI's `status.migrationState`, the target pod, the clock) to the next phase and what the
//! controller does. Pure: the controller applies the [`MigrationStep`]. The node agents'
//! decisions are here too: [`target_action`] on the target node, [`source_action`] on the
//! source, and the `migrationState` changes each writes (`record_*`, [`end_source_state`]).
//!
//! Each pass moves at most one phase forward along KubeVirt's sequence (Pending, Scheduling,
//! Scheduled, PreparingTarget, TargetReady, Running, Succeeded), so every phase appears in
//! `phaseTransitionTimestamps`; `Failed` is reached from any phase.

use std::net::{IpAddr, SocketAddr};

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

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

/// How the source side of a migration ended, as the source node saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceOutcome {
    /// The guest runs at the target.
    Completed,
    /// The guest runs on at the source; `aborted` when the transfer was cancelled (asked
    /// for, or QEMU reported `cancelled`).
    Failed {
        /// Why, in the words the VMI's `failureReason` shows.
        reason: String,
        /// The transfer was cancelled rather than broken.
        aborted: bool,
    },
}

/// Record the source side's end in `state` at `now`: `completed` and `endTimestamp`, or
/// [`fail_state`] with `abortStatus: Succeeded` when the migration was aborted — cancelled
/// by QEMU or asked for by an abort (`abortRequested`) that the failure answered. A failure
/// that was neither leaves `abortStatus` as it was.
pub fn end_source_state(state: &mut MigrationState, outcome: &SourceOutcome, now: &str) {
    match outcome {
        SourceOutcome::Completed => {
            state.completed = true;
            state.end_timestamp = Some(now.into());
        }
        SourceOutcome::Failed { reason, aborted } => {
            fail_state(state, reason, now);
            if *aborted || state.abort_requested {
                state.abort_status = "Succeeded".into();
            }
        }
    }
}

/// Apply `change` to `vmi`'s `migrationState` when it is migration `uid`'s (another
/// migration's state, or none, is left alone); returns whether the VMI changed.
pub fn update_vmi_migration_state(
    vmi: &mut VirtualMachineInstance,
    uid: &str,
    change: impl FnOnce(&mut MigrationState),
) -> bool {
    let Some(mut state) = vmi_migration_state(vmi).filter(|s| s.migration_uid == uid) else {
        return false;
    };
    change(&mut state);
    set_vmi_migration_state(vmi, &state)
}

/// What the target node observes about its launcher pod on one pass (the VMI's
/// `migrationState` being this migration's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetObservation {
    /// The target guest exited: how (`None` while it runs, or without a guest).
    pub guest_exit: Option<String>,
    /// The target pod's phase is `Running`.
    pub pod_running: bool,
    /// This pod already listens for this migration (its target side has this uid).
    pub listening: bool,
    /// The guest already runs here (resumed and announced).
    pub resumed: bool,
}

/// What the target node does on this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetAction {
    /// The migration failed: end the target side.
    End,
    /// The target QEMU exited (`how`): the target pod fails ([`target_exit_reason`]), the
    /// source guest runs on.
    FailPod {
        /// How the QEMU exited.
        how: String,
    },
    /// Nothing yet.
    Wait,
    /// Listen for the incoming state and record where ([`record_target_listening`]).
    Listen,
    /// The state is across: resume the guest here, announce it ([`record_target_ready`]).
    Resume,
}

/// The target node's decision for one pass.
pub fn target_action(state: &MigrationState, obs: TargetObservation) -> TargetAction {
    if state.failed {
        return TargetAction::End;
    }
    if let Some(how) = obs.guest_exit {
        return TargetAction::FailPod { how };
    }
    if !obs.pod_running {
        return TargetAction::Wait;
    }
    if !obs.listening {
        return TargetAction::Listen;
    }
    if obs.resumed || !state.completed {
        return TargetAction::Wait;
    }
    TargetAction::Resume
}

/// The failed target pod's message: how its QEMU exited and its log.
pub fn target_exit_reason(how: &str, log: &str) -> String {
    format!("the migration target's QEMU exited ({how}) {}", log.trim())
}

/// The target listens at `address`: record it (target ready for the source).
pub fn record_target_listening(state: &mut MigrationState, address: SocketAddr) {
    state.target_node_address = address.ip().to_string();
    state.target_direct_migration_node_ports = [(address.port().to_string(), 0)].into();
    state.target_node_domain_detected = true;
}

/// The guest runs on the target since `now`.
pub fn record_target_ready(state: &mut MigrationState, now: &str) {
    state.target_node_domain_ready_timestamp = Some(now.into());
}

/// What the source node observes about its launcher pod on one pass (the VMI's
/// `migrationState` naming this pod as the source).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceObservation<'a> {
    /// The uid of the transfer this pod runs, if it runs one.
    pub running: Option<&'a str>,
    /// This pod finished the state's migration already (never started again).
    pub done: bool,
    /// A guest runs in the pod (none with `--no-guests`).
    pub has_guest: bool,
}

/// What the source node does on this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceAction {
    /// Nothing.
    Wait,
    /// No guest to transfer (`--no-guests`): the migration completes at once
    /// ([`complete_without_guest`]).
    CompleteWithoutGuest,
    /// Start the transfer to `target` ([`record_source_started`]).
    Start {
        /// The target node's migration proxy.
        target: SocketAddr,
    },
    /// Follow the running transfer: its progress and its end; `cancel` it first when an abort
    /// was asked for.
    Follow {
        /// `abortRequested`: cancel the transfer.
        cancel: bool,
    },
}

/// Why the target's address in a `migrationState` cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetAddressError {
    /// No `targetDirectMigrationNodePorts` entry with role 0, or its port does not parse.
    #[error("migrationState has no target port")]
    NoPort,
    /// `targetNodeAddress` is not an IP address.
    #[error("migrationState.targetNodeAddress: {0:?} is not an IP address")]
    BadAddress(String),
}

/// Where the source sends: `targetNodeAddress` and the main stream's (role 0) port.
pub fn target_address(state: &MigrationState) -> Result<SocketAddr, TargetAddressError> {
    let port = state
        .target_direct_migration_node_ports
        .iter()
        .find(|(_, role)| **role == 0)
        .and_then(|(port, _)| port.parse::<u16>().ok())
        .ok_or(TargetAddressError::NoPort)?;
    let ip: IpAddr = state
        .target_node_address
        .parse()
        .map_err(|_| TargetAddressError::BadAddress(state.target_node_address.clone()))?;
    Ok(SocketAddr::new(ip, port))
}

/// The source node's decision for one pass: start once the target is ready (not over, no
/// abort, not done before), follow a running transfer of this migration.
pub fn source_action(
    state: &MigrationState,
    obs: SourceObservation,
) -> Result<SourceAction, TargetAddressError> {
    if let Some(uid) = obs.running {
        if uid != state.migration_uid {
            return Ok(SourceAction::Wait);
        }
        return Ok(SourceAction::Follow {
            cancel: state.abort_requested,
        });
    }
    let startable =
        !state.is_final() && !state.abort_requested && !state.target_node_address.is_empty() && !obs.done;
    if !startable {
        return Ok(SourceAction::Wait);
    }
    if !obs.has_guest {
        return Ok(SourceAction::CompleteWithoutGuest);
    }
    Ok(SourceAction::Start {
        target: target_address(state)?,
    })
}

/// The source started sending at `now` (pre-copy).
pub fn record_source_started(state: &mut MigrationState, now: &str) {
    state.start_timestamp = Some(now.into());
    state.mode = MODE_PRE_COPY.into();
}

/// No guest to transfer (`--no-guests`): started and completed at `now`.
pub fn complete_without_guest(state: &mut MigrationState, now: &str) {
    record_source_started(state, now);
    state.end_timestamp = Some(now.into());
    state.completed = true;
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

/// The step of a migration whose target could not be created (`error`): Failed, nothing
/// else to do (no state was recorded, no pod exists).
pub fn target_creation_failed(error: String) -> MigrationStep {
    MigrationStep {
        phase: MigrationPhase::Failed,
        reason: Some(error),
        actions: MigrationActions::default(),
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
mod tests {
    use super::*;
    use MigrationPhase::*;

    #[test]
    fn the_source_end_sets_abort_status_only_for_an_abort() {
        let now = "2026-01-01T00:00:00Z";
        let failed = |aborted| SourceOutcome::Failed {
            reason: "boom".into(),
            aborted,
        };
        let mut done = MigrationState::default();
        end_source_state(&mut done, &SourceOutcome::Completed, now);
        assert!(done.completed && !done.failed);
        assert_eq!(done.end_timestamp.as_deref(), Some(now));
        assert_eq!(done.abort_status, "");

        let mut broken = MigrationState::default();
        end_source_state(&mut broken, &failed(false), now);
        assert!(broken.failed && !broken.completed);
        assert_eq!(broken.failure_reason, "boom");
        assert_eq!(broken.abort_status, "", "a broken transfer is not an abort");

        let mut cancelled = MigrationState::default();
        end_source_state(&mut cancelled, &failed(true), now);
        assert_eq!(cancelled.abort_status, "Succeeded");

        // An abort was asked for and the transfer then failed: the abort succeeded.
        let mut asked = MigrationState {
            abort_requested: true,
            ..Default::default()
        };
        end_source_state(&mut asked, &failed(false), now);
        assert_eq!(asked.abort_status, "Succeeded");
        assert!(asked.failed);
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn obs<'a>(
        phase: MigrationPhase,
        state: Option<&'a MigrationState>,
        pod: Option<&str>,
    ) -> MigrationObservation<'a> {
        MigrationObservation {
            phase: Some(phase),
            since: Some(at(0)),
            now: at(1),
            vmi_running: true,
            not_migratable: None,
            state,
            target_pod: pod.map(|p| TargetPod {
                phase: p.into(),
                message: "boom".into(),
            }),
            pending_timeout: SignedDuration::from_secs(30),
            completion_timeout: completion_timeout(256),
        }
    }

    /// Runs the machine until it stops moving, collecting the phases.
    fn walk(mut phase: MigrationPhase, state: &MigrationState, pod: &str) -> Vec<MigrationPhase> {
        let mut seen = vec![phase];
        loop {
            let step = migration_step(&obs(phase, Some(state), Some(pod)));
            if step.phase == phase {
                return seen;
            }
            phase = step.phase;
            seen.push(phase);
        }
    }

    #[test]
    fn a_new_migration_creates_its_target_in_its_first_pass() {
        let mut new = obs(Pending, None, None);
        new.phase = None;
        let step = migration_step(&new);
        assert_eq!(step.phase, Scheduling);
        assert!(step.actions.create_target);
        assert_eq!(phases_to(None, step.phase), vec![Pending, Scheduling]);
        let step = migration_step(&obs(Pending, None, None));
        assert_eq!(step.phase, Scheduling);
        assert!(step.actions.create_target);
    }

    #[test]
    fn a_pass_goes_as_far_as_observed_and_records_every_phase() {
        let mut state = MigrationState {
            migration_uid: "u".into(),
            ..Default::default()
        };
        assert_eq!(walk(Scheduling, &state, "Pending"), vec![Scheduling]);
        assert_eq!(
            walk(Scheduling, &state, "Running"),
            vec![Scheduling, PreparingTarget]
        );
        assert_eq!(
            phases_to(Some(Scheduling), PreparingTarget),
            vec![Scheduled, PreparingTarget]
        );
        state.target_node_address = "172.31.255.2".into();
        assert_eq!(
            walk(PreparingTarget, &state, "Running"),
            vec![PreparingTarget, TargetReady]
        );
        state.start_timestamp = Some("t".into());
        assert_eq!(walk(TargetReady, &state, "Running"), vec![TargetReady, Running]);
        // Completed on the source, the target guest not yet resumed: still Running.
        state.completed = true;
        assert_eq!(walk(Running, &state, "Running"), vec![Running]);
        state.target_node_domain_ready_timestamp = Some("t".into());
        let step = migration_step(&obs(Running, Some(&state), Some("Running")));
        assert_eq!(step.phase, Succeeded);
        assert!(step.actions.hand_over);
        // Everything at once: one pass, every phase recorded in order.
        assert_eq!(walk(Scheduling, &state, "Running"), vec![Scheduling, Succeeded]);
        assert_eq!(
            phases_to(Some(Scheduling), Succeeded),
            vec![Scheduled, PreparingTarget, TargetReady, Running, Succeeded]
        );
        let mut status = crate::api::MigrationStatus::default();
        assert!(record_phases(&mut status, Succeeded, "t0"));
        assert!(!record_phases(&mut status, Succeeded, "t1"));
        let recorded: Vec<&str> = status
            .phase_transition_timestamps
            .iter()
            .map(|t| t.phase.as_str())
            .collect();
        assert_eq!(
            recorded,
            [
                "Pending",
                "Scheduling",
                "Scheduled",
                "PreparingTarget",
                "TargetReady",
                "Running",
                "Succeeded"
            ]
        );
        // Failed straight from anywhere, once.
        assert_eq!(phases_to(Some(TargetReady), Failed), vec![Failed]);
        assert_eq!(phases_to(None, Failed), vec![Pending, Failed]);
        assert_eq!(phases_to(Some(Failed), Failed), Vec::<MigrationPhase>::new());
        // Final phases stay.
        assert_eq!(
            migration_step(&obs(Succeeded, Some(&state), None)).phase,
            Succeeded
        );
    }

    #[test]
    fn failures_keep_the_source_and_remove_the_target() {
        let state = MigrationState::default();
        let step = migration_step(&obs(Scheduling, Some(&state), Some("Failed")));
        assert_eq!(step.phase, Failed);
        assert_eq!(step.reason.as_deref(), Some("the target pod failed: boom"));
        assert!(step.actions.delete_target && step.actions.fail_state && !step.actions.abort_source);

        // Pending too long.
        let mut slow = obs(Scheduling, Some(&state), Some("Pending"));
        slow.now = at(31);
        let step = migration_step(&slow);
        assert_eq!(step.phase, Failed);
        assert!(step.reason.unwrap().contains("within 30s"));

        // The target gone mid-transfer: the source is asked to cancel.
        let started = MigrationState {
            start_timestamp: Some("t".into()),
            ..Default::default()
        };
        let step = migration_step(&obs(Running, Some(&started), None));
        assert_eq!(step.phase, Failed);
        assert!(step.actions.abort_source && !step.actions.fail_state && !step.actions.delete_target);

        // The source reported the failure.
        let reported = MigrationState {
            failed: true,
            failure_reason: "Unable to write to socket".into(),
            ..started.clone()
        };
        let step = migration_step(&obs(Running, Some(&reported), Some("Running")));
        assert_eq!(step.reason.as_deref(), Some("Unable to write to socket"));
        assert!(step.actions.delete_target && !step.actions.abort_source);
        // A Failed migration keeps deleting its target pod until it is gone.
        assert!(
            migration_step(&obs(Failed, Some(&reported), Some("Running")))
                .actions
                .delete_target
        );
        assert!(
            !migration_step(&obs(Failed, Some(&reported), None))
                .actions
                .delete_target
        );

        // Too slow a transfer.
        let mut stuck = obs(Running, Some(&started), Some("Running"));
        stuck.now = at(151);
        let step = migration_step(&stuck);
        assert_eq!(step.phase, Failed);
        assert!(step.actions.abort_source);

        // Not running / not migratable: failed before anything exists.
        let mut stopped = obs(Pending, None, None);
        stopped.vmi_running = false;
        assert_eq!(
            migration_step(&stopped).reason.as_deref(),
            Some("the VMI is not running")
        );
        let mut bridged = obs(Pending, None, None);
        bridged.not_migratable = Some("bridge on the pod network".into());
        let step = migration_step(&bridged);
        assert_eq!(step.phase, Failed);
        assert!(!step.actions.create_target);
    }

    #[test]
    fn a_deleted_migration_aborts() {
        let mut state = MigrationState::default();
        assert_eq!(
            orphaned_state_step(&state, true),
            OrphanedStateStep::AbortUnstarted
        );
        state.start_timestamp = Some("t".into());
        assert_eq!(orphaned_state_step(&state, true), OrphanedStateStep::RequestAbort);
        state.abort_requested = true;
        assert_eq!(orphaned_state_step(&state, true), OrphanedStateStep::Nothing);
        state.failed = true;
        assert_eq!(orphaned_state_step(&state, true), OrphanedStateStep::CleanUp);
        assert_eq!(orphaned_state_step(&state, false), OrphanedStateStep::Nothing);
        state.failed = false;
        state.completed = true;
        assert_eq!(orphaned_state_step(&state, true), OrphanedStateStep::Nothing);
    }

    #[test]
    fn timeouts() {
        assert_eq!(completion_timeout(256), SignedDuration::from_secs(150));
        assert_eq!(completion_timeout(4096), SignedDuration::from_secs(600));
        let mut vmim = VirtualMachineInstanceMigration::default();
        assert_eq!(pending_pod_timeout(&vmim), DEFAULT_PENDING_POD_TIMEOUT);
        vmim.metadata
            .annotations
            .insert(PENDING_POD_TIMEOUT_ANNOTATION.into(), "20".into());
        assert_eq!(pending_pod_timeout(&vmim), SignedDuration::from_secs(20));
    }

    #[test]
    fn phases_round_trip_and_are_recorded_once() {
        for phase in MigrationPhase::ALL {
            assert_eq!(MigrationPhase::parse(phase.as_str()), Some(phase));
        }
        let mut status = crate::api::MigrationStatus::default();
        assert!(record_phase(&mut status, Pending, "t0"));
        assert!(!record_phase(&mut status, Pending, "t1"));
        assert!(record_phase(&mut status, Scheduling, "t2"));
        assert_eq!(status.phase_transition_timestamps.len(), 2);
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["phaseTransitionTimestamps"][1]["phase"], "Scheduling");
        assert_eq!(
            json["phaseTransitionTimestamps"][1]["phaseTransitionTimestamp"],
            "t2"
        );
    }

    #[test]
    fn a_pass_is_recorded_once() {
        let state = MigrationState {
            migration_uid: "u".into(),
            ..Default::default()
        };
        let mut status = crate::api::MigrationStatus::default();
        // Nothing new: no change.
        assert!(record_migration(&mut status, Scheduling, None, None, "t0"));
        assert!(!record_migration(&mut status, Scheduling, None, None, "t1"));
        // The state is copied only when it differs.
        assert!(record_migration(
            &mut status,
            Scheduling,
            None,
            Some(&state),
            "t2"
        ));
        assert_eq!(status.migration_state.as_ref(), Some(&state));
        assert!(!record_migration(
            &mut status,
            Scheduling,
            None,
            Some(&state),
            "t3"
        ));
        // No state (gone, or another migration's): the copy stays.
        assert!(!record_migration(&mut status, Scheduling, None, None, "t4"));
        assert_eq!(status.migration_state.as_ref(), Some(&state));
        let newer = MigrationState {
            failed: true,
            ..state.clone()
        };
        assert!(record_migration(
            &mut status,
            Scheduling,
            None,
            Some(&newer),
            "t5"
        ));
        assert_eq!(status.migration_state.as_ref(), Some(&newer));
        // Failed: the condition once, with the first reason.
        assert!(record_migration(
            &mut status,
            Failed,
            Some("boom"),
            Some(&newer),
            "t6"
        ));
        assert!(!record_migration(
            &mut status,
            Failed,
            Some("again"),
            Some(&newer),
            "t7"
        ));
        let failed: Vec<_> = status.conditions.iter().filter(|c| c.type_ == "Failed").collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].message, "boom");
        assert_eq!(failed[0].reason, "MigrationFailed");
        assert_eq!(failed[0].status, "True");
        assert_eq!(failed[0].last_transition_time, Some("t6".into()));
        assert_eq!(status.phase, "Failed");
    }

    #[test]
    fn only_the_migrations_own_state_is_updated() {
        let mut vmi = VirtualMachineInstance::default();
        assert!(!update_vmi_migration_state(&mut vmi, "u", |s| s.failed = true));
        let state = MigrationState {
            migration_uid: "u".into(),
            ..Default::default()
        };
        assert!(set_vmi_migration_state(&mut vmi, &state));
        assert!(!update_vmi_migration_state(&mut vmi, "other", |s| s.failed = true));
        assert!(update_vmi_migration_state(&mut vmi, "u", |s| s.failed = true));
        assert!(vmi_migration_state(&vmi).unwrap().failed);
        assert!(!update_vmi_migration_state(&mut vmi, "u", |s| s.failed = true));
        let mut state = MigrationState::default();
        fail_state(&mut state, "boom", "t0");
        assert!(state.failed && state.is_final());
        assert_eq!(state.failure_reason, "boom");
        assert_eq!(state.end_timestamp.as_deref(), Some("t0"));
    }

    #[test]
    fn the_target_node_acts_on_what_it_observes() {
        let open = MigrationState::default();
        let completed = MigrationState {
            completed: true,
            ..Default::default()
        };
        let failed = MigrationState {
            failed: true,
            ..Default::default()
        };
        let seen = |exit: Option<&str>, running, listening, resumed| TargetObservation {
            guest_exit: exit.map(Into::into),
            pod_running: running,
            listening,
            resumed,
        };
        let fail = || TargetAction::FailPod {
            how: "signal 9".into(),
        };
        let cases = [
            // The migration failed: the target side ends, whatever else holds.
            (
                &failed,
                seen(Some("signal 9"), true, true, false),
                TargetAction::End,
            ),
            (&failed, seen(None, false, false, false), TargetAction::End),
            // The target QEMU exited: its pod fails, even before it runs.
            (&open, seen(Some("signal 9"), false, false, false), fail()),
            (&completed, seen(Some("signal 9"), true, true, true), fail()),
            // Not running yet.
            (&open, seen(None, false, false, false), TargetAction::Wait),
            (&completed, seen(None, false, true, false), TargetAction::Wait),
            // Running, no target side for this uid yet: listen.
            (&open, seen(None, true, false, false), TargetAction::Listen),
            (&completed, seen(None, true, false, false), TargetAction::Listen),
            // Listening: wait for the state, resume once.
            (&open, seen(None, true, true, false), TargetAction::Wait),
            (&completed, seen(None, true, true, false), TargetAction::Resume),
            (&completed, seen(None, true, true, true), TargetAction::Wait),
        ];
        for (state, obs, want) in cases {
            assert_eq!(target_action(state, obs.clone()), want, "{state:?} {obs:?}");
        }
        assert_eq!(
            target_exit_reason("exit status: 1", "  qemu: no such device\n"),
            "the migration target's QEMU exited (exit status: 1) qemu: no such device"
        );
        assert_eq!(
            target_exit_reason("signal 9", ""),
            "the migration target's QEMU exited (signal 9) "
        );
    }

    #[test]
    fn the_target_records_where_it_listens_and_when_it_runs() {
        let mut state = MigrationState::default();
        record_target_listening(&mut state, "172.31.255.2:40123".parse().unwrap());
        assert_eq!(state.target_node_address, "172.31.255.2");
        assert_eq!(
            state.target_direct_migration_node_ports,
            [("40123".to_string(), 0)].into()
        );
        assert!(state.target_node_domain_detected);
        assert_eq!(target_address(&state), Ok("172.31.255.2:40123".parse().unwrap()));
        // No guest (`--no-guests`): port 0, the address still says "ready".
        let mut bare = MigrationState::default();
        record_target_listening(&mut bare, "172.31.255.3:0".parse().unwrap());
        assert_eq!(
            bare.target_direct_migration_node_ports,
            [("0".to_string(), 0)].into()
        );
        assert!(bare.target_node_domain_ready_timestamp.is_none());
        record_target_ready(&mut bare, "t0");
        assert_eq!(bare.target_node_domain_ready_timestamp.as_deref(), Some("t0"));
    }

    #[test]
    fn the_target_address_needs_a_main_port_and_an_ip() {
        let state = |address: &str, ports: &[(&str, u16)]| MigrationState {
            target_node_address: address.into(),
            target_direct_migration_node_ports: ports.iter().map(|(p, r)| (p.to_string(), *r)).collect(),
            ..Default::default()
        };
        let cases: [(MigrationState, Result<SocketAddr, TargetAddressError>); 6] = [
            (
                state("10.0.0.2", &[("4000", 0)]),
                Ok("10.0.0.2:4000".parse().unwrap()),
            ),
            (
                state("fd00::2", &[("4001", 1), ("4000", 0)]),
                Ok("[fd00::2]:4000".parse().unwrap()),
            ),
            (state("10.0.0.2", &[]), Err(TargetAddressError::NoPort)),
            (state("10.0.0.2", &[("4001", 1)]), Err(TargetAddressError::NoPort)),
            (state("10.0.0.2", &[("http", 0)]), Err(TargetAddressError::NoPort)),
            (
                state("node-b", &[("4000", 0)]),
                Err(TargetAddressError::BadAddress("node-b".into())),
            ),
        ];
        for (state, want) in cases {
            assert_eq!(target_address(&state), want, "{state:?}");
        }
        assert_eq!(
            TargetAddressError::NoPort.to_string(),
            "migrationState has no target port"
        );
    }

    #[test]
    fn the_source_node_acts_on_what_it_observes() {
        let ready = MigrationState {
            migration_uid: "u".into(),
            target_node_address: "10.0.0.2".into(),
            target_direct_migration_node_ports: [("4000".to_string(), 0)].into(),
            ..Default::default()
        };
        let preparing = MigrationState {
            target_node_address: String::new(),
            ..ready.clone()
        };
        let aborting = MigrationState {
            abort_requested: true,
            ..ready.clone()
        };
        let over = MigrationState {
            failed: true,
            ..ready.clone()
        };
        let no_port = MigrationState {
            target_direct_migration_node_ports: Default::default(),
            ..ready.clone()
        };
        let seen = |running, done, has_guest| SourceObservation {
            running,
            done,
            has_guest,
        };
        let start = Ok(SourceAction::Start {
            target: "10.0.0.2:4000".parse().unwrap(),
        });
        let cases = [
            // Nothing running: start once the target is ready.
            (&ready, seen(None, false, true), start),
            (
                &ready,
                seen(None, false, false),
                Ok(SourceAction::CompleteWithoutGuest),
            ),
            (&preparing, seen(None, false, true), Ok(SourceAction::Wait)),
            (&aborting, seen(None, false, true), Ok(SourceAction::Wait)),
            (&over, seen(None, false, true), Ok(SourceAction::Wait)),
            (&ready, seen(None, true, true), Ok(SourceAction::Wait)),
            (&no_port, seen(None, false, true), Err(TargetAddressError::NoPort)),
            // Without a guest the port is not needed.
            (
                &no_port,
                seen(None, false, false),
                Ok(SourceAction::CompleteWithoutGuest),
            ),
            // Running: follow it, cancelling on an abort; another migration's transfer waits.
            (
                &ready,
                seen(Some("u"), false, true),
                Ok(SourceAction::Follow { cancel: false }),
            ),
            (
                &aborting,
                seen(Some("u"), false, true),
                Ok(SourceAction::Follow { cancel: true }),
            ),
            (
                &over,
                seen(Some("u"), false, true),
                Ok(SourceAction::Follow { cancel: false }),
            ),
            (&aborting, seen(Some("old"), false, true), Ok(SourceAction::Wait)),
        ];
        for (state, obs, want) in cases {
            assert_eq!(source_action(state, obs.clone()), want, "{state:?} {obs:?}");
        }
    }

    #[test]
    fn the_source_records_its_start() {
        let mut started = MigrationState::default();
        record_source_started(&mut started, "t0");
        assert_eq!(started.start_timestamp.as_deref(), Some("t0"));
        assert_eq!(started.mode, MODE_PRE_COPY);
        assert!(!started.is_final() && started.end_timestamp.is_none());
        let mut bare = MigrationState::default();
        complete_without_guest(&mut bare, "t1");
        assert_eq!(bare.start_timestamp.as_deref(), Some("t1"));
        assert_eq!(bare.end_timestamp.as_deref(), Some("t1"));
        assert_eq!(bare.mode, MODE_PRE_COPY);
        assert!(bare.completed && !bare.failed);
    }

    fn migration(
        uid: &str,
        phase: &str,
        created: Option<&str>,
        rv: Option<&str>,
    ) -> VirtualMachineInstanceMigration {
        let mut m = VirtualMachineInstanceMigration::default();
        m.metadata.uid = Some(uid.into());
        m.metadata.creation_timestamp = created.map(Into::into);
        m.metadata.resource_version = rv.map(Into::into);
        if !phase.is_empty() {
            m.status = Some(MigrationStatus {
                phase: phase.into(),
                ..Default::default()
            });
        }
        m
    }

    fn uids(migrations: &[VirtualMachineInstanceMigration]) -> Vec<&str> {
        migrations
            .iter()
            .filter_map(|m| m.metadata.uid.as_deref())
            .collect()
    }

    /// Migrations by uid and phase.
    type Phases<'a> = &'a [(&'a str, &'a str)];

    #[test]
    fn migrations_are_driven_oldest_first_one_at_a_time() {
        let mut all = vec![
            migration("c", "", Some("2026-01-01T00:00:02Z"), Some("5")),
            migration("b", "Running", Some("2026-01-01T00:00:01Z"), Some("12")),
            migration("a", "Succeeded", Some("2026-01-01T00:00:01Z"), Some("9")),
            migration("z", "Pending", None, Some("bogus")),
        ];
        sort_migrations(&mut all);
        // No timestamp first; same second: by numeric resourceVersion (9 before 12).
        assert_eq!(uids(&all), ["z", "a", "b", "c"]);
        assert_eq!(migration_phase(&all[0]), Some(Pending));
        assert_eq!(migration_phase(&all[3]), None);
        assert_eq!(
            driven_migration(&all).and_then(|m| m.metadata.uid.as_deref()),
            Some("z")
        );
        let cases: [(Phases, Option<&str>); 5] = [
            (&[], None),
            (&[("a", "Succeeded"), ("b", "Failed")], None),
            (&[("a", "Succeeded"), ("b", "Running"), ("c", "")], Some("b")),
            (&[("a", "Failed"), ("c", "")], Some("c")),
            (&[("a", "Whatever")], Some("a")),
        ];
        for (phases, want) in cases {
            let all: Vec<_> = phases.iter().map(|(u, p)| migration(u, p, None, None)).collect();
            assert_eq!(
                driven_migration(&all).and_then(|m| m.metadata.uid.as_deref()),
                want,
                "{phases:?}"
            );
        }
        let all: Vec<_> = [
            ("a", "Failed"),
            ("b", "Succeeded"),
            ("c", "Failed"),
            ("d", "Running"),
        ]
        .iter()
        .map(|(u, p)| migration(u, p, None, None))
        .collect();
        assert_eq!(failed_migration_uids(&all), ["a", "c"]);
    }

    #[test]
    fn a_state_is_orphaned_when_its_migration_object_is_gone() {
        let all = vec![migration("a", "Running", None, None)];
        let own = MigrationState {
            migration_uid: "a".into(),
            ..Default::default()
        };
        let gone = MigrationState {
            migration_uid: "b".into(),
            ..Default::default()
        };
        assert_eq!(orphaned_state(Some(&own), &all), None);
        assert_eq!(orphaned_state(Some(&gone), &all), Some(&gone));
        assert_eq!(orphaned_state(Some(&own), &[]), Some(&own));
        assert_eq!(orphaned_state(None, &all), None);
    }

    #[test]
    fn an_unstarted_abort_fails_the_state_and_succeeds() {
        let mut state = MigrationState {
            migration_uid: "u".into(),
            ..Default::default()
        };
        abort_unstarted(&mut state, "t0");
        assert!(state.abort_requested && state.failed && !state.completed);
        assert_eq!(state.abort_status, "Succeeded");
        assert_eq!(state.failure_reason, "aborted: the migration object was deleted");
        assert_eq!(state.end_timestamp.as_deref(), Some("t0"));
        assert!(state.start_timestamp.is_none());
    }

    #[test]
    fn a_step_changes_the_state_for_an_abort_or_a_failure() {
        let step = |abort_source, fail_state| MigrationStep {
            phase: Failed,
            reason: Some("boom".into()),
            actions: MigrationActions {
                abort_source,
                fail_state,
                ..Default::default()
            },
        };
        let cases = [
            (false, false, false, false),
            (true, false, true, false),
            (false, true, false, true),
            (true, true, true, true),
        ];
        for (abort, fail, want_abort, want_fail) in cases {
            let step = step(abort, fail);
            assert_eq!(step.actions.changes_state(), abort || fail);
            let mut state = MigrationState::default();
            step_state_change(&mut state, &step, "t0");
            assert_eq!(state.abort_requested, want_abort, "{abort} {fail}");
            assert_eq!(state.failed, want_fail, "{abort} {fail}");
            if want_fail {
                assert_eq!(state.failure_reason, "boom");
                assert_eq!(state.end_timestamp.as_deref(), Some("t0"));
            } else {
                assert_eq!(
                    state,
                    MigrationState {
                        abort_requested: want_abort,
                        ..Default::default()
                    }
                );
            }
        }
        // A failure without a reason fails with an empty one.
        let mut state = MigrationState::default();
        let mut quiet = step(false, true);
        quiet.reason = None;
        step_state_change(&mut state, &quiet, "t1");
        assert!(state.failed && state.failure_reason.is_empty());
        // The target could not be created: Failed with the error, nothing to undo.
        let failed = target_creation_failed("no node to migrate to".into());
        assert_eq!(failed.phase, Failed);
        assert_eq!(failed.reason.as_deref(), Some("no node to migrate to"));
        assert_eq!(failed.actions, MigrationActions::default());
        assert!(!failed.actions.changes_state());
    }

    #[test]
    fn the_hand_over_moves_the_vmi_and_drops_migration_required() {
        let condition = |type_: &str| Condition {
            type_: type_.into(),
            status: "True".into(),
            ..Default::default()
        };
        let mut status = VmiStatus {
            node_name: "node-a".into(),
            conditions: vec![
                condition("Ready"),
                condition(crate::migration::MIGRATION_REQUIRED),
            ],
            ..Default::default()
        };
        assert!(hand_over_status(&mut status, "node-b"));
        assert_eq!(status.node_name, "node-b");
        assert_eq!(status.conditions, vec![condition("Ready")]);
        assert!(!hand_over_status(&mut status, "node-b"));
        // Only the condition left to drop: still a change.
        status
            .conditions
            .push(condition(crate::migration::MIGRATION_REQUIRED));
        assert!(hand_over_status(&mut status, "node-b"));
        assert_eq!(status.conditions, vec![condition("Ready")]);
    }
}
