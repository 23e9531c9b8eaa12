//! One controller sync of a VMI that has a launcher pod, as a single decision: the VMI's
//! phase and node, the new `status.interfaces`, the pod annotations to patch, and the
//! `MigrationRequired` condition. The controller computes it once per reconcile and applies
//! it with [`VmiSyncPlan::apply`].

use jiff::Timestamp;

use crate::annotations::{Annotations, running_pod_annotations};
use crate::api::{InterfaceStatus, VirtualMachineInstance, VmiStatus};
use crate::config::ClusterConfig;
use crate::migration::{
    ConditionUpdate, MIGRATION_REQUIRED, evaluate_migration, migration_condition_update,
    migration_required_condition,
};
use crate::netstatus::network_statuses;
use crate::status::controller_status_interfaces;
use crate::status::lifecycle::vmi_phase_from_pod;

/// What the launcher pod looks like to the controller.
#[derive(Clone, Copy, Debug)]
pub struct PodView<'a> {
    /// The pod's annotations (network-status, networks).
    pub annotations: &'a Annotations,
    /// The pod is running and ready (annotations are only patched then).
    pub ready: bool,
    /// The pod's `status.phase`.
    pub phase: &'a str,
    /// The node the pod runs on (`spec.nodeName`).
    pub node: &'a str,
}

/// The decisions of one sync.
#[derive(Clone, Debug, PartialEq)]
pub struct VmiSyncPlan {
    /// The VMI's `status.phase` ([`vmi_phase_from_pod`]).
    pub phase: &'static str,
    /// The VMI's `status.nodeName`: the pod's node.
    pub node_name: String,
    /// The new `status.interfaces` (write when different from the current one).
    pub status_interfaces: Vec<InterfaceStatus>,
    /// Pod annotations to set (empty: nothing to patch).
    pub pod_annotations: Annotations,
    /// What to do with the `MigrationRequired` condition.
    pub migration_condition: ConditionUpdate,
}

/// Plan one controller sync of a VMI with a launcher pod. The migration condition is
/// evaluated on the VMI as this sync leaves it (its new phase and interfaces, as KubeVirt's
/// VMI controller evaluates its updated copy), when that is `Running` and not migrating
/// (`migrating` says whether it is): a VMI that starts running gets its condition in the same
/// write.
pub fn plan_vmi_sync(
    vmi: &VirtualMachineInstance,
    pod: PodView<'_>,
    migrating: bool,
    config: &ClusterConfig,
    now: Timestamp,
) -> VmiSyncPlan {
    let statuses = network_statuses(pod.annotations);
    let status_interfaces =
        controller_status_interfaces(&vmi.spec.networks, vmi.status_interfaces(), &statuses);
    let pod_annotations = if pod.ready {
        running_pod_annotations(vmi, pod.annotations, config)
    } else {
        Annotations::new()
    };
    let phase = vmi_phase_from_pod(pod.phase);
    let migration_condition = if phase == "Running" && !migrating {
        let mut next = vmi.clone();
        let status = next.status.get_or_insert_with(Default::default);
        status.phase = phase.into();
        status.interfaces.clone_from(&status_interfaces);
        let existing = migration_required_condition(&next);
        let result = evaluate_migration(&next, &statuses, existing, now);
        migration_condition_update(existing, result, now)
    } else {
        ConditionUpdate::Keep
    };
    VmiSyncPlan {
        phase,
        node_name: pod.node.to_string(),
        status_interfaces,
        pod_annotations,
        migration_condition,
    }
}

