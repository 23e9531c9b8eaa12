//! Defaulting of a VMI's networks: the auto-attached `default` pod interface.

use crate::api::{Interface, Marker, Network, VmiSpec};
use crate::config::ClusterConfig;

/// Why defaulting failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefaultingError {
    /// The default binding is bridge but bridge on the pod network is not permitted.
    #[error("bridge interface is not enabled in kubevirt-config")]
    BridgeNotEnabled,
    /// The default binding is slirp, which is gone.
    #[error("slirp interface is deprecated as of v1.3")]
    SlirpDeprecated,
}

/// KubeVirt's `SetDefaultNetworkInterface`: when neither networks nor interfaces are given
/// (and `autoattachPodInterface` is not `false`), add the `default` pod network with the
/// cluster's default binding.
pub fn apply_network_defaults(spec: &mut VmiSpec, config: &ClusterConfig) -> Result<(), DefaultingError> {
    if spec.domain.devices.autoattach_pod_interface == Some(false) {
        return Ok(());
    }
    if !spec.networks.is_empty() || !spec.interfaces().is_empty() {
        return Ok(());
    }
    let mut iface = Interface {
        name: "default".into(),
        ..Default::default()
    };
    match config.default_network_interface.as_str() {
        "masquerade" => iface.masquerade = Some(Marker::new()),
        "slirp" => return Err(DefaultingError::SlirpDeprecated),
        // `bridge`, and any unknown value, mean bridge.
        _ => {
            if !config.permit_bridge_interface_on_pod_network {
                return Err(DefaultingError::BridgeNotEnabled);
            }
            iface.bridge = Some(Marker::new());
        }
    }
    spec.interfaces_mut().push(iface);
    spec.networks.push(Network::default_pod());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_bridge_masquerade_and_errors() {
        let mut spec = VmiSpec::default();
        apply_network_defaults(&mut spec, &ClusterConfig::default()).unwrap();
        assert!(spec.interfaces()[0].bridge.is_some());
        assert_eq!(spec.networks[0], Network::default_pod());

        let mut config = ClusterConfig {
            default_network_interface: "masquerade".into(),
            ..Default::default()
        };
        let mut spec = VmiSpec::default();
        apply_network_defaults(&mut spec, &config).unwrap();
        assert!(spec.interfaces()[0].masquerade.is_some());

        config.default_network_interface = "nonsense".into();
        config.permit_bridge_interface_on_pod_network = false;
        let mut spec = VmiSpec::default();
        assert_eq!(
            apply_network_defaults(&mut spec, &config),
            Err(DefaultingError::BridgeNotEnabled)
        );
        config.default_network_interface = "slirp".into();
        assert_eq!(
            apply_network_defaults(&mut spec, &config),
            Err(DefaultingError::SlirpDeprecated)
        );

        let mut spec = VmiSpec::default();
        spec.domain.devices.autoattach_pod_interface = Some(false);
        apply_network_defaults(&mut spec, &ClusterConfig::default()).unwrap();
        assert!(spec.networks.is_empty());
    }
}
