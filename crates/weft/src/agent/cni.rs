//! The meta-plugin on the agent: ADD attaches the cluster network then every selected network
//! through their delegate plugins (rolling back on failure) and writes network-status on the
//! pod; DEL detaches what the cache says was attached; CHECK, STATUS and GC reach every delegate.

use serde_json::Value;
use weft_cni::runtime::{CniRuntime, RuntimeConf};
use weft_cni::{CniArgs, CniCommand, CniError, NetworkConfigList, RequestEnv, codes};
use weft_meta::MetaConfig;
use weft_store::Api;

use super::Agent;
use super::cache::{self, CacheRead, CachedDelegate, ContainerCache};
use super::plan::{self, PodRef};
use crate::kinds::Pod;
use crate::protocol::CniRequest;

fn internal(msg: impl Into<String>, details: impl ToString) -> CniError {
    CniError::new(codes::IO_FAILURE, msg).with_details(details.to_string())
}

/// Handle one request from the shim (`single`: a hot-plug `/delegate` request).
pub async fn handle(agent: &Agent, request: CniRequest, single: bool) -> Result<Option<Value>, CniError> {
    let env = RequestEnv::from_lookup(|k| request.env.get(k).cloned())?;
    let bytes = request.config_bytes()?;
    let config = MetaConfig::parse(&bytes).map_err(|e| {
        CniError::new(codes::INVALID_NETWORK_CONFIG, "invalid weft configuration").with_details(e.to_string())
    })?;
    if single {
        return Err(CniError::new(
            codes::UNSUPPORTED_FIELD,
            "hot-plug (/delegate) is not supported yet",
        ));
    }
    let pod = PodRef::from_args(&env.args);
    match env.command {
        CniCommand::Add => add(agent, &config, &env, &pod).await.map(Some),
        CniCommand::Del => del(agent, &config, &env, &pod).await.map(|()| None),
        CniCommand::Check => check(agent, &env).await.map(|()| None),
        CniCommand::Status => status(agent, &config).await.map(|()| None),
        CniCommand::Gc => Ok(None),
        CniCommand::Version => Err(CniError::new(
            codes::INVALID_ENVIRONMENT,
            "VERSION is answered by the shim",
        )),
    }
}

fn runtime(agent: &Agent) -> CniRuntime {
    CniRuntime::new(agent.args.cni_bin_dirs.clone())
}

fn runtime_conf(env: &RequestEnv, delegate: &CachedDelegate) -> RuntimeConf {
    RuntimeConf {
        container_id: env.container_id.clone(),
        netns: env.netns.clone(),
        ifname: delegate.ifname.clone(),
        args: CniArgs::from_pairs(delegate.args.clone()),
        capability_args: delegate.capability_args.clone(),
    }
}

fn list_of(delegate: &CachedDelegate) -> Result<NetworkConfigList, CniError> {
    weft_cni::AnyNetworkConfig::from_bytes(delegate.config.as_bytes())
        .map(super::plan::into_list)
        .map_err(|e| {
            CniError::new(
                codes::INVALID_NETWORK_CONFIG,
                format!("delegate {}", delegate.name),
            )
            .with_details(e.to_string())
        })
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, CniError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| internal("delegate task failed", e))
}

async fn get_pod(agent: &Agent, pod: &PodRef) -> Result<Option<Pod>, CniError> {
    Api::<Pod>::namespaced(agent.store.clone(), &pod.namespace)
        .get(&pod.name)
        .await
        .map_err(|e| {
            CniError::new(
                codes::TRY_AGAIN_LATER,
                format!("cannot read pod {}/{}", pod.namespace, pod.name),
            )
            .with_details(e.to_string())
        })
}

async fn add(
    agent: &Agent,
    config: &MetaConfig,
    env: &RequestEnv,
    pod_ref: &PodRef,
) -> Result<Value, CniError> {
    let pod = get_pod(agent, pod_ref).await?;
    if let (Some(pod), Some(uid)) = (&pod, pod_ref.uid.as_deref())
        && pod.metadata.uid.as_deref().is_some_and(|u| u != uid)
    {
        return Err(CniError::new(
            codes::OBJECT_INVALID,
            format!(
                "expected pod UID {uid:?} but got {:?} from the store",
                pod.metadata.uid.as_deref().unwrap_or("")
            ),
        ));
    }
    let delegates = plan::plan(agent, config, env, pod_ref, pod.as_ref()).await?;
    let mut record = ContainerCache {
        version: cache::CACHE_VERSION,
        container_id: env.container_id.clone(),
        netns: env.netns.clone(),
        pod: (
            pod_ref.namespace.clone(),
            pod_ref.name.clone(),
            pod_ref.uid.clone().unwrap_or_default(),
        ),
        delegates,
    };
    let cache_dir = agent.args.cache_dir.clone();
    cache::write(&cache_dir, &record).map_err(|e| internal("cannot write the attachment cache", e))?;
    for index in 0..record.delegates.len() {
        let delegate = record.delegates[index].clone();
        let list = list_of(&delegate)?;
        let conf = runtime_conf(env, &delegate);
        let cni = runtime(agent);
        let outcome = blocking(move || cni.add(&list, &conf)).await?;
        match outcome {
            Ok(result) => {
                record.delegates[index].result = Some(result);
                cache::write(&cache_dir, &record)
                    .map_err(|e| internal("cannot write the attachment cache", e))?;
            }
            Err(error) => {
                agent
                    .metrics
                    .delegate_errors
                    .get_or_create(&super::metrics::DelegateLabels {
                        plugin: list_type(&delegate),
                    })
                    .inc();
                let rollback = rollback(agent, env, &record.delegates[..=index]).await;
                let _ = cache::remove(&cache_dir, &env.container_id);
                let mut err = error.to_cni_error();
                err.msg = format!(
                    "[{}/{}:{}]: error adding container to network {:?}: {}",
                    pod_ref.namespace, pod_ref.name, delegate.name, delegate.name, err.msg
                );
                if !rollback.is_empty() {
                    err.details = format!("{}; rollback: {}", err.details, rollback.join("; "));
                }
                return Err(err);
            }
        }
    }
    if pod.is_some() {
        write_network_status(agent, pod_ref, &record).await?;
    }
    let master = record
        .delegates
        .iter()
        .find(|d| d.master)
        .or(record.delegates.first())
        .and_then(|d| d.result.clone())
        .unwrap_or_default();
    weft_cni::result_to_value(&master, weft_cni::CniVersion::LATEST)
        .map_err(|e| internal("cannot encode the result", e))
}

