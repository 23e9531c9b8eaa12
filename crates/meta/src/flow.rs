//! The request-level decisions the agent takes on every ADD and DEL, composed from the
//! pieces: pod lookup outcome → synthetic result / plan + cache record (ADD); cache or
//! recompute → delegates with their cached results (DEL). Still pure.

use weft_cni::{CniCommand, CniError, CniResult, codes};

use crate::cache::{CacheRecord, DelDecision, decide_del};
use crate::catalog::NetworkCatalog;
use crate::config::MetaConfig;
use crate::plan::{AttachmentRequest, DelegatePlan, PlanError, Pod, plan_add, plan_del_recompute};
use crate::request::{UidMismatch, check_pod_uid, synthetic_result};

/// What reading the pod gave.
#[derive(Clone, Copy, Debug)]
pub enum PodLookup<'a> {
    /// The pod.
    Found(&'a Pod),
    /// The store says it does not exist (deleted meanwhile).
    NotFound,
    /// No cluster API is configured (inline `delegates` only; Multus's "no kubeconfig").
    NoApi,
}

/// What ADD does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddDecision {
    /// The pod is gone: return this result, run nothing.
    Synthetic(CniResult),
    /// Write `cache` (before the first delegate), then run `plans`.
    Run {
        /// Delegates in order.
        plans: Vec<DelegatePlan>,
        /// The record to write now; add the results after success.
        cache: CacheRecord,
    },
}

/// Why ADD is refused before any delegate runs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    /// The runtime's pod UID is not the pod's.
    #[error("[{pod}]: {source}")]
    Uid {
        /// `<ns>/<pod>/<uid>`.
        pod: String,
        /// The mismatch.
        source: UidMismatch,
    },
    /// Planning failed.
    #[error("[{pod}]: error loading k8s delegates: {source}")]
    Plan {
        /// `<ns>/<pod>/<uid>`.
        pod: String,
        /// Why.
        source: Box<PlanError>,
    },
}

impl AddError {
    /// The CNI error for the runtime: isolation → 103, missing/invalid objects → 102,
    /// bad requests (annotation, names, routes) → 7, UID mismatch → 3.
    pub fn to_cni_error(&self) -> CniError {
        let code = match self {
            Self::Uid { .. } => codes::UNKNOWN_CONTAINER,
            Self::Plan { source, .. } => plan_error_code(source),
        };
        CniError::new(code, self.to_string())
    }
}

/// The CNI error code of a planning failure.
pub fn plan_error_code(error: &PlanError) -> u32 {
    match error {
        PlanError::Isolation(_) => codes::FORBIDDEN,
        PlanError::ClusterNetwork { .. }
        | PlanError::DefaultNetwork { .. }
        | PlanError::Network(_)
        | PlanError::DefaultNetworkOverride(_) => codes::OBJECT_INVALID,
        PlanError::Annotation { .. }
        | PlanError::CniArgs { .. }
        | PlanError::InvalidIfname { .. }
        | PlanError::DuplicateIfname { .. }
        | PlanError::Gateway(_)
        | PlanError::DeviceId { .. }
        | PlanError::AuxChain(_) => codes::INVALID_NETWORK_CONFIG,
    }
}

/// Decide an ADD (Multus `CmdAdd` steps 3–8).
pub fn decide_add(
    config: &MetaConfig,
    request: &AttachmentRequest,
    pod: PodLookup<'_>,
    catalog: &dyn NetworkCatalog,
) -> Result<AddDecision, AddError> {
    let label = request.k8s.pod_label();
    let pod = match pod {
        PodLookup::NotFound => return Ok(AddDecision::Synthetic(synthetic_result(config, request))),
        PodLookup::Found(pod) => {
            check_pod_uid(request, pod).map_err(|source| AddError::Uid {
                pod: label.clone(),
                source,
            })?;
            Some(pod)
        }
        PodLookup::NoApi => None,
    };
    let plans = plan_add(config, request, pod, catalog).map_err(|source| AddError::Plan {
        pod: label,
        source: Box::new(source),
    })?;
    Ok(AddDecision::Run {
        cache: CacheRecord::new(request, plans.clone()),
        plans,
    })
}

