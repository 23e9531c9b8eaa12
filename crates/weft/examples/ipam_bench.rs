//! End-to-end IPAM benchmark: concurrent workers each run ADD then DEL cycles of plugin
//! processes on one pool, for `weft-ipam` as installed (`weft install-cni`: the static client,
//! through a node agent as deployed, or running the weft binary when no agent serves it), the
//! weft binary itself under the name `weft-ipam`, and the reference `host-local` plugin, plus a
//! baseline of exec'ing `/bin/true` as often.
//! Every ADD result is checked against the addresses live at that moment: a duplicate is
//! counted (and must be 0).
//!
//! ```text
//! cargo run --release -p weft --example ipam_bench -- [cycles per worker] [workers] [rounds]
//! ```
//!
//! With `WEFT_BENCH_KUBECONFIG=<kubeconfig>` (the `weft-node` ServiceAccount's, on an API server
//! with deploy/'s CRDs and RBAC) it first runs weft-ipam on the Kubernetes backend: 1,000
//! allocations from the workers through a `weft agent --kubeconfig`.
//!
//! The weft binary is `target/<profile>/weft` next to this example (built first if `cargo`
//! started us), or `$WEFT_BIN`; host-local is `/usr/lib/cni/host-local` or `$HOST_LOCAL`.

use std::collections::HashMap;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use weft_testing::agent::AgentProcess;

use bench_support::{arg, weft_binary};

#[path = "bench_support/mod.rs"]
mod bench_support;

/// The variable naming a kubeconfig for the Kubernetes phase (the `weft-node` ServiceAccount's,
/// on an API server with deploy/'s CRDs and RBAC): a `weft agent --kubeconfig` process serves
/// the installed `weft-ipam` clients, which allocate in the API server (one IPReservation per
/// address), as on a node of a real cluster. Without it the phase is not run.
const KUBECONFIG_ENV: &str = "WEFT_BENCH_KUBECONFIG";

/// The pool every plugin allocates from.
const RANGE: &str = "10.77.0.0/24";
const GATEWAY: &str = "10.77.0.1";

/// One kind of process under test.
#[derive(Clone)]
struct Subject {
    name: &'static str,
    program: PathBuf,
    /// Network config on stdin; `None` for the exec baseline.
    config: Option<Value>,
    /// Extra environment (the agent's variables for its delegates).
    env: Vec<(String, String)>,
}

/// What one phase measured.
struct Figures {
    cycles: usize,
    elapsed: Duration,
    add: Duration,
    del: Duration,
    duplicates: usize,
    failures: Vec<String>,
}

impl Figures {
    fn per_second(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }
}

/// Run one process, feed it `stdin`, and return its stdout (an error on failure).
/// The directory the plugin processes may keep stores under (`WEFT_IPAM_STATE_ROOTS`).
static STATE_ROOT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

fn exec(
    program: &Path,
    env: &[(String, String)],
    verb: &str,
    container: &str,
    cni_path: &Path,
    stdin: &[u8],
) -> Result<Vec<u8>> {
    let mut child = Command::new(program)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("CNI_COMMAND", verb)
        .env("CNI_CONTAINERID", container)
        .env("CNI_IFNAME", "net1")
        .env("CNI_NETNS", "/var/run/netns/bench")
        .env("CNI_PATH", cni_path)
        .env(
            "WEFT_IPAM_STATE_ROOTS",
            STATE_ROOT.get().map(|p| p.as_os_str()).unwrap_or_default(),
        )
        .env_remove("WEFT_NODE_NAME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawn {}", program.display()))?;
    let mut input = child.stdin.take().context("stdin")?;
    // /bin/true does not read stdin; a broken pipe there is expected.
    let _ = input.write_all(stdin);
    drop(input);
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{verb} {container}: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(out.stdout)
}

fn first_address(stdout: &[u8]) -> Result<IpAddr> {
    let result: Value = serde_json::from_slice(stdout).context("ADD result is not JSON")?;
    let text = result["ips"][0]["address"]
        .as_str()
        .context("ADD result has no address")?;
    Ok(text.parse::<ipnet::IpNet>()?.addr())
}

