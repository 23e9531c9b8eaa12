//! One controller sync of a VMI that has a launcher pod, as a single decision: the new
//! `status.interfaces`, the pod annotations to patch, and the `MigrationRequired` condition.

use jiff::Timestamp;

use crate::annotations::{Annotations, running_pod_annotations};
use crate::api::{InterfaceStatus, VirtualMachineInstance};
use crate::config::ClusterConfig;
use crate::migration::{
    ConditionUpdate, evaluate_migration, migration_condition_update, migration_required_condition,
};
use crate::netstatus::network_statuses;
use crate::status::controller_status_interfaces;

/// What the launcher pod looks like to the controller.
#[derive(Clone, Copy, Debug)]
pub struct PodView<'a> {
    /// The pod's annotations (network-status, networks).
    pub annotations: &'a Annotations,
    /// The pod is running and ready (annotations are only patched then).
    pub ready: bool,
}

/// The decisions of one sync.
#[derive(Clone, Debug, PartialEq)]
pub struct VmiSyncPlan {
    /// The new `status.interfaces` (write when different from the current one).
    pub status_interfaces: Vec<InterfaceStatus>,
    /// Pod annotations to set (empty: nothing to patch).
    pub pod_annotations: Annotations,
    /// What to do with the `MigrationRequired` condition.
    pub migration_condition: ConditionUpdate,
}

/// Plan one controller sync of a VMI with a launcher pod. The migration condition is only
/// evaluated for a `Running` VMI that is not migrating (`migrating` says whether it is).
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
    let running = vmi.status.as_ref().is_some_and(|s| s.phase == "Running");
    let migration_condition = if running && !migrating {
        let existing = migration_required_condition(vmi);
        let result = evaluate_migration(vmi, &statuses, existing, now);
        migration_condition_update(existing, result, now)
    } else {
        ConditionUpdate::Keep
    };
    VmiSyncPlan {
        status_interfaces,
        pod_annotations,
        migration_condition,
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
        };
        assert!(
            plan_vmi_sync(&vmi, not_ready, false, &ClusterConfig::default(), now)
                .pod_annotations
                .is_empty()
        );
    }
}
