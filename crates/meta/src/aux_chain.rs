//! The auxiliary CNI chain (`auxiliaryCNIChainName`, docs/upstream/multus.md §3.1 step 7): a
//! conflist made of a `passthru` plugin followed by the plugin configs found in
//! `<dir(clusterNetwork)>/<chain>/*.conf`, run as one more secondary delegate of every pod.

use serde_json::{Map, Value, json};
use weft_netconf::DelegateConfig;

use crate::catalog::{NetworkCatalog, PathEntry};
use crate::config::MetaConfig;
use crate::resolve::{NetworkSource, Resolved};

/// The plugin type heading the chain (it returns an empty result; the chain's plugins do the
/// work). weft serves it as a multi-call name of its binary.
pub const PASSTHRU_TYPE: &str = "passthru";

/// Why the auxiliary chain cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuxChainError {
    /// `clusterNetwork` is a name, so there is no directory to look in.
    #[error("auxiliary chain used but ClusterNetwork must be a path, and it is not a path: {0}")]
    NotAPath(String),
    /// A plugin file of the chain is not a plugin config.
    #[error("auxiliary chain {chain}: {file}: {detail}")]
    BadPlugin {
        /// The chain name.
        chain: String,
        /// The file.
        file: String,
        /// Why.
        detail: String,
    },
}

/// The chain's directory: `<dir(clusterNetwork)>/<chain>` (`None` without a chain or when
/// `clusterNetwork` is not a path). The agent reads it for the catalog.
pub fn aux_chain_dir(config: &MetaConfig) -> Option<String> {
    let chain = &config.auxiliary_cni_chain_name;
    if chain.is_empty() || !config.cluster_network.contains('/') {
        return None;
    }
    let cluster = config.cluster_network.trim_end_matches('/');
    let dir = match cluster.rsplit_once('/') {
        Some(("", _)) => "/",
        Some((dir, _)) => dir,
        None => ".",
    };
    Some(format!("{}/{chain}", dir.trim_end_matches('/')))
}

