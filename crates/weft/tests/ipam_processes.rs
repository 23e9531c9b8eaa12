//! `weft-ipam` at the process level: many plugin processes at once on one pool (distinct
//! addresses, exhaustion reported as a CNI error, requested addresses reserved or refused), and
//! crash safety (SIGKILL at random moments during ADD/DEL cycles, then CNI GC and the
//! reconciler: no duplicates, no leaks).
//!
//! No root and no network namespaces: an IPAM plugin never enters CNI_NETNS, and every test has
//! its own state directory, so these run in parallel with anything.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{text, weft, weft_bin};
use ipnet::Ipv4Net;
use serde_json::{Value, json};
use weft_testing::agent::AgentProcess;

/// A temp dir holding weft's plugins as installed (`weft-ipam`, the static client, which runs
/// `weft-cni`, the binary under test, when no agent serves the call) and the store's state dir.
struct Plugin {
    dir: tempfile::TempDir,
    /// Extra environment of every process (what a node agent gives its delegates).
    env: Vec<(String, String)>,
}

/// What one plugin process answered.
#[derive(Clone, Debug, PartialEq)]
enum Reply {
    /// Exit 0; the result's first address (ADD) or `None` (DEL, GC, ...).
    Ok(Option<Ipv4Net>),
    /// A CNI error on stdout.
    Error { code: u64, msg: String, details: String },
    /// Killed by SIGKILL before it finished.
    Killed,
}

impl Plugin {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        common::install_plugins(dir.path());
        Self { dir, env: Vec::new() }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// A network config for `range` (with `extra` merged into the `ipam` section).
    fn config(&self, range: &str, extra: Value) -> Value {
        let mut ipam = json!({"type": "weft-ipam", "range": range, "stateDir": self.state()});
        if let (Some(ipam), Some(extra)) = (ipam.as_object_mut(), extra.as_object()) {
            ipam.extend(extra.clone());
        }
        json!({"cniVersion": "1.0.0", "name": "blue", "type": "bridge", "ipam": ipam})
    }

    /// Start one plugin process and hand it `config` on stdin.
    fn spawn(&self, verb: &str, container: &str, cni_args: &str, config: &Value) -> Child {
        let mut child = Command::new(self.dir.path().join("weft-ipam"))
            .env("CNI_COMMAND", verb)
            .env("CNI_CONTAINERID", container)
            .env("CNI_IFNAME", "net1")
            .env("CNI_NETNS", "/var/run/netns/not-entered")
            .env("CNI_PATH", self.dir.path())
            .env("CNI_ARGS", cni_args)
            // The node allows stores under the test's temp dir (its default roots are elsewhere).
            .env("WEFT_IPAM_STATE_ROOTS", self.dir.path())
            .env_remove("WEFT_STATE_DIR")
            .env_remove("WEFT_NODE_NAME")
            .env_remove("WEFT_IPAM_SOCKET")
            .env_remove("WEFT_IPAM_DEFAULT_STORE")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn weft-ipam");
        let mut stdin = child.stdin.take().expect("stdin piped");
        // A process killed early closes its stdin: the write may fail, which is part of the test.
        let _ = stdin.write_all(config.to_string().as_bytes());
        child
    }

    fn run(&self, verb: &str, container: &str, cni_args: &str, config: &Value) -> Reply {
        finish(self.spawn(verb, container, cni_args, config))
    }

