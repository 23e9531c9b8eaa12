//! Launcher pod annotations: what a new launcher pod carries, and what a running one must be
//! updated to after hot-plug / hot-unplug.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};
use weft_netconf::{
    DEFAULT_NETWORK_ANNOTATION, NETWORKS_ANNOTATION, NetworkSelectionElement, NetworkStatus, split_namespaced,
};

use crate::api::{BindingKind, Interface, InterfaceBindingPlugin, Network, VirtualMachineInstance};
use crate::config::ClusterConfig;
use crate::names::{
    DEFAULT_BRIDGE_NAME, NameScheme, PodInterfaceNames, hashed_scheme, scheme_from_network_statuses,
    scheme_names, scheme_of_pod,
};
use crate::netstatus::network_statuses;

/// Downward-API payload for SR-IOV and device-info binding plugins.
pub const NETWORK_INFO_ANNOTATION: &str = "kubevirt.io/network-info";
/// Istio: virtual interfaces whose traffic the sidecar intercepts (legacy key).
pub const ISTIO_KUBEVIRT_INTERFACES_ANNOTATION: &str = "traffic.sidecar.istio.io/kubevirtInterfaces";
/// Istio: virtual interfaces to reroute.
pub const ISTIO_REROUTE_ANNOTATION: &str = "istio.io/reroute-virtual-interfaces";
/// A binding plugin asking for the network-info downward API.
pub const DOWNWARD_API_DEVICE_INFO: &str = "device-info";

/// VMI annotation prefixes that are never copied to the launcher pod.
const NOT_COPIED_PREFIXES: &[&str] = &[
    "kubectl.kubernetes.io",
    "kubevirt.io/storage-observed-api-version",
    "kubevirt.io/latest-observed-api-version",
];

/// Why the pod annotations could not be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    /// An interface names a binding plugin the KubeVirt CR does not register.
    #[error("unable to find the network binding plugin '{0}' in Kubevirt configuration")]
    UnknownBindingPlugin(String),
}

/// Annotations keyed by name.
pub type Annotations = BTreeMap<String, String>;

/// JSON exactly as Go's `encoding/json` writes it: compact, and `<`, `>`, `&`, U+2028, U+2029
/// escaped (they can only occur inside strings, so a textual replacement is exact).
pub fn go_json<T: Serialize + ?Sized>(value: &T) -> String {
    let json = serde_json::to_string(value).unwrap_or_default();
    if !json.contains(['<', '>', '&', '\u{2028}', '\u{2029}']) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            other => out.push(other),
        }
    }
    out
}

/// The networks of `interfaces`, in interface order (KubeVirt's `FilterNetworksByInterfaces`).
pub fn networks_of_interfaces<'a>(interfaces: &[&Interface], networks: &'a [Network]) -> Vec<&'a Network> {
    interfaces
        .iter()
        .filter_map(|iface| networks.iter().find(|n| n.name == iface.name))
        .collect()
}

/// KubeVirt's `GenerateCNIAnnotationFromNameScheme`: the networks annotation value for the
/// given networks (in the given order); `""` when there is nothing to attach.
pub fn networks_annotation(
    namespace: &str,
    interfaces: &[Interface],
    networks: &[&Network],
    names: &PodInterfaceNames,
    plugins: &BTreeMap<String, InterfaceBindingPlugin>,
) -> Result<String, AnnotationError> {
    let mut elements = Vec::new();
    for net in networks {
        if let Some(multus) = net.multus.as_ref().filter(|m| !m.default) {
            let (ns, name) = split_namespaced(&multus.network_name, namespace);
            let mac = interfaces
                .iter()
                .find(|i| i.name == net.name)
                .map(|i| i.mac_address.clone())
                .unwrap_or_default();
            elements.push(NetworkSelectionElement {
                name: name.into(),
                namespace: ns.into(),
                mac,
                interface: names.get(&net.name).cloned().unwrap_or_default(),
                ..Default::default()
            });
        }
        let plugin_name = interfaces
            .iter()
            .find(|i| i.name == net.name)
            .and_then(|i| i.binding.as_ref())
            .map(|b| b.name.as_str());
        if let Some(plugin_name) = plugin_name {
            let plugin = plugins
                .get(plugin_name)
                .ok_or_else(|| AnnotationError::UnknownBindingPlugin(plugin_name.into()))?;
            if !plugin.network_attachment_definition.is_empty() {
                let (ns, name) = split_namespaced(&plugin.network_attachment_definition, namespace);
                let mut args = Map::new();
                args.insert("logicNetworkName".into(), Value::String(net.name.clone()));
                elements.push(NetworkSelectionElement {
                    name: name.into(),
                    namespace: ns.into(),
                    cni_args: Some(args),
                    ..Default::default()
                });
            }
        }
    }
    Ok(if elements.is_empty() {
        String::new()
    } else {
        go_json(&elements)
    })
}

