//! The local cluster's supervisor (`weft supervise`, started by `weft up`): it owns the node
//! agents and the controller as its children, restarts one that exits with bounded exponential
//! backoff, records every restart (`run/restarts.jsonl` and the pid file), and makes a down
//! component visible: the node's `Ready` condition (reason `AgentDown`) and Events.
//! `weft down` stops it first, so nothing is restarted while the cluster is torn down.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use weft_store::{Api, Store};

use super::processes;
use super::topology::Topology;
use crate::events;
use crate::kinds::{Node, ObjectReference};

/// Who reports the supervisor's events.
pub const COMPONENT: &str = "weft-supervisor";
/// Name of the controller's process record.
pub const CONTROLLER: &str = "controller";
/// File the restarts are appended to (one JSON object a line).
pub const RESTARTS_FILE: &str = "restarts.jsonl";

/// How restarts back off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Delay before the first restart.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
    /// A component that ran this long before exiting starts its backoff afresh.
    pub stable: Duration,
    /// Consecutive failures after which the supervisor stops restarting and reports.
    pub give_up_after: u32,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(250),
            max: Duration::from_secs(10),
            stable: Duration::from_secs(60),
            give_up_after: 8,
        }
    }
}

/// What to do about a component that is not running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start it again now.
    RestartNow,
    /// Wait this long, then ask again.
    Wait(Duration),
    /// It keeps failing: stop restarting and report.
    GiveUp,
}

/// Consecutive failures after an exit: a component that ran `ran_for` at least the policy's
/// `stable` time counts as a first failure again.
pub fn failures_after_exit(policy: &RestartPolicy, previous: u32, ran_for: Duration) -> u32 {
    if ran_for >= policy.stable {
        1
    } else {
        previous.saturating_add(1)
    }
}

/// The delay before restart number `failures` (1-based): `initial · 2^(failures-1)`, capped;
/// none before the first start (`failures` 0).
pub fn backoff(policy: &RestartPolicy, failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let doublings = failures.saturating_sub(1).min(20);
    policy.initial.saturating_mul(1 << doublings).min(policy.max)
}

/// Restart now, wait for the backoff, or give up, for a component with `failures` consecutive
/// failures that exited `since_exit` ago.
pub fn decide(policy: &RestartPolicy, failures: u32, since_exit: Duration) -> Decision {
    if failures > policy.give_up_after {
        return Decision::GiveUp;
    }
    let delay = backoff(policy, failures);
    if since_exit >= delay {
        Decision::RestartNow
    } else {
        Decision::Wait(delay - since_exit)
    }
}

/// Set (or add) condition `type_` on a Node's status; `lastTransitionTime` moves only when the
/// status changes. Returns whether anything changed.
pub fn set_condition(
    status: &mut Value,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
    now: &str,
) -> bool {
    if !status.is_object() {
        *status = json!({});
    }
    let conditions = status
        .as_object_mut()
        .map(|s| s.entry("conditions").or_insert_with(|| json!([])))
        .expect("an object");
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let list = conditions.as_array_mut().expect("an array");
    let wanted = json!({"type": type_, "status": value, "reason": reason, "message": message});
    match list.iter_mut().find(|c| c["type"] == type_) {
        Some(c) => {
            let same = c["status"] == value && c["reason"] == reason && c["message"] == message;
            if same {
                return false;
            }
            let transition = if c["status"] == value {
                c["lastTransitionTime"].clone()
            } else {
                Value::String(now.into())
            };
            *c = wanted;
            c["lastTransitionTime"] = transition;
            c["lastHeartbeatTime"] = Value::String(now.into());
        }
        None => {
            let mut c = wanted;
            c["lastTransitionTime"] = Value::String(now.into());
            c["lastHeartbeatTime"] = Value::String(now.into());
            list.push(c);
        }
    }
    true
}

/// One supervised process.
struct Component {
    /// Record name (`agent-node1`, `controller`).
    name: String,
    /// The node an agent serves (`None`: the controller).
    node: Option<String>,
    /// Its netns (agents).
    netns: Option<String>,
    /// Its socket (agents): it is up once this answers.
    socket: Option<PathBuf>,
    log: PathBuf,
    command: fn(&Topology, &Path, &Component) -> Command,
    state: State,
    failures: u32,
    restarts: u32,
}

enum State {
    /// Started, not answering yet.
    Starting(Child, Instant),
    /// Up.
    Running(Child, Instant),
    /// Exited at that time.
    Down(Instant),
    /// Given up on.
    GaveUp,
}