impl VmiSyncPlan {
    /// Write the plan's status part (phase, node, interfaces, `MigrationRequired`) into a
    /// VMI's status; returns whether it changed (whether to write).
    pub fn apply(&self, status: &mut VmiStatus) -> bool {
        let before = status.clone();
        status.phase = self.phase.into();
        status.node_name.clone_from(&self.node_name);
        status.interfaces.clone_from(&self.status_interfaces);
        match &self.migration_condition {
            ConditionUpdate::Keep => {}
            ConditionUpdate::Remove => status.conditions.retain(|c| c.type_ != MIGRATION_REQUIRED),
            ConditionUpdate::Set(condition) => {
                status.conditions.retain(|c| c.type_ != MIGRATION_REQUIRED);
                status.conditions.push((**condition).clone());
            }
        }
        *status != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hotplug_without_dynamic_networks_controller() {
        let vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}}, {"name": "sec", "bridge": {}}]}},
                "networks": [{"name": "default", "pod": {}}, {"name": "sec", "multus": {"networkName": "nad"}}]},
            "status": {"phase": "Running", "interfaces": [{"name": "default", "infoSource": "domain"}]}
        }))
        .unwrap();
        let mut annotations = Annotations::new();
        annotations.insert(
            weft_netconf::NETWORK_STATUS_ANNOTATION.into(),
            r#"[{"name":"k8s-pod-network","interface":"eth0","default":true,"dns":{}}]"#.into(),
        );
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let pod = PodView {
            annotations: &annotations,
            ready: true,
            phase: "Running",
            node: "n1",
        };
        let plan = plan_vmi_sync(&vmi, pod, false, &ClusterConfig::default(), now);
        assert_eq!(plan.status_interfaces[0].pod_interface_name, "eth0");
        assert_eq!(
            plan.pod_annotations[weft_netconf::NETWORKS_ANNOTATION],
            r#"[{"name":"nad","namespace":"ns","interface":"pod4e6ef8e2e3a"}]"#
                .replace("pod4e6ef8e2e3a", &crate::names::hashed_pod_interface_name("sec"))
        );
        let ConditionUpdate::Set(condition) = &plan.migration_condition else {
            panic!("expected a pending condition");
        };
        assert_eq!(condition.status, "False");

        let plan = plan_vmi_sync(&vmi, pod, true, &ClusterConfig::default(), now);
        assert_eq!(plan.migration_condition, ConditionUpdate::Keep);
        let not_ready = PodView {
            annotations: &annotations,
            ready: false,
            phase: "Pending",
            node: "n1",
        };
        assert!(
            plan_vmi_sync(&vmi, not_ready, false, &ClusterConfig::default(), now)
                .pod_annotations
                .is_empty()
        );
    }

    #[test]
    fn applying_a_plan_writes_phase_node_interfaces_and_the_condition_once() {
        let vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
                "networks": [{"name": "default", "pod": {}}]},
            "status": {"phase": "Scheduling", "conditions": [
                {"type": "MigrationRequired", "status": "False"}, {"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let annotations = Annotations::new();
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let pod = PodView {
            annotations: &annotations,
            ready: false,
            phase: "Pending",
            node: "n2",
        };
        let plan = plan_vmi_sync(&vmi, pod, false, &ClusterConfig::default(), now);
        // Not Running yet: the condition is left alone.
        assert_eq!(plan.migration_condition, ConditionUpdate::Keep);
        let mut status = vmi.status.clone().unwrap();
        assert!(plan.apply(&mut status));
        assert_eq!(
            (status.phase.as_str(), status.node_name.as_str()),
            ("Scheduled", "n2")
        );
        assert_eq!(status.interfaces, plan.status_interfaces);
        assert_eq!(status.conditions.len(), 2);
        // Applying the same plan again is no change: no write.
        assert!(!plan.apply(&mut status));

        let remove = VmiSyncPlan {
            migration_condition: ConditionUpdate::Remove,
            ..plan.clone()
        };
        assert!(remove.apply(&mut status));
        assert_eq!(
            status
                .conditions
                .iter()
                .map(|c| c.type_.as_str())
                .collect::<Vec<_>>(),
            ["Ready"]
        );
        let set = VmiSyncPlan {
            migration_condition: ConditionUpdate::Set(Box::new(crate::api::Condition {
                type_: MIGRATION_REQUIRED.into(),
                status: "True".into(),
                ..Default::default()
            })),
            ..plan
        };
        assert!(set.apply(&mut status));
        assert!(
            !set.apply(&mut status),
            "a set condition is replaced, not added twice"
        );
        assert_eq!(status.conditions.len(), 2);
    }

    #[test]
    fn a_vmi_that_starts_running_gets_its_migration_condition_in_the_same_plan() {
        // Scheduled, its secondary not in the pod's network-status yet: the plan that makes it
        // Running also says the hot-plug is pending (one write, not two).
        let vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}}, {"name": "sec", "bridge": {}}]}},
                "networks": [{"name": "default", "pod": {}}, {"name": "sec", "multus": {"networkName": "nad"}}]},
            "status": {"phase": "Scheduled"}
        }))
        .unwrap();
        let annotations = Annotations::new();
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let view = |phase| PodView {
            annotations: &annotations,
            ready: phase == "Running",
            phase,
            node: "n1",
        };
        let config = ClusterConfig::default();
        let plan = plan_vmi_sync(&vmi, view("Running"), false, &config, now);
        assert_eq!(plan.phase, "Running");
        let ConditionUpdate::Set(condition) = &plan.migration_condition else {
            panic!("expected the pending condition with the Running phase");
        };
        assert_eq!(condition.status, "False");
        // Applied, the next sync of the same pod changes nothing.
        let mut next = vmi.clone();
        assert!(plan.apply(next.status.get_or_insert_with(Default::default)));
        let again = plan_vmi_sync(&next, view("Running"), false, &config, now);
        assert!(!again.apply(next.status.get_or_insert_with(Default::default)));
        // Still starting, or migrating: no evaluation.
        assert_eq!(
            plan_vmi_sync(&vmi, view("Pending"), false, &config, now).migration_condition,
            ConditionUpdate::Keep
        );
        assert_eq!(
            plan_vmi_sync(&vmi, view("Running"), true, &config, now).migration_condition,
            ConditionUpdate::Keep
        );
    }
}