/// [`networks_annotation`] for `networks` of `vmi` (its namespace, interfaces and the
/// cluster's binding plugins).
fn vmi_networks_annotation(
    vmi: &VirtualMachineInstance,
    networks: &[&Network],
    names: &PodInterfaceNames,
    config: &ClusterConfig,
) -> Result<String, AnnotationError> {
    networks_annotation(
        vmi.namespace(),
        vmi.spec.interfaces(),
        networks,
        names,
        &config.binding_plugins,
    )
}

/// Sets the networks annotation to `value`, unless there is nothing to request (KubeVirt
/// leaves the annotation out then).
fn insert_networks_annotation(annotations: &mut Annotations, value: String) {
    if !value.is_empty() {
        annotations.insert(NETWORKS_ANNOTATION.into(), value);
    }
}

/// KubeVirt's `Generator.Generate`: the network annotations of a new launcher pod (hashed
/// names; absent interfaces dropped; networks in interface order).
pub fn network_annotations(
    vmi: &VirtualMachineInstance,
    config: &ClusterConfig,
) -> Result<Annotations, AnnotationError> {
    let interfaces = vmi.spec.interfaces();
    let present: Vec<&Interface> = interfaces.iter().filter(|i| !i.is_absent()).collect();
    let networks = networks_of_interfaces(&present, &vmi.spec.networks);
    let mut annotations = Annotations::new();
    let owned: Vec<Network> = networks.iter().map(|n| (*n).clone()).collect();
    let names = hashed_scheme(&owned);
    insert_networks_annotation(
        &mut annotations,
        vmi_networks_annotation(vmi, &networks, &names, config)?,
    );
    if let Some(default) = networks
        .iter()
        .find_map(|n| n.multus.as_ref().filter(|m| m.default))
    {
        annotations.insert(DEFAULT_NETWORK_ANNOTATION.into(), default.network_name.clone());
    }
    if interfaces.iter().any(|i| i.masquerade.is_some()) {
        annotations.insert(
            ISTIO_KUBEVIRT_INTERFACES_ANNOTATION.into(),
            DEFAULT_BRIDGE_NAME.into(),
        );
        annotations.insert(ISTIO_REROUTE_ANNOTATION.into(), DEFAULT_BRIDGE_NAME.into());
    }
    Ok(annotations)
}

