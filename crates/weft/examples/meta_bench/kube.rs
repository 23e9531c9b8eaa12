//! The Kubernetes backend. With `WEFT_KUBE_APISERVER` (the path to a kube-apiserver binary, as
//! for the `real_apiserver` tests) the bench starts etcd + that API server itself (weft-testing's
//! [`RealCluster`]: `--authorization-mode=Node,RBAC`, deploy/'s CRDs and RBAC, an audit log) and
//! uses its `weft-node` ServiceAccount; or, with `WEFT_BENCH_KUBECONFIG` (the `weft-node`
//! ServiceAccount's, on an API server with deploy/'s CRDs and RBAC) and
//! `WEFT_BENCH_ADMIN_KUBECONFIG` (one allowed to create NADs and pods in `default`), an API server
//! of your own (it wins when both are set). The same NADs and pods are created in the API server and agents run with
//! `--kubeconfig`: they read pods and NADs from their watch caches and write network-status
//! through `pods/status`. With the audit log (`WEFT_BENCH_AUDIT_LOG` for your own server) the
//! weft-node requests of each phase are counted from it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use weft_testing::real_apiserver::{APISERVER_ENV, RealCluster};

use crate::world::World;
use crate::{Agent, BURST_WORKERS, Netns, http};

/// The variable naming the weft-node kubeconfig of an API server of your own.
pub const KUBECONFIG_ENV: &str = "WEFT_BENCH_KUBECONFIG";
/// The variable naming a kubeconfig that may create the bench's NADs and pods.
pub const ADMIN_ENV: &str = "WEFT_BENCH_ADMIN_KUBECONFIG";
/// The variable naming the API server's and etcd's pids (space-separated): their CPU during
/// part 1 is printed.
pub const SERVER_PIDS_ENV: &str = "WEFT_BENCH_SERVER_PIDS";
/// The variable naming the API server's audit log.
pub const AUDIT_ENV: &str = "WEFT_BENCH_AUDIT_LOG";
/// The audit log's name for the agent's identity.
const NODE_USER: &str = "system:serviceaccount:weft-system:weft-node";

/// Where the API server is and how to watch what weft asks of it.
pub struct Kube {
    pub kubeconfig: PathBuf,
    pub audit: Option<PathBuf>,
    /// The API server's and etcd's pids, when known.
    pub server_pids: Vec<u32>,
    /// The cluster the bench started (killed with it).
    _cluster: Option<RealCluster>,
}

impl Kube {
    /// From the environment; `None` (and a line saying so) without [`APISERVER_ENV`] or
    /// [`KUBECONFIG_ENV`].
    pub fn from_env(world: &World) -> Result<Option<Self>> {
        let (kubeconfig, admin, audit, server_pids, cluster) =
            match (std::env::var_os(KUBECONFIG_ENV), std::env::var_os(APISERVER_ENV)) {
                (Some(kubeconfig), _) => {
                    let admin = std::env::var_os(ADMIN_ENV)
                        .with_context(|| format!("{KUBECONFIG_ENV} needs {ADMIN_ENV}"))?;
                    let pids = std::env::var(SERVER_PIDS_ENV).unwrap_or_default();
                    let pids = pids.split_whitespace().filter_map(|p| p.parse().ok()).collect();
                    let audit = std::env::var_os(AUDIT_ENV).map(PathBuf::from);
                    (PathBuf::from(kubeconfig), PathBuf::from(admin), audit, pids, None)
                }
                (None, Some(binary)) => {
                    let mut cluster = RealCluster::start(Path::new(&binary));
                    let node = cluster.dir.path().join("weft-node.kubeconfig");
                    let admin = cluster.dir.path().join("bench-admin.kubeconfig");
                    cluster.kubeconfig_for("weft-node", &node);
                    cluster.admin_kubeconfig("weft-bench-admin", &admin);
                    let (audit, pids) = (cluster.audit_log(), cluster.server_pids());
                    println!(
                        "# Kubernetes backend: kube-apiserver {} started on 127.0.0.1:{} (pids {pids:?})",
                        Path::new(&binary).display(),
                        cluster.port
                    );
                    (node, admin, Some(audit), pids, Some(cluster))
                }
                (None, None) => {
                    println!(
                        "# Kubernetes backend skipped: neither {APISERVER_ENV} nor {KUBECONFIG_ENV} is set"
                    );
                    return Ok(None);
                }
            };
        for file in &world.objects {
            let applied = Command::new(&world.weft)
                .arg("--kubeconfig")
                .arg(&admin)
                .args(["apply", "-f"])
                .arg(file)
                .output()?;
            ensure!(
                applied.status.success(),
                "weft apply to the API server: {}",
                String::from_utf8_lossy(&applied.stderr)
            );
        }
        forward_into(&world.node, &api_server_address(&kubeconfig)?)?;
        Ok(Some(Self {
            kubeconfig,
            audit,
            server_pids,
            _cluster: cluster,
        }))
    }