fn list_type(delegate: &CachedDelegate) -> String {
    list_of(delegate)
        .ok()
        .and_then(|l| l.plugins().first().map(|p| p.plugin_type().to_string()))
        .unwrap_or_default()
}

/// DEL `delegates` in reverse order, collecting every error.
async fn rollback(agent: &Agent, env: &RequestEnv, delegates: &[CachedDelegate]) -> Vec<String> {
    let mut errors = Vec::new();
    for delegate in delegates.iter().rev() {
        let list = match list_of(delegate) {
            Ok(list) => list,
            Err(e) => {
                errors.push(format!("{}: {e}", delegate.name));
                continue;
            }
        };
        let conf = runtime_conf(env, delegate);
        let cached = delegate.result.clone();
        let cni = runtime(agent);
        match blocking(move || cni.del(&list, &conf, cached.as_ref())).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(format!("{}: {e}", delegate.name)),
            Err(e) => errors.push(format!("{}: {e}", delegate.name)),
        }
    }
    errors
}

async fn write_network_status(agent: &Agent, pod: &PodRef, record: &ContainerCache) -> Result<(), CniError> {
    let statuses: Vec<weft_netconf::NetworkStatus> = record
        .delegates
        .iter()
        .filter_map(|d| {
            d.result
                .as_ref()
                .map(|r| weft_netconf::network_statuses(r, &d.name, d.master, None))
        })
        .flatten()
        .collect();
    let value = weft_netconf::format_network_status_annotation(&statuses);
    let outcome = Api::<Pod>::namespaced(agent.store.clone(), &pod.namespace)
        .modify_status(&pod.name, |p| {
            let changed =
                p.metadata.annotation(weft_netconf::NETWORK_STATUS_ANNOTATION) != Some(value.as_str());
            p.metadata
                .annotations
                .insert(weft_netconf::NETWORK_STATUS_ANNOTATION.into(), value.clone());
            changed
        })
        .await;
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

async fn del(agent: &Agent, config: &MetaConfig, env: &RequestEnv, pod_ref: &PodRef) -> Result<(), CniError> {
    let cache_dir = agent.args.cache_dir.clone();
    let delegates = match cache::read(&cache_dir, &env.container_id) {
        CacheRead::Found(record) => record.delegates,
        other => {
            if let CacheRead::Corrupt(reason) = &other {
                tracing::warn!(container = %env.container_id, %reason, "attachment cache unreadable: recomputing the delegates from the pod");
            }
            let pod = get_pod(agent, pod_ref).await.unwrap_or(None);
            match (&other, pod) {
                (CacheRead::Missing, None) => {
                    tracing::info!(container = %env.container_id, "DEL: nothing cached and the pod is gone; only the cluster network is detached");
                    plan::cluster_only(agent, config, env).await?
                }
                (_, pod) => plan::plan(agent, config, env, pod_ref, pod.as_ref()).await?,
            }
        }
    };
    let errors = rollback(agent, env, &delegates).await;
    if errors.is_empty() {
        cache::remove(&cache_dir, &env.container_id)
            .map_err(|e| internal("cannot remove the attachment cache", e))?;
        Ok(())
    } else {
        Err(CniError::new(
            codes::DELEGATE_FAILED,
            "DEL failed for some delegates; the cache is kept for a retry",
        )
        .with_details(errors.join("; ")))
    }
}

async fn check(agent: &Agent, env: &RequestEnv) -> Result<(), CniError> {
    let CacheRead::Found(record) = cache::read(&agent.args.cache_dir, &env.container_id) else {
        return Err(CniError::new(
            codes::UNKNOWN_CONTAINER,
            format!("no attachment of container {}", env.container_id),
        ));
    };
    for delegate in &record.delegates {
        let list = list_of(delegate)?;
        let conf = runtime_conf(env, delegate);
        let cached = delegate.result.clone();
        let cni = runtime(agent);
        blocking(move || cni.check(&list, &conf, cached.as_ref()))
            .await?
            .map_err(|e| {
                let mut err = e.to_cni_error();
                err.msg = format!("CHECK of {}: {}", delegate.name, err.msg);
                err
            })?;
    }
    Ok(())
}

async fn status(agent: &Agent, config: &MetaConfig) -> Result<(), CniError> {
    let cluster = plan::cluster_list(config)?;
    let cni = runtime(agent);
    blocking(move || cni.status(&cluster))
        .await?
        .map_err(|e| e.to_cni_error())
}
