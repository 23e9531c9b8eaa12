//! The `MigrationRequired` condition: whether network changes of a running VMI need a live
//! migration now, soon (pending the in-place hot-plug grace period), or not at all.

use jiff::{SignedDuration, Timestamp};
use weft_netconf::NetworkStatus;

use crate::api::{BindingKind, Condition, VirtualMachineInstance};
use crate::config::ClusterConfig;
use crate::infosource::{self, DOMAIN, MULTUS_STATUS};

/// Condition type.
pub const MIGRATION_REQUIRED: &str = "MigrationRequired";
/// Reason when the condition is `True`.
pub const REASON_MIGRATION_DUE: &str = "AutoMigrationDueToLiveUpdate";
/// Reason when the condition is `False` (pending).
pub const REASON_MIGRATION_PENDING: &str = "AutoMigrationPending";
/// How long in-place hot-plug (Multus dynamic networks controller) gets before migrating.
pub const DYNAMIC_NETWORK_CONTROLLER_GRACE_PERIOD: SignedDuration = SignedDuration::from_secs(15);
/// When to look again after setting the condition to `False`.
pub const PENDING_REQUEUE: SignedDuration = SignedDuration::from_secs(10);

/// The evaluation result, as a condition status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationRequirement {
    /// `Unknown`: no migration needed.
    NotRequired,
    /// `False`: a change is pending; migrate if it is not done in place in time.
    Pending,
    /// `True`: migrate now.
    Required,
}

impl MigrationRequirement {
    /// The condition status string (`Unknown`, `False`, `True`).
    pub fn as_condition_status(self) -> &'static str {
        match self {
            Self::NotRequired => "Unknown",
            Self::Pending => "False",
            Self::Required => "True",
        }
    }
}

fn nad_name_equal(spec_name: &str, status_name: &str, namespace: &str) -> bool {
    spec_name == status_name
        || (!spec_name.contains('/')
            && status_name.len() == namespace.len() + 1 + spec_name.len()
            && status_name.starts_with(namespace)
            && status_name[namespace.len()..].starts_with('/')
            && status_name.ends_with(spec_name))
}

fn condition_time(condition: &Condition) -> Option<Timestamp> {
    condition.last_transition_time.as_ref()?.as_str()?.parse().ok()
}

/// KubeVirt's `Evaluator.Evaluate`: needs the pod's network-status entries, the existing
/// `MigrationRequired` condition (if any) and the current time.
pub fn evaluate_migration(
    vmi: &VirtualMachineInstance,
    pod_statuses: &[NetworkStatus],
    existing: Option<&Condition>,
    now: Timestamp,
) -> MigrationRequirement {
    let status = vmi.status_interfaces();
    let mut result = MigrationRequirement::NotRequired;
    for net in vmi.spec.networks.iter().filter(|n| n.is_secondary()) {
        let Some(iface) = vmi.spec.interfaces().iter().find(|i| i.name == net.name) else {
            continue;
        };
        let entry = status.iter().find(|s| s.name == iface.name);
        let verdict = match entry {
            None if !iface.is_absent() => {
                if iface.binding_kind() == BindingKind::Sriov {
                    MigrationRequirement::Required
                } else {
                    MigrationRequirement::Pending
                }
            }
            Some(s)
                if iface.is_absent()
                    && infosource::contains(&s.info_source, MULTUS_STATUS)
                    && !infosource::contains(&s.info_source, DOMAIN) =>
            {
                MigrationRequirement::Pending
            }
            Some(s) if !s.pod_interface_name.is_empty() => {
                let spec_nad = net.multus.as_ref().map(|m| m.network_name.as_str()).unwrap_or("");
                match pod_statuses.iter().find(|p| p.interface == s.pod_interface_name) {
                    Some(p) if !nad_name_equal(spec_nad, &p.name, vmi.namespace()) => {
                        MigrationRequirement::Required
                    }
                    _ => MigrationRequirement::NotRequired,
                }
            }
            _ => MigrationRequirement::NotRequired,
        };
        if verdict != MigrationRequirement::NotRequired {
            result = verdict;
            break;
        }
    }
    if result == MigrationRequirement::Pending
        && let Some(cond) = existing.filter(|c| c.status == "False")
        && let Some(since) = condition_time(cond)
        && now.duration_since(since) > DYNAMIC_NETWORK_CONTROLLER_GRACE_PERIOD
    {
        return MigrationRequirement::Required;
    }
    result
}

/// What to do with the VMI's `MigrationRequired` condition.
#[derive(Clone, Debug, PartialEq)]
pub enum ConditionUpdate {
    /// Leave the conditions as they are.
    Keep,
    /// Remove the `MigrationRequired` condition.
    Remove,
    /// Insert or replace the `MigrationRequired` condition.
    Set(Box<Condition>),
}

