//! The effective cluster configuration decisions depend on: the KubeVirt CR's network section
//! and feature gates, with KubeVirt's defaults filled in.

use std::collections::BTreeMap;

use crate::api::{InterfaceBindingPlugin, KubeVirt};

/// Feature gate: core passt binding (`passtBinding: {}`).
pub const GATE_PASST_BINDING: &str = "PasstBinding";
/// Feature gate: DRA networks (`resourceClaim`).
pub const GATE_NETWORK_DEVICES_WITH_DRA: &str = "NetworkDevicesWithDRA";
/// Feature gate: `portRanges` on masquerade interfaces.
pub const GATE_PORT_RANGES_SPEC: &str = "PortRangesSpec";
/// Feature gate: migrations upgrade ordinal pod interface names to hashed ones.
pub const GATE_POD_SECONDARY_INTERFACE_NAMING_UPGRADE: &str = "PodSecondaryInterfaceNamingUpgrade";

/// The gates that change network decisions, with KubeVirt's default (maturity) for each.
const KNOWN_GATES: &[(&str, bool)] = &[
    (GATE_PASST_BINDING, false),
    (GATE_NETWORK_DEVICES_WITH_DRA, false),
    (GATE_PORT_RANGES_SPEC, false),
    (GATE_POD_SECONDARY_INTERFACE_NAMING_UPGRADE, true),
];

/// KubeVirt's built-in `defaultNetworkInterface`.
pub const DEFAULT_NETWORK_INTERFACE: &str = "bridge";

/// Feature gates that matter to network decisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    /// `PasstBinding` (alpha: off by default).
    pub passt_binding: bool,
    /// `NetworkDevicesWithDRA` (alpha: off by default).
    pub network_devices_with_dra: bool,
    /// `PortRangesSpec` (alpha: off by default).
    pub port_ranges_spec: bool,
    /// `PodSecondaryInterfaceNamingUpgrade` (beta: on by default).
    pub pod_secondary_interface_naming_upgrade: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self::from_lists(&[], &[])
    }
}

impl FeatureGates {
    /// Gates from `featureGates` / `disabledFeatureGates`; a gate named in neither keeps
    /// KubeVirt's default, and a gate named in both is disabled (disabling wins, as in KubeVirt).
    pub fn from_lists(enabled: &[String], disabled: &[String]) -> Self {
        let state = |gate: &str| {
            if disabled.iter().any(|g| g == gate) {
                false
            } else if enabled.iter().any(|g| g == gate) {
                true
            } else {
                KNOWN_GATES
                    .iter()
                    .find(|(name, _)| *name == gate)
                    .is_some_and(|(_, on)| *on)
            }
        };
        Self {
            passt_binding: state(GATE_PASST_BINDING),
            network_devices_with_dra: state(GATE_NETWORK_DEVICES_WITH_DRA),
            port_ranges_spec: state(GATE_PORT_RANGES_SPEC),
            pod_secondary_interface_naming_upgrade: state(GATE_POD_SECONDARY_INTERFACE_NAMING_UPGRADE),
        }
    }
}

/// The effective network configuration of the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterConfig {
    /// Binding of the auto-attached `default` interface (`bridge`, `masquerade`, `slirp`).
    pub default_network_interface: String,
    /// Whether bridge binding is allowed on the pod network.
    pub permit_bridge_interface_on_pod_network: bool,
    /// Whether (deprecated) slirp is permitted.
    pub permit_slirp_interface: bool,
    /// Registered binding plugins.
    pub binding_plugins: BTreeMap<String, InterfaceBindingPlugin>,
    /// Feature gates.
    pub gates: FeatureGates,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            default_network_interface: DEFAULT_NETWORK_INTERFACE.into(),
            permit_bridge_interface_on_pod_network: true,
            permit_slirp_interface: false,
            binding_plugins: BTreeMap::new(),
            gates: FeatureGates::default(),
        }
    }
}

impl ClusterConfig {
    /// The effective configuration of a KubeVirt CR (defaults for everything it leaves out).
    pub fn from_kubevirt(kv: &KubeVirt) -> Self {
        let mut config = Self::default();
        let configuration = &kv.spec.configuration;
        if let Some(net) = &configuration.network {
            if let Some(iface) = &net.default_network_interface {
                config.default_network_interface = iface.clone();
            }
            if let Some(permit) = net.permit_bridge_interface_on_pod_network {
                config.permit_bridge_interface_on_pod_network = permit;
            }
            if let Some(permit) = net.permit_slirp_interface {
                config.permit_slirp_interface = permit;
            }
            config.binding_plugins = net.binding.clone();
        }
        if let Some(dev) = &configuration.developer_configuration {
            config.gates = FeatureGates::from_lists(&dev.feature_gates, &dev.disabled_feature_gates);
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_default_by_maturity_and_explicit_lists_win() {
        let g = FeatureGates::default();
        assert!(!g.passt_binding && !g.port_ranges_spec && g.pod_secondary_interface_naming_upgrade);
        let g = FeatureGates::from_lists(
            &["PasstBinding".into()],
            &["PodSecondaryInterfaceNamingUpgrade".into()],
        );
        assert!(g.passt_binding && !g.pod_secondary_interface_naming_upgrade);
    }

    #[test]
    fn kubevirt_cr_overrides_defaults() {
        let kv: KubeVirt = serde_json::from_value(serde_json::json!({
            "spec": {"configuration": {
                "network": {"defaultNetworkInterface": "masquerade", "permitBridgeInterfaceOnPodNetwork": false,
                            "binding": {"passt": {"sidecarImage": "x", "networkAttachmentDefinition": "default/passt"}}},
                "developerConfiguration": {"featureGates": ["PortRangesSpec"]}
            }}
        }))
        .unwrap();
        let c = ClusterConfig::from_kubevirt(&kv);
        assert_eq!(c.default_network_interface, "masquerade");
        assert!(!c.permit_bridge_interface_on_pod_network);
        assert!(c.gates.port_ranges_spec);
        assert_eq!(
            c.binding_plugins["passt"].network_attachment_definition,
            "default/passt"
        );
    }
}
