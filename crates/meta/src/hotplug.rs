//! Hot-plug (the `/delegate` path; multus-dynamic-networks-controller semantics,
//! docs/upstream/multus.md §4.4–§4.5; `vectors/multus/21-dynamic-controller-status-update.json`):
//! planning one attachment with the same isolation rules as ADD, and the network-status update.

use serde_json::{Map, Value};
use weft_cni::CniResult;
use weft_netconf::{NetworkSelectionElement, NetworkStatus, RESOURCE_NAME_ANNOTATION, network_status};

use crate::args::delegate_cni_args;
use crate::catalog::NetworkCatalog;
use crate::config::MetaConfig;
use crate::devices::{DeviceAllocator, device_attachment, unknown_device_info_file, with_device_id};
use crate::gateway::DefaultRoutePlan;
use crate::isolation::check_isolation;
use crate::plan::{AttachmentRequest, AttachmentRequests, DelegatePlan, PlanError, Pod, merge_cni_args};
use crate::resolve::resolve_nad;

/// Why a hot-plug cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HotplugError {
    /// The element names no interface (the controller keys attachments by interface).
    #[error("hot-plug of {network}: an interface name is required")]
    NoInterface {
        /// `<ns>/<name>`.
        network: String,
    },
    /// The interface is already attached.
    #[error("hot-plug of {network}: interface {ifname} is already attached ({existing})")]
    InterfaceInUse {
        /// `<ns>/<name>`.
        network: String,
        /// The interface.
        ifname: String,
        /// What holds it.
        existing: String,
    },
    /// Isolation, resolution, naming.
    #[error(transparent)]
    Plan(#[from] Box<PlanError>),
}

/// Plan attaching `element` (namespace already defaulted) to a running pod. Namespace
/// isolation applies (Multus leaves this path open). Like Multus, the runtime's
/// `runtimeConfig` is not used; the element's requests are. `attached` are the delegates
/// already on the pod (from the cache).
pub fn plan_hotplug_add(
    config: &MetaConfig,
    request: &AttachmentRequest,
    pod: &Pod,
    element: &NetworkSelectionElement,
    attached: &[DelegatePlan],
    catalog: &dyn NetworkCatalog,
) -> Result<DelegatePlan, HotplugError> {
    let network = format!("{}/{}", element.namespace, element.name);
    if element.interface.is_empty() {
        return Err(HotplugError::NoInterface { network });
    }
    check_isolation(config, &pod.namespace, &element.namespace, &element.name)
        .map_err(|e| Box::new(PlanError::from(e)))?;
    weft_cni::validate_ifname(&element.interface).map_err(|reason| {
        Box::new(PlanError::InvalidIfname {
            network: network.clone(),
            ifname: element.interface.clone(),
            reason,
        })
    })?;
    if let Some(existing) = attached.iter().find(|d| d.ifname == element.interface) {
        return Err(HotplugError::InterfaceInUse {
            network,
            ifname: element.interface.clone(),
            existing: existing.display_name.clone(),
        });
    }
    let resolved = resolve_nad(catalog, &config.conf_dir, &element.namespace, &element.name)
        .map_err(|e| Box::new(PlanError::Network(Box::new(e))))?;
    let config_with_args = match &element.cni_args {
        Some(args) => merge_cni_args(&resolved.config, args).map_err(|source| {
            Box::new(PlanError::CniArgs {
                network: network.clone(),
                source,
            })
        })?,
        None => resolved.config,
    };
    let requests = AttachmentRequests::from(element);
    let no_runtime = MetaConfig {
        runtime_config: Map::new(),
        runtime_config_to_all_delegates: false,
        ..config.clone()
    };
    let resource_name = catalog
        .nad(&element.namespace, &element.name)
        .and_then(|nad| nad.metadata.annotations.get(RESOURCE_NAME_ANNOTATION))
        .cloned()
        .unwrap_or_default();
    let allocated = match resource_name.is_empty() {
        true => None,
        false => next_free_device(catalog, pod, &resource_name, attached),
    };
    let config_with_args = match &allocated {
        Some(id) => with_device_id(&config_with_args, id).map_err(|source| {
            Box::new(PlanError::DeviceId {
                network: network.clone(),
                source,
            })
        })?,
        None => config_with_args,
    };
    let device = device_attachment(
        &config.device_info_dir,
        &resource_name,
        allocated,
        &requests.device_id,
        &resolved.display_name,
        &request.container_id,
        &element.interface,
    );
    let unknown_device_info_file = unknown_device_info_file(
        device.as_ref(),
        &config.device_info_dir,
        &resource_name,
        &resolved.display_name,
        &request.container_id,
        &element.interface,
    );
    let mut capability_args = crate::plan::secondary_capability_args(&no_runtime, &requests);
    if let Some(device) = &device {
        capability_args.insert("deviceID".into(), Value::String(device.device_id.clone()));
        capability_args.insert(
            "CNIDeviceInfoFile".into(),
            Value::String(device.cni_device_info_file.clone()),
        );
    }
    Ok(DelegatePlan {
        capability_args,
        display_name: resolved.display_name,
        source: resolved.source,
        config: config_with_args,
        is_master: false,
        ifname: element.interface.clone(),
        cni_args: delegate_cni_args(&request.k8s, &request.cni_args),
        requests,
        default_route: DefaultRoutePlan::default(),
        device,
        unknown_device_info_file,
    })
}

