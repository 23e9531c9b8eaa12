//! Which networks the node agent wires into the launcher pod, and whether the VMI can migrate
//! with its pod network binding.

use crate::api::{BindingKind, Network, VirtualMachineInstance};
use crate::config::ClusterConfig;
use crate::infosource::{self, DOMAIN, MULTUS_STATUS};

/// VMI annotation allowing live migration with bridge binding on the pod network.
pub const ALLOW_POD_BRIDGE_NETWORK_LIVE_MIGRATION: &str =
    "kubevirt.io/allow-pod-bridge-network-live-migration";

/// Why a VMI cannot live-migrate because of its networks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotMigratable {
    /// The pod network's binding does not survive a migration.
    #[error(
        "cannot migrate VMI which does not use masquerade or a migratable plugin to connect to the pod network"
    )]
    PodNetworkBinding,
}

/// Networks to wire when the VM starts: those of non-absent interfaces (spec order).
pub fn networks_at_start(vmi: &VirtualMachineInstance) -> Vec<&Network> {
    vmi.spec
        .networks
        .iter()
        .filter(|n| has_interface(vmi, n, false))
        .collect()
}

/// Whether the spec has an interface for `network` that is (`absent`) or is not `state: absent`.
fn has_interface(vmi: &VirtualMachineInstance, network: &Network, absent: bool) -> bool {
    vmi.spec
        .interfaces()
        .iter()
        .any(|i| i.name == network.name && i.is_absent() == absent)
}

/// Networks to wire on a migration target: all of them.
pub fn networks_at_migration_target(vmi: &VirtualMachineInstance) -> Vec<&Network> {
    vmi.spec.networks.iter().collect()
}

/// Networks to hot-plug on a running VMI: non-absent, attached to the pod (`multus-status`)
/// but not yet in the domain.
pub fn networks_to_hotplug(vmi: &VirtualMachineInstance) -> Vec<&Network> {
    let status = vmi.status_interfaces();
    networks_at_start(vmi)
        .into_iter()
        .filter(|n| {
            status.iter().any(|s| {
                s.name == n.name
                    && infosource::contains(&s.info_source, MULTUS_STATUS)
                    && !infosource::contains(&s.info_source, DOMAIN)
            })
        })
        .collect()
}

/// Networks to tear down on a running VMI: absent interfaces already gone from the domain
/// (status entry present without `domain`).
pub fn networks_to_unplug(vmi: &VirtualMachineInstance) -> Vec<&Network> {
    absent_networks(vmi, false)
}

/// Networks to detach from the running domain: absent interfaces whose NIC is still in it
/// (status entry with `domain`), as virt-handler's domain sync picks them.
pub fn networks_to_detach(vmi: &VirtualMachineInstance) -> Vec<&Network> {
    absent_networks(vmi, true)
}

/// Networks whose interface is `state: absent` and that have a status entry which is
/// (`in_domain`) or is not (`!in_domain`) reported by the domain: the two halves of an unplug.
fn absent_networks(vmi: &VirtualMachineInstance, in_domain: bool) -> Vec<&Network> {
    let status = vmi.status_interfaces();
    vmi.spec
        .networks
        .iter()
        .filter(|n| {
            has_interface(vmi, n, true)
                && status
                    .iter()
                    .any(|s| s.name == n.name && infosource::contains(&s.info_source, DOMAIN) == in_domain)
        })
        .collect()
}

/// What a launcher changes on a running VMI, by network name (spec order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HotplugPlan {
    /// Wire in the pod and attach to the guest: [`networks_to_hotplug`].
    pub attach: Vec<String>,
    /// Detach from the guest, then tear down in the pod: [`networks_to_detach`].
    pub detach: Vec<String>,
    /// Tear down in the pod only (already out of the domain): [`networks_to_unplug`].
    pub unplug: Vec<String>,
}

impl HotplugPlan {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.attach.is_empty() && self.detach.is_empty() && self.unplug.is_empty()
    }
}

/// KubeVirt's hot-plug selection ([`networks_to_hotplug`], [`networks_to_detach`],
/// [`networks_to_unplug`]) applied to what the launcher itself sees instead of the VMI status
/// (which lags behind it): `attached` are the networks whose pod interface the meta-plugin has
/// attached (`multus-status`), `in_domain` those whose NIC is in the guest (`domain`), `wired`
/// those with pod-side wiring. A network in the domain is never attached twice; a network
/// that is not wired has nothing to tear down.
pub fn plan_hotplug(
    vmi: &VirtualMachineInstance,
    attached: &[&str],
    in_domain: &[&str],
    wired: &[&str],
) -> HotplugPlan {
    let mut view = VirtualMachineInstance {
        spec: vmi.spec.clone(),
        ..Default::default()
    };
    let status = view.status.get_or_insert_with(Default::default);
    for network in &vmi.spec.networks {
        let mut info_source = String::new();
        if in_domain.contains(&network.name.as_str()) {
            info_source = infosource::add(&info_source, DOMAIN);
        }
        if attached.contains(&network.name.as_str()) {
            info_source = infosource::add(&info_source, MULTUS_STATUS);
        }
        if !info_source.is_empty() || wired.contains(&network.name.as_str()) {
            status.interfaces.push(crate::api::InterfaceStatus {
                name: network.name.clone(),
                info_source,
                ..Default::default()
            });
        }
    }
    let names = |nets: Vec<&Network>| nets.into_iter().map(|n| n.name.clone()).collect::<Vec<_>>();
    HotplugPlan {
        attach: names(networks_to_hotplug(&view))
            .into_iter()
            .filter(|n| !wired.contains(&n.as_str()))
            .collect(),
        detach: names(networks_to_detach(&view)),
        unplug: names(networks_to_unplug(&view))
            .into_iter()
            .filter(|n| wired.contains(&n.as_str()))
            .collect(),
    }
}

