//! Device IDs and device-info (docs/upstream/multus.md §1.6, §3.3.2–§3.3.4): the kubelet
//! device-plugin checkpoint, the per-ADD allocation of a pod's devices to the delegates whose NAD
//! names a `k8s.v1.cni.cncf.io/resourceName`, the config mutation (`deviceID`/`pciBusID`), and the
//! device-info file paths. Pure; the agent reads the checkpoint and the executor moves files.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_netconf::{DelegateConfig, DelegateConfigError};

/// The kubelet's device-plugin checkpoint (Multus's fallback when the PodResources socket is
/// absent).
pub const DEFAULT_CHECKPOINT_FILE: &str = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint";
/// Base directory of device-info files (`dp/` from device plugins, `cni/` per attachment).
pub const DEFAULT_DEVICE_INFO_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo";

/// Why the checkpoint cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// Not the checkpoint's JSON shape.
    #[error("kubelet device checkpoint: {0}")]
    Checkpoint(String),
}

/// One `Data.PodDeviceEntries` item: the devices of one resource given to one container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodDeviceEntry {
    /// `PodUID`.
    pub pod_uid: String,
    /// `ContainerName`.
    pub container_name: String,
    /// `ResourceName`, e.g. `intel.com/sriov`.
    pub resource_name: String,
    /// `DeviceIDs`, every NUMA node's flattened (in NUMA-node order).
    pub device_ids: Vec<String>,
}

#[derive(Deserialize)]
struct CheckpointWire {
    #[serde(rename = "Data")]
    data: DataWire,
}

#[derive(Deserialize)]
struct DataWire {
    #[serde(rename = "PodDeviceEntries", default)]
    entries: Option<Vec<EntryWire>>,
}

#[derive(Deserialize)]
struct EntryWire {
    #[serde(rename = "PodUID", default)]
    pod_uid: String,
    #[serde(rename = "ContainerName", default)]
    container_name: String,
    #[serde(rename = "ResourceName", default)]
    resource_name: String,
    #[serde(rename = "DeviceIDs", default)]
    device_ids: Option<DeviceIdsWire>,
}

/// Kubelets ≥ 1.20 key IDs by NUMA node; older ones write a plain list.
#[derive(Deserialize)]
#[serde(untagged)]
enum DeviceIdsWire {
    PerNuma(BTreeMap<String, Option<Vec<String>>>),
    List(Vec<String>),
}

/// Parse `kubelet_internal_checkpoint` (`Data.PodDeviceEntries`; `Checksum` is not verified —
/// the kubelet rewrites the file atomically).
pub fn parse_kubelet_checkpoint(bytes: &[u8]) -> Result<Vec<PodDeviceEntry>, DeviceError> {
    let wire: CheckpointWire =
        serde_json::from_slice(bytes).map_err(|e| DeviceError::Checkpoint(e.to_string()))?;
    Ok(wire
        .data
        .entries
        .unwrap_or_default()
        .into_iter()
        .map(|e| PodDeviceEntry {
            pod_uid: e.pod_uid,
            container_name: e.container_name,
            resource_name: e.resource_name,
            device_ids: match e.device_ids {
                None => Vec::new(),
                Some(DeviceIdsWire::List(ids)) => ids,
                Some(DeviceIdsWire::PerNuma(per_numa)) => {
                    let mut nodes: Vec<(String, Vec<String>)> = per_numa
                        .into_iter()
                        .map(|(node, ids)| (node, ids.unwrap_or_default()))
                        .collect();
                    // Numeric NUMA order ("10" after "9").
                    nodes.sort_by_key(|(node, _)| (node.parse::<i64>().ok(), node.clone()));
                    nodes.into_iter().flat_map(|(_, ids)| ids).collect()
                }
            },
        })
        .collect())
}

/// One ADD's device cursor: per resource, the pod's device IDs sorted and deduplicated, and
/// how many were handed out. Every delegate of the ADD draws from the same allocator, so no ID
/// is handed twice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceAllocator {
    resources: BTreeMap<String, (Vec<String>, usize)>,
}

impl DeviceAllocator {
    /// The devices of pod `pod_uid` (every container's), per resource.
    pub fn for_pod(entries: &[PodDeviceEntry], pod_uid: &str) -> Self {
        let mut resources: BTreeMap<String, (Vec<String>, usize)> = BTreeMap::new();
        for entry in entries
            .iter()
            .filter(|e| !pod_uid.is_empty() && e.pod_uid == pod_uid)
        {
            resources
                .entry(entry.resource_name.clone())
                .or_default()
                .0
                .extend(entry.device_ids.iter().filter(|id| !id.is_empty()).cloned());
        }
        for (ids, _) in resources.values_mut() {
            ids.sort();
            ids.dedup();
        }
        Self { resources }
    }

