//! The agent's kubelet and launcher roles in the local cluster: for every pod bound to this node,
//! create its sandbox (a network namespace), run the CNI config exactly as a container runtime
//! would (exec `weft-cni` with the CNI environment), and for virt-launcher pods wire the guest
//! side of every NIC, serve DHCP and boot the guest; report back into the pod and VMI status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use weft_store::{Api, ListOptions};
use weft_vm::VirtualMachineInstance;

use crate::agent::local::context::AgentContext;
use crate::agent::local::launcher::{self, LauncherState};
use crate::agent::local::sandbox::{self, Sandbox};
use crate::controller::launcher_pod;
use crate::kinds::Pod;
use crate::local::topology::Topology;

const RESYNC: Duration = Duration::from_millis(300);

/// A pod this node runs.
struct RunningPod {
    namespace: String,
    name: String,
    sandbox: Sandbox,
    launcher: Option<LauncherState>,
    /// Live migrations this pod takes part in.
    migration: crate::agent::local::migration::PodMigration,
}

/// What one pass of the local kubelet does with the pods bound to its node.
#[derive(Debug, PartialEq)]
struct PodPlan<'a> {
    /// Pods to start (or adopt), by uid: wanted and not running.
    start: Vec<(&'a str, &'a Pod)>,
    /// Running pods (by uid) to stop: deleted, being deleted, or Failed.
    stop: Vec<String>,
}

/// A pod runs while it is not being deleted and has not failed (a Failed pod's sandbox goes;
/// the pod stays for its status); pods without a uid are not the API server's yet.
fn plan_pods<'a, V>(pods: &'a [Pod], running: &BTreeMap<String, V>) -> PodPlan<'a> {
    let wanted: BTreeMap<&str, &Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && p.status.phase != "Failed")
        .filter_map(|p| p.metadata.uid.as_deref().map(|uid| (uid, p)))
        .collect();
    PodPlan {
        start: wanted
            .iter()
            .filter(|(uid, _)| !running.contains_key(**uid))
            .map(|(uid, pod)| (*uid, *pod))
            .collect(),
        stop: running
            .keys()
            .filter(|uid| !wanted.contains_key(uid.as_str()))
            .cloned()
            .collect(),
    }
}