    /// Exit code and stdout of one process.
    fn output(&self, verb: &str, container: &str, config: &Value) -> (Option<i32>, String) {
        let out = self
            .spawn(verb, container, "", config)
            .wait_with_output()
            .expect("wait");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// Rows of `weft ipam list`: (ip, container).
    fn listed(&self) -> Vec<(Ipv4Addr, String)> {
        self.listed_with_node()
            .into_iter()
            .map(|(ip, c, _)| (ip, c))
            .collect()
    }

    /// Rows of `weft ipam list`: (ip, container, node or "").
    fn listed_with_node(&self) -> Vec<(Ipv4Addr, String, String)> {
        listed_in(&self.state())
    }
}

/// Rows of `weft ipam list` on the store in `state`: (ip, container, node or "").
fn listed_in(state: &Path) -> Vec<(Ipv4Addr, String, String)> {
    let out = weft(state, &["ipam", "list"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect("ipam list column");
    let (ip_col, container_col, node_col) = (col("IP"), col("CONTAINER"), col("NODE"));
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            let ip = cells[ip_col]
                .parse()
                .unwrap_or_else(|e| panic!("ipam list row {l:?}: {e}"));
            let node = cells.get(node_col).copied().unwrap_or_default();
            (ip, cells[container_col].to_string(), node.to_string())
        })
        .collect()
}

/// Wait for a plugin process and read its answer.
fn finish(child: Child) -> Reply {
    let out = child.wait_with_output().expect("wait for weft-ipam");
    if out.status.signal() == Some(libc_sigkill()) {
        return Reply::Killed;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let parsed: Value = if stdout.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {stdout:?}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    if out.status.success() {
        let ip = parsed["ips"][0]["address"].as_str().map(|a| {
            a.parse::<Ipv4Net>()
                .unwrap_or_else(|e| panic!("result address {a:?}: {e}"))
        });
        return Reply::Ok(ip);
    }
    Reply::Error {
        code: parsed["code"]
            .as_u64()
            .unwrap_or_else(|| panic!("failure without a CNI error code: {stdout:?}")),
        msg: parsed["msg"].as_str().unwrap_or_default().to_string(),
        details: parsed["details"].as_str().unwrap_or_default().to_string(),
    }
}

fn libc_sigkill() -> i32 {
    nix::sys::signal::Signal::SIGKILL as i32
}

/// Run one verb for many containers at once (every process is started before any is awaited).
fn all_at_once(plugin: &Plugin, verb: &str, containers: &[String], config: &Value) -> Vec<Reply> {
    let children: Vec<Child> = containers
        .iter()
        .map(|c| plugin.spawn(verb, c, "", config))
        .collect();
    children.into_iter().map(finish).collect()
}

fn containers(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:02}")).collect()
}

#[test]
fn sixty_four_concurrent_adds_get_distinct_addresses_and_del_frees_them() {
    let plugin = Plugin::new();
    let config = plugin.config("10.77.0.0/24", json!({"gateway": "10.77.0.1"}));
    let ids = containers("c", 64);
    let subnet: Ipv4Net = "10.77.0.0/24".parse().unwrap();

    let replies = all_at_once(&plugin, "ADD", &ids, &config);
    let mut addresses = BTreeSet::new();
    for (id, reply) in ids.iter().zip(&replies) {
        let Reply::Ok(Some(net)) = reply else {
            panic!("ADD {id}: {reply:?}");
        };
        assert_eq!(net.prefix_len(), 24, "ADD {id}: prefix of {net}");
        let ip = net.addr();
        assert!(subnet.contains(&ip), "ADD {id}: {ip} outside {subnet}");
        assert!(
            ![subnet.network(), subnet.broadcast(), Ipv4Addr::new(10, 77, 0, 1)].contains(&ip),
            "ADD {id}: network/broadcast/gateway {ip} handed out"
        );
        addresses.insert(ip);
    }
    assert_eq!(addresses.len(), 64, "duplicate addresses: {replies:?}");

    let listed = plugin.listed();
    assert_eq!(listed.len(), 64, "{listed:?}");
    let listed_ips: BTreeSet<Ipv4Addr> = listed.iter().map(|(ip, _)| *ip).collect();
    assert_eq!(listed_ips, addresses, "weft ipam list shows what ADD returned");

    for (id, reply) in ids.iter().zip(all_at_once(&plugin, "DEL", &ids, &config)) {
        assert_eq!(reply, Reply::Ok(None), "DEL {id}");
    }
    assert_eq!(plugin.listed(), vec![], "every address freed");
    for (id, reply) in ids.iter().zip(all_at_once(&plugin, "DEL", &ids, &config)) {
        assert_eq!(reply, Reply::Ok(None), "second DEL {id} must succeed too");
    }
}

#[test]
fn an_exhausted_pool_fails_the_surplus_with_a_cni_error() {
    let plugin = Plugin::new();
    // A /28 without gateway: 16 addresses minus network and broadcast.
    let config = plugin.config("10.77.1.0/28", json!({}));
    let ids = containers("x", 20);
    let replies = all_at_once(&plugin, "ADD", &ids, &config);

    let mut addresses = BTreeSet::new();
    let mut refused = 0;
    for (id, reply) in ids.iter().zip(&replies) {
        match reply {
            Reply::Ok(Some(net)) => assert!(addresses.insert(net.addr()), "duplicate {net}"),
            Reply::Error { code, msg, .. } => {
                assert_eq!(*code, 104, "ADD {id}: pool exhaustion code, got {msg:?}");
                assert!(
                    msg.contains("no free IP address")
                        && msg.contains("10.77.1.0/28")
                        && msg.contains("blue"),
                    "ADD {id}: message names the exhausted range and network: {msg:?}"
                );
                refused += 1;
            }
            other => panic!("ADD {id}: {other:?}"),
        }
    }
    assert_eq!((addresses.len(), refused), (14, 6), "{replies:?}");
    assert_eq!(plugin.listed().len(), 14);

    let mut status_config = config.clone();
    status_config["cniVersion"] = json!("1.1.0");
    match plugin.run("STATUS", "", "", &status_config) {
        Reply::Error { code: 50, msg, .. } => assert!(msg.contains("exhausted"), "{msg}"),
        other => panic!("STATUS on a full pool: {other:?}"),
    }
}

#[test]
fn requested_addresses_are_reserved_or_refused_when_taken() {
    let plugin = Plugin::new();
    let config = plugin.config("10.77.2.0/24", json!({"gateway": "10.77.2.1"}));
    let with_runtime_ips = |ips: &[&str]| {
        let mut c = config.clone();
        c["capabilities"] = json!({"ips": true});
        c["runtimeConfig"] = json!({"ips": ips});
        c
    };
    let ok = |ip: &str| Reply::Ok(Some(format!("{ip}/24").parse().unwrap()));

    // CNI_ARGS IP=: reserved exactly, the only address of the result.
    assert_eq!(plugin.run("ADD", "a", "IP=10.77.2.50", &config), ok("10.77.2.50"));
    assert_eq!(
        plugin.run("ADD", "a", "IP=10.77.2.50", &config),
        ok("10.77.2.50"),
        "a retried ADD is idempotent"
    );
    match plugin.run("ADD", "b", "IP=10.77.2.50", &config) {
        Reply::Error { code: 105, msg, .. } => assert!(
            msg.contains("10.77.2.50") && msg.contains("already held") && msg.contains("container a"),
            "{msg}"
        ),
        other => panic!("taken CNI_ARGS IP: {other:?}"),
    }

    // runtimeConfig `ips` (the capability) wins over CNI_ARGS.
    assert_eq!(
        plugin.run("ADD", "c", "IP=10.77.2.70", &with_runtime_ips(&["10.77.2.60/24"])),
        ok("10.77.2.60")
    );
    match plugin.run("ADD", "d", "", &with_runtime_ips(&["10.77.2.50/24"])) {
        Reply::Error { code: 105, msg, .. } => assert!(
            msg.contains("10.77.2.50") && msg.contains("already held"),
            "{msg}"
        ),
        other => panic!("taken runtimeConfig ip: {other:?}"),
    }
    for reserved in ["10.77.2.1", "10.77.2.255", "10.99.0.1"] {
        match plugin.run("ADD", "e", &format!("IP={reserved}"), &config) {
            Reply::Error { code: 7, msg, .. } => {
                assert!(msg.contains(reserved) && msg.contains("not available"), "{msg}")
            }
            other => panic!("requested {reserved}: {other:?}"),
        }
    }
    match plugin.run("ADD", "f", "", &with_runtime_ips(&["not-an-ip"])) {
        Reply::Error { code: 4, msg, .. } => assert!(msg.contains("runtimeConfig.ips[0]"), "{msg}"),
        other => panic!("malformed runtimeConfig ip: {other:?}"),
    }

    let mut listed = plugin.listed();
    listed.sort();
    assert_eq!(
        listed,
        vec![
            ("10.77.2.50".parse().unwrap(), "a".to_string()),
            ("10.77.2.60".parse().unwrap(), "c".to_string())
        ],
        "refused requests hold nothing"
    );
}

/// Attachments whose ADD returned an address and whose DEL has not started: their reservations
/// must exist, so a second live holder of the same address is a duplicate.
#[derive(Default)]
struct Ledger {
    live: HashMap<Ipv4Addr, String>,
    duplicates: Vec<String>,
}

#[derive(Default, Debug)]
struct Tally {
    processes: usize,
    killed: usize,
    unexpected: Vec<String>,
}

const WORKERS: usize = 16;
const CYCLES_PER_WORKER: usize = 63;
/// One process in this many is sent SIGKILL 0–3 ms after it was started.
const KILL_ONE_IN: u64 = 4;
/// Attachments each worker keeps alive at any time (and at the end).
const KEEP_LIVE: usize = 2;

/// Start a plugin process and, for a random subset, SIGKILL it at a random moment.
fn run_maybe_killed(
    plugin: &Plugin,
    verb: &str,
    container: &str,
    cni_args: &str,
    config: &Value,
    tally: &mut Tally,
) -> Reply {
    let mut child = plugin.spawn(verb, container, cni_args, config);
    tally.processes += 1;
    if rand::random::<u64>().is_multiple_of(KILL_ONE_IN) {
        std::thread::sleep(Duration::from_micros(rand::random::<u64>() % 3_000));
        let _ = child.kill();
    }
    let reply = finish(child);
    if reply == Reply::Killed {
        tally.killed += 1;
    }
    reply
}

/// Pod identity for even workers (so the pod reconciler can judge them); odd workers' ADDs carry
/// none, which only CNI GC may collect.
fn pod_args(worker: usize, container: &str) -> String {
    if worker.is_multiple_of(2) {
        format!("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=pod-{container};K8S_POD_UID=uid-{container}")
    } else {
        String::new()
    }
}

fn worker(
    plugin: &Plugin,
    config: &Value,
    w: usize,
    ledger: &Mutex<Ledger>,
) -> (Tally, Vec<(String, Ipv4Addr)>) {
    let mut tally = Tally::default();
    let mut live: Vec<(String, Ipv4Addr)> = Vec::new();
    for cycle in 0..CYCLES_PER_WORKER {
        let id = format!("w{w:02}-{cycle:03}");
        let args = pod_args(w, &id);
        match run_maybe_killed(plugin, "ADD", &id, &args, config, &mut tally) {
            Reply::Ok(Some(net)) => {
                let mut ledger = ledger.lock().unwrap();
                if let Some(other) = ledger.live.insert(net.addr(), id.clone()) {
                    ledger
                        .duplicates
                        .push(format!("{} held by {other} and {id}", net.addr()));
                }
                live.push((id, net.addr()));
            }
            Reply::Killed => {
                // A runtime usually DELs after a failed ADD; sometimes it crashed as well.
                if rand::random::<bool>() {
                    match run_maybe_killed(plugin, "DEL", &id, &args, config, &mut tally) {
                        Reply::Ok(None) | Reply::Killed => {}
                        other => tally
                            .unexpected
                            .push(format!("DEL after killed ADD {id}: {other:?}")),
                    }
                }
            }
            other => tally.unexpected.push(format!("ADD {id}: {other:?}")),
        }
        if live.len() > KEEP_LIVE {
            let (id, ip) = live.remove(0);
            ledger.lock().unwrap().live.remove(&ip);
            match run_maybe_killed(plugin, "DEL", &id, &pod_args(w, &id), config, &mut tally) {
                Reply::Ok(None) | Reply::Killed => {}
                other => tally.unexpected.push(format!("DEL {id}: {other:?}")),
            }
        }
    }
    (tally, live)
}

/// The plugin's store (the SQLite file the processes share) and a runtime to call it on.
fn open_store(plugin: &Plugin) -> (Arc<dyn weft_store::Store>, tokio::runtime::Runtime) {
    let store = weft_store::SqliteStore::open(plugin.state().join("store.db"))
        .expect("open store")
        .shared();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (store, rt)
}

/// Every reservation in the store: ip → (container, pod reference).
fn reservations(plugin: &Plugin) -> BTreeMap<Ipv4Addr, (String, String)> {
    let (store, rt) = open_store(plugin);
    let list = rt
        .block_on(weft_ipam::allocator::list_reservations(&store, "blue"))
        .expect("list reservations");
    let mut by_ip = BTreeMap::new();
    for r in list {
        let Some(std::net::IpAddr::V4(ip)) = r.spec.ip else {
            panic!("reservation without an IPv4 address: {r:?}");
        };
        let previous = by_ip.insert(ip, (r.spec.container_id, r.spec.pod_ref));
        assert!(previous.is_none(), "two reservations of {ip}");
    }
    by_ip
}

fn leaks(reserved: &BTreeMap<Ipv4Addr, (String, String)>, live: &BTreeMap<String, Ipv4Addr>) -> Vec<String> {
    reserved
        .iter()
        .filter(|(ip, (container, _))| live.get(container) != Some(ip))
        .map(|(ip, (container, pod))| format!("{ip} held by dead {container} (pod {pod:?})"))
        .collect()
}

/// The pod reconciler (library call on the same SQLite file) with the pods of live attachments.
fn reconcile_pods(plugin: &Plugin, live: &BTreeMap<String, Ipv4Addr>) -> usize {
    let pods: Vec<weft_ipam::reconcile::LivePod> = live
        .keys()
        .filter(|id| id.starts_with('w') && id[1..3].parse::<usize>().is_ok_and(|w| w.is_multiple_of(2)))
        .map(|id| weft_ipam::reconcile::LivePod {
            namespace: "ns".into(),
            name: format!("pod-{id}"),
            uid: format!("uid-{id}"),
            container_ids: vec![id.clone()],
            terminating: false,
        })
        .collect();
    let (store, rt) = open_store(plugin);
    let grace = Duration::from_secs(60);
    // Everything in the store was written before this call; judging "an hour from now" stands
    // in for waiting out the grace period that protects fresh reservations.
    let now = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3600);
    rt.block_on(weft_ipam::reconcile::reconcile(&store, &pods, now, grace))
        .expect("reconcile")
        .len()
}