/// What DEL runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DelPlan {
    /// Delegates in plan order (run them in reverse); empty when nothing is held.
    pub delegates: Vec<DelegatePlan>,
    /// Cached ADD results, same order (`None` when unknown).
    pub cached_results: Vec<Option<CniResult>>,
    /// Things the agent must log (corrupt cache, networks that could not be recomputed).
    pub warnings: Vec<String>,
    /// The pod (namespace, name) the attachment was made for: the record's when there is one
    /// (a DEL's `K8S_POD_*` may differ from its ADD's, or be missing), else the request's;
    /// `default` for a namespace left out. Its pending network-status write is dropped.
    pub pod: (String, String),
}

/// The DEL of a sandbox whose attachment record decoded (already [`CacheRecord::for_del`]):
/// its delegates in plan order with their cached results. It needs neither the pod nor the
/// catalog, so the agent looks neither up (a DEL must work while the API server is down, and
/// costs the node nothing it does not need).
pub fn del_plan_of_record(record: CacheRecord) -> DelPlan {
    DelPlan {
        cached_results: (0..record.delegates.len())
            .map(|i| record.result(i).cloned())
            .collect(),
        pod: (record.pod_namespace().to_string(), record.k8s.pod_name.clone()),
        delegates: record.delegates,
        warnings: Vec::new(),
    }
}

/// Decide a DEL (Multus `CmdDel` steps 3–5, without its silent skip on a corrupt cache). A pod
/// whose UID differs from the runtime's counts as gone. Fails only when the cache is unusable
/// and even the configuration's static networks cannot be resolved — then the runtime must
/// retry rather than be told nothing was held.
pub fn decide_del_plan(
    config: &MetaConfig,
    request: &AttachmentRequest,
    cache: Option<&[u8]>,
    pod: PodLookup<'_>,
    catalog: &dyn NetworkCatalog,
) -> Result<DelPlan, PlanError> {
    let pod = match pod {
        PodLookup::Found(pod) if check_pod_uid(request, pod).is_ok() => Some(pod),
        _ => None,
    };
    let requested = (
        request.k8s.namespace_or_default().to_string(),
        request.k8s.pod_name.clone(),
    );
    match decide_del(config, cache, &request.container_id, pod.is_some()) {
        DelDecision::FromCache(record) => Ok(del_plan_of_record(*record)),
        DelDecision::NothingHeld => Ok(DelPlan {
            pod: requested,
            ..DelPlan::default()
        }),
        DelDecision::Recompute { corrupt } => {
            let mut warnings: Vec<String> = corrupt
                .iter()
                .map(|e| format!("{e}; recomputing the delegates to DEL"))
                .collect();
            if pod.is_none() && corrupt.is_some() {
                warnings.push(
                    "the pod is gone: only the configuration's networks can be recomputed; annotation networks may still hold resources"
                        .into(),
                );
            }
            let (delegates, skipped) = plan_del_recompute(config, request, pod, catalog)?;
            warnings.extend(skipped.iter().map(|e| format!("not torn down: {e}")));
            Ok(DelPlan {
                cached_results: vec![None; delegates.len()],
                delegates,
                warnings,
                pod: requested,
            })
        }
    }
}

/// One step a request takes before its command runs (none: run it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Run a DEL as for a namespace that is gone: delegates release what they hold elsewhere
    /// and touch no interface in it. DEL must not fail forever.
    DelWithoutNetns,
    /// Refuse with this CNI error.
    Refuse(CniError),
    /// Wait (bounded) for the readiness indicator file, then run.
    WaitForReadiness,
    /// Run, and say when the readiness indicator file is missing: DEL goes on whatever that
    /// check says.
    ProceedWarnIfNotReady,
}

