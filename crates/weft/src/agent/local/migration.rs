//! The node agents' part of a live migration (virt-handler's in KubeVirt), per launcher pod
//! and pass of the kubelet loop:
//!
//! - on the **target** node (a pod labelled `kubevirt.io/migrationJobUID`): the launcher has
//!   wired the same NICs (same MACs, taps in the pod netns) and started QEMU with the same
//!   devices and `-incoming defer`; this module gives it `migrate-incoming` on a Unix socket in
//!   the pod directory, listens on the node's underlay address ([`Proxy::target`]) and records
//!   that address in the VMI's `migrationState` (target ready). Once the guest runs there (QEMU
//!   resumes by itself after the incoming state), `announce-self` tells the bridges and the
//!   overlay where the guest's MACs are now, and `targetNodeDomainReadyTimestamp` is written.
//! - on the **source** node: once the target is ready, the source QEMU migrates (pre-copy,
//!   downtime limit) to a Unix socket relayed to the target ([`Proxy::source`]); progress from
//!   `query-migrate` goes to the migration object, the outcome to `migrationState`. An abort
//!   (`abortRequested`) is a `migrate_cancel`; a failed or cancelled migration leaves the
//!   source guest running.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use weft_guest::migrate::{self, MigrationProgress, TargetRunStatus};
use weft_guest::qmp::QmpClient;
use weft_store::Api;
use weft_vm::api::MigrationState;
use weft_vm::vmim::{
    self, MIGRATION_JOB_LABEL, MIGRATION_PROGRESS_ANNOTATION, SourceAction, SourceOutcome as Outcome,
    TargetAction,
};
use weft_vm::{VirtualMachineInstance, VirtualMachineInstanceMigration};

use crate::agent::local::context::AgentContext;
pub use crate::agent::local::incoming::INCOMING_ANNOTATION;
use crate::agent::local::launcher::LauncherState;
use crate::agent::local::migration_proxy::Proxy;
use crate::kinds::Pod;
use crate::local::topology::Topology;

/// Migration annotation capping the transfer's bandwidth (bytes/s; KubeVirt's
/// `bandwidthPerMigration` of a migration policy): a slow transfer for tests that act while it
/// runs.
pub const BANDWIDTH_ANNOTATION: &str = "weft.dev/migration-bandwidth";

/// File names in the pod directories.
const INCOMING_SOCKET: &str = "incoming.sock";
const OUTGOING_SOCKET: &str = "migration.sock";

/// What a launcher pod does for migrations (kept across passes).
#[derive(Default)]
pub struct PodMigration {
    target: Option<TargetSide>,
    source: Option<SourceSide>,
    /// Migrations this pod has finished as the source (never started again).
    done: BTreeSet<String>,
}

struct TargetSide {
    uid: String,
    proxy: Option<Proxy>,
    resumed: bool,
}

struct SourceSide {
    uid: String,
    cancel: Arc<AtomicBool>,
    progress: Arc<Mutex<MigrationProgress>>,
    driver: Option<JoinHandle<Outcome>>,
    written: Option<MigrationProgress>,
}

/// The VMI the launcher of `pod` starts from: for a migration target, the source's MACs (from
/// the VMI status: the guest keeps them) and [`INCOMING_ANNOTATION`]; other pods get `vmi`.
/// Reads the topology file for a target: call it on a blocking thread.
pub fn target_vmi(agent: &AgentContext, pod: &Pod, vmi: VirtualMachineInstance) -> VirtualMachineInstance {
    let Some(uid) = pod.metadata.label(MIGRATION_JOB_LABEL) else {
        return vmi;
    };
    let mut vmi = vmi;
    let macs: Vec<(String, String)> = vmi
        .status_interfaces()
        .iter()
        .filter(|s| !s.mac.is_empty())
        .map(|s| (s.name.clone(), s.mac.clone()))
        .collect();
    for interface in vmi
        .spec
        .interfaces_mut()
        .iter_mut()
        .filter(|i| i.mac_address.is_empty())
    {
        if let Some((_, mac)) = macs.iter().find(|(name, _)| *name == interface.name) {
            interface.mac_address = mac.clone();
        }
    }
    let seed = vmim::vmi_migration_state(&vmi)
        .filter(|s| s.migration_uid == uid)
        .and_then(|s| {
            let topology = Topology::load(&agent.state_dir).ok()?;
            let node = topology.nodes.iter().find(|n| n.name == s.source_node)?;
            let ns = vmi.namespace();
            let pods = super::context::pods_dir(&node.cache_dir());
            Some(
                super::pods::pod_dir_in(&pods, ns, &s.source_pod)
                    .join(format!("{}.serial.log", vmi.metadata.name)),
            )
        })
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    vmi.metadata.annotations.insert(INCOMING_ANNOTATION.into(), seed);
    vmi
}

