//! The node agent: the thick CNI plugin behind `weft-cni` (meta-plugin), and in the local
//! cluster also the kubelet (pod sandboxes) and launcher (guest wiring, DHCP, QEMU) roles.

pub mod adds_running;
mod autoconf;
mod cni;
mod cni_call;
mod dynamic;
mod ipam;
pub mod journal;
mod limits;
pub mod local;
mod metrics;
pub mod pod_events;
mod records;
mod routes;
mod server;
mod socket;
pub mod status_writes;
#[cfg(test)]
mod test_agent;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use clap::Args;
use weft_cni::CniError;
use weft_store::Store;

pub use metrics::Metrics;

use crate::protocol::CniRequest;

/// `weft agent` options.
#[derive(Clone, Debug, Args)]
pub struct AgentArgs {
    /// Name of this node.
    #[arg(long, env = "WEFT_NODE_NAME")]
    pub node: String,
    /// The agent's Unix socket.
    #[arg(long, default_value = crate::protocol::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Directories searched for delegate plugins, in order.
    #[arg(long = "cni-bin-dir", default_values = ["/opt/cni/bin", "/usr/lib/cni"])]
    pub cni_bin_dirs: Vec<PathBuf>,
    /// Directory of CNI configs (cluster network files, generated 00-weft.conflist).
    #[arg(long, default_value = "/etc/cni/net.d")]
    pub conf_dir: PathBuf,
    /// Per-container cache of what was attached (for DEL).
    #[arg(long, default_value = "/var/lib/weft/cache")]
    pub cache_dir: PathBuf,
    /// How many of a pod's delegates are ADDed at once, the cluster network among them unless a
    /// delegate depends on it (`weft_meta::schedule`); its DELs then all at once, up to 16. 1: one
    /// after another, ADD and DEL, as Multus.
    #[arg(long, default_value_t = 4)]
    pub parallel_delegates: usize,
    /// How many ADD plugin processes run at once on this node, over all pods: the rest wait
    /// their turn, in order, at most a plugin's timeout; a plugin running longer than a second
    /// gives its slot back (it is waiting, not burning CPU). DEL, CHECK, STATUS and GC are not
    /// bounded. Default: twice the cores, and never fewer than `--parallel-delegates` + 1.
    #[arg(long)]
    pub max_plugins: Option<usize>,
    /// `GOMAXPROCS` in the delegates' environment (the reference plugins are Go programs): 1 by
    /// default, so a plugin runs on one scheduler thread instead of one per core, and a burst
    /// of pods on a busy node does not pay for idle Go threads spinning for work. 0 leaves it
    /// to the Go runtime. A `GOMAXPROCS` in the agent's own environment is passed on as it is.
    #[arg(long, default_value_t = 1)]
    pub delegate_gomaxprocs: usize,
    /// The `AddedInterface` Events of an ADD: `per-pod` (one Event naming every interface, in
    /// Multus' words: one API write per ADD), `per-interface` (one per NIC, as Multus) or
    /// `none` (network-status alone shows what is attached; failures are still Events).
    #[arg(long, value_enum, default_value_t = pod_events::InterfaceEvents::PerPod)]
    pub interface_events: pod_events::InterfaceEvents,
    /// When an ADD writes the pod's network-status: `after-reply` (the ADD answers first; the
    /// value is kept in the attachment record and written at once, retried with backoff) or
    /// `before-reply` (as Multus: the ADD waits for the write and fails with it). Default:
    /// after the reply on Kubernetes, before it on the embedded store.
    #[arg(long = "network-status", value_enum)]
    pub network_status: Option<status_writes::StatusWrite>,
    /// Milliseconds the writes an ADD leaves behind (its network-status after the reply, its
    /// `AddedInterface` Event) wait while other ADDs run on this node: they go out as soon as
    /// none runs, or when this much has passed. Pods starting at once then do not compete with
    /// those writes (nor, where the control plane shares the node, with the API server's work
    /// for them). 0: at once.
    #[arg(long, default_value_t = 1000)]
    pub writes_yield_ms: u64,
    /// Daemon config (JSON): every key is overlaid on each request's config (thick mode).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Generate `00-weft.conflist` in --conf-dir from the first network config found in this
    /// directory (the primary network), and keep it up to date.
    #[arg(long)]
    pub auto_config: Option<PathBuf>,
    /// Also serve `/metrics`, `/healthz` and `/readyz` over TCP here (for Prometheus), e.g.
    /// `127.0.0.1:9102`. Loopback only unless --metrics-allow-remote.
    #[arg(long)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Allow a --metrics-addr that is not loopback (metrics readable from the network).
    #[arg(long)]
    pub metrics_allow_remote: bool,
    /// Connections served at once (socket and TCP each); more are answered "busy" (a CNI error
    /// the runtime retries) and closed at once.
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,
    /// Seconds a request's head, and then its body, may take to arrive.
    #[arg(long, default_value_t = 10)]
    pub read_timeout: u64,
    /// Local-cluster mode: also run pod sandboxes and guests for pods bound to this node.
    #[arg(long)]
    pub local: bool,
    /// Local-cluster mode: wire the guests' NICs, but boot no guests (no QEMU; `weft up
    /// --no-guests`).
    #[arg(long, requires = "local")]
    pub no_guests: bool,
}

