//! Which delegates a pod gets, in order: the cluster network as the master (`eth0`), then every
//! network its `k8s.v1.cni.cncf.io/networks` annotation selects, each from its NAD.

use serde_json::{Map, Value};
use weft_cni::{AnyNetworkConfig, CniArgs, CniError, NetworkConfigList, RequestEnv, codes};
use weft_meta::MetaConfig;
use weft_netconf::{NetworkAttachmentDefinition, NetworkSelectionElement};
use weft_store::Api;

use super::Agent;
use super::cache::CachedDelegate;
use crate::kinds::Pod;

/// The pod a request is for, from CNI_ARGS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    /// Namespace (`default` when the runtime sends none).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID, when sent.
    pub uid: Option<String>,
    /// Sandbox id.
    pub infra_container_id: String,
}

impl PodRef {
    /// From CNI_ARGS.
    pub fn from_args(args: &CniArgs) -> Self {
        Self {
            namespace: args
                .pod_namespace()
                .filter(|s| !s.is_empty())
                .unwrap_or("default")
                .to_string(),
            name: args.pod_name().unwrap_or("").to_string(),
            uid: args
                .get(CniArgs::K8S_POD_UID)
                .filter(|s| !s.is_empty())
                .map(String::from),
            infra_container_id: args
                .get(CniArgs::K8S_POD_INFRA_CONTAINER_ID)
                .unwrap_or("")
                .to_string(),
        }
    }

    fn base_args(&self) -> Vec<(String, String)> {
        vec![
            ("IgnoreUnknown".into(), "true".into()),
            ("K8S_POD_NAMESPACE".into(), self.namespace.clone()),
            ("K8S_POD_NAME".into(), self.name.clone()),
            (
                "K8S_POD_INFRA_CONTAINER_ID".into(),
                self.infra_container_id.clone(),
            ),
            ("K8S_POD_UID".into(), self.uid.clone().unwrap_or_default()),
        ]
    }
}

/// A single plugin config as a one-plugin list (how runtimes run both kinds the same way).
pub fn into_list(config: AnyNetworkConfig) -> NetworkConfigList {
    match config {
        AnyNetworkConfig::List(list) => list,
        AnyNetworkConfig::Single(single) => NetworkConfigList::from_single(single),
    }
}

fn config_error(what: &str, e: impl ToString) -> CniError {
    CniError::new(codes::INVALID_NETWORK_CONFIG, what.to_string()).with_details(e.to_string())
}

