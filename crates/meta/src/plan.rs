//! Delegate planning: from the configuration, the request, the pod and the catalog to the ordered
//! list of delegates to run (docs/upstream/multus.md §2.2, §2.5, §3.1–§3.3, §3.5, §5).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weft_netconf::{
    AnnotationError, Bandwidth, DEFAULT_NETWORK_ANNOTATION, DelegateConfig, DelegateConfigError,
    NETWORKS_ANNOTATION, NetworkSelectionElement, PortMapping, RESOURCE_NAME_ANNOTATION,
    parse_default_network_annotation, parse_networks_annotation,
};

use crate::args::{K8sArgs, delegate_cni_args};
use crate::aux_chain::{AuxChainError, resolve_aux_chain};
use crate::catalog::NetworkCatalog;
use crate::config::MetaConfig;
use crate::devices::{
    DeviceAllocator, DeviceAttachment, device_attachment, unknown_device_info_file, with_device_id,
};
use crate::gateway::{DefaultRoutePlan, GatewayError, plan_default_routes};
use crate::isolation::{IsolationError, check_isolation};
use crate::resolve::{NetworkSource, ResolveError, Resolved, resolve_nad, resolve_static_network};

/// The CNI request as the runtime made it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentRequest {
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_NETNS`.
    pub netns: String,
    /// `CNI_IFNAME` (the cluster network's interface, normally `eth0`).
    pub ifname: String,
    /// The runtime's `CNI_ARGS`, raw.
    pub cni_args: String,
    /// Pod identity parsed from `CNI_ARGS`.
    pub k8s: K8sArgs,
}

/// The pod, as far as planning cares.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

/// What the selection element asked for this attachment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentRequests {
    /// `interface` (empty: none).
    pub interface: String,
    /// `mac`.
    pub mac: String,
    /// `ips`.
    pub ips: Vec<String>,
    /// `infiniband-guid`.
    pub infiniband_guid: String,
    /// `deviceID`.
    pub device_id: String,
    /// `portMappings`.
    pub port_mappings: Vec<PortMapping>,
    /// `bandwidth`.
    pub bandwidth: Option<Bandwidth>,
    /// `cni-args`.
    pub cni_args: Option<Map<String, Value>>,
    /// `ipam-claim-reference` (read by claim-aware IPAM; weft passes it on).
    pub ipam_claim_reference: String,
}

impl From<&NetworkSelectionElement> for AttachmentRequests {
    fn from(e: &NetworkSelectionElement) -> Self {
        Self {
            interface: e.interface.clone(),
            mac: e.mac.clone(),
            ips: e.ips.clone(),
            infiniband_guid: e.infiniband_guid.clone(),
            device_id: e.device_id.clone(),
            port_mappings: e.port_mappings.clone(),
            bandwidth: e.bandwidth.clone(),
            cni_args: e.cni_args.clone(),
            ipam_claim_reference: e.ipam_claim_reference.clone(),
        }
    }
}

/// One delegate to run, everything decided.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegatePlan {
    /// Network-status name: `<ns>/<nad>` for NADs, the config `name` otherwise.
    pub display_name: String,
    /// Where the configuration came from.
    pub source: NetworkSource,
    /// The configuration to invoke (lossless; `cni-args` merged into `args.cni`).
    pub config: DelegateConfig,
    /// The cluster network: its result is the one returned to the runtime.
    pub is_master: bool,
    /// `CNI_IFNAME` for this delegate.
    pub ifname: String,
    /// `CNI_ARGS` pairs for every verb (legacy `MAC`/`IP` are added for ADD only).
    pub cni_args: Vec<(String, String)>,
    /// Capability args; the executor puts into each plugin's `runtimeConfig` only the keys
    /// that plugin declares in `capabilities` (libcni rule).
    pub capability_args: Map<String, Value>,
    /// The element's requests.
    pub requests: AttachmentRequests,
    /// Default-route handling.
    pub default_route: DefaultRoutePlan,
    /// The device given to a secondary delegate (from its NAD's resource name or the
    /// element's `deviceID`) and its device-info files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceAttachment>,
    /// A NAD naming a device resource, without a known device: the device-info file an
    /// earlier ADD may have left, which DEL removes ([`DelegatePlan::device_info_file`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_device_info_file: Option<String>,
}

impl DelegatePlan {
    /// The CNI network name (libcni cache identity with container id and ifname).
    pub fn network_name(&self) -> &str {
        self.config.name()
    }

    /// The per-attachment device-info file DEL removes, if any.
    pub fn device_info_file(&self) -> Option<&str> {
        self.device
            .as_ref()
            .map(|device| device.cni_device_info_file.as_str())
            .or(self.unknown_device_info_file.as_deref())
    }

    /// `CNI_ARGS` for ADD: the common pairs then `MAC=` and `IP=` (comma-joined) when
    /// requested (Multus's legacy path).
    pub fn add_cni_args(&self) -> Vec<(String, String)> {
        let mut args = self.cni_args.clone();
        if !self.requests.mac.is_empty() {
            args.push(("MAC".into(), self.requests.mac.clone()));
        }
        if !self.requests.ips.is_empty() {
            args.push(("IP".into(), self.requests.ips.join(",")));
        }
        args
    }

    /// `CNI_ARGS` for DEL, CHECK (no legacy `MAC`/`IP`).
    pub fn del_cni_args(&self) -> Vec<(String, String)> {
        self.cni_args.clone()
    }
}

/// Why an ADD cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// An annotation is malformed.
    #[error("{annotation}: {source}")]
    Annotation {
        /// Which annotation.
        annotation: &'static str,
        /// Why.
        source: AnnotationError,
    },
    /// The cluster network cannot be resolved.
    #[error("GetDefaultNetworks: failed to get clusterNetwork {value} in namespace {namespace}: {source}")]
    ClusterNetwork {
        /// `clusterNetwork`.
        value: String,
        /// `multusNamespace`.
        namespace: String,
        /// Why.
        source: Box<ResolveError>,
    },
    /// A `defaultNetworks` entry cannot be resolved.
    #[error("defaultNetworks entry {value}: {source}")]
    DefaultNetwork {
        /// The entry.
        value: String,
        /// Why.
        source: Box<ResolveError>,
    },
    /// An annotation network cannot be resolved.
    #[error("GetNetworkDelegates: failed getting the delegate: {0}")]
    Network(Box<ResolveError>),
    /// The default-network annotation's NAD cannot be resolved.
    #[error("tryLoadK8sPodDefaultNetwork: {0}")]
    DefaultNetworkOverride(Box<ResolveError>),
    /// Namespace isolation forbids a reference.
    #[error(transparent)]
    Isolation(#[from] IsolationError),
    /// `cni-args` could not be merged.
    #[error("network {network}: cannot merge cni-args: {source}")]
    CniArgs {
        /// The network.
        network: String,
        /// Why.
        source: DelegateConfigError,
    },
    /// A requested interface name is invalid.
    #[error("network {network}: invalid interface name {ifname:?}: {reason}")]
    InvalidIfname {
        /// The network.
        network: String,
        /// The name.
        ifname: String,
        /// Why.
        reason: &'static str,
    },
    /// Two delegates would get the same interface.
    #[error("interface name {ifname} is used by both {first} and {second}")]
    DuplicateIfname {
        /// The name.
        ifname: String,
        /// First network.
        first: String,
        /// Second network.
        second: String,
    },
    /// Conflicting default-route requests.
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    /// The auxiliary chain cannot be built.
    #[error(transparent)]
    AuxChain(#[from] AuxChainError),
    /// The device ID could not be set in the configuration.
    #[error("network {network}: cannot set deviceID: {source}")]
    DeviceId {
        /// The network.
        network: String,
        /// Why.
        source: DelegateConfigError,
    },
}

/// A delegate before naming and argument assembly.
struct Candidate {
    resolved: Resolved,
    is_master: bool,
    element: Option<NetworkSelectionElement>,
    /// The NAD's `k8s.v1.cni.cncf.io/resourceName` (set only when the pod is known).
    resource_name: String,
}

/// Plan an ADD (Multus `CmdAdd` steps 4–5): the cluster network (or inline `delegates`), the
/// default-network override, `defaultNetworks` (not for `systemNamespaces` pods), then the
/// networks annotation, with namespace isolation, ifnames, default routes, `CNI_ARGS` and
/// capability args. `pod` is `None` when the pod is unknown (static delegates only).
pub fn plan_add(
    config: &MetaConfig,
    request: &AttachmentRequest,
    pod: Option<&Pod>,
    catalog: &dyn NetworkCatalog,
) -> Result<Vec<DelegatePlan>, PlanError> {
    let mut candidates = static_candidates(config, request, catalog)?;
    if let Some(pod) = pod {
        apply_default_network_override(config, pod, catalog, &mut candidates)?;
        for element in annotation_elements(pod)? {
            candidates.push(annotation_candidate(config, pod, catalog, element)?);
        }
    }
    if let Some(resolved) = resolve_aux_chain(config, catalog)? {
        candidates.push(aux_candidate(resolved));
    }
    let mut devices = pod_devices(catalog, pod, &mut candidates);
    finish(config, request, candidates, false, &mut devices)
}

/// Plan a DEL when there is no cache: as [`plan_add`], but a broken annotation, a missing NAD
/// or an isolation violation drops only that network (returned in the second list) as long as
/// the static delegates resolve.
pub fn plan_del_recompute(
    config: &MetaConfig,
    request: &AttachmentRequest,
    pod: Option<&Pod>,
    catalog: &dyn NetworkCatalog,
) -> Result<(Vec<DelegatePlan>, Vec<PlanError>), PlanError> {
    let mut candidates = static_candidates(config, request, catalog)?;
    let mut skipped = Vec::new();
    if let Some(pod) = pod {
        if let Err(e) = apply_default_network_override(config, pod, catalog, &mut candidates) {
            skipped.push(e);
        }
        match annotation_elements(pod) {
            Ok(elements) => {
                for element in elements {
                    match annotation_candidate(config, pod, catalog, element) {
                        Ok(c) => candidates.push(c),
                        Err(e) => skipped.push(e),
                    }
                }
            }
            Err(e) => skipped.push(e),
        }
    }
    match resolve_aux_chain(config, catalog) {
        Ok(Some(resolved)) => candidates.push(aux_candidate(resolved)),
        Ok(None) => {}
        Err(e) => skipped.push(e.into()),
    }
    let mut devices = pod_devices(catalog, pod, &mut candidates);
    // An invalid or duplicate ifname or an ECMP request must not stop a teardown.
    Ok((finish(config, request, candidates, true, &mut devices)?, skipped))
}

/// The auxiliary chain runs after every other network, named `net<N>` like them.
fn aux_candidate(resolved: Resolved) -> Candidate {
    Candidate {
        resolved,
        is_master: false,
        element: None,
        resource_name: String::new(),
    }
}

/// With a known pod: the resource name of every NAD-backed candidate, and the pod's devices
/// (docs/upstream/multus.md §3.3.4; without a pod, no device is drawn).
fn pod_devices(
    catalog: &dyn NetworkCatalog,
    pod: Option<&Pod>,
    candidates: &mut [Candidate],
) -> DeviceAllocator {
    let Some(pod) = pod else {
        return DeviceAllocator::default();
    };
    let mut any = false;
    for c in candidates.iter_mut() {
        let NetworkSource::Nad { namespace, name } = &c.resolved.source else {
            continue;
        };
        if let Some(resource) = catalog
            .nad(namespace, name)
            .and_then(|nad| nad.metadata.annotations.get(RESOURCE_NAME_ANNOTATION))
            .filter(|r| !r.is_empty())
        {
            c.resource_name = resource.clone();
            any = true;
        }
    }
    match any {
        true => DeviceAllocator::for_pod(&catalog.pod_devices(), &pod.uid),
        false => DeviceAllocator::default(),
    }
}

fn static_candidates(
    config: &MetaConfig,
    request: &AttachmentRequest,
    catalog: &dyn NetworkCatalog,
) -> Result<Vec<Candidate>, PlanError> {
    if config.cluster_network.is_empty() {
        return Ok(config
            .delegates
            .iter()
            .enumerate()
            .map(|(index, c)| Candidate {
                resolved: Resolved {
                    display_name: c.name().to_owned(),
                    source: NetworkSource::Inline { index },
                    config: c.clone(),
                },
                is_master: index == 0,
                element: None,
                resource_name: String::new(),
            })
            .collect());
    }
    let ns = &config.multus_namespace;
    let cluster =
        resolve_static_network(catalog, &config.conf_dir, ns, &config.cluster_network).map_err(|source| {
            PlanError::ClusterNetwork {
                value: config.cluster_network.clone(),
                namespace: ns.clone(),
                source: Box::new(source),
            }
        })?;
    let mut out = vec![Candidate {
        resolved: cluster,
        is_master: true,
        element: None,
        resource_name: String::new(),
    }];
    if !config.is_system_namespace(&request.k8s.pod_namespace) {
        for value in &config.default_networks {
            let resolved =
                resolve_static_network(catalog, &config.conf_dir, ns, value).map_err(|source| {
                    PlanError::DefaultNetwork {
                        value: value.clone(),
                        source: Box::new(source),
                    }
                })?;
            out.push(Candidate {
                resolved,
                is_master: false,
                element: None,
                resource_name: String::new(),
            });
        }
    }
    Ok(out)
}

/// The default-network annotation replaces delegate 0 and becomes master. weft applies
/// namespace isolation to it (Multus does not), allowing the pod's namespace, the global
/// namespaces and `multusNamespace`.
fn apply_default_network_override(
    config: &MetaConfig,
    pod: &Pod,
    catalog: &dyn NetworkCatalog,
    candidates: &mut [Candidate],
) -> Result<(), PlanError> {
    let Some(value) = pod.annotations.get(DEFAULT_NETWORK_ANNOTATION) else {
        return Ok(());
    };
    let element = parse_default_network_annotation(value, &config.multus_namespace).map_err(|source| {
        PlanError::Annotation {
            annotation: DEFAULT_NETWORK_ANNOTATION,
            source,
        }
    })?;
    let Some(element) = element else {
        return Ok(());
    };
    if element.namespace != config.multus_namespace {
        check_isolation(config, &pod.namespace, &element.namespace, &element.name)?;
    }
    let resolved = resolve_nad(catalog, &config.conf_dir, &element.namespace, &element.name)
        .map_err(|e| PlanError::DefaultNetworkOverride(Box::new(e)))?;
    let resolved = with_cni_args(resolved, &element)?;
    if let Some(first) = candidates.first_mut() {
        *first = Candidate {
            resolved,
            is_master: true,
            element: Some(element),
            resource_name: String::new(),
        };
    }
    Ok(())
}

fn annotation_elements(pod: &Pod) -> Result<Vec<NetworkSelectionElement>, PlanError> {
    let value = pod
        .annotations
        .get(NETWORKS_ANNOTATION)
        .map(String::as_str)
        .unwrap_or("");
    parse_networks_annotation(value, &pod.namespace).map_err(|source| PlanError::Annotation {
        annotation: NETWORKS_ANNOTATION,
        source,
    })
}

fn annotation_candidate(
    config: &MetaConfig,
    pod: &Pod,
    catalog: &dyn NetworkCatalog,
    element: NetworkSelectionElement,
) -> Result<Candidate, PlanError> {
    check_isolation(config, &pod.namespace, &element.namespace, &element.name)?;
    let resolved = resolve_nad(catalog, &config.conf_dir, &element.namespace, &element.name)
        .map_err(|e| PlanError::Network(Box::new(e)))?;
    Ok(Candidate {
        resolved: with_cni_args(resolved, &element)?,
        is_master: false,
        element: Some(element),
        resource_name: String::new(),
    })
}

/// `cni-args` shallow-merged into `args.cni` of the config or of every plugin of a list
/// (annotation wins; `vectors/multus/12-cni-args-injection.json`).
fn with_cni_args(mut resolved: Resolved, element: &NetworkSelectionElement) -> Result<Resolved, PlanError> {
    let Some(cni_args) = element.cni_args.as_ref() else {
        return Ok(resolved);
    };
    resolved.config = merge_cni_args(&resolved.config, cni_args).map_err(|source| PlanError::CniArgs {
        network: resolved.display_name.clone(),
        source,
    })?;
    Ok(resolved)
}

/// Merge `cni_args` into `args.cni` (every plugin of a list), annotation values winning.
pub fn merge_cni_args(
    config: &DelegateConfig,
    cni_args: &Map<String, Value>,
) -> Result<DelegateConfig, DelegateConfigError> {
    config.map_plugins(|plugin| {
        let args = plugin.entry("args").or_insert_with(|| Value::Object(Map::new()));
        if !args.is_object() {
            *args = Value::Object(Map::new());
        }
        let cni = args
            .as_object_mut()
            .expect("made an object")
            .entry("cni")
            .or_insert_with(|| Value::Object(Map::new()));
        if !cni.is_object() {
            *cni = Value::Object(Map::new());
        }
        let cni = cni.as_object_mut().expect("made an object");
        for (k, v) in cni_args {
            cni.insert(k.clone(), v.clone());
        }
    })
}

/// `lenient` (DEL): naming and route conflicts do not fail the plan. Devices are drawn from
/// `devices` in delegate order.
fn finish(
    config: &MetaConfig,
    request: &AttachmentRequest,
    candidates: Vec<Candidate>,
    lenient: bool,
    devices: &mut DeviceAllocator,
) -> Result<Vec<DelegatePlan>, PlanError> {
    let ifnames = assign_ifnames(request, &candidates, lenient)?;
    let route_requests: Vec<(&str, Option<&Vec<IpAddr>>)> = candidates
        .iter()
        .map(|c| {
            (
                c.resolved.display_name.as_str(),
                c.element.as_ref().and_then(|e| e.default_route.as_ref()),
            )
        })
        .collect();
    let routes = match plan_default_routes(&route_requests) {
        Err(_) if lenient => vec![DefaultRoutePlan::default(); candidates.len()],
        other => other?,
    };
    let cni_args = delegate_cni_args(&request.k8s, &request.cni_args);
    let mut plans = Vec::with_capacity(candidates.len());
    for ((c, ifname), default_route) in candidates.into_iter().zip(ifnames).zip(routes) {
        let requests = c
            .element
            .as_ref()
            .map(AttachmentRequests::from)
            .unwrap_or_default();
        let allocated = match c.resource_name.is_empty() {
            true => None,
            false => devices.next(&c.resource_name),
        };
        let mut config_to_run = c.resolved.config;
        if let Some(id) = &allocated {
            config_to_run = with_device_id(&config_to_run, id).map_err(|source| PlanError::DeviceId {
                network: c.resolved.display_name.clone(),
                source,
            })?;
        }
        let mut capability_args = capability_args(config, c.is_master, &requests);
        // Multus gives the master only the runtime's runtimeConfig: no device capability args.
        let device = match c.is_master {
            true => None,
            false => device_attachment(
                &config.device_info_dir,
                &c.resource_name,
                allocated,
                &requests.device_id,
                &c.resolved.display_name,
                &request.container_id,
                &ifname,
            ),
        };
        let unknown_device_info_file = match c.is_master {
            true => None,
            false => unknown_device_info_file(
                device.as_ref(),
                &config.device_info_dir,
                &c.resource_name,
                &c.resolved.display_name,
                &request.container_id,
                &ifname,
            ),
        };
        if let Some(device) = &device {
            capability_args.insert("deviceID".into(), Value::String(device.device_id.clone()));
            capability_args.insert(
                "CNIDeviceInfoFile".into(),
                Value::String(device.cni_device_info_file.clone()),
            );
        }
        plans.push(DelegatePlan {
            capability_args,
            display_name: c.resolved.display_name,
            source: c.resolved.source,
            config: config_to_run,
            is_master: c.is_master,
            ifname,
            cni_args: cni_args.clone(),
            requests,
            default_route,
            device,
            unknown_device_info_file,
        });
    }
    Ok(plans)
}

/// Multus `getIfname`: the requested name, else `CNI_IFNAME` for the master, else `net<i>`
/// with `i` the position in the full list. weft also validates names and rejects duplicates
/// here, before anything runs (Multus finds them inside the netns mid-ADD).
fn assign_ifnames(
    request: &AttachmentRequest,
    candidates: &[Candidate],
    lenient: bool,
) -> Result<Vec<String>, PlanError> {
    let mut names: Vec<String> = Vec::with_capacity(candidates.len());
    for (i, c) in candidates.iter().enumerate() {
        let requested = c.element.as_ref().map(|e| e.interface.as_str()).unwrap_or("");
        let ifname = if !requested.is_empty() {
            requested.to_owned()
        } else if c.is_master {
            if request.ifname.is_empty() {
                "eth0".to_owned()
            } else {
                request.ifname.clone()
            }
        } else {
            format!("net{i}")
        };
        if lenient {
            names.push(ifname);
            continue;
        }
        weft_cni::validate_ifname(&ifname).map_err(|reason| PlanError::InvalidIfname {
            network: c.resolved.display_name.clone(),
            ifname: ifname.clone(),
            reason,
        })?;
        if let Some(j) = names.iter().position(|n| *n == ifname) {
            return Err(PlanError::DuplicateIfname {
                ifname,
                first: candidates[j].resolved.display_name.clone(),
                second: c.resolved.display_name.clone(),
            });
        }
        names.push(ifname);
    }
    Ok(names)
}

/// Capability args (docs/upstream/multus.md §3.3.2). The master gets the runtime's `runtimeConfig`
/// (every key). Secondaries get only their element's requests, unless `runtimeConfigToAllDelegates`
/// restores Multus's behaviour of using the runtime's values as their base (NPWG §7.5 says the
/// runtime's values are for the cluster network only; docs/upstream/multus.md §3.3.2).
fn capability_args(
    config: &MetaConfig,
    is_master: bool,
    requests: &AttachmentRequests,
) -> Map<String, Value> {
    if is_master {
        return config.runtime_config.clone();
    }
    secondary_capability_args(config, requests)
}

/// A secondary delegate's capability args: its element's requests over the runtime's values
/// (only with `runtimeConfigToAllDelegates`).
pub(crate) fn secondary_capability_args(
    config: &MetaConfig,
    requests: &AttachmentRequests,
) -> Map<String, Value> {
    let mut args = if config.runtime_config_to_all_delegates {
        config.runtime_config.clone()
    } else {
        Map::new()
    };
    if !requests.port_mappings.is_empty() {
        args.insert("portMappings".into(), to_value(&requests.port_mappings));
    }
    if let Some(bandwidth) = &requests.bandwidth {
        args.insert("bandwidth".into(), to_value(bandwidth));
    }
    if !requests.ips.is_empty() {
        args.insert("ips".into(), to_value(&requests.ips));
    }
    if !requests.mac.is_empty() {
        args.insert("mac".into(), to_value(&requests.mac));
    }
    if !requests.infiniband_guid.is_empty() {
        args.insert("infinibandGUID".into(), to_value(&requests.infiniband_guid));
    }
    if !requests.device_id.is_empty() {
        args.insert("deviceID".into(), to_value(&requests.device_id));
    }
    // Multus emits neither when empty, whatever their source.
    for key in ["portMappings", "ips"] {
        if args
            .get(key)
            .is_some_and(|v| v.as_array().is_some_and(Vec::is_empty))
        {
            args.remove(key);
        }
    }
    args
}

fn to_value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("wire types serialise")
}

#[cfg(test)]
mod tests;