impl AgentArgs {
    /// How long an ADD's writes wait for the other ADDs (`--writes-yield-ms`).
    pub fn writes_yield(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.writes_yield_ms)
    }
}

/// `--max-plugins`, or its default: twice the cores, and more than one pod's ADD runs at once
/// (`--parallel-delegates`), so a lone pod never waits and a second one can start beside it.
pub fn plugin_slots(max_plugins: Option<usize>, parallel_delegates: usize, cores: usize) -> usize {
    max_plugins
        .unwrap_or_else(|| (2 * cores).max(parallel_delegates + 1))
        .max(1)
}

/// The `GOMAXPROCS` the agent adds to its delegates' environment (`--delegate-gomaxprocs`):
/// none when the agent's own environment sets one (`inherited`: it reaches the delegates as it
/// is) or when the flag is 0.
pub fn delegate_gomaxprocs(flag: usize, inherited: Option<&std::ffi::OsStr>) -> Option<(String, String)> {
    (flag > 0 && inherited.is_none()).then(|| ("GOMAXPROCS".to_string(), flag.to_string()))
}

/// The agent's shared state.
pub struct Agent {
    /// Options.
    pub args: AgentArgs,
    /// State directory (local cluster: logs, pids, guest images).
    pub state_dir: PathBuf,
    /// The cluster store (served from watch caches on Kubernetes).
    pub store: Arc<dyn Store>,
    /// The cluster store without caches: IPAM's reads must see every write at once.
    pub ipam_store: Arc<dyn Store>,
    /// How delegated `weft-ipam` processes recognise the agent's store (see `/ipam`).
    pub store_identity: Option<String>,
    /// The daemon config overlaid on every request.
    pub daemon_config: serde_json::Map<String, serde_json::Value>,
    /// Metrics.
    pub metrics: Metrics,
    /// IPAM releases that wait for the store (the API server is unreachable).
    pub journal: journal::ReleaseJournal,
    /// The Events the agent records (aggregated, rate limited per pod).
    pub events: crate::event_recorder::Recorder,
    /// The reservations the agent's IPAM ADDs made, per attachment: their DEL releases with one
    /// conditional delete per address instead of a search.
    pub ipam_held: weft_ipam::HeldCache,
    /// When ADDs write network-status (`--network-status`, resolved for the store).
    pub status_write: status_writes::StatusWrite,
    /// The network-status writes that run after their ADD answered.
    pub status_writes: Arc<status_writes::StatusWrites>,
    /// The ADDs running now, which those writes and the ADDs' Events yield to
    /// (`--writes-yield-ms`).
    pub adds: Arc<adds_running::AddsRunning>,
    /// A sandbox's ADD, DEL and hot-plug passes do not overlap.
    pub sandboxes: records::Sandboxes,
    /// ADDs and hot-plug passes hold it shared, GC alone: GC builds the valid attachments from
    /// the records, so an attachment made meanwhile (not yet in a record) would be collected.
    pub gc_gate: tokio::sync::RwLock<()>,
    /// The node-wide bound on ADD plugin processes at once (`--max-plugins`).
    pub plugins: Arc<weft_cni::runtime::limit::ExecLimit>,
}

impl Agent {
    /// Handle a `/cni` request from the shim.
    pub async fn handle_cni(&self, request: CniRequest) -> Result<Option<serde_json::Value>, CniError> {
        cni::handle(self, request, false).await
    }

    /// Answer a `/cni-call` call from the static shim; also returns its verb.
    pub async fn handle_cni_call(&self, body: &[u8]) -> (String, weft_cni::plugin::Outcome) {
        cni_call::handle(self, body).await
    }

    /// Answer an `/ipam` call from a delegated `weft-ipam`; also returns its verb.
    pub async fn handle_ipam(&self, body: &[u8]) -> (String, ipam::IpamAnswer) {
        ipam::handle(self, body).await
    }

