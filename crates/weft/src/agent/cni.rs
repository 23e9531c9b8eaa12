//! The meta-plugin on the agent. Decisions come from `weft_meta` (plan, cache record, DEL
//! plan); this module only gathers what they need (pod, NADs, conf files, cache bytes), runs
//! the plan through the executor on a blocking thread, and writes the cache and network-status.

use std::path::{Path, PathBuf};

use serde_json::Value;
use weft_cni::runtime::CniRuntime;
use weft_cni::{CniCommand, CniError, RequestEnv, codes};
use weft_meta::flow::{AddDecision, Gate, PodLookup, decide_add, decide_del_plan, plan_error_code};
use weft_meta::{
    AttachmentRequest, CacheAfterDel, CacheRecord, DelegatePlan, Executor, MemoryCatalog, MetaConfig,
    PathEntry,
};
use weft_netconf::NetworkAttachmentDefinition;
use weft_store::Api;

use super::Agent;
use super::routes::NetnsRouteEditor;
use super::status_writes::StatusWrite;
use crate::kinds::Pod;
use crate::protocol::CniRequest;

fn internal(msg: impl Into<String>, details: impl ToString) -> CniError {
    CniError::new(codes::IO_FAILURE, msg).with_details(details.to_string())
}

/// Run file work (the conf dir, the attachment cache, the device checkpoint, netns stats) on
/// the blocking pool, never on an async worker.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, CniError> {
    crate::sys::blocking(work)
        .await
        .map_err(|e| internal("blocking task failed", format!("{e:#}")))
}

/// Handle one request from the shim (`single`: a hot-plug `/delegate` request).
pub async fn handle(agent: &Agent, request: CniRequest, single: bool) -> Result<Option<Value>, CniError> {
    let env = RequestEnv::from_lookup(|k| request.env.get(k).cloned())?;
    let bytes = request.config_bytes()?;
    let bytes = overlay(&bytes, &agent.daemon_config)?;
    let config = MetaConfig::parse(&bytes).map_err(|e| {
        CniError::new(codes::INVALID_NETWORK_CONFIG, "invalid weft configuration").with_details(e.to_string())
    })?;
    let mut request = AttachmentRequest::from_request_env(&env);
    let netns = request.netns.clone();
    let forbidden = if single {
        None
    } else {
        blocking(move || forbidden_netns(&netns)).await?
    };
    let readiness = &config.readiness_indicator_file;
    let gates = weft_meta::flow::gates(
        env.command,
        &request.netns,
        forbidden,
        !readiness.is_empty(),
        single,
    );
    for gate in gates {
        match gate {
            Gate::Refuse(error) => return Err(error),
            Gate::DelWithoutNetns => {
                tracing::warn!(netns = %request.netns, container = %request.container_id, "DEL with CNI_NETNS = {}: run without the namespace", forbidden.unwrap_or_default());
                request.netns.clear();
            }
            Gate::ProceedWarnIfNotReady => {
                let file = readiness.clone();
                // DEL goes on whatever this check says (even if it could not run).
                if !blocking(move || Path::new(&file).exists()).await.unwrap_or(false) {
                    tracing::warn!(path = %readiness, "readiness indicator file missing; DEL goes on");
                }
            }
            Gate::WaitForReadiness => {
                super::autoconf::wait_for_readiness(readiness, super::autoconf::READINESS_WAIT)
                    .await
                    .map_err(|e| CniError::new(codes::TRY_AGAIN_LATER, e))?
            }
        }
    }
    match env.command {
        CniCommand::Add => {
            let result = add(agent, &config, &request).await;
            if let Err(error) = &result {
                super::pod_events::add_failed(agent, &request, error);
            }
            result.map(Some)
        }
        CniCommand::Del => del(agent, &config, &request).await.map(|()| None),
        CniCommand::Check => check(agent, &request).await.map(|()| None),
        CniCommand::Status => status(agent, &config).await.map(|()| None),
        CniCommand::Gc => gc(agent).await.map(|()| None),
        CniCommand::Version => Err(CniError::new(
            codes::INVALID_ENVIRONMENT,
            "VERSION is answered by the shim",
        )),
    }
}