    /// CPU (ms) the API server and etcd have used so far, if their pids are known.
    pub fn server_cpu_ms(&self) -> Option<f64> {
        if self.server_pids.is_empty() {
            return None;
        }
        self.server_pids.iter().map(|pid| crate::cpu_ms(*pid).ok()).sum()
    }
}

/// `host:port` of the API server a kubeconfig names (its first `server:`).
fn api_server_address(kubeconfig: &Path) -> Result<String> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let at = text.find("server").context("no server in the kubeconfig")?;
    let rest = &text[at..];
    let start = rest.find("://").context("no server URL in the kubeconfig")? + 3;
    let address: String = rest[start..]
        .chars()
        .take_while(|c| !matches!(c, '"' | '/' | '\'' | ' ' | '\n'))
        .collect();
    ensure!(
        address.starts_with("127.0.0.1:"),
        "the API server must be on 127.0.0.1 (not {address})"
    );
    Ok(address)
}

/// Forwards TCP connections to the API server's loopback address inside the node netns (where
/// the agents run and cannot reach the host's loopback) to the same address on the host.
/// Its threads end with the process.
fn forward_into(netns: &Netns, address: &str) -> Result<()> {
    let file = std::fs::File::open(netns.path())?;
    let host = std::fs::File::open("/proc/thread-self/ns/net")?;
    let bind_address = address.to_string();
    // A thread of its own joins the netns to bind, then returns to the host's.
    let listener = std::thread::spawn(move || -> Result<std::net::TcpListener> {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).context("setns node")?;
        let listener = std::net::TcpListener::bind(&bind_address);
        nix::sched::setns(&host, nix::sched::CloneFlags::CLONE_NEWNET).context("setns host")?;
        Ok(listener?)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("bind thread panicked"))??;
    let address = address.to_string();
    std::thread::spawn(move || {
        for inside in listener.incoming().flatten() {
            let Ok(outside) = std::net::TcpStream::connect(&address) else {
                continue;
            };
            let _ = inside.set_nodelay(true);
            let _ = outside.set_nodelay(true);
            let (Ok(mut a), Ok(mut b)) = (inside.try_clone(), outside.try_clone()) else {
                continue;
            };
            let (mut inside, mut outside) = (inside, outside);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut a, &mut outside);
                let _ = outside.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut b, &mut inside);
                let _ = inside.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    Ok(())
}

/// weft-node requests in the audit log from byte `from` to `to` (or its end), as "verb
/// resource[/sub] code" → count. A watch counts when it starts, anything else when it completes.
pub fn audit_counts(audit: &Path, from: u64, to: Option<u64>) -> Result<BTreeMap<String, usize>> {
    let text = std::fs::read(audit)?;
    let end = to.map_or(text.len(), |to| (to as usize).min(text.len()));
    let mut counts = BTreeMap::new();
    for line in text[(from as usize).min(end)..end].split(|b| *b == b'\n') {
        let Ok(event) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if event["user"]["username"] != NODE_USER {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or("?");
        let wanted = if verb == "watch" {
            "ResponseStarted"
        } else {
            "ResponseComplete"
        };
        if event["stage"] != wanted {
            continue;
        }
        let mut resource = event["objectRef"]["resource"].as_str().unwrap_or("?").to_string();
        if let Some(sub) = event["objectRef"]["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
        *counts.entry(format!("{verb} {resource} {code}")).or_insert(0) += 1;
    }
    Ok(counts)
}

/// The audit log's length now (where the next phase's requests begin), after letting the API
/// server write what it still holds.
pub fn audit_mark(audit: &Path) -> Result<u64> {
    std::thread::sleep(Duration::from_millis(500));
    Ok(std::fs::metadata(audit)?.len())
}

fn print_counts(what: &str, counts: &BTreeMap<String, usize>, per: usize) {
    let total: usize = counts.values().sum();
    let events: usize = counts
        .iter()
        .filter(|(k, _)| k.contains(" events "))
        .map(|(_, v)| v)
        .sum();
    let list: Vec<String> = counts.iter().map(|(k, v)| format!("{k} ×{v}")).collect();
    println!(
        "| {what} | {:.2} | {:.2} | {} |",
        (total - events) as f64 / per.max(1) as f64,
        events as f64 / per.max(1) as f64,
        list.join(", ")
    );
}

/// API requests per pod ADD and per DEL: `n` sequential ADD+DEL of the bench pod (eth0 + 4
/// host-local secondaries: no weft-ipam network, so the target is 1 per ADD).
pub fn requests_per_pod(world: &World, agent: &Agent, audit: &Path, n: usize) -> Result<()> {
    let pod_ns = Netns::new(30)?;
    let container = |i: usize| format!("mb{}rq{i}", std::process::id());
    let start = audit_mark(audit)?;
    for i in 0..n {
        world.shim_ok(
            agent,
            &world.env("ADD", &container(i), &pod_ns.path(), &agent.pod("bench")),
        )?;
        world.shim_ok(
            agent,
            &world.env("CHECK", &container(i), &pod_ns.path(), &agent.pod("bench")),
        )?;
        let between = audit_mark(audit)?;
        world.shim_ok(
            agent,
            &world.env("DEL", &container(i), &pod_ns.path(), &agent.pod("bench")),
        )?;
        let end = audit_mark(audit)?;
        if i == 0 {
            println!(
                "\n## Kubernetes API requests (weft-node, audit log), {n} × ADD+CHECK then DEL of the bench pod\n"
            );
            println!("| request | per pod, Events aside | Events per pod | what (first pod) |");
            println!("|---|---|---|---|");
            print_counts("ADD + CHECK", &audit_counts(audit, start, Some(between))?, 1);
            print_counts("DEL", &audit_counts(audit, between, Some(end))?, 1);
        }
    }
    audit_mark(audit)?;
    print_counts(
        &format!("all {n} ADD+CHECK+DEL"),
        &audit_counts(audit, start, None)?,
        n,
    );
    Ok(())
}

/// The API server's and etcd's CPU per pod ADD+DEL for each of `agents`: `n` pods each (the
/// agent's own part-3 pods `<tag>-rss-<i>`, eth0 + 2 secondaries, so that every ADD creates its
/// Events as a new pod's would; the same pod again and again would be rate limited), one
/// ADD+DEL after another, then 1 s for the Events (written on their own task), less the
/// servers' idle CPU over the same time (measured first, 5 s).
pub fn server_cpu_per_pod(world: &World, kube: &Kube, agents: &[(&str, &Agent)], n: usize) -> Result<()> {
    let Some(idle_start) = kube.server_cpu_ms() else {
        println!("# API server CPU per pod skipped: its pids are unknown");
        return Ok(());
    };
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    let idle_per_ms =
        (kube.server_cpu_ms().unwrap_or(idle_start) - idle_start) / started.elapsed().as_secs_f64() / 1e3;
    let pod_ns = Netns::new(31)?;
    println!(
        "\n## API server + etcd CPU per pod ADD+DEL ({n} pods one after another per variant, eth0 + 2 secondaries each; idle {:.1} ms/s taken off)\n",
        idle_per_ms * 1e3
    );
    println!("| variant | CPU per ADD+DEL | weft-node Event writes per pod |");
    println!("|---|---|---|");
    for (v, (name, agent)) in agents.iter().enumerate() {
        let container = |i: usize| format!("mb{}cpu{v}x{i}", std::process::id());
        let pod = |i: usize| agent.pod(&format!("rss-{i}"));
        let mark = match &kube.audit {
            Some(audit) => Some(audit_mark(audit)?),
            None => None,
        };
        let before = kube.server_cpu_ms().unwrap_or_default();
        let started = Instant::now();
        for i in 0..n {
            world.shim_ok(agent, &world.env("ADD", &container(i), &pod_ns.path(), &pod(i)))?;
            world.shim_ok(agent, &world.env("DEL", &container(i), &pod_ns.path(), &pod(i)))?;
        }
        std::thread::sleep(Duration::from_secs(1));
        let used = kube.server_cpu_ms().unwrap_or_default() - before;
        let idle = idle_per_ms * started.elapsed().as_secs_f64() * 1e3;
        let events = match (&kube.audit, mark) {
            (Some(audit), Some(mark)) => {
                let counts = audit_counts(audit, mark, None)?;
                let writes: usize = counts
                    .iter()
                    .filter(|(k, _)| k.contains(" events ") && !k.starts_with("get "))
                    .map(|(_, v)| v)
                    .sum();
                format!("{:.2}", writes as f64 / n as f64)
            }
            _ => "?".into(),
        };
        println!("| {name} | {:.1} ms | {events} |", (used - idle) / n as f64);
    }
    Ok(())
}

/// Agent restart on a node with `pods` attached pods (eth0 + 2 secondaries each, their
/// network-status in the API server): the agent `tag` is killed and started again on the same
/// cache; how long until it answers, is ready, CHECKs, DELs and ADDs, and what it asks the API
/// server meanwhile. Then DEL of every pod.
pub fn restart(world: &World, kube: &Kube, agent: Agent, tag: &str, pods: usize) -> Result<()> {
    let netns: Vec<Netns> = (0..pods).map(|p| Netns::new(1000 + p)).collect::<Result<_>>()?;
    let container = |p: usize| format!("mb{}rs{p}", std::process::id());
    let env =
        |verb: &str, p: usize| world.env(verb, &container(p), &netns[p].path(), &format!("{tag}-rss-{p}"));
    let added = crate::rss::burst(pods, BURST_WORKERS, &|p| {
        world.shim_ok(&agent, &env("ADD", p)).map(|_| ())
    })?;
    // The generated conflist (as `--auto-config` writes it): with it the dynamic-networks sweep
    // runs over every attached pod, as on a deployed node.
    let conf: Value = serde_json::from_slice(&agent.conf)?;
    let list = serde_json::json!({"cniVersion": "1.0.0", "name": "weft", "plugins": [conf]});
    let generated = world.conf_dir.join("00-weft.conflist");
    std::fs::write(&generated, list.to_string())?;
    drop(agent);
    let mark = match &kube.audit {
        Some(audit) => Some(audit_mark(audit)?),
        None => None,
    };

    let started = Instant::now();
    let agent = world.spawn_agent(tag, 4, None, Some(&kube.kubeconfig), "info", &[])?;
    world.wait_healthy(tag, &agent)?;
    let healthy = started.elapsed();
    let (status, body) = http(&agent.socket, "GET", "/readyz", b"")?;
    ensure!(status == 200, "/readyz: {status} {body}");
    let ready = started.elapsed();
    // DEL, ADD, then CHECK of that pod (a CHECK of an older pod can fail in the reference
    // bridge plugin: the bridge's MAC follows its ports, so it changed since that pod's ADD).
    world.shim_ok(&agent, &env("DEL", 0))?;
    let deleted = started.elapsed();
    world.shim_ok(&agent, &env("ADD", 0))?;
    let readded = started.elapsed();
    world.shim_ok(&agent, &env("CHECK", 0))?;
    let checked = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !world.agent_log(tag).contains("watch caches synced") {
        ensure!(
            Instant::now() < deadline,
            "caches did not sync: {}",
            world.agent_log(tag)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let synced = started.elapsed();
    // Several sweeps (every 500 ms) over the attached pods.
    std::thread::sleep(Duration::from_secs(3));
    let counts = match (&kube.audit, mark) {
        (Some(audit), Some(mark)) => Some(audit_counts(audit, mark, None)?),
        _ => None,
    };
    std::fs::remove_file(&generated)?;
    let deleted_all = crate::rss::burst(pods, BURST_WORKERS, &|p| {
        world.shim_ok(&agent, &env("DEL", p)).map(|_| ())
    })?;
    for ns in &netns {
        let names = ns.link_names()?;
        if names != ["lo"] {
            bail!("{} after DEL of all: {names:?}", ns.0);
        }
    }

    println!(
        "\n## Agent restart, {pods} pods attached (eth0 + 2 secondaries each; ADD of all took {:.1} s, 8 at a time)\n",
        added.as_secs_f64()
    );
    println!("| since the new agent process was spawned | ms |");
    println!("|---|---|");
    for (what, t) in [
        ("`/healthz` answers (serving CNI requests)", healthy),
        ("`/readyz` answers 200", ready),
        ("first DEL (an attached pod) succeeded", deleted),
        ("first ADD (that pod again) succeeded", readded),
        ("first CHECK (that pod) succeeded", checked),
        ("log says \"watch caches synced\" (first seen after)", synced),
    ] {
        println!("| {what} | {:.1} |", t.as_secs_f64() * 1e3);
    }
    if let Some(counts) = counts {
        println!(
            "\nweft-node requests from the restart until 3 s after the caches synced (the CHECK, DEL and ADD of one pod included):\n"
        );
        for (k, v) in &counts {
            println!("- {k} ×{v}");
        }
    }
    println!(
        "\nDEL of all {pods} after the restart: {:.1} s; nothing left in the pod netns.",
        deleted_all.as_secs_f64()
    );
    Ok(())
}

/// The pod set of the direct runner that writes ([`Writer`]): its pods are on node `n-dw`.
pub const WRITER_POD_SET: &str = "dw";

/// The API writes a weft agent makes for an ADD, made for the direct runner: the pod's
/// network-status through `pods/status` (the pod read from a watch cache of its node's pods,
/// as the agent reads it: weft's `write_status`) and one `AddedInterface` Event (weft's
/// recorder), both sent when the ADD is done and not waited for, as the agent does. What the
/// control plane costs any component that writes them, measured beside the agents.
pub struct Writer {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Pod, network-status, Event message, and where to say the status update is done.
type Job = (String, String, String, std::sync::mpsc::Sender<()>);

/// A write the writer was given; [`Pending::wait`] returns when its status update is done.
pub struct Pending(std::sync::mpsc::Receiver<()>);

impl Pending {
    /// Wait (at most 10 s) for the status update.
    pub fn wait(self) {
        let _ = self.0.recv_timeout(Duration::from_secs(10));
    }
}

impl Writer {
    /// A writer as the `weft-node` ServiceAccount of `kube`, in the host netns (the agents
    /// reach the API server through the bench's relay: one loopback hop more).
    pub fn start(kube: &Kube) -> Result<Self> {
        use weft_store::{CachedStore, ListOptions, Resource, Store};
        let kubeconfig = kube.kubeconfig.clone();
        let (jobs, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let thread = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
            };
            runtime.block_on(async move {
                let identity = weft::cluster::Component::Node.identity();
                let api: Arc<dyn Store> =
                    match weft_store::KubeStore::from_kubeconfig(&kubeconfig, &identity).await {
                        Ok(store) => Arc::new(store),
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                let node = crate::world::node_of(Some(WRITER_POD_SET));
                let cached = CachedStore::new(
                    api.clone(),
                    vec![(
                        weft::kinds::Pod::resource_type(),
                        ListOptions::default().field("spec.nodeName", &node),
                    )],
                );
                if let Err(e) = cached.wait_synced(Duration::from_secs(30)).await {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
                let cached: Arc<dyn Store> = Arc::new(cached);
                let recorder = weft::event_recorder::Recorder::new(
                    api.clone(),
                    "weft-node",
                    weft::event_recorder::Limits::default(),
                );
                let _ = ready_tx.send(Ok(()));
                while let Some((pod, value, message, done)) = rx.recv().await {
                    let pod_ref = weft::kinds::ObjectReference {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                        namespace: crate::NAMESPACE.into(),
                        name: pod.clone(),
                    };
                    let (cached, api) = (cached.clone(), api.clone());
                    tokio::spawn(async move {
                        let written = weft::agent::status_writes::write_status(
                            &cached,
                            &api,
                            crate::NAMESPACE,
                            &pod,
                            &value,
                            None,
                        )
                        .await;
                        if let Err(e) = written {
                            eprintln!("direct runner's status write: {e}");
                        }
                        let _ = done.send(());
                    });
                    recorder.record(
                        &pod_ref,
                        weft::events::NORMAL,
                        weft::agent::pod_events::ADDED_INTERFACE,
                        &message,
                    );
                }
            });
        });
        match ready_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(())) => Ok(Self {
                jobs,
                thread: Some(thread),
            }),
            Ok(Err(e)) => bail!("the direct runner's writer: {e}"),
            Err(_) => bail!("the direct runner's writer did not start in 60 s"),
        }
    }

    /// Send pod `pod`'s network-status `value` and its Event (`message`); returns at once.
    pub fn write(&self, pod: &str, value: String, message: String) -> Pending {
        let (done, wait) = std::sync::mpsc::channel();
        let _ = self.jobs.send((pod.to_string(), value, message, done));
        Pending(wait)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the queue ends the thread's loop.
        let (closed, _) = tokio::sync::mpsc::unbounded_channel();
        self.jobs = closed;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