/// One pass for the launcher pod `name`. Returns true when the pod is a migration target (the
/// kubelet then leaves its status reports and hot-plug alone until it takes over).
pub async fn step(
    agent: &Arc<AgentContext>,
    namespace: &str,
    name: &str,
    launcher: Option<&mut LauncherState>,
    migration: &mut PodMigration,
) -> bool {
    let Some(launcher) = launcher else {
        return false;
    };
    let pod = match Api::<Pod>::namespaced(agent.store.clone(), namespace)
        .get(name)
        .await
    {
        Ok(Some(pod)) => pod,
        _ => return false,
    };
    let is_target = pod.metadata.label(MIGRATION_JOB_LABEL).is_some();
    let result = if let Some(uid) = pod.metadata.label(MIGRATION_JOB_LABEL) {
        target_step(agent, &pod, uid, launcher, migration).await
    } else {
        end_target(migration).await;
        source_step(agent, &pod, launcher, migration).await
    };
    if let Err(e) = result {
        tracing::warn!(pod = %name, "migration: {e:#}");
    }
    is_target
}

/// End the target side of a migration (if any) off the async workers: closing its proxy joins
/// the relay threads.
async fn end_target(migration: &mut PodMigration) {
    if let Some(target) = migration.target.take()
        && let Err(e) = crate::sys::blocking(move || drop(target)).await
    {
        tracing::warn!("migration target: {e:#}");
    }
}

/// Let go of a pod's migrations (its pod stopped), off the async workers.
pub async fn release(mut migration: PodMigration) {
    end_target(&mut migration).await;
}

fn node_ip(topology: &Topology, node: &str) -> anyhow::Result<IpAddr> {
    topology
        .nodes
        .iter()
        .find(|n| n.name == node)
        .map(|n| IpAddr::V4(n.underlay_ip))
        .with_context(|| format!("node {node} is not in the local cluster"))
}

async fn target_step(
    agent: &Arc<AgentContext>,
    pod: &Pod,
    uid: &str,
    launcher: &mut LauncherState,
    migration: &mut PodMigration,
) -> anyhow::Result<()> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let vmi = Api::<VirtualMachineInstance>::namespaced(agent.store.clone(), &ns)
        .get_required(&launcher.vmi)
        .await?;
    let Some(state) = vmim::vmi_migration_state(&vmi).filter(|s| s.migration_uid == uid) else {
        return Ok(());
    };
    let own = migration.target.as_ref().filter(|t| t.uid == uid);
    let observation = vmim::TargetObservation {
        guest_exit: launcher.guest.as_mut().and_then(|g| g.exited()),
        pod_running: pod.status.phase == "Running",
        listening: own.is_some(),
        resumed: own.is_some_and(|t| t.resumed),
    };
    match vmim::target_action(&state, observation) {
        TargetAction::End => end_target(migration).await,
        TargetAction::Wait => {}
        TargetAction::FailPod { how } => fail_target(agent, pod, &how, launcher, migration).await?,
        TargetAction::Listen => listen(agent, &ns, &state, uid, launcher, migration).await?,
        TargetAction::Resume => resume(agent, &ns, uid, launcher, migration).await?,
    }
    Ok(())
}

/// The target failed, not the VMI: its pod fails (the controller ends the migration and
/// removes it); the source guest runs on.
async fn fail_target(
    agent: &Arc<AgentContext>,
    pod: &Pod,
    how: &str,
    launcher: &mut LauncherState,
    migration: &mut PodMigration,
) -> anyhow::Result<()> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let log = match launcher.guest.as_ref().map(|g| g.spec().qemu_log()) {
        Some(file) => crate::sys::blocking(move || std::fs::read_to_string(file).unwrap_or_default()).await?,
        None => String::new(),
    };
    launcher.drop_guest().await;
    end_target(migration).await;
    let reason = vmim::target_exit_reason(how, &log);
    tracing::warn!(pod = %pod.metadata.name, "{reason}");
    Api::<Pod>::namespaced(agent.store.clone(), &ns)
        .modify_status(&pod.metadata.name, |p| {
            p.status.phase = "Failed".into();
            p.status.message = reason.clone();
            true
        })
        .await?;
    Ok(())
}