/// The gates of a request, in order: the namespace first (`forbidden` says what kind of
/// namespace `CNI_NETNS` is when weft may not configure it, e.g. the host's), then the
/// readiness indicator (`readiness`: one is configured). `/delegate` requests (`single`) are
/// refused: the agent hot-plugs from the pod's networks annotation. CHECK skips the
/// readiness wait (it asks about what exists); every other command but DEL waits.
pub fn gates(
    command: CniCommand,
    netns: &str,
    forbidden: Option<&str>,
    readiness: bool,
    single: bool,
) -> Vec<Gate> {
    if single {
        return vec![Gate::Refuse(CniError::new(
            codes::UNSUPPORTED_FIELD,
            "/delegate is not served: edit the pod's k8s.v1.cni.cncf.io/networks annotation, the weft agent hot-plugs and unplugs from it",
        ))];
    }
    let mut gates = Vec::new();
    match (forbidden, command) {
        (None, _) => {}
        (Some(_), CniCommand::Del) => gates.push(Gate::DelWithoutNetns),
        (Some(what), _) => {
            return vec![Gate::Refuse(CniError::new(
                codes::INVALID_ENVIRONMENT,
                format!("CNI_NETNS {netns} is {what}: refusing to configure it"),
            ))];
        }
    }
    if readiness {
        match command {
            CniCommand::Del => gates.push(Gate::ProceedWarnIfNotReady),
            CniCommand::Check => {}
            _ => gates.push(Gate::WaitForReadiness),
        }
    }
    gates
}

#[cfg(test)]
mod tests {
    #[test]
    fn gates_refuse_configuring_a_forbidden_namespace_and_del_goes_on() {
        use super::{Gate, gates};
        use weft_cni::CniCommand::*;
        let refused = |g: &[Gate]| match g {
            [Gate::Refuse(e)] => e.code,
            other => panic!("not refused: {other:?}"),
        };
        assert_eq!(gates(Add, "/proc/1/ns/net", None, false, false), vec![]);
        assert_eq!(
            refused(&gates(Add, "/proc/1/ns/net", Some("the host's"), false, false)),
            codes::INVALID_ENVIRONMENT
        );
        let error = match gates(Check, "/proc/1/ns/net", Some("the host's"), true, false).remove(0) {
            Gate::Refuse(e) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            error.msg,
            "CNI_NETNS /proc/1/ns/net is the host's: refusing to configure it"
        );
        assert_eq!(
            gates(Del, "/proc/1/ns/net", Some("the host's"), true, false),
            vec![Gate::DelWithoutNetns, Gate::ProceedWarnIfNotReady]
        );
        assert_eq!(gates(Add, "n", None, true, false), vec![Gate::WaitForReadiness]);
        assert_eq!(gates(Status, "", None, true, false), vec![Gate::WaitForReadiness]);
        assert_eq!(gates(Check, "n", None, true, false), vec![]);
        assert_eq!(
            refused(&gates(Del, "n", None, false, true)),
            codes::UNSUPPORTED_FIELD
        );
    }

    use super::*;
    use crate::catalog::MemoryCatalog;
    use crate::plan::Pod;