/// What `netns` is if it is a namespace no CNI request may configure: the agent's own (on a
/// node, the host's) or pid 1's. A path that cannot be read is left to the delegates to report.
fn forbidden_netns(netns: &str) -> Option<&'static str> {
    if netns.is_empty() {
        return None;
    }
    let target = weft_host::NsId::of(netns).ok()?;
    let forbidden: Vec<(weft_host::NsId, &'static str)> = [
        ("/proc/self/ns/net", "the weft agent's own network namespace"),
        ("/proc/1/ns/net", "the host network namespace (pid 1's)"),
    ]
    .into_iter()
    .filter_map(|(path, what)| weft_host::NsId::of(path).ok().map(|id| (id, what)))
    .collect();
    weft_host::forbidden_netns(target, &forbidden)
}

/// The request's config with every key of the daemon config overlaid (Multus thick mode).
fn overlay(bytes: &[u8], daemon: &serde_json::Map<String, Value>) -> Result<Vec<u8>, CniError> {
    if daemon.is_empty() {
        return Ok(bytes.to_vec());
    }
    let Value::Object(request) = serde_json::from_slice(bytes).map_err(|e| {
        CniError::new(codes::DECODING_FAILURE, "config is not valid JSON").with_details(e.to_string())
    })?
    else {
        return Err(CniError::new(
            codes::DECODING_FAILURE,
            "config is not a JSON object",
        ));
    };
    let merged = weft_meta::install::overlay_daemon_config(&request, daemon, false);
    serde_json::to_vec(&merged).map_err(|e| internal("config", e))
}

/// The pod of a request, as planning sees it (`None`: not in the store).
async fn pod_of(agent: &Agent, request: &AttachmentRequest) -> Result<Option<weft_meta::Pod>, CniError> {
    pod_from(&agent.store, request).await
}

/// The pod of an ADD. A pod the watch cache does not hold (yet) is read from the API server
/// itself; one the API server does not have either is a retriable error, never a success with
/// no network (Multus's empty result after a cache lag starts pods without their NICs,
/// multus-cni #1387, #1312). Only a request naming no pod gets Multus's empty result.
async fn pod_for_add(agent: &Agent, request: &AttachmentRequest) -> Result<Option<weft_meta::Pod>, CniError> {
    if let Some(pod) = pod_of(agent, request).await? {
        return Ok(Some(pod));
    }
    if request.k8s.pod_name.is_empty() {
        return Ok(None);
    }
    match pod_from(&agent.ipam_store, request).await? {
        Some(pod) => Ok(Some(pod)),
        None => Err(CniError::new(
            codes::TRY_AGAIN_LATER,
            format!(
                "pod {}/{} does not exist",
                request.k8s.namespace_or_default(),
                request.k8s.pod_name
            ),
        )
        .with_details(
            "neither the agent's watch cache nor the API server has it (not created yet, or deleted): nothing was attached; retry",
        )),
    }
}

async fn pod_from(
    store: &std::sync::Arc<dyn weft_store::Store>,
    request: &AttachmentRequest,
) -> Result<Option<weft_meta::Pod>, CniError> {
    let (ns, name) = (&request.k8s.pod_namespace, &request.k8s.pod_name);
    let ns = if ns.is_empty() { "default" } else { ns.as_str() };
    if name.is_empty() {
        return Ok(None);
    }
    let pod = Api::<Pod>::namespaced(store.clone(), ns)
        .get(name)
        .await
        .map_err(|e| {
            CniError::new(codes::TRY_AGAIN_LATER, format!("cannot read pod {ns}/{name}"))
                .with_details(e.to_string())
        })?;
    Ok(pod.map(|p| weft_meta::Pod {
        namespace: ns.to_string(),
        name: name.clone(),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        annotations: p.metadata.annotations.clone(),
    }))
}

fn path_entry(path: &str) -> PathEntry {
    let p = Path::new(path);
    if p.is_dir() {
        PathEntry::Dir(super::autoconf::read_dir_files(p))
    } else {
        match std::fs::read(p) {
            Ok(bytes) => PathEntry::File(bytes),
            Err(e) => PathEntry::Missing(format!("stat {path}: {e}")),
        }
    }
}

