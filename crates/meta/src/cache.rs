//! The per-container cache record (everything DEL needs, losslessly) and the DEL decision
//! (docs/upstream/multus.md §3.9, §3.10; issue 3: never silently skip when the cache is corrupt).

use serde::{Deserialize, Serialize};
use weft_cni::{CniResult, GcAttachment};

use crate::args::K8sArgs;
use crate::config::MetaConfig;
use crate::plan::{AttachmentRequest, DelegatePlan};

/// Version of the record layout; another version is treated as unreadable.
pub const CACHE_VERSION: u32 = 1;

/// What is cached per container, written before the first delegate runs and updated by
/// hot-plug.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheRecord {
    /// Layout version ([`CACHE_VERSION`]).
    pub version: u32,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_NETNS` at ADD.
    pub netns: String,
    /// `CNI_IFNAME` at ADD.
    pub ifname: String,
    /// Pod identity at ADD.
    pub k8s: K8sArgs,
    /// Every delegate in ADD order (lossless configs, ifnames, requests), hot-plugged ones last.
    pub delegates: Vec<DelegatePlan>,
    /// Each delegate's ADD result once known (same order; `None` before/without it): the
    /// `prevResult` of DEL and CHECK.
    #[serde(default)]
    pub results: Vec<Option<CniResult>>,
    /// The pod's network-status annotation value this ADD still has to write (the agent
    /// answered the runtime first: `weft agent --network-status after-reply`); `None` once it
    /// is written, or when the ADD wrote it before answering. Kept here, in the record the
    /// ADD writes anyway, so that a restarted agent writes it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_status: Option<String>,
    /// When the ADD completed (milliseconds since the epoch): of a pod's sandboxes on a node,
    /// the one added last is the pod's (a restarted agent writes only its network-status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_ms: Option<u64>,
}

/// Why a cache record cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// Not a record.
    #[error("cache record is corrupt: {0}")]
    Corrupt(String),
    /// A layout this build does not read.
    #[error("cache record has version {0}, expected {CACHE_VERSION}")]
    Version(u32),
    /// Written for another container.
    #[error("cache record belongs to container {found}, not {expected}")]
    OtherContainer {
        /// The request's container.
        expected: String,
        /// The record's container.
        found: String,
    },
}

impl CacheRecord {
    /// The record for an ADD.
    pub fn new(request: &AttachmentRequest, delegates: Vec<DelegatePlan>) -> Self {
        Self {
            version: CACHE_VERSION,
            container_id: request.container_id.clone(),
            netns: request.netns.clone(),
            ifname: request.ifname.clone(),
            k8s: request.k8s.clone(),
            delegates,
            results: Vec::new(),
            network_status: None,
            added_ms: None,
        }
    }

    /// The record with `value` as the network-status annotation still to write.
    pub fn with_pending_status(mut self, value: String) -> Self {
        self.network_status = Some(value);
        self
    }

    /// The record once the pod's network-status holds `written`: without it as pending, or
    /// `None` (nothing to change) when the record waits for another value (a later ADD of the
    /// same container) or for none.
    pub fn status_written(&self, written: &str) -> Option<Self> {
        (self.network_status.as_deref() == Some(written)).then(|| Self {
            network_status: None,
            ..self.clone()
        })
    }

    /// The record once ADD succeeded: every delegate's result (plan order).
    pub fn with_results(mut self, results: Vec<CniResult>) -> Self {
        self.results = results.into_iter().map(Some).collect();
        self
    }

    /// The record stamped with the time its ADD completed (`added_ms`).
    pub fn added_at(mut self, ms_since_epoch: u64) -> Self {
        self.added_ms = Some(ms_since_epoch);
        self
    }

    /// What a failed ADD still holds, for the runtime's DEL to retry: only the delegates
    /// it attached whose rollback DEL failed (`held`: plan index and ADD result, as
    /// [`crate::ExecutorError::Add`] reports them), nothing after a complete rollback. Never
    /// the failed delegate (its interface name may be another container's in a shared
    /// namespace, and a DEL of it would remove that container's interface), unless it is a
    /// conflist whose first plugins attached and whose undo of them failed: that interface is
    /// the ADD's own.
    pub fn holding(self, held: &[(usize, CniResult)]) -> Self {
        let (delegates, results) = held
            .iter()
            .filter_map(|(i, result)| self.delegates.get(*i).map(|d| (d.clone(), Some(result.clone()))))
            .unzip();
        Self {
            delegates,
            results,
            ..self
        }
    }

    /// Whether the record is pod `namespace`/`name`'s (a record without a namespace is the
    /// `default` namespace's, as the runtime's `K8S_POD_NAMESPACE` left out means).
    pub fn is_pod(&self, namespace: &str, name: &str) -> bool {
        self.pod_namespace() == namespace && self.k8s.pod_name == name
    }

    /// The namespace of the record's pod (`default` when the runtime left it out).
    pub fn pod_namespace(&self) -> &str {
        self.k8s.namespace_or_default()
    }

    /// Whether a hot-plug pass may act on this record for the pod now holding its name
    /// (`pod_uid`, with network-status `pod_status`): its ADD is done (every delegate has its
    /// result: an ADD still running, or one that failed, owns the pod, and its network-status
    /// write brings the pod back), the network-status the ADD left to write is on the pod
    /// (until then the pod's annotation does not show what is attached, and a hot-plug pass
    /// would plug everything again), and the pod is the one the ADD was for, not a new pod of
    /// the same name.
    pub fn hotplug_ready(&self, pod_uid: Option<&str>, pod_status: Option<&str>) -> bool {
        let attached = !self.delegates.is_empty()
            && self.results.len() == self.delegates.len()
            && self.results.iter().all(Option::is_some);
        let status_shown = self
            .network_status
            .as_deref()
            .is_none_or(|pending| pod_status == Some(pending));
        let replaced = pod_uid.is_some_and(|uid| !self.k8s.pod_uid.is_empty() && uid != self.k8s.pod_uid);
        attached && status_shown && !replaced
    }

    /// The cached ADD result of delegate `index`.
    pub fn result(&self, index: usize) -> Option<&CniResult> {
        self.results.get(index).and_then(Option::as_ref)
    }

    /// Serialised form (JSON).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a cache record serialises")
    }

    /// Read a record for `container_id`.
    pub fn decode(bytes: &[u8], container_id: &str) -> Result<Self, CacheError> {
        #[derive(Deserialize)]
        struct Header {
            version: u32,
        }
        let header: Header = serde_json::from_slice(bytes).map_err(|e| CacheError::Corrupt(e.to_string()))?;
        if header.version != CACHE_VERSION {
            return Err(CacheError::Version(header.version));
        }
        let record: Self = serde_json::from_slice(bytes).map_err(|e| CacheError::Corrupt(e.to_string()))?;
        if record.container_id != container_id {
            return Err(CacheError::OtherContainer {
                expected: container_id.into(),
                found: record.container_id,
            });
        }
        Ok(record)
    }

    /// The attachment on `ifname` with its cached result (hot-unplug DELs exactly this).
    pub fn attachment(&self, ifname: &str) -> Option<(&DelegatePlan, Option<&CniResult>)> {
        let index = self.delegates.iter().position(|d| d.ifname == ifname)?;
        Some((&self.delegates[index], self.result(index)))
    }

    /// The record with a hot-plugged attachment added (its result once known).
    pub fn with_attachment(mut self, plan: DelegatePlan, result: Option<CniResult>) -> Self {
        self.results.resize(self.delegates.len(), None);
        self.delegates.push(plan);
        self.results.push(result);
        self
    }

    /// The record as DEL runs it under `config`: cached lists lacking `cniVersion` get the
    /// configuration's (Multus `CmdDel` step 5).
    pub fn for_del(mut self, config: &MetaConfig) -> Self {
        for d in &mut self.delegates {
            if d.config.is_list() && !config.cni_version.is_empty() {
                d.config = d.config.with_cni_version_if_missing(&config.cni_version);
            }
        }
        self
    }

    /// The record without the attachment on `ifname` (hot-unplug).
    pub fn without_attachment(mut self, ifname: &str) -> Self {
        self.results.resize(self.delegates.len(), None);
        let keep: Vec<bool> = self.delegates.iter().map(|d| d.ifname != ifname).collect();
        let mut flags = keep.iter();
        self.delegates.retain(|_| *flags.next().expect("same length"));
        let mut flags = keep.iter();
        self.results.retain(|_| *flags.next().expect("same length"));
        self
    }
}

/// Where DEL gets its delegates from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DelDecision {
    /// The cached record (preferred even when the pod still exists): DEL its delegates in
    /// reverse with their cached results.
    FromCache(Box<CacheRecord>),
    /// Recompute with [`crate::plan_del_recompute`] from the configuration and the pod (or
    /// the configuration alone when the pod is gone). `corrupt` says why the cache was not
    /// used; the agent must log it — a corrupt cache never turns into a silent no-op.
    Recompute {
        /// The cache error, if there was a cache.
        corrupt: Option<CacheError>,
    },
    /// No cache and no pod: nothing was ever attached (the cache is written before the first
    /// delegate runs); DEL succeeds.
    NothingHeld,
}

/// Decide DEL's source. `cache` is the record's bytes if the file exists; `pod_known` whether
/// the pod could be read. Cached lists lacking `cniVersion` get the configuration's.
pub fn decide_del(
    config: &MetaConfig,
    cache: Option<&[u8]>,
    container_id: &str,
    pod_known: bool,
) -> DelDecision {
    match cache.map(|bytes| CacheRecord::decode(bytes, container_id)) {
        Some(Ok(record)) => DelDecision::FromCache(Box::new(record.for_del(config))),
        Some(Err(e)) => DelDecision::Recompute { corrupt: Some(e) },
        None if pod_known => DelDecision::Recompute { corrupt: None },
        None => DelDecision::NothingHeld,
    }
}

/// GC (CNI 1.1): every network the node's cached attachments use — not only the cluster
/// network, as Multus — each with the attachments that must be kept (its `(container, ifname)`
/// pairs across all records). One entry per CNI network name, in first-seen order; the
/// configuration is the first cached one.
pub fn gc_targets(records: &[CacheRecord]) -> Vec<(DelegatePlan, Vec<GcAttachment>)> {
    let mut out: Vec<(DelegatePlan, Vec<GcAttachment>)> = Vec::new();
    for record in records {
        for d in &record.delegates {
            let attachment = GcAttachment {
                container_id: record.container_id.clone(),
                ifname: d.ifname.clone(),
            };
            match out.iter_mut().find(|(p, _)| p.network_name() == d.network_name()) {
                Some((_, valid)) => valid.push(attachment),
                None => out.push((d.clone(), vec![attachment])),
            }
        }
    }
    out
}