    /// Mark `device_id` of `resource_name` as taken (hot-plug: devices attached earlier).
    pub fn take(&mut self, resource_name: &str, device_id: &str) {
        let Some((ids, cursor)) = self.resources.get_mut(resource_name) else {
            return;
        };
        if let Some(i) = ids.iter().position(|id| id == device_id) {
            ids.remove(i);
            if i < *cursor {
                *cursor -= 1;
            }
        }
    }

    /// The next unused device of `resource_name` (`None`: none allocated, or all handed out).
    pub fn next(&mut self, resource_name: &str) -> Option<String> {
        let (ids, cursor) = self.resources.get_mut(resource_name)?;
        let id = ids.get(*cursor)?.clone();
        *cursor += 1;
        Some(id)
    }
}

/// A secondary delegate's device (docs/upstream/multus.md §3.3.2): the one drawn for its NAD's
/// `resourceName` wins; otherwise the element's explicit `deviceID`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceAttachment {
    /// The NAD's `k8s.v1.cni.cncf.io/resourceName` (empty: none).
    #[serde(default)]
    pub resource_name: String,
    /// The device ID given to the delegate.
    pub device_id: String,
    /// True when `device_id` came from `resource_name` (then it is also in the config as
    /// `deviceID`/`pciBusID`).
    #[serde(default)]
    pub from_resource: bool,
    /// The per-attachment device-info file (capability arg `CNIDeviceInfoFile`).
    pub cni_device_info_file: String,
    /// The device plugin's file copied into it before ADD (empty without a resource name).
    #[serde(default)]
    pub dp_device_info_file: String,
}

/// Decide a delegate's device: `allocated` is what the resource cursor gave (if the NAD has a
/// resource name and the pod is known), `requested` the element's `deviceID`. `None` when
/// neither gives one. Paths are built from `device_info_dir` and the attachment identity.
pub fn device_attachment(
    device_info_dir: &str,
    resource_name: &str,
    allocated: Option<String>,
    requested: &str,
    delegate_name: &str,
    container_id: &str,
    ifname: &str,
) -> Option<DeviceAttachment> {
    let from_resource = allocated.is_some();
    let device_id = allocated.unwrap_or_else(|| requested.to_owned());
    if device_id.is_empty() {
        return None;
    }
    Some(DeviceAttachment {
        resource_name: resource_name.to_owned(),
        dp_device_info_file: if resource_name.is_empty() {
            String::new()
        } else {
            dp_device_info_path(device_info_dir, resource_name, &device_id)
        },
        cni_device_info_file: cni_device_info_path(device_info_dir, delegate_name, container_id, ifname),
        device_id,
        from_resource,
    })
}

/// `<dir>/cni/<delegateName>-<containerID>_<ifName>`, every `/` of the file name turned into
/// `-` (so `default/sriov` gives `default-sriov-…`).
pub fn cni_device_info_path(
    device_info_dir: &str,
    delegate_name: &str,
    container_id: &str,
    ifname: &str,
) -> String {
    let file = format!("{delegate_name}-{container_id}_{ifname}").replace('/', "-");
    format!("{}/cni/{file}", device_info_dir.trim_end_matches('/'))
}

/// The per-attachment device-info file DEL removes for a secondary delegate whose NAD names a
/// resource but which has no known device (the kubelet frees a pod's devices before the
/// runtime's last DEL, and an earlier ADD may have left the file): `None` when the delegate has
/// a device (its own path is used) or no resource name.
pub fn unknown_device_info_file(
    device: Option<&DeviceAttachment>,
    device_info_dir: &str,
    resource_name: &str,
    delegate_name: &str,
    container_id: &str,
    ifname: &str,
) -> Option<String> {
    (device.is_none() && !resource_name.is_empty())
        .then(|| cni_device_info_path(device_info_dir, delegate_name, container_id, ifname))
}

/// `<dir>/dp/<resourceName>-<deviceID>-device.json`, `/` → `-` in both parts.
pub fn dp_device_info_path(device_info_dir: &str, resource_name: &str, device_id: &str) -> String {
    format!(
        "{}/dp/{}-{}-device.json",
        device_info_dir.trim_end_matches('/'),
        resource_name.replace('/', "-"),
        device_id.replace('/', "-")
    )
}

/// The config mutation for a device from a resource: top-level `deviceID` and `pciBusID` (both
/// the device ID) on the plugin, or on every plugin of a list (Multus `delegateAddDeviceID`,
/// `addDeviceIDInConfList`).
pub fn with_device_id(
    config: &DelegateConfig,
    device_id: &str,
) -> Result<DelegateConfig, DelegateConfigError> {
    config.map_plugins(|plugin| {
        plugin.insert("deviceID".into(), Value::String(device_id.into()));
        plugin.insert("pciBusID".into(), Value::String(device_id.into()));
    })
}

/// A device-info file's contents for network-status `device-info`: a JSON object, else
/// `None` (a missing or unreadable file gives no entry, as Multus).
pub fn parse_device_info(bytes: &[u8]) -> Option<Value> {
    match serde_json::from_slice(bytes) {
        Ok(value @ Value::Object(_)) => Some(value),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