/// Listen for migration `uid`'s incoming state and record where.
async fn listen(
    agent: &Arc<AgentContext>,
    ns: &str,
    state: &MigrationState,
    uid: &str,
    launcher: &mut LauncherState,
    migration: &mut PodMigration,
) -> anyhow::Result<()> {
    let state_dir = agent.state_dir.clone();
    let topology = crate::sys::blocking(move || Topology::load(&state_dir)).await??;
    let here = node_ip(&topology, &agent.node)?;
    let source = node_ip(&topology, &state.source_node)?;
    let qmp = launcher.guest.as_ref().map(|g| g.spec().qmp_socket());
    let incoming = launcher.dir.join(INCOMING_SOCKET);
    let (proxy, address) =
        crate::sys::blocking(move || listen_for_incoming(qmp.as_deref(), &incoming, here, source)).await??;
    // A previous migration's target (another uid) joins its relay threads when dropped.
    end_target(migration).await;
    migration.target = Some(TargetSide {
        uid: uid.to_string(),
        proxy,
        resumed: false,
    });
    update_state(agent, ns, &launcher.vmi, uid, |s| {
        vmim::record_target_listening(s, address)
    })
    .await
}

/// The source says the state is across: the guest runs here once QEMU resumed it.
async fn resume(
    agent: &Arc<AgentContext>,
    ns: &str,
    uid: &str,
    launcher: &mut LauncherState,
    migration: &mut PodMigration,
) -> anyhow::Result<()> {
    let Some(target) = migration.target.as_mut() else {
        return Ok(());
    };
    let qmp = launcher.guest.as_ref().map(|g| g.spec().qmp_socket());
    let netns = launcher.netns_path.clone();
    let running = crate::sys::blocking(move || resume_and_announce(qmp.as_deref(), &netns)).await??;
    if !running {
        return Ok(());
    }
    target.resumed = true;
    if let Some(proxy) = target.proxy.take() {
        crate::sys::blocking(move || proxy.close()).await?;
    }
    let now = weft_store::now_rfc3339();
    update_state(agent, ns, &launcher.vmi, uid, |s| {
        vmim::record_target_ready(s, &now)
    })
    .await
}

/// `migrate-incoming` on `incoming` (when a guest runs) and the target proxy on this node's
/// underlay address, accepting the source node only.
fn listen_for_incoming(
    qmp: Option<&Path>,
    incoming: &Path,
    here: IpAddr,
    source: IpAddr,
) -> anyhow::Result<(Option<Proxy>, SocketAddr)> {
    let Some(qmp) = qmp else {
        // No guest (`--no-guests`): no state to receive; the address still says "ready".
        return Ok((None, SocketAddr::new(here, 0)));
    };
    let _ = std::fs::remove_file(incoming);
    let mut client = QmpClient::connect(qmp).context("the target QEMU's QMP")?;
    client
        .execute(&migrate::migrate_incoming(&format!(
            "unix:{}",
            incoming.display()
        )))
        .context("migrate-incoming")?;
    let (proxy, address) = Proxy::target(SocketAddr::new(here, 0), source, incoming)?;
    Ok((Some(proxy), address))
}

/// Whether the target guest runs; once it does, the pod's quiet tables go and then
/// `announce-self`. A paused target (it should not be: QEMU resumes after the incoming state
/// unless started with `-S`) gets `cont`.
fn resume_and_announce(qmp: Option<&Path>, netns_path: &str) -> anyhow::Result<bool> {
    let Some(qmp) = qmp else {
        crate::agent::local::migration_quiet::remove(netns_path)?;
        return Ok(true);
    };
    let mut client = QmpClient::connect(qmp).context("the target QEMU's QMP")?;
    let status = client.execute(&migrate::query_status())?;
    match migrate::target_run_status(status["status"].as_str().unwrap_or("")) {
        TargetRunStatus::Running => {}
        TargetRunStatus::NeedsCont => {
            client.execute(&migrate::cont()).context("cont")?;
        }
        TargetRunStatus::NotYet => return Ok(false),
    }
    crate::agent::local::migration_quiet::remove(netns_path)?;
    client
        .execute(&migrate::announce_self())
        .context("announce-self")?;
    Ok(true)
}

