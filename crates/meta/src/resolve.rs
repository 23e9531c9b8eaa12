//! Resolving a network reference to a delegate configuration: annotation elements (NADs only),
//! and `clusterNetwork` / `defaultNetworks` entries (NAD, conf name, directory or file; Multus
//! `getNetDelegate`, docs/upstream/multus.md §2.2).

use serde::{Deserialize, Serialize};
use weft_netconf::{
    ConfDirError, DelegateConfig, DelegateConfigError, NadConfigError, delegate_config_from_nad,
    find_config_in_dir,
};

use crate::catalog::{NetworkCatalog, PathEntry};

/// Where a delegate's configuration came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum NetworkSource {
    /// A NetworkAttachmentDefinition.
    Nad {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// A conf-dir configuration found by network name.
    ConfName {
        /// The network name.
        name: String,
    },
    /// A file (directly, or the first of a directory).
    File {
        /// Its path.
        path: String,
    },
    /// An inline `delegates` entry of the meta-plugin configuration.
    Inline {
        /// Its position.
        index: usize,
    },
}

/// Why a reference could not be resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The NAD does not exist.
    #[error(
        "getKubernetesDelegate: cannot find a network-attachment-definition ({name}) in namespace ({namespace}): not found"
    )]
    NadNotFound {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The NAD exists but gives no usable configuration.
    #[error("getKubernetesDelegate: {0}")]
    NadConfig(#[from] NadConfigError),
    /// Neither a NAD nor a conf-dir configuration has that name.
    #[error("getNetDelegate: cannot find network: {0}")]
    NotFound(String),
    /// A conf-dir file met during the search is broken.
    #[error("getNetDelegate: {0}")]
    ConfDir(ConfDirError),
    /// A path could not be read.
    #[error("getNetDelegate: {0}")]
    Path(String),
    /// A file is not a usable configuration.
    #[error("error loading CNI config file {path}: {detail}")]
    BadFile {
        /// The file.
        path: String,
        /// Why.
        detail: String,
    },
}

/// A resolved configuration with its network-status display name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// `<ns>/<nad>` for NADs, the CNI config `name` otherwise.
    pub display_name: String,
    /// Where it came from.
    pub source: NetworkSource,
    /// The configuration, lossless.
    pub config: DelegateConfig,
}

/// A NAD-backed attachment (annotation networks, default-network annotation).
pub fn resolve_nad(
    catalog: &dyn NetworkCatalog,
    conf_dir: &str,
    namespace: &str,
    name: &str,
) -> Result<Resolved, ResolveError> {
    let nad = catalog
        .nad(namespace, name)
        .ok_or_else(|| ResolveError::NadNotFound {
            namespace: namespace.into(),
            name: name.into(),
        })?;
    let config = delegate_config_from_nad(nad, conf_dir, catalog.conf_dir_files())?;
    Ok(Resolved {
        display_name: format!("{namespace}/{name}"),
        source: NetworkSource::Nad {
            namespace: namespace.into(),
            name: name.into(),
        },
        config,
    })
}

/// A `clusterNetwork` / `defaultNetworks` entry. Without `/`: the NAD
/// `<multus_namespace>/<value>` (only a missing NAD falls through), then the conf-dir
/// configuration named `value`. With `/`: a directory (its first `.conf`/`.conflist`/`.json`
/// file in name order) or a file.
pub fn resolve_static_network(
    catalog: &dyn NetworkCatalog,
    conf_dir: &str,
    multus_namespace: &str,
    value: &str,
) -> Result<Resolved, ResolveError> {
    if !value.contains('/') {
        match resolve_nad(catalog, conf_dir, multus_namespace, value) {
            Err(ResolveError::NadNotFound { .. }) => {}
            other => return other,
        }
        let text = find_config_in_dir(conf_dir, catalog.conf_dir_files(), value).map_err(|e| match e {
            ConfDirError::NotFound { .. } | ConfDirError::Empty { .. } => {
                ResolveError::NotFound(value.into())
            }
            other => ResolveError::ConfDir(other),
        })?;
        let config = parse_file_config(&format!("{conf_dir}/{value}"), text, false)?;
        return Ok(Resolved {
            display_name: config.name().to_owned(),
            source: NetworkSource::ConfName { name: value.into() },
            config,
        });
    }
    let (path, bytes) = match catalog.path(value) {
        PathEntry::Missing(err) => return Err(ResolveError::Path(err)),
        PathEntry::File(bytes) => (value.to_owned(), bytes),
        PathEntry::Dir(mut files) => {
            files.retain(|(f, _)| [".conf", ".conflist", ".json"].iter().any(|e| f.ends_with(e)));
            files.sort_by(|a, b| a.0.cmp(&b.0));
            // The meta-plugin's own file (`00-weft.conflist`, first in the node's conf dir) is
            // never the network a directory means: the first other file is.
            let is_meta_plugin = |bytes: &[u8]| {
                std::str::from_utf8(bytes)
                    .is_ok_and(|t| matches!(DelegateConfig::parse(t), Err(DelegateConfigError::MetaPlugin)))
            };
            let Some((file, bytes)) = files.into_iter().find(|(_, bytes)| !is_meta_plugin(bytes)) else {
                return Err(ResolveError::NotFound(value.into()));
            };
            (format!("{}/{file}", value.trim_end_matches('/')), bytes)
        }
    };
    let text = String::from_utf8(bytes).map_err(|_| ResolveError::BadFile {
        path: path.clone(),
        detail: "not UTF-8".into(),
    })?;
    let config = parse_file_config(&path, text, path.ends_with(".conflist"))?;
    Ok(Resolved {
        display_name: config.name().to_owned(),
        source: NetworkSource::File { path },
        config,
    })
}

fn parse_file_config(path: &str, text: String, must_be_list: bool) -> Result<DelegateConfig, ResolveError> {
    let config = DelegateConfig::parse(text).map_err(|e| ResolveError::BadFile {
        path: path.into(),
        detail: match e {
            DelegateConfigError::NoTypeOrPlugins => {
                "no 'type'; perhaps this is supposed to be a .conflist?".into()
            }
            other => other.to_string(),
        },
    })?;
    if must_be_list && !config.is_list() {
        return Err(ResolveError::BadFile {
            path: path.into(),
            detail: "no 'plugins' key".into(),
        });
    }
    Ok(config)
}
