//! SR-IOV: the network → VF PCI address pool from the `kubevirt.io/network-info` downward-API
//! file, and the `<hostdev>` elements of a VMI's SR-IOV interfaces
//! (docs/upstream/kubevirt-network.md §12).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::interface::{ConvertError, InterfaceBinding, InterfaceState, VmiInterface, sriov_hostdev};
use crate::xml::HostDev;

/// Errors reading the pool or assigning VFs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SriovError {
    /// The network-info file is not the expected JSON.
    #[error("network-info: {0}")]
    InvalidNetworkInfo(String),
    /// The file maps no network to a PCI address.
    #[error("found no SR-IOV networks to PCI-Address mapping")]
    EmptyPool,
    /// An SR-IOV interface has no VF in the pool.
    #[error("PCI-Address for SR-IOV network \"{0}\" not found")]
    MissingAddress(String),
    /// A VMI interface or pool entry is invalid.
    #[error(transparent)]
    Convert(#[from] ConvertError),
}

#[derive(Deserialize)]
struct NetworkInfo {
    #[serde(default)]
    interfaces: Vec<NetworkInfoInterface>,
}

#[derive(Deserialize)]
struct NetworkInfoInterface {
    network: String,
    #[serde(rename = "deviceInfo")]
    device_info: Option<DeviceInfo>,
}

#[derive(Deserialize)]
struct DeviceInfo {
    pci: Option<PciInfo>,
}

#[derive(Deserialize)]
struct PciInfo {
    #[serde(rename = "pci-address")]
    pci_address: Option<String>,
}

/// The VF addresses per network, each handed out once, in file order.
pub type PciPool = BTreeMap<String, Vec<String>>;

/// Parse the network-info file (`{"interfaces":[{"network", "deviceInfo":{"pci":{"pci-address"}}}]}`).
pub fn parse_network_info(text: &str) -> Result<PciPool, SriovError> {
    let info: NetworkInfo =
        serde_json::from_str(text).map_err(|e| SriovError::InvalidNetworkInfo(e.to_string()))?;
    let mut pool = PciPool::new();
    for entry in info.interfaces {
        if let Some(address) = entry.device_info.and_then(|d| d.pci).and_then(|p| p.pci_address) {
            pool.entry(entry.network).or_default().push(address);
        }
    }
    if pool.is_empty() {
        return Err(SriovError::EmptyPool);
    }
    Ok(pool)
}

/// The `<hostdev>` of every SR-IOV interface of the VMI (absent ones skipped), in spec order,
/// taking each interface's VF from `pool`.
pub fn sriov_hostdevs(ifaces: &[VmiInterface], mut pool: PciPool) -> Result<Vec<HostDev>, SriovError> {
    let mut hostdevs = Vec::new();
    for iface in ifaces {
        if iface.binding != InterfaceBinding::Sriov || iface.state == InterfaceState::Absent {
            continue;
        }
        let address = pool
            .get_mut(&iface.name)
            .filter(|addresses| !addresses.is_empty())
            .map(|addresses| addresses.remove(0))
            .ok_or_else(|| SriovError::MissingAddress(iface.name.clone()))?;
        hostdevs.push(sriov_hostdev(iface, &address)?);
    }
    Ok(hostdevs)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn network_info_parser_never_panics(text in ".{0,200}") {
            let _ = parse_network_info(&text);
        }

        #[test]
        fn bad_pool_addresses_are_errors_not_panics(address in ".{0,20}") {
            let text = serde_json::json!({"interfaces": [{"network": "a", "deviceInfo": {"pci": {"pci-address": address}}}]});
            let pool = parse_network_info(&text.to_string()).unwrap();
            let _ = sriov_hostdevs(&[VmiInterface::new("a", InterfaceBinding::Sriov)], pool);
        }
    }

    #[test]
    fn pool_hands_each_address_out_once() {
        let text = r#"{"interfaces":[
            {"network":"a","deviceInfo":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:81:01.0"}}},
            {"network":"b","deviceInfo":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:81:01.1"}}},
            {"network":"c"}]}"#;
        let pool = parse_network_info(text).unwrap();
        let ifaces = [
            VmiInterface::new("a", InterfaceBinding::Sriov),
            VmiInterface::new("default", InterfaceBinding::Masquerade),
            VmiInterface::new("b", InterfaceBinding::Sriov),
        ];
        let hostdevs = sriov_hostdevs(&ifaces, pool.clone()).unwrap();
        assert_eq!(hostdevs.len(), 2);
        assert_eq!(hostdevs[1].source.address.function, "0x1");
        assert_eq!(hostdevs[1].alias.name, "ua-sriov-b");
        let twice = [
            VmiInterface::new("a", InterfaceBinding::Sriov),
            VmiInterface::new("a", InterfaceBinding::Sriov),
        ];
        assert_eq!(
            sriov_hostdevs(&twice, pool).unwrap_err(),
            SriovError::MissingAddress("a".into())
        );
        assert_eq!(
            parse_network_info(r#"{"interfaces":[]}"#).unwrap_err(),
            SriovError::EmptyPool
        );
        assert!(matches!(
            parse_network_info("nope"),
            Err(SriovError::InvalidNetworkInfo(_))
        ));
    }
}
