//! VM and VMI lifecycle status as decisions: whether a VM wants to run, its
//! `printableStatus`/`ready`, a VMI's phase from its launcher pod, the `Ready` condition and a
//! `Failed` VMI. The controller and the node agent only write what these return.

use serde_json::Value;

use crate::api::{Condition, Extra, VirtualMachine, VirtualMachineInstance, VmiStatus};

/// VMI condition type saying whether the guest is ready.
pub const READY: &str = "Ready";

/// Whether a VM wants to run: its `runStrategy` (`Always`, `RerunOnFailure`, `Once`), else
/// the deprecated `running` flag.
pub fn wants_running(vm: &VirtualMachine) -> bool {
    match vm.spec.run_strategy.as_deref() {
        Some("Always") | Some("RerunOnFailure") | Some("Once") => true,
        Some(_) => false,
        None => vm.spec.running.unwrap_or(false),
    }
}

/// A VM's `status.printableStatus` (the subset weft reports): `Running` when it wants to run
/// and its VMI runs, `Starting` while it wants to and the VMI is not there yet, `Stopping`
/// while it does not want to and a VMI still exists, else `Stopped`.
pub fn vm_printable_status(wants_running: bool, vmi_phase: Option<&str>) -> &'static str {
    match (wants_running, vmi_phase) {
        (true, Some("Running")) => "Running",
        (true, _) => "Starting",
        (false, Some(_)) => "Stopping",
        (false, None) => "Stopped",
    }
}

/// What the VM controller does with a VM's VMI in one pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum VmAction<'a> {
    /// Create the VMI from the template (after admission).
    CreateVmi,
    /// Delete this VMI: the VM does not want to run.
    DeleteVmi(&'a VirtualMachineInstance),
    /// Carry template changes to this running VMI (hot-plug, unplug, link state).
    SyncVmi(&'a VirtualMachineInstance),
    /// Nothing: stopped and no VMI, or its deletion is under way.
    Nothing,
}

/// The pass for VM `vm` whose VMI of the same name is `vmi` (`None`: none exists).
pub fn vm_action<'a>(vm: &VirtualMachine, vmi: Option<&'a VirtualMachineInstance>) -> VmAction<'a> {
    match (wants_running(vm), vmi) {
        (true, None) => VmAction::CreateVmi,
        (false, Some(vmi)) if vmi.metadata.deletion_timestamp.is_none() => VmAction::DeleteVmi(vmi),
        // A VMI being deleted while the VM wants to run again: synced until it is gone, then
        // created anew (KubeVirt waits for the old one the same way).
        (true, Some(vmi)) => VmAction::SyncVmi(vmi),
        (false, _) => VmAction::Nothing,
    }
}

/// The VM status fields the controller owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmStatusUpdate {
    /// `status.printableStatus`.
    pub printable_status: &'static str,
    /// `status.ready`: the VMI runs.
    pub ready: bool,
}

impl VmStatusUpdate {
    /// Write the fields into a VM's (JSON) status.
    pub fn apply(&self, status: &mut Extra) {
        status.insert(
            "printableStatus".into(),
            Value::String(self.printable_status.into()),
        );
        status.insert("ready".into(), Value::Bool(self.ready));
    }
}

/// The VM status to write given its VMI as it was when the reconcile started (`None`: no VMI
/// of that name), or `None` when the VM's status already says so (no write).
pub fn plan_vm_status(vm: &VirtualMachine, vmi: Option<&VirtualMachineInstance>) -> Option<VmStatusUpdate> {
    let phase = vmi.map(|v| v.status.as_ref().map(|s| s.phase.as_str()).unwrap_or(""));
    let printable_status = vm_printable_status(wants_running(vm), phase);
    let update = VmStatusUpdate {
        printable_status,
        ready: printable_status == "Running",
    };
    let status = vm.status.as_ref();
    let current = (
        status
            .and_then(|s| s.get("printableStatus"))
            .and_then(Value::as_str),
        status.and_then(|s| s.get("ready")).and_then(Value::as_bool),
    );
    (current != (Some(update.printable_status), Some(update.ready))).then_some(update)
}