/// Every annotation of a new launcher pod KubeVirt derives from the VMI: the VMI's own
/// annotations (minus kubectl / observed-api-version ones), overridden by
/// [`network_annotations`].
pub fn launcher_pod_annotations(
    vmi: &VirtualMachineInstance,
    config: &ClusterConfig,
) -> Result<Annotations, AnnotationError> {
    let mut annotations: Annotations = vmi
        .metadata
        .annotations
        .iter()
        .filter(|(k, _)| !NOT_COPIED_PREFIXES.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    annotations.extend(network_annotations(vmi, config)?);
    Ok(annotations)
}

/// KubeVirt's `GenerateFromSource`: a migration target pod keeps the source pod's ordinal
/// names when the naming upgrade gate is off. Returns the annotations to override.
pub fn migration_target_annotations(
    vmi: &VirtualMachineInstance,
    source_pod_annotations: &Annotations,
    config: &ClusterConfig,
) -> Result<Annotations, AnnotationError> {
    let mut annotations = Annotations::new();
    if config.gates.pod_secondary_interface_naming_upgrade {
        return Ok(annotations);
    }
    let statuses = network_statuses(source_pod_annotations);
    if scheme_of_pod(&statuses) != NameScheme::Ordinal {
        return Ok(annotations);
    }
    // KubeVirt passes every spec network, in spec order (absent ones included) and numbers
    // them over the same list.
    let networks: Vec<&Network> = vmi.spec.networks.iter().collect();
    let names = scheme_names(NameScheme::Ordinal, &vmi.spec.networks);
    insert_networks_annotation(
        &mut annotations,
        vmi_networks_annotation(vmi, &networks, &names, config)?,
    );
    Ok(annotations)
}

/// KubeVirt's `GenerateFromActivePod`: the annotations to set on a running, ready launcher pod
/// (network-info for SR-IOV/device-info interfaces, and the networks annotation after
/// hot-plug/unplug). Only keys whose value must change are returned; generation errors mean
/// "no update", as in KubeVirt.
pub fn running_pod_annotations(
    vmi: &VirtualMachineInstance,
    pod_annotations: &Annotations,
    config: &ClusterConfig,
) -> Annotations {
    let mut update = Annotations::new();
    let statuses = network_statuses(pod_annotations);
    if let Some(info) = network_info(vmi, &statuses, config) {
        update.insert(NETWORK_INFO_ANNOTATION.into(), info);
    }
    if let Some(networks) = hotplug_networks_annotation(vmi, pod_annotations, &statuses, config) {
        update.insert(NETWORKS_ANNOTATION.into(), networks);
    }
    update
}

fn hotplug_networks_annotation(
    vmi: &VirtualMachineInstance,
    pod_annotations: &Annotations,
    statuses: &[NetworkStatus],
    config: &ClusterConfig,
) -> Option<String> {
    let interfaces = vmi.spec.interfaces();
    let status = vmi.status_interfaces();
    let has_status = |name: &str| status.iter().any(|s| s.name == name);
    let to_annotate: Vec<&Interface> = interfaces
        .iter()
        .filter(|i| !i.is_absent())
        .filter(|i| i.sriov.is_none() || has_status(&i.name))
        .collect();
    let required =
        to_annotate.iter().any(|i| !has_status(&i.name)) || interfaces.iter().any(Interface::is_absent);
    if !required {
        return None;
    }
    let networks = networks_of_interfaces(&to_annotate, &vmi.spec.networks);
    // KubeVirt names over the networks it annotates (present interfaces, plugged SR-IOV, in
    // interface order), not over spec.networks: under the ordinal scheme an SR-IOV interface
    // still waiting for its device, an absent one, or interface order that differs from network
    // order changes the `netN` a network gets.
    let owned: Vec<Network> = networks.iter().map(|n| (*n).clone()).collect();
    let names = scheme_from_network_statuses(&owned, statuses);
    let value = vmi_networks_annotation(vmi, &networks, &names, config).ok()?;
    let current = pod_annotations
        .get(NETWORKS_ANNOTATION)
        .map(String::as_str)
        .unwrap_or("");
    (value != current).then_some(value)
}

#[derive(Serialize)]
struct NetworkInfo<'a> {
    interfaces: Vec<NetworkInfoInterface<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NetworkInfoInterface<'a> {
    network: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    device_info: Option<&'a Value>,
    #[serde(skip_serializing_if = "str::is_empty")]
    mac: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    mtu: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// The `kubevirt.io/network-info` value for SR-IOV and device-info plugin interfaces, from the
/// pod's network-status; `None` when no such interface is attached yet.
pub fn network_info(
    vmi: &VirtualMachineInstance,
    statuses: &[NetworkStatus],
    config: &ClusterConfig,
) -> Option<String> {
    let names = scheme_from_network_statuses(&vmi.spec.networks, statuses);
    let mut entries: Vec<NetworkInfoInterface<'_>> = vmi
        .spec
        .interfaces()
        .iter()
        .filter(|iface| match iface.binding_kind() {
            BindingKind::Sriov => true,
            BindingKind::Plugin(p) => config
                .binding_plugins
                .get(p)
                .is_some_and(|p| p.downward_api == DOWNWARD_API_DEVICE_INFO),
            _ => false,
        })
        .filter_map(|iface| {
            let pod_iface = names.get(&iface.name)?;
            let status = statuses.iter().find(|s| &s.interface == pod_iface)?;
            Some(NetworkInfoInterface {
                network: &iface.name,
                device_info: status.device_info.as_ref(),
                mac: &status.mac,
                mtu: status.mtu,
            })
        })
        .collect();
    if entries.is_empty() {
        return None;
    }
    entries.sort_by(|a, b| a.network.cmp(b.network));
    Some(go_json(&NetworkInfo { interfaces: entries }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_json_escapes_like_go() {
        let v = serde_json::json!([{"name": "a<b>&c\u{2028}"}]);
        assert_eq!(go_json(&v), r#"[{"name":"a\u003cb\u003e\u0026c\u2028"}]"#);
        assert_eq!(go_json(&serde_json::json!({"a": "plain"})), r#"{"a":"plain"}"#);
    }

    #[test]
    fn nad_references() {
        assert_eq!(split_namespaced("ns/a/b", "x"), ("ns", "a/b"));
        assert_eq!(split_namespaced("a", "x"), ("x", "a"));
    }
}
