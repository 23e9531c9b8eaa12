//! End-to-end meta-plugin benchmark through real processes: a runtime execs `weft-cni` (the
//! weft binary under that name) → the agent (`weft agent`, in a node netns) → the reference
//! `bridge` + `host-local` plugins. Three measurements in one run:
//!
//! 1. ADD+DEL of a pod with eth0 + 4 secondaries (each its own bridge and subnet) through the
//!    shim, with an agent running secondaries one by one (`--parallel-delegates 1`) and one
//!    running 4 at once (the default), against the same delegates exec'd directly one by one
//!    (`weft_cni::runtime::CniRuntime`, plugins spawned into the same node netns by a thread
//!    that entered it, as a runtime there would: `add_del::direct_cni`), interleaved.
//! 2. The shim's exec + round trip alone: ADD for a pod the store does not know (the agent
//!    answers CNI error 11 and runs no delegate), against exec of `busybox true`
//!    (static) and of `weft-cni` answering VERSION itself (no agent).
//! 3. The agent's RSS with many pods × 3 networks attached (eth0 + 2 secondaries), ADDed 8 at
//!    a time, sampled every 50 ms; then DEL of all and a check that nothing is left.
//!
//! Also 8 pods ADDing at once (part 1b) against 8 threads running the delegates directly. With
//! `WEFT_KUBE_APISERVER` (a kube-apiserver binary: the bench starts it on etcd) or
//! `WEFT_BENCH_KUBECONFIG` (an API server of your own; see `meta_bench/kube.rs`) agents on the
//! Kubernetes API join parts 1 and 1b (answering the ADD before the network-status write, the
//! default there, and after it, `--network-status before-reply`, Multus' order; in part 1b also
//! one whose writes do not yield to the node's other ADDs, `--writes-yield-ms 0`); part 1 also
//! gets the direct runner making an agent's two API writes for each ADD (`kube::Writer`: what
//! those writes cost any component whose node shares cores with the control plane), the API requests
//! per pod ADD and DEL are counted from the audit log, and an agent with many pods attached is
//! restarted (time until it serves, requests it makes). Without it those are skipped.
//!
//! ```text
//! cargo run --release -p weft --example meta_bench -- [iterations] [pods]   # as root
//! ```
//!
//! `WEFT_BENCH_PARTS` (a comma-separated list of `1`, `1b`, `2`, `3`, `restart`; all when unset)
//! runs only those parts, e.g. `WEFT_BENCH_PARTS=1b` for longer samples of the burst alone.
//! `WEFT_BENCH_EXTRA_NADS=<n>` creates n NADs no bench pod selects beside the bench's own, as on
//! a cluster with many tenants.
//!
//! The weft binary is `target/<profile>/weft` next to this example (built first if `cargo`
//! started us), or `$WEFT_BIN`. Every namespace is named `wt-mb-<pid>-<n>` and deleted on
//! exit, failure included.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

const PLUGIN_DIR: &str = "/usr/lib/cni";
const BUSYBOX: &str = "/bin/busybox";
/// Secondary networks of the ADD+DEL pod (part 1); the RSS pods (part 3) use the first two.
const SECONDARIES: u32 = 4;
const RSS_SECONDARIES: u32 = 2;
/// ADDs (and DELs) in flight at once in the RSS burst.
const BURST_WORKERS: usize = 8;
const NAMESPACE: &str = "default";

use bench_support::{arg, weft_binary};

#[path = "meta_bench/add_del.rs"]
mod add_del;
#[path = "bench_support/mod.rs"]
mod bench_support;
#[path = "meta_bench/concurrent.rs"]
mod concurrent;
#[path = "meta_bench/kube.rs"]
mod kube;
#[path = "meta_bench/round_trip.rs"]
mod round_trip;
#[path = "meta_bench/rss.rs"]
mod rss;
#[path = "meta_bench/world.rs"]
mod world;

// ---------------------------------------------------------------- guards and small helpers

