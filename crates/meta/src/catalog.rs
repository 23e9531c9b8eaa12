//! What planning may look up: NADs, the conf dir, and files/dirs named by `clusterNetwork` or
//! `defaultNetworks`. The agent answers from its watch caches and a directory read; planning
//! itself stays pure.

use std::collections::BTreeMap;

use weft_netconf::NetworkAttachmentDefinition;

use crate::devices::PodDeviceEntry;

/// A path as seen by the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathEntry {
    /// Could not be read; the text is the I/O error.
    Missing(String),
    /// A regular file's contents.
    File(Vec<u8>),
    /// A directory's regular files, `(file name, contents)`.
    Dir(Vec<(String, Vec<u8>)>),
}

/// Lookups planning needs. Implementations must not block on I/O per call (use caches).
pub trait NetworkCatalog {
    /// The NAD `namespace/name`, if known.
    fn nad(&self, namespace: &str, name: &str) -> Option<&NetworkAttachmentDefinition>;
    /// The files of the meta-plugin's `confDir`, `(file name, contents)`.
    fn conf_dir_files(&self) -> &[(String, Vec<u8>)];
    /// A path named by `clusterNetwork` / `defaultNetworks`.
    fn path(&self, path: &str) -> PathEntry;
    /// The kubelet's device allocations (every pod's; planning picks the pod's). Asked only
    /// when a planned NAD names a resource.
    fn pod_devices(&self) -> Vec<PodDeviceEntry> {
        Vec::new()
    }
}

/// An in-memory catalog (tests, and the agent's snapshot of its caches).
#[derive(Clone, Debug, Default)]
pub struct MemoryCatalog {
    /// NADs by `(namespace, name)`.
    pub nads: BTreeMap<(String, String), NetworkAttachmentDefinition>,
    /// Contents of `confDir`.
    pub conf_dir_files: Vec<(String, Vec<u8>)>,
    /// Paths by their full name.
    pub paths: BTreeMap<String, PathEntry>,
    /// The kubelet's device allocations.
    pub devices: Vec<PodDeviceEntry>,
}

impl MemoryCatalog {
    /// Add a NAD with the given `spec.config`.
    pub fn with_nad(mut self, namespace: &str, name: &str, config: &str) -> Self {
        let mut nad = NetworkAttachmentDefinition::default();
        nad.metadata.namespace = Some(namespace.into());
        nad.metadata.name = name.into();
        nad.spec.config = config.into();
        self.nads.insert((namespace.into(), name.into()), nad);
        self
    }

    /// Add a conf-dir file.
    pub fn with_conf_file(mut self, file: &str, contents: &str) -> Self {
        self.conf_dir_files
            .push((file.into(), contents.as_bytes().to_vec()));
        self
    }

    /// Add device allocations.
    pub fn with_devices(mut self, entries: Vec<PodDeviceEntry>) -> Self {
        self.devices.extend(entries);
        self
    }

    /// Add a path.
    pub fn with_path(mut self, path: &str, entry: PathEntry) -> Self {
        self.paths.insert(path.into(), entry);
        self
    }
}

impl NetworkCatalog for MemoryCatalog {
    fn nad(&self, namespace: &str, name: &str) -> Option<&NetworkAttachmentDefinition> {
        self.nads.get(&(namespace.to_owned(), name.to_owned()))
    }
    fn conf_dir_files(&self) -> &[(String, Vec<u8>)] {
        &self.conf_dir_files
    }
    fn path(&self, path: &str) -> PathEntry {
        self.paths
            .get(path)
            .cloned()
            .unwrap_or_else(|| PathEntry::Missing(format!("stat {path}: no such file or directory")))
    }
    fn pod_devices(&self) -> Vec<PodDeviceEntry> {
        self.devices.clone()
    }
}