    /// The variables every delegate gets (how a delegated `weft-ipam` finds the agent).
    pub fn delegate_env(&self) -> Vec<(String, String)> {
        let mut env = ipam::delegate_env(self);
        let inherited = std::env::var_os("GOMAXPROCS");
        env.extend(delegate_gomaxprocs(
            self.args.delegate_gomaxprocs,
            inherited.as_deref(),
        ));
        env
    }

    /// Handle a `/delegate` (single attachment, hot-plug) request.
    pub async fn handle_delegate(&self, request: CniRequest) -> Result<Option<serde_json::Value>, CniError> {
        cni::handle(self, request, true).await
    }
}

/// `weft agent-ready`: 0 when an agent answers `/readyz` on `socket` with 200, else 1 (why on
/// stderr).
pub async fn probe_ready(socket: PathBuf) -> anyhow::Result<i32> {
    let answer = tokio::task::spawn_blocking(move || {
        crate::shim::post(&socket, "/readyz", b"").map_err(|e| format!("{}: {e}", socket.display()))
    })
    .await
    .context("readiness probe task")?;
    match answer {
        Ok((200, _)) => Ok(0),
        Ok((status, _)) => {
            eprintln!("weft agent not ready: /readyz answered HTTP {status}");
            Ok(1)
        }
        Err(e) => {
            eprintln!("weft agent not reachable: {e}");
            Ok(1)
        }
    }
}