async fn source_step(
    agent: &Arc<AgentContext>,
    pod: &Pod,
    launcher: &mut LauncherState,
    migration: &mut PodMigration,
) -> anyhow::Result<()> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let vmi = Api::<VirtualMachineInstance>::namespaced(agent.store.clone(), &ns)
        .get_required(&launcher.vmi)
        .await?;
    let Some(state) = vmim::vmi_migration_state(&vmi).filter(|s| s.source_pod == pod.metadata.name) else {
        return Ok(());
    };
    let uid = state.migration_uid.clone();
    let observation = vmim::SourceObservation {
        running: migration.source.as_ref().map(|s| s.uid.as_str()),
        done: migration.done.contains(&uid),
        has_guest: launcher.guest.is_some(),
    };
    match vmim::source_action(&state, observation)? {
        SourceAction::Wait => Ok(()),
        SourceAction::CompleteWithoutGuest => {
            migration.done.insert(uid.clone());
            let now = weft_store::now_rfc3339();
            update_state(agent, &ns, &launcher.vmi, &uid, |s| {
                vmim::complete_without_guest(s, &now)
            })
            .await
        }
        SourceAction::Start { target } => start_source(agent, &ns, &uid, target, launcher, migration).await,
        SourceAction::Follow { cancel } => follow_source(agent, &ns, &uid, cancel, launcher, migration).await,
    }
}

/// Start migration `uid`'s transfer to `target` on a thread ([`drive`]).
async fn start_source(
    agent: &Arc<AgentContext>,
    ns: &str,
    uid: &str,
    target: SocketAddr,
    launcher: &mut LauncherState,
    migration: &mut PodMigration,
) -> anyhow::Result<()> {
    let now = weft_store::now_rfc3339();
    // `source_action` starts a transfer only with a guest; without one this is a bug.
    let guest = launcher
        .guest
        .as_ref()
        .context("a transfer was started without a running guest")?;
    let bandwidth = find_migration(agent, ns, uid)
        .await?
        .and_then(|m| {
            m.metadata
                .annotation(BANDWIDTH_ANNOTATION)
                .and_then(|b| b.parse().ok())
        })
        .unwrap_or(migrate::MAX_BANDWIDTH);
    let cancel = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Mutex::new(MigrationProgress::default()));
    let (qmp, socket) = (guest.spec().qmp_socket(), launcher.dir.join(OUTGOING_SOCKET));
    let (cancel2, progress2) = (cancel.clone(), progress.clone());
    let driver = std::thread::Builder::new()
        .name("weft-migrate".into())
        .spawn(move || drive(&qmp, &socket, target, bandwidth, &cancel2, &progress2))
        .context("spawn the migration thread")?;
    migration.source = Some(SourceSide {
        uid: uid.to_string(),
        cancel,
        progress,
        driver: Some(driver),
        written: None,
    });
    update_state(agent, ns, &launcher.vmi, uid, |s| {
        vmim::record_source_started(s, &now)
    })
    .await
}

/// Follow migration `uid`'s running transfer: cancel it when asked, write its progress, record
/// its end once its thread is done.
async fn follow_source(
    agent: &Arc<AgentContext>,
    ns: &str,
    uid: &str,
    cancel: bool,
    launcher: &mut LauncherState,
    migration: &mut PodMigration,
) -> anyhow::Result<()> {
    let Some(source) = migration.source.as_mut() else {
        return Ok(());
    };
    if cancel {
        source.cancel.store(true, Ordering::SeqCst);
    }
    let progress = source.progress.lock().map(|p| p.clone()).unwrap_or_default();
    if progress.is_news(source.written.as_ref()) {
        write_progress(agent, ns, uid, &progress).await?;
        source.written = Some(progress);
    }
    if !source.driver.as_ref().is_some_and(JoinHandle::is_finished) {
        return Ok(());
    }
    let outcome = match source.driver.take().map(JoinHandle::join) {
        Some(Ok(outcome)) => outcome,
        _ => Outcome::Failed {
            reason: "the migration thread panicked".into(),
            aborted: false,
        },
    };
    let final_progress = source.progress.lock().map(|p| p.clone()).unwrap_or_default();
    write_progress(agent, ns, uid, &final_progress).await?;
    migration.source = None;
    migration.done.insert(uid.to_string());
    let now = weft_store::now_rfc3339();
    update_state(agent, ns, &launcher.vmi, uid, |s| {
        vmim::end_source_state(s, &outcome, &now)
    })
    .await
}