/// KubeVirt's `syncMigrationRequiredCondition` (callers skip it while the VMI migrates).
/// After a `Set` with status `False`, look again after [`PENDING_REQUEUE`].
pub fn migration_condition_update(
    existing: Option<&Condition>,
    result: MigrationRequirement,
    now: Timestamp,
) -> ConditionUpdate {
    match (result, existing) {
        (MigrationRequirement::NotRequired, None) => ConditionUpdate::Keep,
        (MigrationRequirement::NotRequired, Some(_)) => ConditionUpdate::Remove,
        (_, Some(c)) if c.status == "True" => ConditionUpdate::Keep,
        (result, existing) => {
            let (status, reason) = match result {
                MigrationRequirement::Required => ("True", REASON_MIGRATION_DUE),
                _ => ("False", REASON_MIGRATION_PENDING),
            };
            if existing.is_some_and(|c| c.status == status && c.reason == reason) {
                return ConditionUpdate::Keep;
            }
            ConditionUpdate::Set(Box::new(Condition {
                type_: MIGRATION_REQUIRED.into(),
                status: status.into(),
                reason: reason.into(),
                last_transition_time: Some(serde_json::Value::String(
                    Timestamp::from_second(now.as_second()).unwrap_or(now).to_string(),
                )),
                ..Default::default()
            }))
        }
    }
}

/// The VMI's `MigrationRequired` condition, if any.
pub fn migration_required_condition(vmi: &VirtualMachineInstance) -> Option<&Condition> {
    vmi.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == MIGRATION_REQUIRED)
}

/// Whether the controller creates a workload-update migration for the VMI: its
/// `MigrationRequired` condition is `True` and the VMI can live-migrate with its networks
/// ([`crate::setup::verify_migratable`] with the KubeVirt CR's configuration). As KubeVirt's
/// workload updater, which only migrates migratable VMIs: a migration of one that cannot
/// move fails, and would be created again after every failure.
pub fn workload_migration_due(vmi: &VirtualMachineInstance, config: &ClusterConfig) -> bool {
    migration_required_condition(vmi).is_some_and(|c| c.status == "True")
        && crate::setup::verify_migratable(vmi, config).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn condition(status: &str, reason: &str, since: &str) -> Condition {
        Condition {
            type_: MIGRATION_REQUIRED.into(),
            status: status.into(),
            reason: reason.into(),
            last_transition_time: Some(serde_json::Value::String(since.into())),
            ..Default::default()
        }
    }

    #[test]
    fn condition_handling() {
        let now = at("2025-01-01T00:00:30Z");
        assert_eq!(
            migration_condition_update(None, MigrationRequirement::NotRequired, now),
            ConditionUpdate::Keep
        );
        let pending = condition("False", REASON_MIGRATION_PENDING, "2025-01-01T00:00:00Z");
        assert_eq!(
            migration_condition_update(Some(&pending), MigrationRequirement::NotRequired, now),
            ConditionUpdate::Remove
        );
        // Same status and reason: the old transition time is kept.
        assert_eq!(
            migration_condition_update(Some(&pending), MigrationRequirement::Pending, now),
            ConditionUpdate::Keep
        );
        let ConditionUpdate::Set(due) =
            migration_condition_update(Some(&pending), MigrationRequirement::Required, now)
        else {
            panic!("expected Set");
        };
        assert_eq!(
            (due.status.as_str(), due.reason.as_str()),
            ("True", REASON_MIGRATION_DUE)
        );
        assert_eq!(
            due.last_transition_time,
            Some(serde_json::json!("2025-01-01T00:00:30Z"))
        );
        // An existing True condition stays until the migration target removes it.
        assert_eq!(
            migration_condition_update(Some(&due), MigrationRequirement::Pending, now),
            ConditionUpdate::Keep
        );
        let ConditionUpdate::Set(new) = migration_condition_update(None, MigrationRequirement::Pending, now)
        else {
            panic!("expected Set");
        };
        assert_eq!(new.status, "False");
    }

    #[test]
    fn a_workload_migration_is_due_only_for_a_required_and_migratable_vmi() {
        let vmi = |binding: &str, condition: Option<&str>| -> VirtualMachineInstance {
            let conditions: Vec<_> = condition
                .map(|status| serde_json::json!({"type": MIGRATION_REQUIRED, "status": status}))
                .into_iter()
                .collect();
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "vm", "namespace": "ns"},
                "spec": {"domain": {"devices": {"interfaces": [{"name": "default", binding: {}}]}},
                    "networks": [{"name": "default", "pod": {}}]},
                "status": {"phase": "Running", "conditions": conditions}
            }))
            .unwrap()
        };
        let config = ClusterConfig::default();
        assert!(workload_migration_due(&vmi("masquerade", Some("True")), &config));
        assert!(!workload_migration_due(
            &vmi("masquerade", Some("False")),
            &config
        ));
        assert!(!workload_migration_due(&vmi("masquerade", None), &config));
        // Bridge on the pod network cannot move (without the allow annotation): no migration
        // object that would only fail.
        assert!(!workload_migration_due(&vmi("bridge", Some("True")), &config));
        let mut allowed = vmi("bridge", Some("True"));
        allowed.metadata.annotations.insert(
            crate::setup::ALLOW_POD_BRIDGE_NETWORK_LIVE_MIGRATION.into(),
            String::new(),
        );
        assert!(workload_migration_due(&allowed, &config));
    }
}