/// The cluster network's config list (from the file `clusterNetwork` names).
pub fn cluster_list(config: &MetaConfig) -> Result<NetworkConfigList, CniError> {
    let path = &config.cluster_network;
    if path.is_empty() {
        return Err(CniError::new(
            codes::INVALID_NETWORK_CONFIG,
            "clusterNetwork is required",
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| config_error(&format!("clusterNetwork {path}"), e))?;
    AnyNetworkConfig::from_bytes(&bytes)
        .map(into_list)
        .map_err(|e| config_error(&format!("clusterNetwork {path}"), e))
}

fn cluster_delegate(config: &MetaConfig, env: &RequestEnv, pod: &PodRef) -> Result<CachedDelegate, CniError> {
    let list = cluster_list(config)?;
    Ok(CachedDelegate {
        name: list.name().to_string(),
        config: String::from_utf8_lossy(&list.to_bytes()).into_owned(),
        ifname: env.ifname.clone(),
        master: true,
        args: pod.base_args(),
        capability_args: config.runtime_config.clone(),
        result: None,
    })
}

/// Only the cluster network (DEL when nothing else is known).
pub async fn cluster_only(
    _agent: &Agent,
    config: &MetaConfig,
    env: &RequestEnv,
) -> Result<Vec<CachedDelegate>, CniError> {
    let pod = PodRef::from_args(&env.args);
    Ok(vec![cluster_delegate(config, env, &pod)?])
}

/// Every delegate of the pod, in attach order.
pub async fn plan(
    agent: &Agent,
    config: &MetaConfig,
    env: &RequestEnv,
    pod_ref: &PodRef,
    pod: Option<&Pod>,
) -> Result<Vec<CachedDelegate>, CniError> {
    let mut delegates = vec![cluster_delegate(config, env, pod_ref)?];
    let annotation = pod
        .and_then(|p| p.metadata.annotation(weft_netconf::NETWORKS_ANNOTATION))
        .unwrap_or("");
    let elements = weft_netconf::parse_networks_annotation(annotation, &pod_ref.namespace).map_err(|e| {
        CniError::new(
            codes::OBJECT_INVALID,
            format!("pod {}/{}: {e}", pod_ref.namespace, pod_ref.name),
        )
    })?;
    for (index, element) in elements.iter().enumerate() {
        delegates.push(secondary(agent, config, pod_ref, element, index + 1).await?);
    }
    Ok(delegates)
}

async fn secondary(
    agent: &Agent,
    config: &MetaConfig,
    pod: &PodRef,
    element: &NetworkSelectionElement,
    index: usize,
) -> Result<CachedDelegate, CniError> {
    if config.namespace_isolation
        && element.namespace != pod.namespace
        && !config.non_isolated_namespaces.contains(&element.namespace)
    {
        return Err(CniError::new(
            codes::FORBIDDEN,
            format!(
                "namespace isolation enabled, annotation violates permission, pod is in namespace {} but refers to target namespace {}",
                pod.namespace, element.namespace
            ),
        ));
    }
    let nad = Api::<NetworkAttachmentDefinition>::namespaced(agent.store.clone(), &element.namespace)
        .get(&element.name)
        .await
        .map_err(|e| {
            CniError::new(codes::TRY_AGAIN_LATER, "cannot read NetworkAttachmentDefinitions")
                .with_details(e.to_string())
        })?
        .ok_or_else(|| {
            CniError::new(
                codes::OBJECT_INVALID,
                format!(
                    "cannot find a network-attachment-definition ({}) in namespace ({})",
                    element.name, element.namespace
                ),
            )
        })?;
    let conf_files = read_conf_dir(&config.conf_dir);
    let delegate = weft_netconf::delegate_config_from_nad(&nad, &config.conf_dir, &conf_files)
        .map_err(|e| CniError::new(codes::INVALID_NETWORK_CONFIG, e.to_string()))?;
    let ifname = if !element.interface.is_empty() {
        element.interface.clone()
    } else {
        format!("net{index}")
    };
    let mut args = pod.base_args();
    let mut capability_args = Map::new();
    if !element.mac.is_empty() {
        args.push(("MAC".into(), element.mac.clone()));
        capability_args.insert("mac".into(), Value::String(element.mac.clone()));
    }
    if !element.ips.is_empty() {
        args.push(("IP".into(), element.ips.join(",")));
        capability_args.insert("ips".into(), Value::from(element.ips.clone()));
    }
    let mut text = delegate.text().to_string();
    if let Some(cni_args) = &element.cni_args {
        let mut value: Value = serde_json::from_str(&text).map_err(|e| config_error("delegate config", e))?;
        inject_cni_args(&mut value, cni_args);
        text = value.to_string();
    }
    Ok(CachedDelegate {
        name: format!("{}/{}", element.namespace, element.name),
        config: text,
        ifname,
        master: false,
        args,
        capability_args,
        result: None,
    })
}

fn inject_cni_args(config: &mut Value, cni_args: &Map<String, Value>) {
    let targets: Vec<&mut Value> = match config.get_mut("plugins").and_then(Value::as_array_mut) {
        Some(plugins) => plugins.iter_mut().collect(),
        None => vec![config],
    };
    for target in targets {
        let Some(map) = target.as_object_mut() else {
            continue;
        };
        let args = map.entry("args").or_insert_with(|| Value::Object(Map::new()));
        if let Some(args) = args.as_object_mut() {
            let cni = args.entry("cni").or_insert_with(|| Value::Object(Map::new()));
            if let Some(cni) = cni.as_object_mut() {
                for (k, v) in cni_args {
                    cni.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

fn read_conf_dir(dir: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    std::fs::read(e.path()).ok().map(|bytes| (name, bytes))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}