fn agent_command(topology: &Topology, exe: &Path, c: &Component) -> Command {
    let node = topology
        .nodes
        .iter()
        .find(|n| Some(&n.name) == c.node.as_ref())
        .expect("a node of the topology");
    let state = &topology.state_dir;
    let mut command = Command::new(exe);
    command
        .env("WEFT_STATE_DIR", state)
        .args(["agent", "--local", "--node", &node.name])
        .arg("--socket")
        .arg(node.socket())
        .arg("--conf-dir")
        .arg(node.conf_dir())
        .arg("--cache-dir")
        .arg(node.cache_dir())
        .arg("--cni-bin-dir")
        .arg(topology.bin_dir())
        .arg("--cni-bin-dir")
        .arg("/usr/lib/cni")
        .arg("--state-dir")
        .arg(state);
    if topology.no_guests {
        command.arg("--no-guests");
    }
    command
}

fn controller_command(topology: &Topology, exe: &Path, _: &Component) -> Command {
    let mut command = Command::new(exe);
    command
        .arg("controller")
        .arg("--state-dir")
        .arg(&topology.state_dir);
    command
}

fn components(topology: &Topology) -> Vec<Component> {
    let mut all: Vec<Component> = topology
        .nodes
        .iter()
        .map(|node| Component {
            name: format!("agent-{}", node.name),
            node: Some(node.name.clone()),
            netns: Some(node.netns.clone()),
            socket: Some(node.socket()),
            log: node.dir.join("agent.log"),
            command: agent_command,
            state: State::Down(Instant::now()),
            failures: 0,
            restarts: 0,
        })
        .collect();
    all.push(Component {
        name: CONTROLLER.into(),
        node: None,
        netns: None,
        socket: None,
        log: topology.state_dir.join("controller.log"),
        command: controller_command,
        state: State::Down(Instant::now()),
        failures: 0,
        restarts: 0,
    });
    all
}

fn involved(c: &Component) -> ObjectReference {
    match &c.node {
        Some(node) => ObjectReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            namespace: String::new(),
            name: node.clone(),
        },
        None => ObjectReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "kube-system".into(),
            name: "weft-controller".into(),
        },
    }
}

struct Supervisor {
    topology: Topology,
    exe: PathBuf,
    store: Arc<dyn Store>,
    policy: RestartPolicy,
}

impl Supervisor {
    fn start(&self, c: &mut Component) -> anyhow::Result<()> {
        let netns = c.netns.as_deref().map(weft_host::Netns::open_named).transpose()?;
        let command = (c.command)(&self.topology, &self.exe, c);
        let child = processes::spawn_child(&c.name, netns.as_ref(), command, &c.log, false)?;
        processes::record(&self.topology.state_dir, &c.name, child.id())?;
        c.state = State::Starting(child, Instant::now());
        Ok(())
    }