/// Run pods bound to this node until `stop` turns true, then stop them all.
pub async fn run(
    agent: Arc<AgentContext>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let node = agent.node.clone();
    let topology = Topology::load(&agent.state_dir)?;
    let pods_api = Api::<Pod>::all(agent.store.clone());
    let mut running: BTreeMap<String, RunningPod> = BTreeMap::new();
    loop {
        let pods = pods_api
            .list(&ListOptions::default().field("spec.nodeName", &node))
            .await?;
        let plan = plan_pods(&pods, &running);
        for (uid, pod) in plan.start {
            if let Some(sandbox) = previous_sandbox(&topology, pod).await {
                // Started by this node's previous agent (it was restarted): take it over.
                match adopt(&agent, pod, sandbox).await {
                    Some(run) => {
                        running.insert(uid.to_string(), run);
                    }
                    None => continue,
                }
                continue;
            }
            match start_pod(&agent, &topology, pod).await {
                Ok(run) => {
                    running.insert(uid.to_string(), run);
                }
                Err(e) => {
                    tracing::error!(pod = %pod.metadata.name, "start failed: {e:#}");
                    record_sandbox_failure(&agent, pod, &format!("{e:#}")).await;
                    set_pod_phase(&agent, pod, "Failed", &format!("{e:#}"), "").await;
                }
            }
        }
        for uid in plan.stop {
            if let Some(run) = running.remove(&uid) {
                stop_pod(&agent, run).await;
            }
        }
        for run in running.values_mut() {
            // A migration target reports nothing (and plugs nothing) until it takes over.
            let (namespace, name) = (run.namespace.clone(), run.name.clone());
            if crate::agent::local::migration::step(
                &agent,
                &namespace,
                &name,
                run.launcher.as_mut(),
                &mut run.migration,
            )
            .await
            {
                continue;
            }
            if let Err(e) = hotplug(&agent, run).await {
                tracing::warn!(pod = %run.name, "hot-plug: {e:#}");
            }
            if let Some(state) = run.launcher.as_mut()
                && let Err(e) = launcher::report(&agent, &run.namespace, state).await
            {
                tracing::warn!(pod = %run.name, "guest report: {e:#}");
            }
            // A guest whose QEMU died is not left looking alive: the pod fails (and is stopped
            // on the next pass), the VMI says why.
            if let Some(state) = run.launcher.as_mut()
                && let Some(how) = state.guest.as_mut().and_then(|g| g.exited())
            {
                let reason = format!("the guest's QEMU exited ({how})");
                tracing::warn!(pod = %run.name, "{reason}");
                state.drop_guest().await;
                // The VMI first: the controller leaves a Failed VMI alone, so the reason stays.
                mark_vmi_failed(&agent, &run.namespace, &state.vmi.clone(), "GuestExited", &reason).await;
                if let Ok(Some(pod)) = Api::<Pod>::namespaced(agent.store.clone(), &run.namespace)
                    .get(&run.name)
                    .await
                {
                    set_pod_phase(&agent, &pod, "Failed", &reason, "").await;
                }
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

/// The sandbox a previous agent of this node left for `pod`: the pod is Running with its
/// sandbox id recorded and its namespace still exists (looked up on the blocking pool).
async fn previous_sandbox(topology: &Topology, pod: &Pod) -> Option<Sandbox> {
    if pod.status.phase != "Running" {
        return None;
    }
    let id = pod
        .metadata
        .annotation(crate::claims::SANDBOX_ANNOTATION)?
        .to_string();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let netns = topology.pod_netns(&namespace, &pod.metadata.name);
    let sandbox = Sandbox {
        id,
        netns,
        pod: (
            namespace,
            pod.metadata.name.clone(),
            pod.metadata.uid.clone().unwrap_or_default(),
        ),
        pod_ip: pod.status.pod_ip.clone(),
    };
    let path = sandbox.netns_path();
    crate::sys::blocking(move || std::path::Path::new(&path).exists())
        .await
        .unwrap_or(false)
        .then_some(sandbox)
}

/// Take over a pod the previous agent started. A plain pod's sandbox keeps running untouched; a
/// launcher pod's wiring, DHCP servers and QEMU are taken over ([`launcher::adopt`]). When that
/// fails (its QEMU died meanwhile, no record), nothing is left orphaned: the recorded QEMU (if
/// it still is that process) is stopped, the sandbox removed, and the pod and VMI marked Failed
/// with the reason.
async fn adopt(agent: &Arc<AgentContext>, pod: &Pod, sandbox: Sandbox) -> Option<RunningPod> {
    let (namespace, name, _) = sandbox.pod.clone();
    let is_launcher =
        pod.metadata.label(launcher_pod::LAUNCHER_LABEL.0) == Some(launcher_pod::LAUNCHER_LABEL.1);
    if !is_launcher {
        tracing::info!(pod = %name, netns = %sandbox.netns, "adopted the sandbox of the previous agent");
        return Some(RunningPod {
            namespace,
            name,
            sandbox,
            launcher: None,
            migration: Default::default(),
        });
    }
    let vmi = pod
        .metadata
        .annotation(launcher_pod::DOMAIN_ANNOTATION)
        .unwrap_or_default()
        .to_string();
    let dir = crate::agent::local::pods::pod_dir(agent, &namespace, &name);
    let taken = async {
        let object = Api::<VirtualMachineInstance>::namespaced(agent.store.clone(), &namespace)
            .get_required(&vmi)
            .await?;
        launcher::adopt(agent, pod, &object, &sandbox, &dir).await
    }
    .await;
    let error = match taken {
        Ok(state) => {
            tracing::info!(pod = %name, vmi = %vmi, "adopted the launcher of the previous agent");
            return Some(RunningPod {
                namespace,
                name,
                sandbox,
                launcher: Some(state),
                migration: Default::default(),
            });
        }
        Err(e) => e,
    };
    let (qemu, state_dir) = (format!("qemu-{namespace}-{vmi}"), agent.state_dir.clone());
    let killed = crate::sys::blocking(move || {
        if let Some(record) = crate::local::processes::recorded(&state_dir, &qemu) {
            record.signal(nix::sys::signal::Signal::SIGKILL);
            let _ = std::fs::remove_file(
                crate::local::processes::pid_dir(&state_dir).join(format!("{qemu}.pid")),
            );
        }
    })
    .await;
    if let Err(e) = killed {
        tracing::warn!(pod = %name, "stop the recorded QEMU: {e:#}");
    }
    let reason = format!("the node agent restarted and could not take the launcher over: {error:#}");
    tracing::warn!(pod = %name, "{reason}");
    if let Err(e) = sandbox::remove(agent, sandbox).await {
        tracing::warn!(pod = %name, "sandbox removal: {e:#}");
    }
    // The VMI first: the controller leaves a Failed VMI alone, so the reason stays.
    mark_vmi_failed(agent, &namespace, &vmi, "LauncherLost", &reason).await;
    set_pod_phase(agent, pod, "Failed", &reason, "").await;
    None
}

/// Mark a VMI Failed with `reason` (status.reason and a `Ready=False` condition saying why).
async fn mark_vmi_failed(agent: &Arc<AgentContext>, namespace: &str, vmi: &str, code: &str, reason: &str) {
    // A VMI deleted meanwhile needs no mark.
    let marked = Api::<VirtualMachineInstance>::namespaced(agent.store.clone(), namespace)
        .modify_status_if_exists(vmi, |v| {
            let status = v.status.get_or_insert_with(Default::default);
            weft_vm::status::mark_vmi_failed(status, reason, Some(code), &weft_store::now_rfc3339())
        })
        .await;
    if let Err(e) = marked {
        tracing::warn!(vmi, "status update: {e}");
    }
}

async fn start_pod(agent: &Arc<AgentContext>, topology: &Topology, pod: &Pod) -> anyhow::Result<RunningPod> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone();
    let netns = topology.pod_netns(&namespace, &name);
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
        migration: Default::default(),
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
        // A migration target's VMI names the source's serial log, from the topology file.
        let (context, target_pod) = (agent.clone(), fresh_pod.clone());
        let vmi = crate::sys::blocking(move || {
            crate::agent::local::migration::target_vmi(&context, &target_pod, vmi)
        })
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

async fn stop_pod(agent: &Arc<AgentContext>, run: RunningPod) {
    if let Some(state) = run.launcher {
        launcher::stop(agent, state).await;
    }
    if let Err(e) = sandbox::remove(agent, run.sandbox).await {
        tracing::warn!(pod = %run.name, "sandbox removal: {e:#}");
    }
    crate::agent::local::migration::release(run.migration).await;
}

/// Record why a pod's sandbox (its CNI ADD, or the launcher's wiring) failed as a Warning
/// Event on the pod, kubelet's `FailedCreatePodSandBox`, with the whole error chain (the CNI
/// error's msg and details included).
async fn record_sandbox_failure(agent: &Arc<AgentContext>, pod: &Pod, message: &str) {
    let object = crate::kinds::ObjectReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone(),
    };
    if let Err(e) = crate::events::emit(
        &agent.store,
        &object,
        crate::events::WARNING,
        crate::explain::stages::FAILED_SANDBOX_REASON,
        message,
        "weft-kubelet",
    )
    .await
    {
        tracing::warn!(pod = %pod.metadata.name, "event: {e}");
    }
}

async fn set_pod_phase(agent: &Arc<AgentContext>, pod: &Pod, phase: &str, message: &str, pod_ip: &str) {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    // A pod deleted meanwhile has no phase to show.
    let result = Api::<Pod>::namespaced(agent.store.clone(), &ns)
        .modify_status_if_exists(&pod.metadata.name, |p| {
            let before = p.status.clone();
            p.status.phase = phase.into();
            p.status.message = message.into();
            if !pod_ip.is_empty() {
                p.status.pod_ip = pod_ip.into();
            }
            p.status != before
        })
        .await;
    if let Err(e) = result {
        tracing::warn!(pod = %pod.metadata.name, "status update: {e}");
    }
}

/// For a launcher pod, wire (and attach to the guest) the interfaces the agent's
/// dynamic-networks role hot-plugged, and undo the unplugged ones.
async fn hotplug(agent: &Arc<AgentContext>, run: &mut RunningPod) -> anyhow::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: Option<&str>, phase: &str, deleting: bool) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = uid.unwrap_or("new").into();
        pod.metadata.uid = uid.map(String::from);
        pod.status.phase = phase.into();
        if deleting {
            pod.metadata.deletion_timestamp = Some("2026-01-01T00:00:00Z".into());
        }
        pod
    }

    #[test]
    fn a_pass_starts_wanted_pods_and_stops_deleted_or_failed_ones() {
        let pods = [
            pod(Some("a"), "Pending", false),
            pod(Some("b"), "Running", false),
            pod(Some("c"), "Running", true),
            pod(Some("d"), "Failed", false),
            pod(None, "Pending", false),
        ];
        let running: BTreeMap<String, ()> = ["b", "c", "d", "gone"].map(|u| (u.to_string(), ())).into();
        let plan = plan_pods(&pods, &running);
        let start: Vec<&str> = plan.start.iter().map(|(uid, _)| *uid).collect();
        assert_eq!(
            start,
            ["a"],
            "b runs already; c is being deleted, d failed, one has no uid"
        );
        assert_eq!(plan.stop, ["c", "d", "gone"]);
        let idle = plan_pods(
            &pods[..2],
            &BTreeMap::<String, ()>::from([("a".into(), ()), ("b".into(), ())]),
        );
        assert_eq!(
            idle,
            PodPlan {
                start: vec![],
                stop: vec![]
            }
        );
    }
}