/// `weft agent`: serve until SIGTERM/SIGINT.
pub async fn run(state: &Path, args: AgentArgs) -> anyhow::Result<i32> {
    if let Some(addr) = args.metrics_addr {
        limits::check_metrics_addr(addr, args.metrics_allow_remote).map_err(anyhow::Error::msg)?;
    }
    let mut store = crate::cluster::open_store(state, crate::cluster::Component::Node).await?;
    let ipam_store = store.clone();
    // Whether the watch caches have synced (or given up waiting): the dynamic-networks sweep
    // waits for it, else an agent restarted on a busy node GETs every attached pod from the
    // API server once before its pod cache holds them.
    let (synced_tx, synced_rx) = tokio::sync::watch::channel(!crate::cluster::is_kubernetes());
    let store_identity = crate::cluster::store_identity(&crate::cluster::target(), state);
    // The pod cache's changes drive the hot-plug reconciler (dynamic.rs); on the embedded store
    // it watches through a cache of its own.
    let mut pod_changes = None;
    if crate::cluster::is_kubernetes() {
        // The hot path reads pods and NADs on every CNI request: serve them from watch caches,
        // without their managedFields (often the larger part of a pod, read by no one here,
        // and parsed again on every read; a status update that omits them leaves the server's).
        let pods = <crate::kinds::Pod as weft_store::Resource>::resource_type();
        let nads = <weft_netconf::NetworkAttachmentDefinition as weft_store::Resource>::resource_type();
        let projections = [
            (pods.clone(), weft_store::Projection::WITHOUT_MANAGED_FIELDS),
            (nads.clone(), weft_store::Projection::WITHOUT_MANAGED_FIELDS),
        ];
        let (cached, changes) = weft_store::CachedStore::with_changes_projected(
            store,
            vec![
                (
                    pods,
                    weft_store::ListOptions::default().field("spec.nodeName", &args.node),
                ),
                (nads, weft_store::ListOptions::default()),
            ],
            projections.into_iter().collect(),
        );
        // Serve at once, synced or not: until the caches sync, reads go to the API server, and
        // DEL works from the attachment records even when the API server is down (an agent
        // restarted during an outage must not fail every DEL as "agent unreachable").
        pod_changes = Some(changes);
        let cached = Arc::new(cached);
        let syncing = cached.clone();
        tokio::spawn(async move {
            match syncing.wait_synced(std::time::Duration::from_secs(20)).await {
                Ok(()) => tracing::info!("watch caches synced"),
                Err(e) => tracing::warn!("{e}: reads go to the API server until the caches sync"),
            }
            synced_tx.send_replace(true);
        });
        store = cached;
    }
    let daemon_config = autoconf::load_daemon_config(args.config.as_deref())?;
    // Events are written through the API server directly (no watch cache holds them).
    let ipam_store_for_events = ipam_store.clone();
    let metrics = Metrics::default();
    let events = crate::event_recorder::Recorder::new(
        ipam_store_for_events,
        crate::cluster::Component::Node.name(),
        crate::event_recorder::Limits::default(),
    );
    let adds = Arc::new(adds_running::AddsRunning::default());
    let status_writes = Arc::new(
        status_writes::StatusWrites::new(
            store.clone(),
            ipam_store.clone(),
            args.cache_dir.clone(),
            metrics.status_pending.clone(),
            metrics.status_write_failures.clone(),
        )
        .with_events(events.clone())
        .yielding_to(adds.clone(), args.writes_yield()),
    );
    let agent = Arc::new(Agent {
        args: args.clone(),
        state_dir: state.to_path_buf(),
        store,
        ipam_store,
        store_identity,
        daemon_config,
        metrics,
        journal: journal::ReleaseJournal::open(state),
        events,
        ipam_held: weft_ipam::HeldCache::default(),
        status_write: status_writes::StatusWrite::resolve(
            args.network_status,
            crate::cluster::is_kubernetes(),
        ),
        status_writes,
        adds,
        sandboxes: Default::default(),
        gc_gate: Default::default(),
        plugins: Arc::new(weft_cni::runtime::limit::ExecLimit::new(plugin_slots(
            args.max_plugins,
            args.parallel_delegates,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        ))),
    });
    let server_state = Arc::new(server::ServerState {
        agent: agent.clone(),
        ready: AtomicBool::new(true),
        limits: limits::Limits {
            max_connections: args.max_connections.max(1),
            read_timeout: std::time::Duration::from_secs(args.read_timeout.max(1)),
            max_body: crate::protocol::MAX_REQUEST_BYTES,
        },
    });
    let server_state_for_metrics = server_state.clone();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(status_writes::resume(
        agent.status_writes.clone(),
        synced_rx.clone(),
    ));
    tokio::spawn(dynamic::run(
        agent.clone(),
        stop_rx.clone(),
        synced_rx,
        pod_changes,
    ));
    tokio::spawn(journal::run(agent.clone(), stop_rx.clone()));
    if let Some(dir) = args.auto_config.clone() {
        tokio::spawn(autoconf::keep_generated(
            args.conf_dir.clone(),
            dir,
            agent.daemon_config.clone(),
            stop_rx.clone(),
        ));
    }
    if args.local {
        // The roles see only what they need of the agent.
        let roles = Arc::new(local::context::AgentContext {
            node: args.node.clone(),
            store: agent.store.clone(),
            state_dir: agent.state_dir.clone(),
            conf_dir: args.conf_dir.clone(),
            cni_bin_dirs: args.cni_bin_dirs.clone(),
            pods_dir: local::context::pods_dir(&args.cache_dir),
            no_guests: args.no_guests,
        });
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            if let Err(e) = local::kubelet::run(roles, stop).await {
                tracing::error!("local pod runner stopped: {e:#}");
            }
        });
    }
    let shutdown = async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
        let _ = stop_tx.send(true);
    };
    tokio::spawn(shutdown);
    if let Some(addr) = args.metrics_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("bind --metrics-addr {addr}"))?;
        tracing::info!(%addr, "metrics listening");
        tokio::spawn(server::serve_tcp(
            listener,
            server_state_for_metrics,
            stop_rx.clone(),
        ));
    }
    server::serve(&args.socket, server_state, stop_rx).await?;
    Ok(0)
}

#[cfg(test)]
mod plugin_slot_tests {
    #[test]
    fn the_default_is_twice_the_cores_and_more_than_one_pods_adds() {
        assert_eq!(super::plugin_slots(None, 4, 2), 5);
        assert_eq!(super::plugin_slots(None, 4, 16), 32);
        assert_eq!(super::plugin_slots(None, 1, 1), 2);
        assert_eq!(super::plugin_slots(Some(3), 4, 16), 3);
        assert_eq!(super::plugin_slots(Some(0), 4, 16), 1);
    }
}

#[cfg(test)]
mod delegate_gomaxprocs_tests {
    use super::delegate_gomaxprocs;

    #[test]
    fn delegates_get_one_go_thread_unless_told_otherwise() {
        let one = Some(("GOMAXPROCS".to_string(), "1".to_string()));
        assert_eq!(delegate_gomaxprocs(1, None), one);
        assert_eq!(
            delegate_gomaxprocs(3, None),
            Some(("GOMAXPROCS".to_string(), "3".to_string()))
        );
        // 0: the Go runtime decides; the agent's own GOMAXPROCS reaches the delegates as it is.
        assert_eq!(delegate_gomaxprocs(0, None), None);
        assert_eq!(delegate_gomaxprocs(1, Some(std::ffi::OsStr::new("8"))), None);
    }
}
