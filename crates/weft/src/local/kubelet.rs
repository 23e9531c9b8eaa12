//! The agent's kubelet and launcher roles in the local cluster: for every pod bound to this node,
//! create its sandbox (a network namespace), run the CNI config exactly as a container runtime
//! would (exec `weft-cni` with the CNI environment), and for virt-launcher pods wire the guest
//! side of every NIC, serve DHCP and boot the guest; report back into the pod and VMI status.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use weft_store::{Api, ListOptions};
use weft_vm::VirtualMachineInstance;

use crate::agent::Agent;
use crate::controller::launcher_pod;
use crate::kinds::Pod;
use crate::local::launcher::{self, LauncherState};
use crate::local::sandbox::{self, Sandbox};
use crate::local::topology::Topology;

const RESYNC: Duration = Duration::from_millis(300);

/// A pod this node runs.
struct RunningPod {
    namespace: String,
    name: String,
    sandbox: Sandbox,
    launcher: Option<LauncherState>,
}

/// Run pods bound to this node until `stop` turns true, then stop them all.
pub async fn run(agent: Arc<Agent>, mut stop: tokio::sync::watch::Receiver<bool>) -> anyhow::Result<()> {
    let node = agent.args.node.clone();
    let pods_api = Api::<Pod>::all(agent.store.clone());
    let mut running: BTreeMap<String, RunningPod> = BTreeMap::new();
    loop {
        let pods = pods_api
            .list(&ListOptions::default().field("spec.nodeName", &node))
            .await?;
        let wanted: BTreeMap<String, &Pod> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && p.status.phase != "Failed")
            .filter_map(|p| p.metadata.uid.clone().map(|uid| (uid, p)))
            .collect();
        for (uid, pod) in &wanted {
            if running.contains_key(uid) {
                continue;
            }
            match start_pod(&agent, pod).await {
                Ok(run) => {
                    running.insert(uid.clone(), run);
                }
                Err(e) => {
                    tracing::error!(pod = %pod.metadata.name, "start failed: {e:#}");
                    set_pod_phase(&agent, pod, "Failed", &format!("{e:#}"), "").await;
                }
            }
        }
        let gone: Vec<String> = running
            .keys()
            .filter(|uid| !wanted.contains_key(*uid))
            .cloned()
            .collect();
        for uid in gone {
            if let Some(run) = running.remove(&uid) {
                stop_pod(&agent, run).await;
            }
        }
        for run in running.values_mut() {
            if let Err(e) = hotplug(&agent, run).await {
                tracing::warn!(pod = %run.name, "hot-plug: {e:#}");
            }
            if let Some(state) = run.launcher.as_mut()
                && let Err(e) = launcher::report(&agent, &run.namespace, state).await
            {
                tracing::warn!(pod = %run.name, "guest report: {e:#}");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RESYNC) => {}
            _ = stop.changed() => {
                for (_, run) in std::mem::take(&mut running) {
                    stop_pod(&agent, run).await;
                }
                return Ok(());
            }
        }
    }
}

async fn start_pod(agent: &Arc<Agent>, pod: &Pod) -> anyhow::Result<RunningPod> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone();
    let netns = Topology::pod_netns(&namespace, &name);
    let sandbox = sandbox::create(agent, pod, &netns)
        .await
        .with_context(|| format!("pod {namespace}/{name}"))?;
    let pod_ip = sandbox.pod_ip.clone();
    let is_launcher =
        pod.metadata.label(launcher_pod::LAUNCHER_LABEL.0) == Some(launcher_pod::LAUNCHER_LABEL.1);
    let mut run = RunningPod {
        namespace: namespace.clone(),
        name: name.clone(),
        sandbox,
        launcher: None,
    };
    if is_launcher {
        let vmi_name = pod
            .metadata
            .annotation(launcher_pod::DOMAIN_ANNOTATION)
            .unwrap_or_default()
            .to_string();
        let vmi = Api::<VirtualMachineInstance>::namespaced(agent.store.clone(), &namespace)
            .get_required(&vmi_name)
            .await?;
        let fresh_pod = Api::<Pod>::namespaced(agent.store.clone(), &namespace)
            .get_required(&name)
            .await?;
        match launcher::start(agent, &fresh_pod, &vmi, &run.sandbox).await {
            Ok(state) => run.launcher = Some(state),
            Err(e) => {
                stop_pod(agent, run).await;
                return Err(e.context(format!("launcher of VMI {namespace}/{vmi_name}")));
            }
        }
    }
    set_pod_phase(agent, pod, "Running", "", &pod_ip).await;
    let sandbox_id = run.sandbox.id.clone();
    let _ = Api::<Pod>::namespaced(agent.store.clone(), &namespace)
        .modify_status(&name, |p| {
            p.metadata
                .annotations
                .insert(crate::claims::SANDBOX_ANNOTATION.into(), sandbox_id.clone());
            true
        })
        .await;
    Ok(run)
}

async fn stop_pod(agent: &Arc<Agent>, run: RunningPod) {
    if let Some(state) = run.launcher {
        launcher::stop(agent, state).await;
    }
    if let Err(e) = sandbox::remove(agent, run.sandbox).await {
        tracing::warn!(pod = %run.name, "sandbox removal: {e:#}");
    }
}

async fn set_pod_phase(agent: &Arc<Agent>, pod: &Pod, phase: &str, message: &str, pod_ip: &str) {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let result = Api::<Pod>::namespaced(agent.store.clone(), &ns)
        .modify_status(&pod.metadata.name, |p| {
            let before = p.status.clone();
            p.status.phase = phase.into();
            p.status.message = message.into();
            if !pod_ip.is_empty() {
                p.status.pod_ip = pod_ip.into();
            }
            p.status != before
        })
        .await;
    if let Err(e) = result
        && !e.is_not_found()
    {
        tracing::warn!(pod = %pod.metadata.name, "status update: {e}");
    }
}

/// For a launcher pod, wire (and attach to the guest) the interfaces the agent's
/// dynamic-networks role hot-plugged, and undo the unplugged ones.
async fn hotplug(agent: &Arc<Agent>, run: &mut RunningPod) -> anyhow::Result<()> {
    let Some(state) = run.launcher.as_mut() else {
        return Ok(());
    };
    let Some(pod) = Api::<Pod>::namespaced(agent.store.clone(), &run.namespace)
        .get(&run.name)
        .await?
    else {
        return Ok(());
    };
    let vmi = Api::<VirtualMachineInstance>::namespaced(agent.store.clone(), &run.namespace)
        .get_required(&state.vmi)
        .await?;
    launcher::hotplug(agent, &pod, &vmi, state).await?;
    Ok(())
}

/// Per-pod files (serial log, domain XML) of this node.
pub fn pod_dir(agent: &Agent, namespace: &str, name: &str) -> PathBuf {
    agent
        .args
        .cache_dir
        .parent()
        .unwrap_or(&agent.args.cache_dir)
        .join("pods")
        .join(format!("{namespace}_{name}"))
}