/// `workers` threads, each running `cycles` ADD+DEL pairs; addresses live at any moment are
/// tracked to count duplicates.
fn phase(subject: &Subject, workers: usize, cycles: usize, dir: &Path) -> Figures {
    let live: Arc<Mutex<HashMap<IpAddr, String>>> = Arc::default();
    let stdin = subject
        .config
        .as_ref()
        .map(|c| c.to_string().into_bytes())
        .unwrap_or_default();
    let started = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (subject, live, stdin, dir) =
                (subject.clone(), live.clone(), stdin.clone(), dir.to_path_buf());
            std::thread::spawn(move || {
                let (mut add, mut del, mut duplicates, mut failures) =
                    (Duration::ZERO, Duration::ZERO, 0, Vec::new());
                for c in 0..cycles {
                    let id = format!("bench-{w:02}-{c:05}");
                    let t = Instant::now();
                    let added = exec(&subject.program, &subject.env, "ADD", &id, &dir, &stdin);
                    add += t.elapsed();
                    let ip = match (&subject.config, added) {
                        (None, Ok(_)) => None,
                        (Some(_), Ok(out)) => match first_address(&out) {
                            Ok(ip) => Some(ip),
                            Err(e) => {
                                failures.push(format!("ADD {id}: {e:#}"));
                                None
                            }
                        },
                        (_, Err(e)) => {
                            failures.push(format!("{e:#}"));
                            None
                        }
                    };
                    if let Some(ip) = ip
                        && let Some(other) = live.lock().unwrap().insert(ip, id.clone())
                    {
                        duplicates += 1;
                        failures.push(format!("duplicate {ip}: {other} and {id}"));
                    }
                    // The address may be handed out again as soon as its DEL starts (the
                    // release commits before the DEL process returns): live until then.
                    if let Some(ip) = ip {
                        live.lock().unwrap().remove(&ip);
                    }
                    let t = Instant::now();
                    if let Err(e) = exec(&subject.program, &subject.env, "DEL", &id, &dir, &stdin) {
                        failures.push(format!("{e:#}"));
                    }
                    del += t.elapsed();
                }
                (add, del, duplicates, failures)
            })
        })
        .collect();
    let mut figures = Figures {
        cycles: workers * cycles,
        elapsed: Duration::ZERO,
        add: Duration::ZERO,
        del: Duration::ZERO,
        duplicates: 0,
        failures: Vec::new(),
    };
    for h in handles {
        let (add, del, duplicates, failures) = h.join().expect("worker thread");
        figures.add += add;
        figures.del += del;
        figures.duplicates += duplicates;
        figures.failures.extend(failures);
    }
    figures.elapsed = started.elapsed();
    figures
}

/// Latency of one lone call, median of `n` (no concurrency): where a single call's time goes.
fn lone_latency(subject: &Subject, verb: &str, dir: &Path, n: usize) -> Duration {
    let (program, env) = (&subject.program, &subject.env);
    let stdin = subject
        .config
        .as_ref()
        .map(|c| c.to_string().into_bytes())
        .unwrap_or_default();
    let stdin = stdin.as_slice();
    let mut samples: Vec<Duration> = (0..n)
        .map(|i| {
            let t = Instant::now();
            let _ = exec(program, env, verb, &format!("lone-{i}"), dir, stdin);
            let spent = t.elapsed();
            if verb == "ADD" {
                let _ = exec(program, env, "DEL", &format!("lone-{i}"), dir, stdin);
            }
            spent
        })
        .collect();
    samples.sort();
    samples[n / 2]
}