#[test]
fn sigkill_during_add_del_cycles_then_gc_and_reconcile_leave_no_duplicates_or_leaks() {
    let started = Instant::now();
    let plugin = Arc::new(Plugin::new());
    // Room for the live attachments plus every leak the kills can make.
    let config = Arc::new(plugin.config("10.77.8.0/22", json!({"gateway": "10.77.8.1"})));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    // The store file is created before the kills start, as the node agent does at startup: a
    // creator killed during the very first open is a separate, known problem (see
    // `concurrent_first_open_survives_a_killed_creator`).
    assert_eq!(plugin.run("DEL", "warm-up", "", &config), Reply::Ok(None));

    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (plugin, config, ledger) = (plugin.clone(), config.clone(), ledger.clone());
            std::thread::spawn(move || worker(&plugin, &config, w, &ledger))
        })
        .collect();
    let mut total = Tally::default();
    let mut live: BTreeMap<String, Ipv4Addr> = BTreeMap::new();
    for h in handles {
        let (tally, kept) = h.join().expect("worker");
        total.processes += tally.processes;
        total.killed += tally.killed;
        total.unexpected.extend(tally.unexpected);
        live.extend(kept);
    }
    let ledger = ledger.lock().unwrap();
    eprintln!(
        "{} cycles, {} plugin processes, {} killed, {} live at the end, {:?}",
        WORKERS * CYCLES_PER_WORKER,
        total.processes,
        total.killed,
        live.len(),
        started.elapsed()
    );
    assert!(
        ledger.duplicates.is_empty(),
        "duplicates: {:?}",
        ledger.duplicates
    );
    assert!(
        total.unexpected.is_empty(),
        "unexpected replies: {:?}",
        total.unexpected
    );
    assert!(total.killed > 0, "the test must actually kill plugin processes");
    let distinct: BTreeSet<&Ipv4Addr> = live.values().collect();
    assert_eq!(
        distinct.len(),
        live.len(),
        "live attachments share an address: {live:?}"
    );

    let before = reservations(&plugin);
    for (id, ip) in &live {
        assert_eq!(before.get(ip).map(|(c, _)| c), Some(id), "live {id} lost {ip}");
    }
    let leaked_before = leaks(&before, &live);
    eprintln!("{} reservations leaked by killed processes", leaked_before.len());

    // 1. The pod reconciler frees the leaks that name a pod, and nothing live.
    let freed = reconcile_pods(&plugin, &live);
    let after_reconcile = reservations(&plugin);
    let left = leaks(&after_reconcile, &live);
    assert_eq!(freed, leaked_before.len() - left.len());
    eprintln!(
        "reconciler freed {freed}; {} leaks without a pod left for GC",
        left.len()
    );
    assert!(
        after_reconcile
            .values()
            .all(|(c, pod)| live.contains_key(c) || pod.is_empty()),
        "the reconciler left a leak that names a pod: {left:?}"
    );

    // 2. CNI GC with the attachments the runtime knows are live frees the rest.
    let mut gc_config = (*config).clone();
    gc_config["cniVersion"] = json!("1.1.0");
    gc_config["cni.dev/valid-attachments"] = live
        .keys()
        .map(|id| json!({"containerID": id, "ifname": "net1"}))
        .collect();
    assert_eq!(plugin.run("GC", "", "", &gc_config), Reply::Ok(None));

    let after_gc = reservations(&plugin);
    assert_eq!(leaks(&after_gc, &live), Vec::<String>::new(), "leaks after GC");
    let expected: BTreeMap<Ipv4Addr, String> = live.iter().map(|(id, ip)| (*ip, id.clone())).collect();
    let held: BTreeMap<Ipv4Addr, String> = after_gc.into_iter().map(|(ip, (c, _))| (ip, c)).collect();
    assert_eq!(held, expected, "exactly the live attachments hold addresses");
    assert_eq!(plugin.listed().len(), live.len(), "weft ipam list agrees");

    // The live attachments still DEL cleanly afterwards.
    let ids: Vec<String> = live.keys().cloned().collect();
    for (id, reply) in ids.iter().zip(all_at_once(&plugin, "DEL", &ids, &config)) {
        assert_eq!(reply, Reply::Ok(None), "DEL {id}");
    }
    assert_eq!(plugin.listed(), vec![]);
    eprintln!("done in {:?}", started.elapsed());
}