/// A VMI's phase while its launcher pod is in `pod_phase`: the pod's terminal and running
/// phases, else `Scheduled` (the pod exists on its node and is starting).
pub fn vmi_phase_from_pod(pod_phase: &str) -> &'static str {
    match pod_phase {
        "Running" => "Running",
        "Failed" => "Failed",
        "Succeeded" => "Succeeded",
        _ => "Scheduled",
    }
}

/// Set the `Ready` condition to `ready` (a changed status gets `now` as its transition time;
/// reason and message are left as they are). Returns whether `conditions` changed.
pub fn set_ready_condition(conditions: &mut Vec<Condition>, ready: bool, now: &str) -> bool {
    let wanted = if ready { "True" } else { "False" };
    match conditions.iter_mut().find(|c| c.type_ == READY) {
        Some(c) if c.status == wanted => false,
        Some(c) => {
            c.status = wanted.into();
            c.last_transition_time = Some(Value::String(now.into()));
            true
        }
        None => {
            conditions.push(Condition {
                type_: READY.into(),
                status: wanted.into(),
                last_transition_time: Some(Value::String(now.into())),
                ..Default::default()
            });
            true
        }
    }
}

/// Mark a VMI `Failed` because of `reason` (kept in `status.reason`). With `ready_reason`
/// (a machine-readable code) the `Ready` condition becomes `False` with that reason and
/// `reason` as its message, at `now`. Returns whether the status changed.
pub fn mark_vmi_failed(status: &mut VmiStatus, reason: &str, ready_reason: Option<&str>, now: &str) -> bool {
    let before = status.clone();
    status.phase = "Failed".into();
    status.extra.insert("reason".into(), Value::String(reason.into()));
    if let Some(code) = ready_reason {
        let keep = status
            .conditions
            .iter()
            .any(|c| c.type_ == READY && c.status == "False" && c.reason == code && c.message == reason);
        if !keep {
            status.conditions.retain(|c| c.type_ != READY);
            status.conditions.push(Condition {
                type_: READY.into(),
                status: "False".into(),
                reason: code.into(),
                message: reason.into(),
                last_transition_time: Some(Value::String(now.into())),
                ..Default::default()
            });
        }
    }
    *status != before
}

/// What [`set_vmi_waiting`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitingUpdate {
    /// The status changed (write it).
    pub changed: bool,
    /// The `Synchronized` condition now says why the VMI waits, and did not before (record
    /// the `FailedCreate` Event once).
    pub newly_blocked: bool,
}

/// A VMI without a launcher pod: its `Synchronized` condition becomes `blocked` (why it cannot
/// get one yet, e.g. [`crate::admission::missing_nad_condition`]; `None` removes it), and a
/// blocked VMI waits in `Pending`.
pub fn set_vmi_waiting(status: &mut VmiStatus, blocked: Option<Condition>, now: &str) -> WaitingUpdate {
    let waiting = blocked.is_some();
    let mut changed = crate::admission::replace_condition(
        &mut status.conditions,
        crate::admission::decision::SYNCHRONIZED,
        blocked,
        now,
    );
    let newly_blocked = changed && waiting;
    if waiting && status.phase != "Pending" {
        status.phase = "Pending".into();
        changed = true;
    }
    WaitingUpdate {
        changed,
        newly_blocked,
    }
}