/// The pod's first device of `resource_name` that no attached delegate holds (Multus's
/// `/delegate` path starts a fresh cursor, handing out a device already in use).
fn next_free_device(
    catalog: &dyn NetworkCatalog,
    pod: &Pod,
    resource_name: &str,
    attached: &[DelegatePlan],
) -> Option<String> {
    let mut devices = DeviceAllocator::for_pod(&catalog.pod_devices(), &pod.uid);
    for device in attached.iter().filter_map(|d| d.device.as_ref()) {
        if device.from_resource && device.resource_name == resource_name {
            devices.take(resource_name, &device.device_id);
        }
    }
    devices.next(resource_name)
}

/// network-status after a hot-plug ADD: the current entries plus one entry for the result
/// (name `<ns>/<name>`, interface of the result's last sandbox interface, every IP).
pub fn status_after_add(
    current: &[NetworkStatus],
    element: &NetworkSelectionElement,
    result: &CniResult,
) -> Vec<NetworkStatus> {
    let name = format!("{}/{}", element.namespace, element.name);
    let mut out = current.to_vec();
    out.push(network_status(result, &name, false, None));
    out
}

/// network-status after a hot-unplug: entries whose `<name>/<interface>` is
/// `<ns>/<name>/<interface>` of the element are removed; order is kept (the controller
/// rebuilds from a map — docs/compat.md).
pub fn status_after_remove(
    current: &[NetworkStatus],
    element: &NetworkSelectionElement,
) -> Vec<NetworkStatus> {
    let key = format!("{}/{}/{}", element.namespace, element.name, element.interface);
    current
        .iter()
        .filter(|s| format!("{}/{}", s.name, s.interface) != key)
        .cloned()
        .collect()
}

/// What ADD attached to a pod besides its networks annotation, so that hot-plug leaves it
/// alone and names unnamed selections as ADD did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HotplugScope {
    /// The index ADD gives the pod's first annotation network in its delegate list (after the
    /// cluster network and `defaultNetworks`, or the inline delegates): an unnamed selection
    /// at annotation position `j` was attached as `net<first_index + j>` (Multus `getIfname`).
    pub first_index: usize,
    /// `<ns>/<name>` of the NAD-backed `defaultNetworks` ADD attached before the annotation's
    /// networks; the first status entry of each is never unplugged (file-based ones have no
    /// `/` and are left alone anyway).
    pub static_networks: Vec<String>,
}

impl HotplugScope {
    /// The scope of a pod in `pod_namespace` under `config`.
    pub fn new(config: &MetaConfig, pod_namespace: &str) -> Self {
        if config.cluster_network.is_empty() {
            return Self {
                first_index: config.delegates.len(),
                static_networks: Vec::new(),
            };
        }
        if config.is_system_namespace(pod_namespace) {
            return Self {
                first_index: 1,
                static_networks: Vec::new(),
            };
        }
        Self {
            first_index: 1 + config.default_networks.len(),
            static_networks: config
                .default_networks
                .iter()
                .filter(|v| !v.contains('/'))
                .map(|v| format!("{}/{v}", config.multus_namespace))
                .collect(),
        }
    }
}