/// Child mode: one ADD or DEL done the way the plugin does it (request parse, runtime start,
/// store open, `weft_ipam::handle`), timed step by step; prints the microseconds of each step
/// (the store opened with one connection, as the plugin opens it) and exits.
fn profile_one(verb: &str, container: &str, config: &str) -> Result<()> {
    let t = Instant::now();
    let env = [
        ("CNI_COMMAND", verb),
        ("CNI_CONTAINERID", container),
        ("CNI_IFNAME", "net1"),
        ("CNI_NETNS", "/var/run/netns/bench"),
        ("CNI_PATH", "/usr/lib/cni"),
    ];
    let request = weft_ipam::IpamRequest::from_lookup(
        |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()),
        config.as_bytes(),
    )?;
    let parsed = t.elapsed();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let runtime_started = t.elapsed();
    let state: Value = serde_json::from_str(config)?;
    let path = Path::new(state["ipam"]["stateDir"].as_str().context("stateDir")?).join("store.db");
    let options = weft_store::SqliteOptions {
        single_connection: true,
        ..weft_store::SqliteOptions::default()
    };
    let store = weft_store::SqliteStore::open_with(path, options)?.shared();
    let opened = t.elapsed();
    let outcome = runtime.block_on(weft_ipam::handle(request, store.clone()));
    let handled = t.elapsed();
    outcome.with_context(|| format!("{verb} {container}"))?;
    println!(
        "{} {} {} {}",
        parsed.as_micros(),
        (runtime_started - parsed).as_micros(),
        (opened - runtime_started).as_micros(),
        (handled - opened).as_micros()
    );
    std::io::stdout().flush()?;
    std::process::exit(0)
}

