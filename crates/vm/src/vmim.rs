//! The `VirtualMachineInstanceMigration` phase machine: from what the controller observes (the
//! VMI's `status.migrationState`, the target pod, the clock) to the next phase and what the
//! controller does. Pure: the controller applies the [`MigrationStep`].
//!
//! Each pass moves at most one phase forward along KubeVirt's sequence (Pending, Scheduling,
//! Scheduled, PreparingTarget, TargetReady, Running, Succeeded), so every phase appears in
//! `phaseTransitionTimestamps`; `Failed` is reached from any phase.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use crate::api::{
    Condition, MigrationState, MigrationStatus, VirtualMachineInstance, VirtualMachineInstanceMigration,
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
}