/// The auxiliary chain delegate, if configured and it has at least one plugin besides
/// `passthru` (else `None`, as Multus). Plugins are the directory's `.conf` files in name order
/// (libcni `NetworkPluginConfsFromFiles`); a missing directory holds none.
pub fn resolve_aux_chain(
    config: &MetaConfig,
    catalog: &dyn NetworkCatalog,
) -> Result<Option<Resolved>, AuxChainError> {
    let chain = &config.auxiliary_cni_chain_name;
    if chain.is_empty() {
        return Ok(None);
    }
    let dir = aux_chain_dir(config).ok_or_else(|| AuxChainError::NotAPath(config.cluster_network.clone()))?;
    let mut files = match catalog.path(&dir) {
        PathEntry::Dir(files) => files,
        PathEntry::File(_) | PathEntry::Missing(_) => Vec::new(),
    };
    files.retain(|(name, _)| name.ends_with(".conf"));
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut plugins = vec![json!({"type": PASSTHRU_TYPE, "name": "passthru-cni"})];
    for (file, bytes) in files {
        let bad = |detail: String| AuxChainError::BadPlugin {
            chain: chain.clone(),
            file: format!("{dir}/{file}"),
            detail,
        };
        let plugin: Map<String, Value> =
            serde_json::from_slice(&bytes).map_err(|e| bad(format!("error parsing configuration: {e}")))?;
        if plugin
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            return Err(bad("error parsing configuration: missing 'type'".into()));
        }
        plugins.push(Value::Object(plugin));
    }
    if plugins.len() < 2 {
        return Ok(None);
    }
    let list = json!({"cniVersion": config.cni_version, "name": chain, "plugins": plugins});
    let config = DelegateConfig::parse(list.to_string()).map_err(|e| AuxChainError::BadPlugin {
        chain: chain.clone(),
        file: dir.clone(),
        detail: e.to_string(),
    })?;
    Ok(Some(Resolved {
        display_name: chain.clone(),
        source: NetworkSource::File { path: dir },
        config,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::MemoryCatalog;

    fn config(cluster: &str) -> MetaConfig {
        MetaConfig::parse(
            json!({"cniVersion": "1.0.0", "clusterNetwork": cluster, "auxiliaryCNIChainName": "vendor-chain"})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
    }

    fn dir(files: &[(&str, &str)]) -> PathEntry {
        PathEntry::Dir(
            files
                .iter()
                .map(|(n, c)| (n.to_string(), c.as_bytes().to_vec()))
                .collect(),
        )
    }

    #[test]
    fn chain_dir_is_beside_the_cluster_network_file() {
        assert_eq!(
            aux_chain_dir(&config("/run/multus/cni/net.d/10-ovn.conf")).as_deref(),
            Some("/run/multus/cni/net.d/vendor-chain")
        );
        assert_eq!(
            aux_chain_dir(&config("/10-a.conf")).as_deref(),
            Some("/vendor-chain")
        );
        assert_eq!(aux_chain_dir(&config("cluster")), None);
        let err = resolve_aux_chain(&config("cluster"), &MemoryCatalog::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "auxiliary chain used but ClusterNetwork must be a path, and it is not a path: cluster"
        );
    }

    #[test]
    fn passthru_then_the_conf_files_in_order() {
        let catalog = MemoryCatalog::default().with_path(
            "/etc/net.d/vendor-chain",
            dir(&[
                ("20-b.conf", r#"{"type":"sbr"}"#),
                ("10-a.conf", r#"{"type":"tuning","sysctl":{"x":"1"}}"#),
                ("notes.txt", "ignored"),
                ("30-c.json", r#"{"type":"ignored-too"}"#),
            ]),
        );
        let resolved = resolve_aux_chain(&config("/etc/net.d/10-x.conflist"), &catalog)
            .unwrap()
            .unwrap();
        assert_eq!(resolved.display_name, "vendor-chain");
        let v = resolved.config.to_value();
        assert_eq!(v["name"], "vendor-chain");
        assert_eq!(v["cniVersion"], "1.0.0");
        let types: Vec<&str> = v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, vec!["passthru", "tuning", "sbr"]);
        assert_eq!(v["plugins"][0]["name"], "passthru-cni");
        assert_eq!(v["plugins"][1]["sysctl"]["x"], "1");
    }

    #[test]
    fn the_chain_runs_last_as_a_numbered_secondary() {
        let catalog = MemoryCatalog::default()
            .with_path(
                "/etc/net.d/10-c.conf",
                PathEntry::File(br#"{"cniVersion":"1.0.0","name":"cluster","type":"ptp"}"#.to_vec()),
            )
            .with_path("/etc/net.d/vendor-chain", dir(&[("1.conf", r#"{"type":"sbr"}"#)]))
            .with_nad("ns", "a", r#"{"cniVersion":"1.0.0","type":"bridge"}"#);
        let config = config("/etc/net.d/10-c.conf");
        let mut request = crate::AttachmentRequest {
            container_id: "c".into(),
            ifname: "eth0".into(),
            ..Default::default()
        };
        request.k8s.pod_namespace = "ns".into();
        let pod = crate::Pod {
            namespace: "ns".into(),
            name: "p".into(),
            annotations: [(weft_netconf::NETWORKS_ANNOTATION.to_string(), "a@x".to_string())].into(),
            ..Default::default()
        };
        let plans = crate::plan_add(&config, &request, Some(&pod), &catalog).unwrap();
        let names: Vec<(&str, &str, bool)> = plans
            .iter()
            .map(|p| (p.display_name.as_str(), p.ifname.as_str(), p.is_master))
            .collect();
        assert_eq!(
            names,
            vec![
                ("cluster", "eth0", true),
                ("ns/a", "x", false),
                ("vendor-chain", "net2", false)
            ]
        );
        let without_pod = crate::plan_add(&config, &request, None, &catalog).unwrap();
        assert_eq!(without_pod.last().unwrap().ifname, "net1");
        let mut no_path = config.clone();
        no_path.cluster_network = "cluster".into();
        let (plans, skipped) = crate::plan_del_recompute(
            &no_path,
            &request,
            None,
            &catalog.clone().with_conf_file(
                "10-c.conf",
                r#"{"cniVersion":"1.0.0","name":"cluster","type":"ptp"}"#,
            ),
        )
        .unwrap();
        assert_eq!(plans.len(), 1, "DEL goes on without the chain");
        assert_eq!(skipped.len(), 1);
    }

    #[test]
    fn no_plugins_no_chain_and_bad_files_are_named() {
        let empty = MemoryCatalog::default();
        assert_eq!(
            resolve_aux_chain(&config("/etc/net.d/a.conf"), &empty).unwrap(),
            None
        );
        let bad = MemoryCatalog::default()
            .with_path("/etc/net.d/vendor-chain", dir(&[("1.conf", r#"{"name":"x"}"#)]));
        let err = resolve_aux_chain(&config("/etc/net.d/a.conf"), &bad)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "auxiliary chain vendor-chain: /etc/net.d/vendor-chain/1.conf: error parsing configuration: missing 'type'"
        );
    }
}