    fn append_restart(&self, line: Value) {
        use std::io::Write;
        let file = processes::pid_dir(&self.topology.state_dir).join(RESTARTS_FILE);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            tracing::warn!("record restart in {}: {e}", file.display());
        }
    }

    /// Make the component's state visible: the node's Ready condition (agents) and an Event.
    async fn report(&self, c: &Component, type_: &str, reason: &str, message: &str) {
        if let Some(node) = &c.node {
            let ready = if type_ == events::NORMAL { "True" } else { "False" };
            let now = weft_store::now_rfc3339();
            let result = Api::<Node>::all(self.store.clone())
                .modify_status(node, |n| {
                    set_condition(&mut n.status, "Ready", ready, reason, message, &now)
                })
                .await;
            if let Err(e) = result {
                tracing::warn!(node, "Ready condition: {e}");
            }
        }
        if let Err(e) = events::emit(&self.store, &involved(c), type_, reason, message, COMPONENT).await {
            tracing::warn!(component = %c.name, "event {reason}: {e}");
        }
    }

    async fn exited(&self, c: &mut Component, pid: u32, status: std::process::ExitStatus, started: Instant) {
        let ran_for = started.elapsed();
        c.failures = failures_after_exit(&self.policy, c.failures, ran_for);
        let delay = backoff(&self.policy, c.failures);
        let how = describe(status);
        tracing::warn!(component = %c.name, pid, "exited ({how}) after {ran_for:?}; restart in {delay:?}");
        self.append_restart(json!({
            "component": c.name, "event": "exited", "pid": pid, "exit": how,
            "ranForMs": ran_for.as_millis() as u64, "failures": c.failures, "at": weft_store::now_rfc3339(),
        }));
        let what = match &c.node {
            Some(node) => format!("weft agent of {node}"),
            None => "weft controller".to_string(),
        };
        let (type_, reason) = lifecycle_event(c.node.is_some(), Lifecycle::Exited);
        let message = format!(
            "{what} (pid {pid}) exited ({how}); restart {} in {delay:?}",
            c.failures
        );
        c.state = State::Down(Instant::now());
        self.report(c, type_, reason, &message).await;
    }

    async fn step(&self, c: &mut Component) {
        match std::mem::replace(&mut c.state, State::GaveUp) {
            State::Starting(mut child, started) => {
                if let Ok(Some(status)) = child.try_wait() {
                    self.exited(c, child.id(), status, started).await;
                    return;
                }
                let up = match &c.socket {
                    Some(socket) => tokio::net::UnixStream::connect(socket).await.is_ok(),
                    None => true,
                };
                if up {
                    let pid = child.id();
                    c.state = State::Running(child, started);
                    if c.restarts > 0 {
                        let message = format!("{} restarted (pid {pid}, restart {})", c.name, c.restarts);
                        self.append_restart(json!({
                            "component": c.name, "event": "restarted", "pid": pid,
                            "restarts": c.restarts, "at": weft_store::now_rfc3339(),
                        }));
                        let (type_, reason) = lifecycle_event(c.node.is_some(), Lifecycle::Restarted);
                        self.report(c, type_, reason, &message).await;
                    } else if c.node.is_some() {
                        let (type_, reason) = lifecycle_event(true, Lifecycle::Ready);
                        self.report(c, type_, reason, "weft agent is serving").await;
                    }
                } else {
                    c.state = State::Starting(child, started);
                }
            }
            State::Running(mut child, started) => match child.try_wait() {
                Ok(Some(status)) => self.exited(c, child.id(), status, started).await,
                _ => c.state = State::Running(child, started),
            },
            State::Down(at) => match decide(&self.policy, c.failures, at.elapsed()) {
                Decision::Wait(_) => c.state = State::Down(at),
                Decision::RestartNow => {
                    if c.failures > 0 {
                        c.restarts += 1;
                    }
                    if let Err(e) = self.start(c) {
                        tracing::error!(component = %c.name, "start: {e:#}");
                        c.failures += 1;
                        c.state = State::Down(Instant::now());
                    }
                }
                Decision::GiveUp => {
                    let message = format!(
                        "{} failed {} times in a row; not restarted any more (see its log)",
                        c.name, c.failures
                    );
                    tracing::error!("{message}");
                    self.append_restart(
                        json!({"component": c.name, "event": "gave-up", "at": weft_store::now_rfc3339()}),
                    );
                    let (type_, reason) = lifecycle_event(c.node.is_some(), Lifecycle::GaveUp);
                    self.report(c, type_, reason, &message).await;
                    c.state = State::GaveUp;
                }
            },
            State::GaveUp => {}
        }
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => match nix::sys::signal::Signal::try_from(signal) {
            Ok(s) => format!("killed by {s}"),
            Err(_) => format!("killed by signal {signal}"),
        },
        _ => "unknown status".into(),
    }
}

/// `weft supervise`: start and keep running the cluster's agents and controller until SIGTERM
/// (then leave them to `weft down`, which stops the supervisor first and them next).
pub async fn run(state: &Path) -> anyhow::Result<i32> {
    let topology = Topology::load(state)?;
    let exe = std::env::current_exe().context("locate the weft binary")?;
    let store = crate::cluster::open_store(state, crate::cluster::Component::Cli).await?;
    let supervisor = Supervisor {
        topology,
        exe,
        store,
        policy: RestartPolicy::default(),
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut all = components(&supervisor.topology);
    loop {
        for c in &mut all {
            supervisor.step(c).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = term.recv() => return Ok(0),
            _ = tokio::signal::ctrl_c() => return Ok(0),
        }
    }
}

/// What happened to a supervised component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lifecycle {
    /// It exited (a restart follows after the back-off).
    Exited,
    /// It serves again after a restart.
    Restarted,
    /// It serves, first start (agents only).
    Ready,
    /// It failed too often: not restarted any more.
    GaveUp,
}