/// KubeVirt's `VerifyVMIMigratable` (network part): with a pod network, its interface must be
/// masquerade or passtBinding, bridge with the allow annotation, or a plugin with `migration`.
pub fn verify_migratable(vmi: &VirtualMachineInstance, config: &ClusterConfig) -> Result<(), NotMigratable> {
    let Some(pod) = vmi.spec.networks.iter().find(|n| n.pod.is_some()) else {
        return Ok(());
    };
    let Some(iface) = vmi.spec.interfaces().iter().find(|i| i.name == pod.name) else {
        return Ok(());
    };
    let migratable = match iface.binding_kind() {
        BindingKind::Masquerade | BindingKind::PasstBinding => true,
        BindingKind::Bridge => vmi
            .metadata
            .annotations
            .contains_key(ALLOW_POD_BRIDGE_NETWORK_LIVE_MIGRATION),
        BindingKind::Plugin(name) => config
            .binding_plugins
            .get(name)
            .is_some_and(|p| p.migration.is_some()),
        BindingKind::Sriov | BindingKind::None => false,
    };
    if migratable {
        Ok(())
    } else {
        Err(NotMigratable::PodNetworkBinding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(v: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn setup_selection() {
        let v = vmi(json!({
            "spec": {"domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}},
                {"name": "new", "bridge": {}},
                {"name": "old", "bridge": {}, "state": "absent"},
                {"name": "going", "bridge": {}, "state": "absent"}
            ]}}, "networks": [
                {"name": "default", "pod": {}},
                {"name": "new", "multus": {"networkName": "a"}},
                {"name": "old", "multus": {"networkName": "b"}},
                {"name": "going", "multus": {"networkName": "c"}}
            ]},
            "status": {"interfaces": [
                {"name": "default", "infoSource": "domain"},
                {"name": "new", "infoSource": "multus-status"},
                {"name": "old", "infoSource": "multus-status"},
                {"name": "going", "infoSource": "domain, multus-status"}
            ]}
        }));
        let names = |nets: Vec<&Network>| nets.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(networks_at_start(&v)), ["default", "new"]);
        assert_eq!(networks_at_migration_target(&v).len(), 4);
        assert_eq!(names(networks_to_hotplug(&v)), ["new"]);
        assert_eq!(names(networks_to_unplug(&v)), ["old"]);
    }

    #[test]
    fn launcher_plan_follows_kubevirts_selection_on_what_the_launcher_sees() {
        let v = vmi(json!({
            "spec": {"domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}},
                {"name": "new", "bridge": {}},
                {"name": "pending", "bridge": {}},
                {"name": "going", "bridge": {}, "state": "absent"},
                {"name": "half", "bridge": {}, "state": "absent"},
                {"name": "gone", "bridge": {}, "state": "absent"}
            ]}}, "networks": [
                {"name": "default", "pod": {}},
                {"name": "new", "multus": {"networkName": "a"}},
                {"name": "pending", "multus": {"networkName": "b"}},
                {"name": "going", "multus": {"networkName": "c"}},
                {"name": "half", "multus": {"networkName": "d"}},
                {"name": "gone", "multus": {"networkName": "e"}}
            ]},
            // The status is ignored: the launcher's own view decides.
            "status": {"interfaces": [{"name": "pending", "infoSource": "domain, multus-status"}]}
        }));
        // `new` attached, not in the domain; `pending` not attached yet; `going` in the domain;
        // `half` out of the domain but still wired (an earlier teardown failed); `gone` done.
        let plan = plan_hotplug(
            &v,
            &["default", "new", "going", "half", "gone"],
            &["default", "going"],
            &["default", "going", "half"],
        );
        assert_eq!(
            plan,
            HotplugPlan {
                attach: vec!["new".into()],
                detach: vec!["going".into()],
                unplug: vec!["half".into()],
            }
        );
        // Applied, the plan is a fixed point.
        let after = plan_hotplug(
            &v,
            &["default", "new", "going", "half", "gone"],
            &["default", "new"],
            &["default", "new"],
        );
        assert!(after.is_empty(), "{after:?}");
    }

    #[test]
    fn migratability() {
        let config = ClusterConfig::default();
        let masquerade = vmi(
            json!({"spec": {"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
            "networks": [{"name": "default", "pod": {}}]}}),
        );
        assert_eq!(verify_migratable(&masquerade, &config), Ok(()));
        let mut bridge = vmi(
            json!({"spec": {"domain": {"devices": {"interfaces": [{"name": "default", "bridge": {}}]}},
            "networks": [{"name": "default", "pod": {}}]}}),
        );
        assert_eq!(
            verify_migratable(&bridge, &config),
            Err(NotMigratable::PodNetworkBinding)
        );
        bridge
            .metadata
            .annotations
            .insert(ALLOW_POD_BRIDGE_NETWORK_LIVE_MIGRATION.into(), "".into());
        assert_eq!(verify_migratable(&bridge, &config), Ok(()));
        let secondary_only = vmi(
            json!({"spec": {"domain": {"devices": {"interfaces": [{"name": "s", "bridge": {}}]}},
            "networks": [{"name": "s", "multus": {"networkName": "n"}}]}}),
        );
        assert_eq!(verify_migratable(&secondary_only, &config), Ok(()));
    }
}
