use std::net::SocketAddr;

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
    // The target could not be created: Failed with the error; a state already recorded for
    // it is marked failed, no pod to delete.
    let failed = target_creation_failed("no node to migrate to".into());
    assert_eq!(failed.phase, Failed);
    assert_eq!(failed.reason.as_deref(), Some("no node to migrate to"));
    assert_eq!(
        failed.actions,
        MigrationActions {
            fail_state: true,
            ..Default::default()
        }
    );
    assert!(failed.actions.changes_state());
    let mut written = MigrationState::default();
    step_state_change(&mut written, &failed, "t2");
    assert!(written.failed && written.failure_reason == "no node to migrate to");
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