/// What planning may look up besides NADs: the conf dir and the files `clusterNetwork` /
/// `defaultNetworks` name, in one trip to the blocking pool. NADs are fetched as planning names
/// them ([`plan_with_nads`]).
async fn files_catalog(config: &MetaConfig) -> Result<MemoryCatalog, CniError> {
    let (conf_dir, paths) = (config.conf_dir.clone(), config.static_paths());
    let (conf_dir_files, paths) = blocking(move || {
        let conf_dir_files = super::autoconf::read_dir_files(Path::new(&conf_dir));
        let paths = paths
            .into_iter()
            .map(|path| {
                let entry = path_entry(&path);
                (path, entry)
            })
            .collect();
        (conf_dir_files, paths)
    })
    .await?;
    Ok(MemoryCatalog {
        conf_dir_files,
        paths,
        ..Default::default()
    })
}

/// Most NADs one planning may fetch: far more than any pod names, so only a planner that kept
/// naming new ones (a bug) reaches it.
const MAX_FETCHED_NADS: usize = 4096;

/// What planning has looked up so far: the files, the NADs fetched, and whether the kubelet's
/// device allocations were read. One per request, or per hot-plug pass (its elements share it).
struct Snapshot {
    catalog: MemoryCatalog,
    devices_read: bool,
}

impl Snapshot {
    async fn of(config: &MetaConfig) -> Result<Self, CniError> {
        Ok(Self {
            catalog: files_catalog(config).await?,
            devices_read: false,
        })
    }
}

/// Run `plan` (pure) with the NADs it names, read from the store (the agent's watch cache) as it
/// names them: plan, fetch what it asked for, plan again until it asks for nothing new
/// (`weft_meta::NadFetches`, driven with the store's async reads). A request costs the NADs it
/// names, not a copy of every NAD of the cluster. The kubelet's device allocations are read
/// when a NAD fetched names a resource.
async fn plan_with_nads<T>(
    agent: &Agent,
    config: &MetaConfig,
    plan: impl FnMut(&dyn weft_meta::NetworkCatalog) -> T,
) -> Result<T, CniError> {
    plan_in(agent, config, &mut Snapshot::of(config).await?, plan).await
}

/// [`plan_with_nads`] on a snapshot that may already hold some NADs (kept for the next plan).
async fn plan_in<T>(
    agent: &Agent,
    config: &MetaConfig,
    snapshot: &mut Snapshot,
    mut plan: impl FnMut(&dyn weft_meta::NetworkCatalog) -> T,
) -> Result<T, CniError> {
    let mut fetches = weft_meta::NadFetches::default();
    loop {
        if !snapshot.devices_read && snapshot.catalog.names_a_resource() {
            let file = config.device_checkpoint_file.clone();
            snapshot.catalog.devices = blocking(move || device_allocations(&file)).await?;
            snapshot.devices_read = true;
        }
        let wanted = match fetches.plan(&snapshot.catalog, &mut plan) {
            Ok(outcome) => return Ok(outcome),
            Err(wanted) => wanted,
        };
        if fetches.count() + wanted.len() > MAX_FETCHED_NADS {
            return Err(internal(
                "planning named too many NetworkAttachmentDefinitions",
                format!("more than {MAX_FETCHED_NADS}"),
            ));
        }
        for (namespace, name) in wanted {
            let nad = Api::<NetworkAttachmentDefinition>::namespaced(agent.store.clone(), &namespace)
                .get(&name)
                .await
                .map_err(|e| {
                    CniError::new(
                        codes::TRY_AGAIN_LATER,
                        format!("cannot read NetworkAttachmentDefinition {namespace}/{name}"),
                    )
                    .with_details(e.to_string())
                })?;
            fetches.found(&mut snapshot.catalog, (namespace, name), nad);
        }
    }
}