/// Run [`profile_one`] in fresh processes (sequentially, then with `workers` at once) and print
/// the mean of each step.
fn profile(workers: usize, dir: &Path) -> Result<()> {
    let exe = std::env::current_exe()?;
    let config = json!({"cniVersion": "1.0.0", "name": "blue", "type": "bridge",
        "ipam": {"type": "weft-ipam", "range": RANGE, "stateDir": dir.join("profile")}})
    .to_string();
    let one = |verb: &str, id: &str| -> Result<(Duration, [u64; 4])> {
        let t = Instant::now();
        let out = Command::new(&exe)
            .args(["--profile-one", verb, id, &config])
            .output()?;
        let wall = t.elapsed();
        if !out.status.success() {
            bail!("profile child: {}", String::from_utf8_lossy(&out.stderr));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut steps = [0u64; 4];
        for (slot, field) in steps.iter_mut().zip(text.split_whitespace()) {
            *slot = field.parse()?;
        }
        Ok((wall, steps))
    };
    let report = |label: &str, samples: &[(Duration, [u64; 4])]| {
        let n = samples.len() as f64;
        let mean = |i: usize| samples.iter().map(|s| s.1[i]).sum::<u64>() as f64 / n / 1e3;
        let wall = samples.iter().map(|s| s.0.as_secs_f64()).sum::<f64>() / n * 1e3;
        println!(
            "  {label:<26} wall {wall:>6.2} ms | parse {:.2} | tokio runtime {:.2} | store open {:.2} | handle {:.2} ms",
            mean(0),
            mean(1),
            mean(2),
            mean(3)
        );
    };
    let n = 40;
    let mut adds = Vec::new();
    let mut dels = Vec::new();
    for i in 0..n {
        adds.push(one("ADD", &format!("p-{i}"))?);
        dels.push(one("DEL", &format!("p-{i}"))?);
    }
    println!("\nin-process steps of one call, in a fresh process each (mean of {n}; wall includes exec):");
    report("ADD, lone", &adds);
    report("DEL, lone", &dels);
    let samples = Mutex::new((Vec::new(), Vec::new()));
    std::thread::scope(|scope| {
        for w in 0..workers {
            let (one, samples) = (&one, &samples);
            scope.spawn(move || {
                for i in 0..n / 4 {
                    let id = format!("q-{w}-{i}");
                    if let (Ok(a), Ok(d)) = (one("ADD", &id), one("DEL", &id)) {
                        let mut s = samples.lock().unwrap();
                        s.0.push(a);
                        s.1.push(d);
                    }
                }
            });
        }
    });
    let (adds, dels) = samples.into_inner().unwrap();
    report(&format!("ADD, {workers} at once"), &adds);
    report(&format!("DEL, {workers} at once"), &dels);
    Ok(())
}

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("--profile-one") {
        return profile_one(&argv[2], &argv[3], &argv[4]);
    }
    let cycles = arg(1, 100)?;
    let workers = arg(2, 16)?;
    let rounds = arg(3, 3)?;
    let tmp = tempfile::tempdir()?;
    // The benchmark's stores are under its temp dir, which a node would allow (see weft-ipam).
    let _ = STATE_ROOT.set(tmp.path().to_path_buf());
    let installed = Command::new(weft_binary()?)
        .args(["install-cni", "--link", "--bin-dir"])
        .arg(tmp.path().join("bin"))
        .output()?;
    if !installed.status.success() {
        bail!("weft install-cni: {}", String::from_utf8_lossy(&installed.stderr));
    }
    let weft_ipam = tmp.path().join("bin/weft-ipam");
    let full_weft = tmp.path().join("full/weft-ipam");
    std::fs::create_dir_all(tmp.path().join("full"))?;
    std::os::unix::fs::symlink(weft_binary()?, &full_weft)?;
    let host_local =
        PathBuf::from(std::env::var_os("HOST_LOCAL").unwrap_or_else(|| "/usr/lib/cni/host-local".into()));
    if !host_local.exists() {
        bail!(
            "{} is missing (apt install containernetworking-plugins)",
            host_local.display()
        );
    }

    if let Some(kubeconfig) = std::env::var_os(KUBECONFIG_ENV) {
        kube_phase(Path::new(&kubeconfig), &weft_ipam, workers, tmp.path())?;
    }
    println!(
        "{workers} workers x {cycles} ADD+DEL cycles, pool {RANGE}, {rounds} rounds (order rotates per round)"
    );
    println!(
        "{:<6} {:<11} {:>10} {:>11} {:>11} {:>11} {:>5}",
        "round", "subject", "cycles/s", "ADD ms", "DEL ms", "wall s", "dups"
    );
    let mut rates: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut total_duplicates = 0;
    for round in 0..rounds {
        let dir = tmp.path().join(format!("round-{round}"));
        let agent = AgentProcess::start(&weft_binary()?, &dir.join("weft-agent"), "bench")?;
        let subjects = [
            Subject {
                name: "/bin/true",
                program: "/bin/true".into(),
                config: None,
                env: Vec::new(),
            },
            Subject {
                name: "host-local",
                program: host_local.clone(),
                config: Some(host_local_config(&dir.join("host-local"))),
                env: Vec::new(),
            },
            Subject {
                name: "weft-ipam",
                program: weft_ipam.clone(),
                config: Some(weft_config(&dir.join("weft"))),
                env: Vec::new(),
            },
            Subject {
                name: "full-weft",
                program: full_weft.clone(),
                config: Some(weft_config(&dir.join("full"))),
                env: Vec::new(),
            },
            Subject {
                name: "weft+agent",
                program: weft_ipam.clone(),
                config: Some(weft_config(&agent.state)),
                env: agent.delegate_env(),
            },
        ];
        for k in 0..subjects.len() {
            let subject = &subjects[(k + round) % subjects.len()];
            let f = phase(subject, workers, cycles, &dir);
            if let Some(first) = f.failures.first() {
                bail!("{}: {} failures, first: {first}", subject.name, f.failures.len());
            }
            total_duplicates += f.duplicates;
            let calls = f.cycles as f64;
            println!(
                "{:<6} {:<11} {:>10.0} {:>11.2} {:>11.2} {:>11.2} {:>5}",
                round,
                subject.name,
                f.per_second(),
                f.add.as_secs_f64() * 1e3 / calls,
                f.del.as_secs_f64() * 1e3 / calls,
                f.elapsed.as_secs_f64(),
                f.duplicates
            );
            rates.entry(subject.name).or_default().push(f.per_second());
        }
    }

    let median = |name: &str| {
        let mut v = rates[name].clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (truth, host, weft, full, via_agent) = (
        median("/bin/true"),
        median("host-local"),
        median("weft-ipam"),
        median("full-weft"),
        median("weft+agent"),
    );
    println!("\nmedian cycles/s (one cycle = one ADD process + one DEL process):");
    println!(
        "  /bin/true  {truth:>8.0}   (exec cost alone: {:.2} ms per process across {workers} workers)",
        1e3 / (2.0 * truth) * workers as f64
    );
    println!("  host-local {host:>8.0}");
    println!("  weft-ipam  {weft:>8.0}   (no agent: the client runs the weft binary)");
    println!("  full-weft  {full:>8.0}   (the weft binary exec'd as weft-ipam directly)");
    println!("  weft-ipam through the node agent {via_agent:>8.0}");
    println!(
        "  weft-ipam / host-local = {:.2}x (no agent, opening the store); the weft binary directly: {:.2}x",
        weft / host,
        full / host
    );
    println!(
        "  weft-ipam through the agent / host-local = {:.2}x (target >= 2x)",
        via_agent / host
    );
    println!("  duplicates: {total_duplicates}");

    let dir = tmp.path().join("lone");
    let agent = AgentProcess::start(&weft_binary()?, &dir.join("weft-agent"), "bench")?;
    let lone =
        |name: &'static str, program: &Path, config: Option<Value>, env: Vec<(String, String)>| Subject {
            name,
            program: program.to_path_buf(),
            config,
            env,
        };
    let subjects = [
        lone("/bin/true", Path::new("/bin/true"), None, Vec::new()),
        lone(
            "weft-ipam",
            &weft_ipam,
            Some(weft_config(&dir.join("weft"))),
            Vec::new(),
        ),
        lone(
            "weft-ipam via agent",
            &weft_ipam,
            Some(weft_config(&agent.state)),
            agent.delegate_env(),
        ),
        lone(
            "host-local",
            &host_local,
            Some(host_local_config(&dir.join("hl"))),
            Vec::new(),
        ),
    ];
    let n = 51;
    println!("\nlone call latency, median of {n} (no concurrency):");
    for subject in &subjects {
        let verbs: &[&str] = if subject.config.is_some() {
            &["VERSION", "ADD"]
        } else {
            &["ADD"]
        };
        for verb in verbs {
            let label = format!(
                "{} {}",
                subject.name,
                if subject.config.is_some() { *verb } else { "" }
            );
            println!(
                "  {label:<30} {:>7.2} ms",
                ms(lone_latency(subject, verb, &dir, n))
            );
        }
    }
    drop(agent);
    profile(workers, &dir)?;
    if total_duplicates > 0 {
        bail!("{total_duplicates} duplicate addresses");
    }
    Ok(())
}