/// The launcher pod of a VMI was just created: `Scheduling` until the pod reports. Returns
/// whether the status changed.
pub fn set_vmi_scheduling(status: &mut VmiStatus) -> bool {
    let changed = status.phase != "Scheduling";
    status.phase = "Scheduling".into();
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_vm_pass_creates_deletes_or_syncs_its_vmi() {
        let running = vm(json!({"running": true}), json!({}));
        let stopped = vm(json!({"runStrategy": "Halted"}), json!({}));
        let live = vmi("Running");
        let mut going = vmi("Running");
        going.metadata.deletion_timestamp = Some("2026-01-01T00:00:00Z".into());
        assert_eq!(vm_action(&running, None), VmAction::CreateVmi);
        assert_eq!(vm_action(&running, Some(&live)), VmAction::SyncVmi(&live));
        assert_eq!(vm_action(&running, Some(&going)), VmAction::SyncVmi(&going));
        assert_eq!(vm_action(&stopped, Some(&live)), VmAction::DeleteVmi(&live));
        assert_eq!(
            vm_action(&stopped, Some(&going)),
            VmAction::Nothing,
            "deleted once"
        );
        assert_eq!(vm_action(&stopped, None), VmAction::Nothing);
    }

    fn vm(spec: Value, status: Value) -> VirtualMachine {
        serde_json::from_value(json!({"metadata": {"name": "vm", "namespace": "ns"},
            "spec": spec, "status": status}))
        .unwrap()
    }

    fn vmi(phase: &str) -> VirtualMachineInstance {
        serde_json::from_value(json!({"metadata": {"name": "vm", "namespace": "ns"},
            "status": {"phase": phase}}))
        .unwrap()
    }

    #[test]
    fn run_strategy_wins_over_running_and_unknown_strategies_do_not_run() {
        for (spec, want) in [
            (json!({}), false),
            (json!({"running": true}), true),
            (json!({"running": false}), false),
            (json!({"runStrategy": "Always", "running": false}), true),
            (json!({"runStrategy": "RerunOnFailure"}), true),
            (json!({"runStrategy": "Once"}), true),
            (json!({"runStrategy": "Halted", "running": true}), false),
            (json!({"runStrategy": "Manual"}), false),
        ] {
            assert_eq!(wants_running(&vm(spec.clone(), json!({}))), want, "{spec}");
        }
    }

    /// Every (wants running, VMI phase) pair: the printable status table.
    #[test]
    fn printable_status_vectors() {
        let phases = [
            None,
            Some(""),
            Some("Pending"),
            Some("Scheduling"),
            Some("Scheduled"),
            Some("Running"),
            Some("Failed"),
        ];
        for phase in phases {
            let want_on = if phase == Some("Running") {
                "Running"
            } else {
                "Starting"
            };
            assert_eq!(vm_printable_status(true, phase), want_on, "{phase:?}");
            let want_off = if phase.is_some() { "Stopping" } else { "Stopped" };
            assert_eq!(vm_printable_status(false, phase), want_off, "{phase:?}");
        }
    }

    #[test]
    fn vm_status_is_written_only_when_it_changes() {
        let on = json!({"runStrategy": "Always"});
        // New VM, no VMI yet: Starting.
        let plan = plan_vm_status(&vm(on.clone(), Value::Null), None).unwrap();
        assert_eq!(
            plan,
            VmStatusUpdate {
                printable_status: "Starting",
                ready: false
            }
        );
        // Already says so: nothing to write.
        let starting = vm(on.clone(), json!({"printableStatus": "Starting", "ready": false}));
        assert_eq!(plan_vm_status(&starting, Some(&vmi("Scheduled"))), None);
        // The VMI runs: Running and ready.
        let plan = plan_vm_status(&starting, Some(&vmi("Running"))).unwrap();
        assert_eq!(
            plan,
            VmStatusUpdate {
                printable_status: "Running",
                ready: true
            }
        );
        let mut status = starting.status.clone().unwrap();
        plan.apply(&mut status);
        let running = vm(on, Value::Object(status));
        assert_eq!(plan_vm_status(&running, Some(&vmi("Running"))), None);
        // Stopped with the VMI still there, then gone.
        let off = vm(
            json!({"runStrategy": "Halted"}),
            json!({"printableStatus": "Running", "ready": true}),
        );
        assert_eq!(
            plan_vm_status(&off, Some(&vmi("Running"))).map(|p| p.printable_status),
            Some("Stopping")
        );
        assert_eq!(
            plan_vm_status(&off, None).map(|p| (p.printable_status, p.ready)),
            Some(("Stopped", false))
        );
        // A status with the right printable status but no `ready` gets it written.
        let partial = vm(
            json!({"runStrategy": "Halted"}),
            json!({"printableStatus": "Stopped"}),
        );
        assert!(plan_vm_status(&partial, None).is_some());
    }

    #[test]
    fn vmi_phase_follows_the_pod() {
        for (pod, want) in [
            ("", "Scheduled"),
            ("Pending", "Scheduled"),
            ("Running", "Running"),
            ("Failed", "Failed"),
            ("Succeeded", "Succeeded"),
            ("Unknown", "Scheduled"),
        ] {
            assert_eq!(vmi_phase_from_pod(pod), want, "{pod}");
        }
    }

    #[test]
    fn ready_condition_transitions_keep_their_time_until_the_status_changes() {
        let mut conditions = Vec::new();
        assert!(set_ready_condition(&mut conditions, false, "t1"));
        assert_eq!(conditions[0].status, "False");
        assert!(!set_ready_condition(&mut conditions, false, "t2"));
        assert_eq!(conditions[0].last_transition_time, Some(json!("t1")));
        assert!(set_ready_condition(&mut conditions, true, "t3"));
        assert_eq!((conditions.len(), conditions[0].status.as_str()), (1, "True"));
        assert_eq!(conditions[0].last_transition_time, Some(json!("t3")));
    }

    #[test]
    fn a_failed_vmi_says_why_once() {
        let mut status = VmiStatus {
            phase: "Running".into(),
            ..Default::default()
        };
        set_ready_condition(&mut status.conditions, true, "t0");
        assert!(mark_vmi_failed(
            &mut status,
            "launcher lost",
            Some("LauncherLost"),
            "t1"
        ));
        assert_eq!(status.phase, "Failed");
        assert_eq!(status.extra["reason"], json!("launcher lost"));
        let ready: Vec<_> = status.conditions.iter().filter(|c| c.type_ == READY).collect();
        assert_eq!(ready.len(), 1);
        assert_eq!(
            (ready[0].status.as_str(), ready[0].reason.as_str()),
            ("False", "LauncherLost")
        );
        // The same failure again changes nothing (its time included).
        assert!(!mark_vmi_failed(
            &mut status,
            "launcher lost",
            Some("LauncherLost"),
            "t2"
        ));
        // Without a Ready reason only the phase and reason are set.
        let mut other = VmiStatus::default();
        assert!(mark_vmi_failed(&mut other, "bad spec", None, "t1"));
        assert!(other.conditions.is_empty());
    }

    #[test]
    fn a_blocked_vmi_waits_in_pending_and_is_announced_once() {
        let blocked = Condition {
            type_: crate::admission::decision::SYNCHRONIZED.into(),
            status: "False".into(),
            reason: "FailedCreate".into(),
            message: "NAD ns/blue does not exist".into(),
            ..Default::default()
        };
        let mut status = VmiStatus::default();
        // Nothing blocks a fresh VMI: nothing to write.
        assert_eq!(set_vmi_waiting(&mut status, None, "t0"), WaitingUpdate::default());
        let first = set_vmi_waiting(&mut status, Some(blocked.clone()), "t1");
        assert_eq!(
            first,
            WaitingUpdate {
                changed: true,
                newly_blocked: true
            }
        );
        assert_eq!(status.phase, "Pending");
        // Still blocked the same way: no write, no second Event.
        assert_eq!(
            set_vmi_waiting(&mut status, Some(blocked), "t2"),
            WaitingUpdate::default()
        );
        // Unblocked: the condition goes, then the pod is created.
        assert_eq!(
            set_vmi_waiting(&mut status, None, "t3"),
            WaitingUpdate {
                changed: true,
                newly_blocked: false
            }
        );
        assert!(status.conditions.is_empty());
        assert!(set_vmi_scheduling(&mut status));
        assert_eq!(status.phase, "Scheduling");
        assert!(!set_vmi_scheduling(&mut status));
    }
}