/// The controller's reconcile: elements to add (annotation order, each with the interface it
/// will get) and status entries to remove, keyed `<ns>/<name>/<interface>`. Entries marked
/// `default` are never removed, nor are entries whose name has no `/` (file-based networks:
/// the controller would remove those — docs/compat.md).
///
/// Selections match attachments the way ADD named them: an element with an interface matches
/// the entry of that network and interface; an element without one (the short form `a,b`, or
/// JSON without `interface`) matches the first entry of the same network that no other
/// element claimed, preferring the one named `net<first_index + position>` as ADD named it.
/// An unnamed element left over is a hot-plug and gets that same name when it is free, else
/// the lowest free `net<N>`.
pub fn hotplug_diff(
    desired: &[NetworkSelectionElement],
    status: &[NetworkStatus],
    scope: &HotplugScope,
) -> (Vec<NetworkSelectionElement>, Vec<NetworkSelectionElement>) {
    let first_index = scope.first_index;
    let network = |e: &NetworkSelectionElement| format!("{}/{}", e.namespace, e.name);
    let mut statics: Vec<&str> = scope.static_networks.iter().map(String::as_str).collect();
    let current: Vec<&NetworkStatus> = status
        .iter()
        .filter(|s| !s.default && s.name.contains('/'))
        .filter(|s| match statics.iter().position(|n| *n == s.name) {
            Some(i) => {
                statics.remove(i);
                false
            }
            None => true,
        })
        .collect();
    let mut claimed = vec![false; current.len()];
    let mut matched = vec![false; desired.len()];
    // Named elements first, so a short-form element never takes an interface another element
    // names explicitly.
    for (j, e) in desired
        .iter()
        .enumerate()
        .filter(|(_, e)| !e.interface.is_empty())
    {
        if let Some(k) = (0..current.len())
            .find(|&k| !claimed[k] && current[k].name == network(e) && current[k].interface == e.interface)
        {
            claimed[k] = true;
            matched[j] = true;
        }
    }
    for (j, e) in desired.iter().enumerate().filter(|(_, e)| e.interface.is_empty()) {
        let add_name = format!("net{}", first_index + j);
        let same_network = |k: &usize| !claimed[*k] && current[*k].name == network(e);
        let found = (0..current.len())
            .filter(same_network)
            .find(|&k| current[k].interface == add_name)
            .or_else(|| (0..current.len()).find(same_network));
        if let Some(k) = found {
            claimed[k] = true;
            matched[j] = true;
        }
    }
    let mut in_use: Vec<String> = status.iter().map(|s| s.interface.clone()).collect();
    in_use.extend(
        desired
            .iter()
            .map(|e| e.interface.clone())
            .filter(|i| !i.is_empty()),
    );
    let mut to_add = Vec::new();
    for (j, e) in desired.iter().enumerate() {
        if matched[j] {
            continue;
        }
        let mut element = e.clone();
        if element.interface.is_empty() {
            let add_name = format!("net{}", first_index + j);
            element.interface = match in_use.contains(&add_name) {
                false => add_name,
                true => (1..)
                    .map(|n| format!("net{n}"))
                    .find(|n| !in_use.contains(n))
                    .unwrap_or_default(),
            };
            in_use.push(element.interface.clone());
        }
        to_add.push(element);
    }
    let to_remove = current
        .iter()
        .zip(&claimed)
        .filter(|(_, claimed)| !**claimed)
        .map(|(s, _)| {
            let (namespace, name) = weft_netconf::split_namespaced(&s.name, "");
            NetworkSelectionElement {
                namespace: namespace.into(),
                name: name.into(),
                interface: s.interface.clone(),
                ..Default::default()
            }
        })
        .collect();
    (to_add, to_remove)
}

#[cfg(test)]
mod tests;