    fn setup() -> (MetaConfig, MemoryCatalog, AttachmentRequest, Pod) {
        let config = MetaConfig::parse(
            br#"{"cniVersion":"1.0.0","clusterNetwork":"cluster","namespaceIsolation":true}"#,
        )
        .unwrap();
        let catalog = MemoryCatalog::default()
            .with_conf_file(
                "10-c.conf",
                r#"{"cniVersion":"1.0.0","name":"cluster","type":"ptp"}"#,
            )
            .with_nad("ns", "a", r#"{"cniVersion":"1.0.0","type":"bridge"}"#)
            .with_nad("other", "b", r#"{"cniVersion":"1.0.0","type":"bridge"}"#);
        let mut request = AttachmentRequest {
            container_id: "c".into(),
            ifname: "eth0".into(),
            ..Default::default()
        };
        request.k8s.pod_namespace = "ns".into();
        request.k8s.pod_name = "p".into();
        request.k8s.pod_uid = "u1".into();
        let pod = Pod {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u1".into(),
            annotations: [(weft_netconf::NETWORKS_ANNOTATION.to_string(), "a".to_string())].into(),
        };
        (config, catalog, request, pod)
    }

    #[test]
    fn add_decisions() {
        let (config, catalog, request, mut pod) = setup();
        match decide_add(&config, &request, PodLookup::Found(&pod), &catalog).unwrap() {
            AddDecision::Run { plans, cache } => {
                assert_eq!(plans.len(), 2);
                assert_eq!(cache.delegates, plans);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decide_add(&config, &request, PodLookup::NotFound, &catalog).unwrap(),
            AddDecision::Synthetic(_)
        ));
        pod.annotations
            .insert(weft_netconf::NETWORKS_ANNOTATION.into(), "other/b".into());
        let err = decide_add(&config, &request, PodLookup::Found(&pod), &catalog).unwrap_err();
        assert_eq!(err.to_cni_error().code, codes::FORBIDDEN);
        assert!(
            err.to_string()
                .starts_with("[ns/p/u1]: error loading k8s delegates: "),
            "{err}"
        );
        pod.uid = "u2".into();
        let err = decide_add(&config, &request, PodLookup::Found(&pod), &catalog).unwrap_err();
        assert_eq!(err.to_cni_error().code, codes::UNKNOWN_CONTAINER);
    }

    #[test]
    fn del_decisions_never_silently_skip() {
        let (config, catalog, request, pod) = setup();
        let AddDecision::Run { cache, .. } =
            decide_add(&config, &request, PodLookup::Found(&pod), &catalog).unwrap()
        else {
            panic!()
        };
        let bytes = cache.to_bytes();
        let from_cache =
            decide_del_plan(&config, &request, Some(&bytes), PodLookup::NotFound, &catalog).unwrap();
        assert_eq!(from_cache.delegates.len(), 2);
        assert!(from_cache.warnings.is_empty());
        let ours = (request.k8s.pod_namespace.clone(), request.k8s.pod_name.clone());
        assert_eq!(from_cache.pod, ours);
        // A DEL without the runtime's K8S_POD_* still names the pod of the ADD (the record's),
        // so that pod's pending network-status write is dropped, not another's.
        let mut bare = request.clone();
        bare.k8s = Default::default();
        let from_record =
            decide_del_plan(&config, &bare, Some(&bytes), PodLookup::NotFound, &catalog).unwrap();
        assert_eq!(from_record.pod, ours);
        let nothing_held = decide_del_plan(&config, &bare, None, PodLookup::NotFound, &catalog).unwrap();
        assert_eq!(nothing_held.pod, ("default".to_string(), String::new()));

        let corrupt = decide_del_plan(
            &config,
            &request,
            Some(b"{garbage"),
            PodLookup::Found(&pod),
            &catalog,
        )
        .unwrap();
        assert_eq!(corrupt.delegates.len(), 2, "recomputed from the pod");
        assert_eq!(corrupt.warnings.len(), 1);

        let corrupt_gone = decide_del_plan(
            &config,
            &request,
            Some(b"{garbage"),
            PodLookup::NotFound,
            &catalog,
        )
        .unwrap();
        assert_eq!(
            corrupt_gone.delegates.len(),
            1,
            "the cluster network is still torn down"
        );
        assert_eq!(corrupt_gone.warnings.len(), 2);

        let nothing = decide_del_plan(&config, &request, None, PodLookup::NotFound, &catalog).unwrap();
        assert!(nothing.delegates.is_empty());

        let err = decide_del_plan(
            &config,
            &request,
            Some(b"x"),
            PodLookup::NotFound,
            &MemoryCatalog::default(),
        );
        assert!(
            err.is_err(),
            "cannot even resolve the cluster network: the runtime must retry"
        );
    }
}