/// The kubelet's device allocations from its checkpoint file. A missing file means no devices
/// (no device plugin on this node); an unreadable one is logged and means no devices too.
fn device_allocations(path: &str) -> Vec<weft_meta::PodDeviceEntry> {
    match std::fs::read(path) {
        Ok(bytes) => weft_meta::parse_kubelet_checkpoint(&bytes).unwrap_or_else(|e| {
            tracing::warn!(%path, "{e}: no device IDs for resourceName NADs");
            Vec::new()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            tracing::warn!(%path, "cannot read the kubelet device checkpoint: {e}");
            Vec::new()
        }
    }
}

fn cache_path(agent: &Agent, container_id: &str) -> PathBuf {
    super::records::path(&agent.args.cache_dir, container_id)
}

/// Write `record` as its container's attachment cache file (on the blocking pool).
async fn write_cache(agent: &Agent, record: &CacheRecord) -> Result<(), CniError> {
    let (dir, record) = (agent.args.cache_dir.clone(), record.clone());
    blocking(move || {
        super::records::write(&dir, &record).map_err(|e| {
            let path = super::records::path(&dir, &record.container_id);
            internal(format!("cannot write the attachment cache {}", path.display()), e)
        })
    })
    .await?
}

/// [`write_cache`] for hot-plug, which rewrites a record it read before running delegates:
/// only while the record is there (a DEL meanwhile removed it; it must stay removed).
async fn write_existing_cache(agent: &Agent, record: &CacheRecord) -> Result<(), CniError> {
    let (dir, copy) = (agent.args.cache_dir.clone(), record.clone());
    let written = blocking(move || super::records::replace(&dir, &copy))
        .await?
        .map_err(|e| internal("cannot write the attachment cache", e))?;
    match written {
        true => Ok(()),
        false => Err(CniError::new(
            codes::UNKNOWN_CONTAINER,
            format!(
                "no attachment of container {} any more (its DEL ran)",
                record.container_id
            ),
        )),
    }
}

/// The attachment cache file of `container_id`, if it can be read (on the blocking pool).
async fn read_cache(agent: &Agent, container_id: &str) -> Result<Option<Vec<u8>>, CniError> {
    let path = cache_path(agent, container_id);
    blocking(move || std::fs::read(path).ok()).await
}

/// Run `f` with an executor on a blocking thread (delegates are processes; waiting is blocking).
async fn execute<T: Send + 'static>(
    agent: &Agent,
    f: impl FnOnce(&Executor<'_, weft_cni::runtime::exec::ProcessExec>) -> T + Send + 'static,
) -> Result<T, CniError> {
    let search = agent.args.cni_bin_dirs.clone();
    let parallelism = agent.args.parallel_delegates;
    let env = agent.delegate_env();
    let plugins = agent.plugins.clone();
    tokio::task::spawn_blocking(move || {
        let cni = CniRuntime::new(search).with_env(env).with_exec_limit(plugins);
        let routes = NetnsRouteEditor;
        f(&Executor::new(&cni, &routes).with_parallelism(parallelism))
    })
    .await
    .map_err(|e| internal("delegate task failed", e))
}

async fn add(agent: &Agent, config: &MetaConfig, request: &AttachmentRequest) -> Result<Value, CniError> {
    // Running from its arrival to its answer: the writes ADDs leave behind wait for it.
    let _running = agent.adds.enter();
    // Not beside a GC (Agent::gc_gate), nor a DEL or hot-plug pass of the same sandbox
    // (records::Sandboxes); always in this order.
    let _gc = agent.gc_gate.read().await;
    let _sandbox = agent.sandboxes.lock(&request.container_id).await;
    let pod = pod_for_add(agent, request).await?;
    let lookup = match &pod {
        Some(pod) => PodLookup::Found(pod),
        None => PodLookup::NotFound,
    };
    let decision = plan_with_nads(agent, config, |catalog| {
        decide_add(config, request, lookup, catalog)
    })
    .await?;
    let (plans, record) = match decision.map_err(|e| e.to_cni_error())? {
        AddDecision::Synthetic(result) => {
            return weft_cni::result_to_value(&result, weft_cni::CniVersion::LATEST)
                .map_err(|e| internal("result", e));
        }
        AddDecision::Run { plans, cache } => (plans, cache),
    };
    write_cache(agent, &record).await?;
    let req = request.clone();
    let outcome = execute(agent, move |executor| executor.add(&req, &plans)).await?;
    match outcome {
        Ok(outcome) => {
            let added_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let mut done = record.with_results(outcome.results.clone()).added_at(added_ms);
            let status = pod
                .as_ref()
                .map(|_| weft_netconf::format_network_status_annotation(&outcome.statuses));
            let after_reply = agent.status_write == StatusWrite::AfterReply;
            if let (Some(value), true) = (&status, after_reply) {
                done = done.with_pending_status(value.clone());
            }
            // The answer first: an ADD that cannot answer must not have its status written.
            let answer = weft_cni::result_to_value(&outcome.result, weft_cni::CniVersion::LATEST)
                .map_err(|e| internal("result", e))?;
            write_cache(agent, &done).await?;
            if let (Some(pod), Some(value)) = (&pod, &status) {
                match after_reply {
                    true => agent
                        .status_writes
                        .kick(&request.container_id, &pod.namespace, &pod.name),
                    false => write_network_status(agent, pod, value).await?,
                }
                super::pod_events::added(agent, &pod.namespace, &pod.name, &outcome.statuses);
            }
            Ok(answer)
        }
        Err(error) => {
            agent
                .metrics
                .delegate_errors
                .get_or_create(&super::metrics::DelegateLabels { plugin: "add".into() })
                .inc();
            // Record exactly what this ADD still holds (see `CacheRecord::holding`).
            if let weft_meta::ExecutorError::Add { held, .. } = &error {
                write_cache(agent, &record.holding(held)).await?;
            }
            Err(error.to_cni_error())
        }
    }
}

/// Write `pod`'s network-status now (before the ADD answers, and hot-plug's), serialised
/// with the pod's deferred writes and bounded as they are.
async fn write_network_status(agent: &Agent, pod: &weft_meta::Pod, value: &str) -> Result<(), CniError> {
    use super::status_writes::{WRITE_TIMEOUT, write_status};
    let _serialised = agent.status_writes.lock_pod(&pod.namespace, &pod.name).await;
    let (store, api) = (&agent.store, &agent.ipam_store);
    let uid = Some(pod.uid.as_str()).filter(|uid| !uid.is_empty());
    let write = write_status(store, api, &pod.namespace, &pod.name, value, uid);
    let outcome = tokio::time::timeout(WRITE_TIMEOUT, write)
        .await
        .unwrap_or_else(|_| {
            Err(weft_store::StoreError::Unavailable(format!(
                "no answer in {WRITE_TIMEOUT:?}"
            )))
        });
    match outcome {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(CniError::new(
            codes::TRY_AGAIN_LATER,
            format!("status update failed for pod {}/{}", pod.namespace, pod.name),
        )
        .with_details(e.to_string())),
    }
}

async fn del(agent: &Agent, config: &MetaConfig, request: &AttachmentRequest) -> Result<(), CniError> {
    // Not beside an ADD or hot-plug pass of the same sandbox (records::Sandboxes).
    let _sandbox = agent.sandboxes.lock(&request.container_id).await;
    // An intact record is all a DEL needs: no pod, no NADs, no conf dir (a stat when the
    // record is known decoded).
    let (dir, id) = (agent.args.cache_dir.clone(), request.container_id.clone());
    let plan = match blocking(move || super::records::read_checked(&dir, &id)).await? {
        Ok(Some(record)) => weft_meta::del_plan_of_record(record.for_del(config)),
        Ok(None) | Err(_) => del_plan_looked_up(agent, config, request).await?,
    };
    for warning in &plan.warnings {
        tracing::warn!(container = %request.container_id, "DEL: {warning}");
    }
    let (req, dir) = (request.clone(), agent.args.cache_dir.clone());
    let (delegates, results, (namespace, name)) = (plan.delegates, plan.cached_results, plan.pod);
    // The delegates, then the record's removal when they let it go, in one trip.
    let (outcome, removed) = execute(agent, move |executor| {
        let outcome = executor.del(&req, &delegates, &results);
        let errors: Vec<String> = match &outcome {
            Ok(()) => Vec::new(),
            Err(weft_meta::ExecutorError::Delegates(list)) => {
                list.iter().map(|(n, e)| format!("{n}: {e}")).collect()
            }
            Err(other) => vec![other.to_string()],
        };
        let remove = weft_meta::cache_after_del(&errors) == CacheAfterDel::Remove;
        if remove {
            super::records::remove(&dir, &req.container_id);
        }
        (outcome, remove)
    })
    .await?;
    if removed {
        agent
            .status_writes
            .forget(&request.container_id, &namespace, &name);
        Ok(())
    } else {
        outcome.map_err(|e| e.to_cni_error())
    }
}

/// The plan of a DEL without an intact record (none, or corrupt): recomputed from the pod and
/// the NADs as its ADD would have planned, when they can be read.
async fn del_plan_looked_up(
    agent: &Agent,
    config: &MetaConfig,
    request: &AttachmentRequest,
) -> Result<weft_meta::DelPlan, CniError> {
    let cached = read_cache(agent, &request.container_id).await?;
    let pod = pod_of(agent, request).await.unwrap_or(None);
    let lookup = match &pod {
        Some(pod) => PodLookup::Found(pod),
        None => PodLookup::NotFound,
    };
    let decide = |catalog: &dyn weft_meta::NetworkCatalog| {
        decide_del_plan(config, request, cached.as_deref(), lookup, catalog)
    };
    // With a (corrupt) record, DEL needs no API object: it must work while the API server is
    // down.
    let decided = match plan_with_nads(agent, config, decide).await {
        Ok(decided) => decided,
        Err(e) if cached.is_some() => {
            tracing::warn!(container = %request.container_id, "DEL without the store ({}): using the cache only", e.msg);
            decide(&MemoryCatalog::default())
        }
        Err(e) => return Err(e),
    };
    decided.map_err(|e| CniError::new(plan_error_code(&e), e.to_string()))
}

async fn cached_record(agent: &Agent, container_id: &str) -> Result<CacheRecord, CniError> {
    let (dir, id) = (agent.args.cache_dir.clone(), container_id.to_string());
    blocking(move || super::records::read_checked(&dir, &id))
        .await?
        .map_err(|e| CniError::new(codes::IO_FAILURE, e))?
        .ok_or_else(|| {
            CniError::new(
                codes::UNKNOWN_CONTAINER,
                format!("no attachment of container {container_id}"),
            )
        })
}

async fn check(agent: &Agent, request: &AttachmentRequest) -> Result<(), CniError> {
    let record = cached_record(agent, &request.container_id).await?;
    let req = request.clone();
    execute(agent, move |executor| {
        executor.check(&req, &record.delegates, &record.results)
    })
    .await?
    .map_err(|e| e.to_cni_error())
}

/// The configuration's own networks (cluster network, default networks), planned without a pod.
fn static_plans(
    config: &MetaConfig,
    catalog: &dyn weft_meta::NetworkCatalog,
) -> Result<Vec<DelegatePlan>, CniError> {
    let request = AttachmentRequest {
        ifname: "eth0".into(),
        ..Default::default()
    };
    match decide_add(config, &request, PodLookup::NoApi, catalog).map_err(|e| e.to_cni_error())? {
        AddDecision::Run { plans, .. } => Ok(plans),
        AddDecision::Synthetic(_) => Ok(Vec::new()),
    }
}

async fn status(agent: &Agent, config: &MetaConfig) -> Result<(), CniError> {
    // Every network this node uses: the configuration's own, and every one attached to a pod.
    let mut plans = plan_with_nads(agent, config, |catalog| static_plans(config, catalog)).await??;
    for record in cached_records_of(agent).await? {
        for delegate in record.delegates {
            if !plans.iter().any(|p| p.network_name() == delegate.network_name()) {
                plans.push(delegate);
            }
        }
    }
    execute(agent, move |executor| executor.status(&plans))
        .await?
        .map_err(|e| {
            let err = e.to_cni_error();
            CniError::new(codes::PLUGIN_NOT_AVAILABLE, err.msg).with_details(err.details)
        })
}

/// [`super::records::all`] of the agent's cache dir, on the blocking pool.
pub(super) async fn cached_records_of(agent: &Agent) -> Result<Vec<CacheRecord>, CniError> {
    let dir = agent.args.cache_dir.clone();
    blocking(move || super::records::all(&dir)).await
}

async fn gc(agent: &Agent) -> Result<(), CniError> {
    // The runtime never overlaps its GC with its ADDs (CNI 1.1), but hot-plug passes are the
    // agent's own: wait for those in flight, and hold new ones until the GC is done.
    let _alone = agent.gc_gate.write().await;
    let records = cached_records_of(agent).await?;
    let targets = weft_meta::cache::gc_targets(&records);
    execute(agent, move |executor| executor.gc(&targets))
        .await?
        .map_err(|e| e.to_cni_error())
}

/// The dynamic-networks-controller role: bring a running pod's attachments in line with its
/// networks annotation (hot-plug and hot-unplug), through the same plans, executor, cache and
/// network-status as ADD/DEL. `container_id`/`netns` identify the pod's sandbox; `config` is
/// the meta-plugin config the runtime uses on this node. Returns the number of changes.
pub async fn reconcile_pod_networks(
    agent: &Agent,
    config_bytes: &[u8],
    container_id: &str,
    netns: &str,
    pod: &Pod,
) -> Result<usize, CniError> {
    let config = MetaConfig::parse(&overlay(config_bytes, &agent.daemon_config)?).map_err(|e| {
        CniError::new(codes::INVALID_NETWORK_CONFIG, "invalid weft configuration").with_details(e.to_string())
    })?;
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let desired = weft_netconf::parse_networks_annotation(
        pod.metadata
            .annotation(weft_netconf::NETWORKS_ANNOTATION)
            .unwrap_or(""),
        &namespace,
    )
    .map_err(|e| CniError::new(codes::OBJECT_INVALID, e.to_string()))?;
    let (mut statuses, _) = weft_netconf::read_network_status_annotation(
        pod.metadata
            .annotation(weft_netconf::NETWORK_STATUS_ANNOTATION)
            .unwrap_or(""),
    );
    let scope = weft_meta::HotplugScope::new(&config, &namespace);
    let (to_add, to_remove) = weft_meta::hotplug_diff(&desired, &statuses, &scope);
    if to_add.is_empty() && to_remove.is_empty() {
        return Ok(0);
    }
    // Not beside a GC, nor an ADD or DEL of the same sandbox (as ADD, in this order).
    let _gc = agent.gc_gate.read().await;
    let _sandbox = agent.sandboxes.lock(container_id).await;
    let mut record = cached_record(agent, container_id).await?;
    let shown = pod.metadata.annotation(weft_netconf::NETWORK_STATUS_ANNOTATION);
    if !record.hotplug_ready(pod.metadata.uid.as_deref(), shown) {
        // A later ADD of the sandbox since the caller looked (this waited for it): it failed,
        // or its network-status is not on the pod yet, whose write's watch event brings the
        // pod back.
        return Ok(0);
    }
    if let Some(value) = record.network_status.take() {
        // The pod shows the value its ADD left to write: mark it written before this pass
        // changes the pod's network-status, or a writer still running could write the older
        // value over the new one.
        let _serialised = agent.status_writes.lock_pod(&namespace, &pod.metadata.name).await;
        let (dir, id) = (agent.args.cache_dir.clone(), container_id.to_string());
        blocking(move || super::records::clear_pending_status(&dir, &id, &value))
            .await?
            .map_err(|e| internal("cannot update the attachment record", e))?;
    }
    let mut request = AttachmentRequest {
        container_id: container_id.to_string(),
        netns: netns.to_string(),
        ifname: record.ifname.clone(),
        ..Default::default()
    };
    request.k8s = record.k8s.clone();
    let meta_pod = weft_meta::Pod {
        namespace: namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        annotations: pod.metadata.annotations.clone(),
    };
    let mut changes = 0;
    // One look at the files for the pass; the NADs its elements name are fetched as named.
    let mut snapshot = Snapshot::of(&config).await?;
    for element in &to_add {
        let plan = plan_in(agent, &config, &mut snapshot, |catalog| {
            weft_meta::plan_hotplug_add(&config, &request, &meta_pod, element, &record.delegates, catalog)
        })
        .await?
        .map_err(|e| CniError::new(codes::OBJECT_INVALID, e.to_string()))?;
        let (req, plans) = (request.clone(), vec![plan.clone()]);
        let outcome = execute(agent, move |executor| executor.add(&req, &plans))
            .await?
            .map_err(|e| e.to_cni_error())?;
        let device_info = outcome.statuses.iter().find_map(|s| s.device_info.clone());
        let result = outcome.results.into_iter().next().unwrap_or_default();
        statuses = weft_meta::status_after_add(&statuses, element, &result);
        if let (Some(info), Some(entry)) = (device_info, statuses.last_mut()) {
            entry.device_info = Some(info);
        }
        record = record.with_attachment(plan, Some(result));
        write_existing_cache(agent, &record).await?;
        changes += 1;
    }
    for element in &to_remove {
        let Some((plan, cached)) = record
            .attachment(&element.interface)
            .map(|(p, r)| (p.clone(), r.cloned()))
        else {
            statuses = weft_meta::status_after_remove(&statuses, element);
            continue;
        };
        let (req, plans) = (request.clone(), vec![plan]);
        execute(agent, move |executor| executor.del(&req, &plans, &[cached]))
            .await?
            .map_err(|e| e.to_cni_error())?;
        statuses = weft_meta::status_after_remove(&statuses, element);
        record = record.without_attachment(&element.interface);
        write_existing_cache(agent, &record).await?;
        changes += 1;
    }
    let pod = weft_meta::Pod {
        annotations: Default::default(),
        ..meta_pod
    };
    let value = weft_netconf::format_network_status_annotation(&statuses);
    write_network_status(agent, &pod, &value).await?;
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// An eth0 request of sandbox `c1` for pod `namespace`/`name`.
    fn request_of_pod(namespace: &str, name: &str) -> AttachmentRequest {
        let mut request = AttachmentRequest {
            container_id: "c1".into(),
            netns: "/var/run/netns/none".into(),
            ifname: "eth0".into(),
            ..Default::default()
        };
        request.k8s.pod_namespace = namespace.into();
        request.k8s.pod_name = name.into();
        request
    }

    /// A DEL with an intact attachment record runs from it alone: no read of the pod or the
    /// NADs (it must work while the API server is down, and a DEL on a busy node costs nothing
    /// it does not need). Without a record it looks the pod up to recompute.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_del_with_an_intact_record_reads_nothing_from_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(weft_store::double::StoreDouble::default());
        let agent = super::super::test_agent::on(backend.clone(), backend.clone(), dir.path());
        let config =
            MetaConfig::parse(br#"{"cniVersion":"1.0.0","name":"weft","clusterNetwork":"/nonexistent"}"#)
                .unwrap();
        let request = request_of_pod("default", "web");
        let record = weft_meta::CacheRecord::new(&request, Vec::new());
        let cache_dir = agent.args.cache_dir.clone();
        super::super::records::write(&cache_dir, &record).unwrap();
        backend.take_calls();

        del(&agent, &config, &request).await.unwrap();
        assert_eq!(backend.take_calls(), Default::default(), "store calls");
        assert!(
            !super::super::records::path(&cache_dir, "c1").exists(),
            "the record is removed"
        );

        // Again, with nothing left: the pod is looked up (a recompute needs it), and with no pod
        // there is nothing to tear down.
        del(&agent, &config, &request).await.unwrap();
        assert_eq!(backend.calls("get"), 1, "{:?}", backend.take_calls());
    }

    /// Planning an ADD reads the NADs the request names, one GET each (answered by the watch
    /// cache on a node), not every NAD of the cluster: 200 other NADs cost it nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_add_reads_only_the_nads_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(weft_store::double::StoreDouble::default());
        let agent = super::super::test_agent::on(backend.clone(), backend.clone(), dir.path());
        let nad = |namespace: &str, name: &str| {
            let mut nad = NetworkAttachmentDefinition::default();
            nad.metadata.namespace = Some(namespace.into());
            nad.metadata.name = name.into();
            nad.spec.config = format!(r#"{{"cniVersion":"1.0.0","name":"{name}","type":"bridge"}}"#);
            nad
        };
        let mut nads = vec![
            nad("kube-system", "cluster"),
            nad("tenant", "a"),
            nad("tenant", "b"),
        ];
        nads.extend((0..200).map(|n| nad("tenant", &format!("other-{n}"))));
        for nad in &nads {
            Api::<NetworkAttachmentDefinition>::namespaced(backend.clone(), "tenant")
                .create(nad)
                .await
                .unwrap();
        }
        let config =
            MetaConfig::parse(br#"{"cniVersion":"1.0.0","name":"weft","clusterNetwork":"cluster"}"#).unwrap();
        let request = request_of_pod("tenant", "web");
        let pod = weft_meta::Pod {
            namespace: "tenant".into(),
            name: "web".into(),
            uid: String::new(),
            annotations: [(
                weft_netconf::NETWORKS_ANNOTATION.to_string(),
                "a,b@net5".to_string(),
            )]
            .into(),
        };
        backend.take_calls();

        let decision = plan_with_nads(&agent, &config, |catalog| {
            decide_add(&config, &request, PodLookup::Found(&pod), catalog)
        })
        .await
        .unwrap();
        let Ok(AddDecision::Run { plans, .. }) = decision else {
            panic!("{decision:?}");
        };
        let planned: Vec<_> = plans
            .iter()
            .map(|p| (p.network_name(), p.ifname.clone()))
            .collect();
        assert_eq!(
            planned,
            [
                ("cluster", "eth0".to_string()),
                ("a", "net1".to_string()),
                ("b", "net5".to_string())
            ]
        );
        assert_eq!(
            backend.take_calls(),
            [("get", 3)].into(),
            "one GET per NAD named, no LIST"
        );
    }
}
