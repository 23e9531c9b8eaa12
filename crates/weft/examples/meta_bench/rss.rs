//! Part 3: the agent's RSS with many pods attached, then DEL of all and a leak check.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};

use crate::world::World;
use crate::{Agent, BURST_WORKERS, Netns, RSS_SECONDARIES, mib, rss_kib};

/// Run `work(n)` for n in 0..count on `workers` threads; the first error wins.
pub fn burst(count: usize, workers: usize, work: &(dyn Fn(usize) -> Result<()> + Sync)) -> Result<Duration> {
    let next = AtomicUsize::new(0);
    let failure = Mutex::new(None);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= count {
                        break;
                    }
                    if let Err(e) = work(n) {
                        let mut first = failure.lock().unwrap();
                        if first.is_none() {
                            *first = Some(e);
                        }
                        next.store(count, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    match failure.into_inner().unwrap() {
        Some(e) => Err(e),
        None => Ok(started.elapsed()),
    }
}

/// Samples the agent's RSS every 50 ms until dropped; keeps the peak.
struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicUsize::new(0));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Ok((rss, _)) = rss_kib(pid) {
                    p.fetch_max(rss as usize, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Self {
            stop,
            peak,
            thread: Some(thread),
        }
    }
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed) as u64
    }
}

/// Addresses host-local still holds (files named like an IP under its data dir).
fn host_local_leases(dir: &Path) -> Vec<String> {
    let mut leases = Vec::new();
    for network in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for file in std::fs::read_dir(network.path()).into_iter().flatten().flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            if name.parse::<std::net::IpAddr>().is_ok() {
                leases.push(format!("{}/{name}", network.file_name().to_string_lossy()));
            }
        }
    }
    leases
}

/// Run part 3 and print its table.
pub fn run(world: &World, agent: &Agent, pods: usize, idle_at_start: u64) -> Result<()> {
    let pid = agent.pid();
    let netns: Vec<Netns> = (0..pods).map(|p| Netns::new(100 + p)).collect::<Result<_>>()?;
    let container = |p: usize| format!("mb{}rss{p}", std::process::id());
    let leases_before = host_local_leases(&world.host_local).len();
    std::thread::sleep(Duration::from_secs(1));
    let (idle_before, _) = rss_kib(pid)?;

    let sampler = RssSampler::start(pid);
    let cpu_at_start = crate::cpu_ms(pid)?;
    let add_time = burst(pods, BURST_WORKERS, &|p| {
        let env = world.env("ADD", &container(p), &netns[p].path(), &format!("rss-{p}"));
        world.shim_ok(agent, &env).map(|_| ())
    });
    let peak = sampler.finish();
    let add_time = add_time?;
    std::thread::sleep(Duration::from_secs(1));
    // The agent's own CPU over the ADD burst and the second after it (its deferred writes and
    // the hot-plug reconciler's look at each pod it changed), plugins not included.
    let add_cpu = crate::cpu_ms(pid)? - cpu_at_start;
    let (idle_after, _) = rss_kib(pid)?;

    let mut attached = 0;
    for ns in &netns {
        let mut names = ns.link_names()?;
        names.sort();
        ensure!(names == ["eth0", "lo", "net1", "net2"], "{}: {names:?}", ns.0);
        attached += 1;
    }
    let leases_added = host_local_leases(&world.host_local)
        .len()
        .saturating_sub(leases_before);

    let cpu_before_del = crate::cpu_ms(pid)?;
    let del_time = burst(pods, BURST_WORKERS, &|p| {
        let env = world.env("DEL", &container(p), &netns[p].path(), &format!("rss-{p}"));
        world.shim_ok(agent, &env).map(|_| ())
    })?;
    std::thread::sleep(Duration::from_secs(1));
    let del_cpu = crate::cpu_ms(pid)? - cpu_before_del;
    let (after_del, hwm) = rss_kib(pid)?;

    let mut problems = Vec::new();
    for ns in &netns {
        let names = ns.link_names()?;
        if names != ["lo"] {
            problems.push(format!("{}: {names:?}", ns.0));
        }
    }
    let veths: Vec<String> = world
        .node
        .links()?
        .into_iter()
        .filter(|(_, kind)| kind == "veth")
        .map(|(name, _)| name)
        .collect();
    if !veths.is_empty() {
        problems.push(format!("{} veths left in the node netns", veths.len()));
    }
    let leases = host_local_leases(&world.host_local);
    if !leases.is_empty() {
        problems.push(format!("host-local still holds {leases:?}"));
    }
    let cache: Vec<_> = std::fs::read_dir(&agent.cache)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    if !cache.is_empty() {
        problems.push(format!("{} cache records left", cache.len()));
    }

    println!(
        "\n## 3. Agent RSS, {pods} pods × {} networks (eth0 + {RSS_SECONDARIES} secondaries), ADD {BURST_WORKERS} at a time\n",
        1 + RSS_SECONDARIES
    );
    println!("| moment | agent RSS |");
    println!("|---|---|");
    println!("| idle, just started | {:.1} MiB |", mib(idle_at_start));
    println!(
        "| idle, before the burst (after parts 1 and 2) | {:.1} MiB |",
        mib(idle_before)
    );
    println!(
        "| peak during the ADD burst (sampled every 50 ms) | **{:.1} MiB** |",
        mib(peak)
    );
    println!(
        "| high-water mark (`VmHWM`, whole life) | **{:.1} MiB** |",
        mib(hwm)
    );
    println!("| idle, {pods} pods attached | {:.1} MiB |", mib(idle_after));
    println!("| after DEL of all | {:.1} MiB |", mib(after_del));
    println!(
        "\nADD burst {:.1} s ({:.0} ms per pod), DEL burst {:.1} s; {attached} pods verified with eth0+net1+net2, {leases_added} host-local leases taken.",
        add_time.as_secs_f64(),
        add_time.as_secs_f64() * 1000.0 / pods as f64,
        del_time.as_secs_f64()
    );
    println!(
        "The agent's own CPU (plugins not included), per pod: {:.1} ms over the ADD burst and the second after it, {:.1} ms over the DEL burst and the second after it.",
        add_cpu / pods as f64,
        del_cpu / pods as f64
    );
    if problems.is_empty() {
        println!("After DEL: nothing left (pod links, node veths, host-local leases, agent cache).");
        Ok(())
    } else {
        bail!("left behind after DEL: {}", problems.join("; "))
    }
}