fn ip(args: &[&str]) -> Result<String> {
    let out = Command::new("ip").args(args).output().context("run ip")?;
    ensure!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A network namespace `wt-mb-<pid>-<n>`, deleted on drop.
struct Netns(String);

impl Netns {
    fn new(n: usize) -> Result<Self> {
        let name = format!("wt-mb-{}-{n}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        ip(&["netns", "add", &name])?;
        let ns = Self(name);
        ip(&["-n", &ns.0, "link", "set", "lo", "up"])?;
        Ok(ns)
    }
    fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }
    /// Link names and kinds (`veth`, `bridge`, or "" for plain) in the namespace.
    fn links(&self) -> Result<Vec<(String, String)>> {
        let text = ip(&["-n", &self.0, "-j", "-d", "link"])?;
        let links: Value = serde_json::from_str(&text).context("ip -j link")?;
        Ok(links
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| {
                (
                    l["ifname"].as_str().unwrap_or_default().to_string(),
                    l["linkinfo"]["info_kind"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect())
    }
    fn link_names(&self) -> Result<Vec<String>> {
        Ok(self.links()?.into_iter().map(|(name, _)| name).collect())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A running agent, killed on drop.
struct Agent {
    child: Child,
    socket: PathBuf,
    /// Its attachment cache directory.
    cache: PathBuf,
    /// The meta-plugin config a runtime passes to `weft-cni` for this agent.
    conf: Vec<u8>,
    /// The prefix of the pods this agent attaches (see [`world::POD_SETS`]).
    pods: String,
}

impl Agent {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// This agent's copy of the bench pod `name`.
    fn pod(&self, name: &str) -> String {
        format!("{}{name}", self.pods)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Median and 90th percentile of a sample, in milliseconds.
fn median_p90(samples: &[Duration]) -> (f64, f64) {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    if ms.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9))
}

fn mean_ms(samples: &[Duration]) -> f64 {
    samples.iter().map(Duration::as_secs_f64).sum::<f64>() * 1000.0 / samples.len().max(1) as f64
}

/// CPU time a process spent itself (user + system, children not included), milliseconds.
fn cpu_ms(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("/proc/pid/stat")?
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    // The kernel reports these in USER_HZ, which is 100 on Linux/x86-64.
    Ok(ticks * 10.0)
}

/// `VmRSS` and `VmHWM` of a process, KiB.
fn rss_kib(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("{key} of pid {pid}"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// GET over the agent's Unix socket; returns the body.
fn http_get(socket: &Path, path: &str) -> Result<String> {
    let (status, body) = http(socket, "GET", path, b"")?;
    ensure!(status == 200, "GET {path}: {status} {body}");
    Ok(body)
}

/// One HTTP/1.1 request over the agent's Unix socket (blocking, `Connection: close`);
/// returns the status and the body.
fn http(socket: &Path, method: &str, path: &str, body: &[u8]) -> Result<(u16, String)> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: weft\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request)?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("{method} {path}: not an HTTP response: {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// The agent's own request time so far: (seconds summed, count) of
/// `weft_agent_cni_request_duration_seconds` for `verb`.
fn agent_time(agent: &Agent, verb: &str) -> Result<(f64, u64)> {
    let metrics = http_get(&agent.socket, "/metrics")?;
    let value = |suffix: &str| {
        let prefix = format!("weft_agent_cni_request_duration_seconds_{suffix}{{verb=\"{verb}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((value("sum"), value("count") as u64))
}

/// Mean agent-side milliseconds per request between two [`agent_time`] readings.
fn agent_mean_ms(before: (f64, u64), after: (f64, u64)) -> f64 {
    (after.0 - before.0) * 1000.0 / (after.1 - before.1).max(1) as f64
}

// ---------------------------------------------------------------- main

/// The parts to run: `WEFT_BENCH_PARTS`, all when unset.
struct Parts(Option<Vec<String>>);

impl Parts {
    const ALL: [&str; 5] = ["1", "1b", "2", "3", "restart"];

    fn from_env() -> Result<Self> {
        let Ok(list) = std::env::var("WEFT_BENCH_PARTS") else {
            return Ok(Self(None));
        };
        let parts: Vec<String> = list.split(',').map(|p| p.trim().to_string()).collect();
        for part in &parts {
            ensure!(
                Self::ALL.contains(&part.as_str()),
                "WEFT_BENCH_PARTS: unknown part {part:?} (parts: {})",
                Self::ALL.join(", ")
            );
        }
        Ok(Self(Some(parts)))
    }

    fn run(&self, part: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|parts| parts.iter().any(|p| p == part))
    }
}

fn main() -> Result<()> {
    use world::World;
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("meta_bench needs root (network namespaces)");
        std::process::exit(2);
    }
    let iterations = arg(1, 30)?;
    let pods = arg(2, 200)?;
    let parts = Parts::from_env()?;
    let dir = tempfile::Builder::new().prefix("wt-mb-").tempdir()?;
    let world = World::new(dir.path(), pods)?;
    let a1 = world.agent("a1", 1, None)?;
    let a4 = world.agent("a4", 4, None)?;
    // The agent fsyncs its attachment cache; a twin with the cache on tmpfs shows that cost.
    let shm = tempfile::Builder::new().prefix("wt-mb-").tempdir_in("/dev/shm")?;
    let a4_tmpfs = world.agent("a4t", 4, Some(shm.path()))?;
    let (idle_at_start, _) = rss_kib(a4.pid())?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "# meta_bench: {} cores, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );

    let kube = kube::Kube::from_env(&world)?;
    let k1 = kube
        .as_ref()
        .map(|k| world.kube_agent("k1", 1, &k.kubeconfig, &[]))
        .transpose()?;
    let k4 = kube
        .as_ref()
        .map(|k| world.kube_agent("k4", 4, &k.kubeconfig, &[]))
        .transpose()?;
    // The same writing network-status before the ADD answers (Multus' order), to show what
    // answering first saves.
    let before_reply = ["--network-status", "before-reply"];
    let k1_before = kube
        .as_ref()
        .map(|k| world.kube_agent("k1b", 1, &k.kubeconfig, &before_reply))
        .transpose()?;
    let k4_before = kube
        .as_ref()
        .map(|k| world.kube_agent("k4b", 4, &k.kubeconfig, &before_reply))
        .transpose()?;
    // The same with Multus' Events (one per NIC instead of one per ADD): what they cost to the
    // API server (measured on its own, after part 1; idle until then).
    let k4_each = kube
        .as_ref()
        .map(|k| world.kube_agent("k4e", 4, &k.kubeconfig, &["--interface-events", "per-interface"]))
        .transpose()?;

    let mut agents = vec![
        ("shim → agent, `--parallel-delegates 1`", &a1),
        ("shim → agent, `--parallel-delegates 4` (default)", &a4),
        ("shim → agent, 4, cache dir on tmpfs", &a4_tmpfs),
    ];
    if let (Some(k1), Some(k4), Some(k1b), Some(k4b)) = (&k1, &k4, &k1_before, &k4_before) {
        agents.push(("Kubernetes API: shim → agent, `--parallel-delegates 1`", k1));
        agents.push(("Kubernetes API: shim → agent, `--parallel-delegates 4`", k4));
        agents.push((
            "Kubernetes API: 1, `--network-status before-reply` (Multus' order)",
            k1b,
        ));
        agents.push(("Kubernetes API: 4, `--network-status before-reply`", k4b));
    }
    if parts.run("1") {
        let server_cpu = kube.as_ref().and_then(kube::Kube::server_cpu_ms);
        let writer = kube.as_ref().map(kube::Writer::start).transpose()?;
        add_del::run(&world, &agents, writer.as_ref(), iterations)?;
        let server_cpu_after = kube.as_ref().and_then(kube::Kube::server_cpu_ms);
        if let (Some(before), Some(after)) = (server_cpu, server_cpu_after) {
            // Four Kubernetes agents and the direct runner that writes, each iteration and
            // the 2 warm-ups.
            let writing = (4 + usize::from(writer.is_some())) * (iterations + 2);
            println!(
                "\nAPI server + etcd CPU during part 1: {:.0} ms, {:.1} ms per ADD+DEL that writes ({writing} of them; its idle work included).",
                after - before,
                (after - before) / writing as f64,
            );
        }
        if let (Some(kube), Some(k4), Some(k4_each)) = (&kube, &k4, &k4_each) {
            kube::server_cpu_per_pod(
                &world,
                kube,
                &[
                    ("Kubernetes API, 4 (one Event per ADD)", k4),
                    ("Kubernetes API, 4, `--interface-events per-interface`", k4_each),
                ],
                iterations.min(pods / 2),
            )?;
        }
    }
    if parts.run("1b") {
        // The same without the node's bound on ADD plugins (64 is more than a burst runs), to
        // show what the bound saves when the plugins alone saturate the cores.
        let a4_unbounded = world.agent_with("a4u", 4, &["--max-plugins", "64"])?;
        let mut concurrent_agents = vec![
            ("shim → agent, 4 (default), embedded store", &a4),
            (
                "shim → agent, 4, `--max-plugins 64` (no node bound)",
                &a4_unbounded,
            ),
        ];
        // The same without AddedInterface Events: what the Event costs a burst.
        let k4_no_events = kube
            .as_ref()
            .map(|k| world.kube_agent("k4n", 4, &k.kubeconfig, &["--interface-events", "none"]))
            .transpose()?;
        // The same writing network-status and the Event at once, beside the other pods' ADDs:
        // what yielding to them saves the burst.
        let k4_at_once = kube
            .as_ref()
            .map(|k| world.kube_agent("k4y", 4, &k.kubeconfig, &["--writes-yield-ms", "0"]))
            .transpose()?;
        if let (Some(k4), Some(k4b), Some(k4n), Some(k4y)) = (&k4, &k4_before, &k4_no_events, &k4_at_once) {
            concurrent_agents.push(("Kubernetes API: shim → agent, 4", k4));
            concurrent_agents.push(("Kubernetes API: 4, `--network-status before-reply`", k4b));
            concurrent_agents.push(("Kubernetes API: 4, `--interface-events none`", k4n));
            concurrent_agents.push(("Kubernetes API: 4, `--writes-yield-ms 0` (writes at once)", k4y));
        }
        let server_cpu = || kube.as_ref().and_then(kube::Kube::server_cpu_ms);
        concurrent::run(&world, &concurrent_agents, iterations.div_ceil(2), &server_cpu)?;
    }
    if let (Some(kube), Some(k4), true) = (&kube, &k4, parts.run("1")) {
        match &kube.audit {
            Some(audit) => kube::requests_per_pod(&world, k4, audit, 5)?,
            None => println!("# API request counts skipped: {} is not set", kube::AUDIT_ENV),
        }
    }
    if parts.run("2") {
        round_trip::run(&world, &a4, iterations)?;
    }
    drop((a1, a4_tmpfs, k1, k4_each, k1_before, k4_before));
    if parts.run("3") {
        rss::run(&world, &a4, pods, idle_at_start)?;
    }
    if let (Some(kube), Some(k4), true) = (&kube, k4, parts.run("restart")) {
        drop(a4);
        kube::restart(&world, kube, k4, "k4", pods)?;
    }
    Ok(())
}