/// weft-ipam on the Kubernetes backend: 1,000 allocations (ADD, then DEL) from `workers`
/// concurrent processes on one pool, through a `weft agent --kubeconfig`.
fn kube_phase(kubeconfig: &Path, weft_ipam: &Path, workers: usize, tmp: &Path) -> Result<()> {
    let dir = tmp.join("kube");
    let agent =
        AgentProcess::start_on_api_server(&weft_binary()?, kubeconfig, &dir.join("weft-agent"), "bench")?;
    let subject = Subject {
        name: "weft-ipam on Kubernetes",
        program: weft_ipam.to_path_buf(),
        config: Some(json!({"cniVersion": "1.0.0", "name": "bench", "type": "bridge",
                            "ipam": {"type": "weft-ipam", "range": RANGE, "gateway": GATEWAY}})),
        env: agent.delegate_env(),
    };
    let cycles = 1000_usize.div_ceil(workers);
    let f = phase(&subject, workers, cycles, &dir);
    if let Some(first) = f.failures.first() {
        bail!("{}: {} failures, first: {first}", subject.name, f.failures.len());
    }
    let calls = f.cycles as f64;
    println!(
        "Kubernetes API ({}): {} allocations from {workers} concurrent processes on {RANGE}: \
         {:.0} allocations/s (ADD+DEL cycles/s; target >= 100), ADD {:.2} ms, DEL {:.2} ms, \
         wall {:.2} s, duplicates {}",
        kubeconfig.display(),
        f.cycles,
        f.per_second(),
        f.add.as_secs_f64() * 1e3 / calls,
        f.del.as_secs_f64() * 1e3 / calls,
        f.elapsed.as_secs_f64(),
        f.duplicates
    );
    if f.duplicates > 0 {
        bail!("{} duplicate addresses on Kubernetes", f.duplicates);
    }
    Ok(())
}

fn weft_config(state: &Path) -> Value {
    json!({"cniVersion": "1.0.0", "name": "blue", "type": "bridge",
        "ipam": {"type": "weft-ipam", "range": RANGE, "gateway": GATEWAY, "stateDir": state}})
}

fn host_local_config(data: &Path) -> Value {
    json!({"cniVersion": "1.0.0", "name": "blue", "type": "bridge",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": RANGE, "gateway": GATEWAY}]], "dataDir": data}})
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