/// The Event type and reason of a component's lifecycle step (`agent`: a node agent, else
/// the controller). A Normal one makes an agent's node Ready, a Warning one NotReady.
fn lifecycle_event(agent: bool, what: Lifecycle) -> (&'static str, &'static str) {
    use Lifecycle::*;
    match (agent, what) {
        (true, Exited) => (events::WARNING, "AgentDown"),
        (false, Exited) => (events::WARNING, "ControllerDown"),
        (true, Restarted) => (events::NORMAL, "AgentRestarted"),
        (false, Restarted) => (events::NORMAL, "ControllerRestarted"),
        // Only agents report a first start (the controller has no node to make Ready).
        (_, Ready) => (events::NORMAL, "AgentReady"),
        (true, GaveUp) => (events::WARNING, "AgentCrashLooping"),
        (false, GaveUp) => (events::WARNING, "ControllerCrashLooping"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lifecycle_events_name_the_component_and_warn_when_it_is_down() {
        use super::Lifecycle::*;
        use super::{events, lifecycle_event};
        let all: Vec<_> = [Exited, Restarted, Ready, GaveUp]
            .into_iter()
            .flat_map(|w| [lifecycle_event(true, w), lifecycle_event(false, w)])
            .collect();
        assert_eq!(
            all,
            [
                (events::WARNING, "AgentDown"),
                (events::WARNING, "ControllerDown"),
                (events::NORMAL, "AgentRestarted"),
                (events::NORMAL, "ControllerRestarted"),
                (events::NORMAL, "AgentReady"),
                (events::NORMAL, "AgentReady"),
                (events::WARNING, "AgentCrashLooping"),
                (events::WARNING, "ControllerCrashLooping"),
            ]
        );
    }

    use super::*;

    #[test]
    fn backoff_doubles_and_is_bounded() {
        let p = RestartPolicy::default();
        assert_eq!(backoff(&p, 0), Duration::ZERO, "the first start");
        assert_eq!(backoff(&p, 1), Duration::from_millis(250));
        assert_eq!(backoff(&p, 2), Duration::from_millis(500));
        assert_eq!(backoff(&p, 4), Duration::from_secs(2));
        assert_eq!(backoff(&p, 7), Duration::from_secs(10), "capped");
        assert_eq!(backoff(&p, 1000), Duration::from_secs(10), "no overflow");
    }

    #[test]
    fn decide_restarts_after_the_backoff_then_gives_up() {
        let p = RestartPolicy::default();
        assert_eq!(decide(&p, 0, Duration::ZERO), Decision::RestartNow, "first start");
        assert_eq!(
            decide(&p, 1, Duration::from_millis(100)),
            Decision::Wait(Duration::from_millis(150))
        );
        assert_eq!(decide(&p, 1, Duration::from_millis(250)), Decision::RestartNow);
        assert_eq!(
            decide(&p, 3, Duration::from_millis(999)),
            Decision::Wait(Duration::from_millis(1))
        );
        assert_eq!(
            decide(&p, p.give_up_after, Duration::from_secs(10)),
            Decision::RestartNow
        );
        assert_eq!(
            decide(&p, p.give_up_after + 1, Duration::from_secs(999)),
            Decision::GiveUp
        );
    }

    #[test]
    fn a_stable_run_resets_the_failure_count() {
        let p = RestartPolicy::default();
        assert_eq!(failures_after_exit(&p, 5, Duration::from_secs(1)), 6);
        assert_eq!(failures_after_exit(&p, 5, p.stable), 1);
        assert_eq!(failures_after_exit(&p, u32::MAX, Duration::ZERO), u32::MAX);
    }

    #[test]
    fn conditions_transition_only_on_status_change() {
        let mut status = json!({"addresses": []});
        assert!(set_condition(
            &mut status,
            "Ready",
            "False",
            "AgentDown",
            "gone",
            "t1"
        ));
        assert_eq!(status["conditions"][0]["lastTransitionTime"], "t1");
        assert!(!set_condition(
            &mut status,
            "Ready",
            "False",
            "AgentDown",
            "gone",
            "t2"
        ));
        assert!(set_condition(
            &mut status,
            "Ready",
            "False",
            "AgentDown",
            "gone again",
            "t3"
        ));
        assert_eq!(status["conditions"][0]["lastTransitionTime"], "t1", "same status");
        assert!(set_condition(
            &mut status,
            "Ready",
            "True",
            "AgentRestarted",
            "back",
            "t4"
        ));
        assert_eq!(status["conditions"][0]["lastTransitionTime"], "t4");
        assert_eq!(status["conditions"].as_array().unwrap().len(), 1);
        assert_eq!(status["addresses"], json!([]), "other fields kept");
        let mut null = Value::Null;
        assert!(set_condition(&mut null, "Ready", "True", "AgentReady", "", "t"));
    }

    #[test]
    fn agents_get_no_guests_as_an_option_not_an_environment_variable() {
        let args = |no_guests: bool| {
            let mut topology = Topology::new(Path::new("/state"), "c1", 1);
            topology.no_guests = no_guests;
            let agent = components(&topology).remove(0);
            let command = (agent.command)(&topology, Path::new("/weft"), &agent);
            assert!(
                command.get_envs().all(|(k, _)| k != "WEFT_NO_GUESTS"),
                "no environment variable carries it"
            );
            command
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        };
        let without = args(true);
        assert!(without.contains(&"--local".to_string()) && without.contains(&"--no-guests".to_string()));
        assert!(!args(false).contains(&"--no-guests".to_string()));
    }
}