/// Regression: on a brand-new store file, when the process creating it is SIGKILLed during its
/// first open, processes opening it at the same moment used to fail at once with `database is
/// locked` (CNI code 11). A new store is now set up in a private temporary file and linked
/// into place, so the others either see no store (and make their own, losing the link race) or
/// a whole one.
#[test]
fn concurrent_first_open_survives_a_killed_creator() {
    let mut failures = Vec::new();
    for trial in 0..20 {
        let plugin = Plugin::new();
        let config = plugin.config("10.77.8.0/22", json!({}));
        let children: Vec<Child> = (0..16)
            .map(|i| plugin.spawn("ADD", &format!("c{i}"), "", &config))
            .collect();
        let replies: Vec<Reply> = children
            .into_iter()
            .map(|mut child| {
                if rand::random::<u64>().is_multiple_of(KILL_ONE_IN) {
                    std::thread::sleep(Duration::from_micros(rand::random::<u64>() % 3_000));
                    let _ = child.kill();
                }
                finish(child)
            })
            .collect();
        failures.extend(
            replies
                .into_iter()
                .filter(|r| matches!(r, Reply::Error { .. }))
                .map(|r| format!("trial {trial}: {r:?}")),
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Delegated `weft-ipam` processes (the installed static client) hand their calls to the node
/// agent that serves their store: 48 at once get distinct addresses, recorded with the agent's
/// node (the processes themselves have no node name), and the agent answers exactly what the
/// full plugin would print. A config naming no store means the agent's. A config naming another
/// store, or an agent that is gone, makes the client run the full plugin, which does the work
/// itself on its config's store, or on the agent's store for a config naming none.
#[test]
fn delegated_processes_go_through_the_agent_serving_their_store() {
    let mut plugin = Plugin::new();
    let agent = AgentProcess::start(&weft_bin(), &plugin.state(), "agent-node").expect("start the agent");
    plugin.env = agent.delegate_env();
    let config = plugin.config("10.77.12.0/24", json!({}));

    let ids: Vec<String> = (0..48).map(|i| format!("via-agent-{i}")).collect();
    let replies = all_at_once(&plugin, "ADD", &ids, &config);
    let addresses: BTreeSet<Ipv4Net> = replies
        .iter()
        .map(|r| match r {
            Reply::Ok(Some(net)) => *net,
            other => panic!("ADD through the agent: {other:?}"),
        })
        .collect();
    assert_eq!(addresses.len(), ids.len(), "distinct addresses");
    let rows = plugin.listed_with_node();
    assert_eq!(rows.len(), ids.len());
    assert!(rows.iter().all(|(_, _, node)| node == "agent-node"), "{rows:?}");

    // The agent's answers are the full plugin's, byte for byte: a repeated ADD (idempotent),
    // VERSION, and a bad config's error.
    let bad = plugin.config("10.77.12.0/33", json!({}));
    for (verb, container, config) in [
        ("ADD", "via-agent-0", &config),
        ("VERSION", "", &config),
        ("ADD", "bad", &bad),
    ] {
        let through_agent = plugin.output(verb, container, config);
        let direct_env = std::mem::take(&mut plugin.env);
        let direct = plugin.output(verb, container, config);
        plugin.env = direct_env;
        assert_eq!(through_agent, direct, "{verb} {container}");
    }
    assert!(matches!(
        plugin.run("ADD", "bad", "", &bad),
        Reply::Error { code: 7, .. }
    ));

    // No store named: the node's default, the agent's store (it announces it to delegates).
    let mut unnamed = config.clone();
    unnamed["ipam"].as_object_mut().unwrap().remove("stateDir");
    let Reply::Ok(Some(unnamed_net)) = plugin.run("ADD", "unnamed-1", "", &unnamed) else {
        panic!("ADD naming no store through the agent")
    };
    assert!(!addresses.contains(&unnamed_net));
    let unnamed_rows: Vec<_> = listed_in(&plugin.state())
        .into_iter()
        .filter(|(_, c, _)| c == "unnamed-1")
        .collect();
    assert_eq!(
        unnamed_rows,
        [(
            unnamed_net.addr(),
            "unnamed-1".to_string(),
            "agent-node".to_string()
        )]
    );

    // Another store named: the agent declines, the full plugin allocates from that store.
    let elsewhere = plugin.dir.path().join("elsewhere");
    let mut other_config = config.clone();
    other_config["ipam"]["stateDir"] = json!(elsewhere);
    assert!(matches!(
        plugin.run("ADD", "direct-1", "", &other_config),
        Reply::Ok(Some(_))
    ));
    assert_eq!(
        listed_in(&elsewhere)
            .into_iter()
            .map(|(_, c, node)| (c, node))
            .collect::<Vec<_>>(),
        vec![("direct-1".to_string(), String::new())]
    );

    // The agent gone: the full plugin on the agent's store, honouring its reservations.
    drop(agent);
    let fallback = plugin.run("ADD", "fallback-1", "", &config);
    let Reply::Ok(Some(net)) = fallback else {
        panic!("ADD without the agent: {fallback:?}")
    };
    assert!(!addresses.contains(&net), "{net} was already handed out");
    // A config naming no store, the agent gone: the full plugin uses the store the agent
    // announced, not some other default.
    let Reply::Ok(Some(unnamed_fallback)) = plugin.run("ADD", "unnamed-2", "", &unnamed) else {
        panic!("ADD naming no store without the agent")
    };
    let rows = plugin.listed_with_node();
    let fallback_rows: BTreeSet<_> = rows
        .into_iter()
        .filter(|(_, c, _)| c == "fallback-1" || c == "unnamed-2")
        .collect();
    assert_eq!(
        fallback_rows,
        BTreeSet::from([
            (net.addr(), "fallback-1".to_string(), String::new()),
            (unnamed_fallback.addr(), "unnamed-2".to_string(), String::new()),
        ])
    );

    let mut everyone = ids.clone();
    everyone.extend(["fallback-1", "unnamed-1", "unnamed-2"].map(String::from));
    for reply in all_at_once(&plugin, "DEL", &everyone, &config) {
        assert_eq!(reply, Reply::Ok(None));
    }
    assert_eq!(plugin.listed(), vec![]);
}
