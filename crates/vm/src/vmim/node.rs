//! The node agents' side of a migration: [`target_action`] on the target node,
//! [`source_action`] on the source, and the `migrationState` changes each writes
//! (`record_*`, [`end_source_state`]). Pure: the agents apply them.

use std::net::{IpAddr, SocketAddr};

use crate::api::{MigrationState, VirtualMachineInstance};

use super::{MODE_PRE_COPY, fail_state, set_vmi_migration_state, vmi_migration_state};

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