/// The source side of one migration (a thread): proxy, parameters, `migrate`, then
/// `query-migrate` until it ends, cancelling when asked. On failure the source guest runs on.
fn drive(
    qmp: &Path,
    socket: &Path,
    target: SocketAddr,
    bandwidth: u64,
    cancel: &AtomicBool,
    progress: &Mutex<MigrationProgress>,
) -> Outcome {
    let fail = |reason: String| Outcome::Failed {
        reason,
        aborted: false,
    };
    let proxy = match Proxy::source(socket, target) {
        Ok(proxy) => proxy,
        Err(e) => return fail(format!("{e}")),
    };
    let mut client = match QmpClient::connect(qmp) {
        Ok(client) => client,
        Err(e) => return fail(format!("the source QEMU's QMP: {e}")),
    };
    // The target pod is wired: whatever its CNI ADD sent with the guest's addresses (a
    // gratuitous ARP over a packet socket passes the quiet tables) is undone by the running
    // source guest announcing itself (GARP and unsolicited NA from the guest, RARP from QEMU),
    // so the peers' caches and the bridges' FDBs point at the source until the switch-over.
    if let Err(e) = client.execute(&migrate::announce_self()) {
        tracing::warn!("announce-self on the source: {e}");
    }
    let started = client
        .execute(&migrate::set_parameters(migrate::DOWNTIME_LIMIT_MS, bandwidth))
        .and_then(|_| client.execute(&migrate::migrate(&format!("unix:{}", socket.display()))));
    if let Err(e) = started {
        return fail(format!("{e}"));
    }
    let mut cancelled = false;
    let last = loop {
        if cancel.load(Ordering::SeqCst) && !cancelled {
            cancelled = true;
            if let Err(e) = client.execute(&migrate::cancel()) {
                tracing::warn!("migrate_cancel: {e}");
            }
        }
        let now = match client.execute(&migrate::query_migrate()) {
            Ok(value) => MigrationProgress::parse(&value),
            Err(e) => return fail(format!("query-migrate: {e}")),
        };
        if let Ok(mut shared) = progress.lock() {
            *shared = now.clone();
        }
        if now.is_final() {
            break now;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let reached = proxy.connected();
    // Let the relay drain what QEMU wrote last, then close it.
    drain(proxy, Duration::from_secs(10), last.status.as_str());
    let Some(reason) = last.failure_reason(reached) else {
        return Outcome::Completed;
    };
    // QEMU resumes the source itself after a failed or cancelled migration; make sure.
    if let Ok(value) = client.execute(&migrate::query_status())
        && value["status"] != "running"
    {
        let _ = client.execute(&migrate::cont());
    }
    Outcome::Failed {
        reason,
        aborted: cancelled || last.status == "cancelled",
    }
}

/// Wait (bounded) for a relay to finish on its own, then close it.
fn drain(proxy: Proxy, limit: Duration, status: &str) {
    let deadline = Instant::now() + limit;
    while !proxy.finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    tracing::info!(status, relayed = proxy.relayed(), "migration stream closed");
    proxy.close();
}

/// Modify the VMI's `migrationState` when it is migration `uid`'s.
async fn update_state(
    agent: &Arc<AgentContext>,
    namespace: &str,
    vmi: &str,
    uid: &str,
    change: impl Fn(&mut MigrationState),
) -> anyhow::Result<()> {
    Api::<VirtualMachineInstance>::namespaced(agent.store.clone(), namespace)
        .modify_status(vmi, |v| vmim::update_vmi_migration_state(v, uid, &change))
        .await?;
    Ok(())
}

/// Write `query-migrate` progress to the migration object's annotation.
async fn write_progress(
    agent: &Arc<AgentContext>,
    namespace: &str,
    uid: &str,
    progress: &MigrationProgress,
) -> anyhow::Result<()> {
    let api = Api::<VirtualMachineInstanceMigration>::namespaced(agent.store.clone(), namespace);
    let Some(vmim) = find_migration(agent, namespace, uid).await? else {
        return Ok(());
    };
    let text = serde_json::to_string(progress)?;
    // A migration deleted meanwhile has no progress to show.
    api.modify_status_if_exists(&vmim.metadata.name, |m| {
        if m.metadata.annotation(MIGRATION_PROGRESS_ANNOTATION) == Some(text.as_str()) {
            return false;
        }
        m.metadata
            .annotations
            .insert(MIGRATION_PROGRESS_ANNOTATION.into(), text.clone());
        true
    })
    .await?;
    Ok(())
}

/// The migration object with `uid`, if it still exists.
async fn find_migration(
    agent: &Arc<AgentContext>,
    namespace: &str,
    uid: &str,
) -> anyhow::Result<Option<VirtualMachineInstanceMigration>> {
    Ok(
        Api::<VirtualMachineInstanceMigration>::namespaced(agent.store.clone(), namespace)
            .list(&Default::default())
            .await?
            .into_iter()
            .find(|m| m.metadata.uid.as_deref() == Some(uid)),
    )
}
