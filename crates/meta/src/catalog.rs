//! What planning may look up: NADs, the conf dir, and files/dirs named by `clusterNetwork` or
//! `defaultNetworks`. The agent answers from its watch caches and a directory read; planning
//! itself stays pure.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

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

    /// Whether one of its NADs names a device resource (planning then asks for the kubelet's
    /// device allocations).
    pub fn names_a_resource(&self) -> bool {
        self.nads.values().any(|n| {
            n.metadata
                .annotations
                .contains_key(weft_netconf::RESOURCE_NAME_ANNOTATION)
        })
    }
}

/// `inner`, noting every NAD planning asks for that `inner` does not hold. The agent plans
/// against the NADs a request names, not a copy of every NAD of the cluster: it plans, fetches
/// what was [`missing`](Self::into_missing), and plans again until nothing new is asked for
/// (planning is pure and cheap; a NAD that is not there stays missing and is not fetched twice).
pub struct RecordingCatalog<'a> {
    inner: &'a MemoryCatalog,
    missing: RefCell<BTreeSet<(String, String)>>,
}

impl<'a> RecordingCatalog<'a> {
    /// Lookups answered from `inner`.
    pub fn new(inner: &'a MemoryCatalog) -> Self {
        Self {
            inner,
            missing: RefCell::default(),
        }
    }

    /// The NADs `(namespace, name)` asked for and not in `inner`.
    pub fn into_missing(self) -> BTreeSet<(String, String)> {
        self.missing.into_inner()
    }
}

impl NetworkCatalog for RecordingCatalog<'_> {
    fn nad(&self, namespace: &str, name: &str) -> Option<&NetworkAttachmentDefinition> {
        let found = self.inner.nad(namespace, name);
        if found.is_none() {
            self.missing
                .borrow_mut()
                .insert((namespace.to_owned(), name.to_owned()));
        }
        found
    }
    fn conf_dir_files(&self) -> &[(String, Vec<u8>)] {
        self.inner.conf_dir_files()
    }
    fn path(&self, path: &str) -> PathEntry {
        self.inner.path(path)
    }
    fn pod_devices(&self) -> Vec<PodDeviceEntry> {
        self.inner.pod_devices()
    }
}

/// Planning with the NADs it names fetched as it names them: [`plan`](Self::plan) on a
/// catalog, fetch what it asks for and record each with [`found`](Self::found), plan again,
/// until a pass asks for nothing new. Every pass fetches at least one NAD more or is the last,
/// so there are at most as many passes as NADs named, plus one. [`plan_fetching`] drives it
/// with a sync fetch; the agent with its store's async reads.
#[derive(Debug, Default)]
pub struct NadFetches {
    fetched: BTreeSet<(String, String)>,
}

impl NadFetches {
    /// Plan on `catalog`: the outcome when planning asked for no NAD that `catalog` lacks and
    /// was not fetched already (found missing), else the NADs `(namespace, name)` to fetch.
    pub fn plan<T>(
        &self,
        catalog: &MemoryCatalog,
        plan: impl FnOnce(&dyn NetworkCatalog) -> T,
    ) -> Result<T, Vec<(String, String)>> {
        let recording = RecordingCatalog::new(catalog);
        let outcome = plan(&recording);
        let wanted: Vec<_> = recording
            .into_missing()
            .into_iter()
            .filter(|key| !self.fetched.contains(key))
            .collect();
        match wanted.is_empty() {
            true => Ok(outcome),
            false => Err(wanted),
        }
    }

    /// Record the fetch of `key` into `catalog` (`None`: there is no such NAD).
    pub fn found(
        &mut self,
        catalog: &mut MemoryCatalog,
        key: (String, String),
        nad: Option<NetworkAttachmentDefinition>,
    ) {
        if let Some(nad) = nad {
            catalog.nads.insert(key.clone(), nad);
        }
        self.fetched.insert(key);
    }

    /// How many NADs were fetched so far.
    pub fn count(&self) -> usize {
        self.fetched.len()
    }
}

/// Run `plan` with the NADs it names fetched by `fetch` (`None`: there is no such NAD) into
/// `catalog`, which holds no NAD or some ([`NadFetches`] with a sync fetch: what tests hold
/// planning to).
pub fn plan_fetching<T>(
    catalog: &mut MemoryCatalog,
    mut fetch: impl FnMut(&str, &str) -> Option<NetworkAttachmentDefinition>,
    mut plan: impl FnMut(&dyn NetworkCatalog) -> T,
) -> T {
    let mut fetches = NadFetches::default();
    loop {
        match fetches.plan(catalog, &mut plan) {
            Ok(outcome) => return outcome,
            Err(wanted) => {
                for key in wanted {
                    let nad = fetch(&key.0, &key.1);
                    fetches.found(catalog, key, nad);
                }
            }
        }
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
