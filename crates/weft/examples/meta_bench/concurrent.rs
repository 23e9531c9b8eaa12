//! Part 1b: 8 pods ADDing at once (then DELing at once), each eth0 + 4 secondaries in its own
//! netns: 8 shims at once against one agent, against 8 threads running the same delegates
//! directly one by one, interleaved. Each round's CPU is counted too: the whole machine's
//! (`/proc/stat`: plugins, agents, shims, the bench, the API server and etcd, kernel threads)
//! and the API server's and etcd's, so a burst's wall time can be read against the work done.

use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};

use crate::add_del::{direct_add_del_at, direct_cni, enter_node_netns};
use crate::world::World;
use crate::{Agent, BURST_WORKERS, Netns, SECONDARIES, median_p90};

/// One pod's part of a round: ADD, meet the barrier, DEL; returns when its ADD and DEL ended.
type Work<'a> = &'a (dyn Fn(usize, &Barrier) -> Result<(Instant, Instant)> + Sync);

/// One round: ADD of every pod at once, a barrier, DEL of every pod at once. Returns the wall
/// time until the last ADD and from there until the last DEL.
fn round(work: Work<'_>) -> Result<(Duration, Duration)> {
    let barrier = Barrier::new(BURST_WORKERS);
    let ends = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for p in 0..BURST_WORKERS {
            let (barrier, ends) = (&barrier, &ends);
            scope.spawn(move || {
                let end = work(p, barrier);
                ends.lock().unwrap().push(end);
            });
        }
    });
    let ends: Vec<(Instant, Instant)> = ends.into_inner().unwrap().into_iter().collect::<Result<_>>()?;
    let added = ends
        .iter()
        .map(|e| e.0)
        .max()
        .ok_or_else(|| anyhow!("no worker"))?;
    let deleted = ends
        .iter()
        .map(|e| e.1)
        .max()
        .ok_or_else(|| anyhow!("no worker"))?;
    Ok((added - started, deleted - added))
}

/// CPU time the whole machine has been busy (all but idle and iowait), milliseconds.
fn machine_busy_ms() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let cpu = stat.lines().next().context("/proc/stat")?;
    let ticks: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let busy: f64 = ticks.iter().take(8).sum::<f64>() - ticks[3] - ticks[4];
    // USER_HZ is 100 on Linux/x86-64.
    Ok(busy * 10.0)
}

/// Run part 1b and print its table. `agents`: (label, agent) of each shim variant;
/// `server_cpu_ms`: the API server's and etcd's CPU so far, when there is one.
pub fn run(
    world: &World,
    agents: &[(&str, &Agent)],
    rounds: usize,
    server_cpu_ms: &dyn Fn() -> Option<f64>,
) -> Result<()> {
    let netns: Vec<Netns> = (0..BURST_WORKERS)
        .map(|p| Netns::new(10 + p))
        .collect::<Result<_>>()?;
    let cni = direct_cni();
    let variants = agents.len() + 1;
    let mut add: Vec<Vec<Duration>> = vec![Vec::new(); variants];
    let mut del: Vec<Vec<Duration>> = vec![Vec::new(); variants];
    // Per variant: machine CPU and API server + etcd CPU over its rounds (ADD and DEL).
    let mut busy = vec![0.0f64; variants];
    let mut server = vec![0.0f64; variants];
    // Per variant: its agent's own CPU (plugins not included); the direct runner: none.
    let mut agent_cpu = vec![0.0f64; variants];
    // Per variant: the bench's own CPU (the direct runner's work, or exec'ing and waiting for
    // shims), plugins and shims not included.
    let mut runner_cpu = vec![0.0f64; variants];
    let me = std::process::id();
    let warmup = 1;
    for i in 0..warmup + rounds {
        for k in 0..variants {
            let variant = (i + k) % variants;
            let container = |p: usize| format!("mb{}c{i}v{variant}p{p}", std::process::id());
            let pod = |p: usize| format!("burst-{p}");
            let agent_pid = (variant > 0).then(|| agents[variant - 1].1.pid());
            let agent_before = agent_pid.map(crate::cpu_ms).transpose()?;
            let runner_before = crate::cpu_ms(me)?;
            let (busy_before, server_before) = (machine_busy_ms()?, server_cpu_ms());
            let (a, d) = if variant == 0 {
                round(&|p, barrier| {
                    // Each worker is a thread of this round's: it enters the node netns and
                    // spawns its plugins there (see `direct_cni`).
                    let env = world.env("ADD", &container(p), &netns[p].path(), &pod(p));
                    let planned = enter_node_netns(world)
                        .and_then(|()| world.plans(&agents[0].1.conf, &env, SECONDARIES));
                    let (request, plans) = match planned {
                        Ok(planned) => planned,
                        Err(e) => {
                            barrier.wait();
                            return Err(e);
                        }
                    };
                    // A failed ADD still meets the barrier (the others must not wait forever).
                    direct_add_del_at(&cni, &request, &plans, barrier)
                })?
            } else {
                let agent = agents[variant - 1].1;
                let pod = |p: usize| agent.pod(&pod(p));
                round(&|p, barrier| {
                    let env = world.env("ADD", &container(p), &netns[p].path(), &pod(p));
                    let add = world.shim_ok(agent, &env);
                    let added = Instant::now();
                    barrier.wait();
                    add?;
                    let env = world.env("DEL", &container(p), &netns[p].path(), &pod(p));
                    world.shim_ok(agent, &env)?;
                    Ok((added, Instant::now()))
                })?
            };
            for ns in &netns {
                let left = ns.link_names()?;
                ensure!(left == ["lo"], "variant {variant}: left in {}: {left:?}", ns.0);
            }
            if i >= warmup {
                add[variant].push(a);
                del[variant].push(d);
                busy[variant] += machine_busy_ms()? - busy_before;
                if let (Some(before), Some(after)) = (server_before, server_cpu_ms()) {
                    server[variant] += after - before;
                }
                runner_cpu[variant] += crate::cpu_ms(me)? - runner_before;
                if let (Some(pid), Some(before)) = (agent_pid, agent_before) {
                    agent_cpu[variant] += crate::cpu_ms(pid)? - before;
                }
            }
        }
    }
    println!(
        "\n## 1b. {BURST_WORKERS} pods ADDing at once, then DELing at once (eth0 + {SECONDARIES} secondaries each), {rounds} rounds, interleaved\n"
    );
    println!(
        "| variant | all ADDs done, median | p90 | ADD / direct | all DELs done, median | DEL / direct | machine CPU per round | of it API server + etcd | the agent itself | the bench itself |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let direct_add = median_p90(&add[0]).0;
    let direct_del = median_p90(&del[0]).0;
    let busy_direct = busy[0].max(1.0);
    let labels = std::iter::once("direct, 8 threads, each one by one, spawned in the node netns (baseline)")
        .chain(agents.iter().map(|(l, _)| *l));
    let per_round = |total: f64| total / rounds.max(1) as f64;
    let cpus = busy.iter().zip(&server).zip(agent_cpu.iter().zip(&runner_cpu));
    for (((label, a), d), ((busy, server), (agent, runner))) in labels.zip(&add).zip(&del).zip(cpus) {
        let (am, ap) = median_p90(a);
        let dm = median_p90(d).0;
        println!(
            "| {label} | {am:.1} ms | {ap:.1} ms | **{:.2}×** | {dm:.1} ms | {:.2}× | {:.0} ms ({:.2}×) | {:.0} ms | {:.0} ms | {:.0} ms |",
            am / direct_add,
            dm / direct_del,
            per_round(*busy),
            busy / busy_direct,
            per_round(*server),
            per_round(*agent),
            per_round(*runner),
        );
    }
    println!(
        "\nMachine CPU per round: all of it (ADDs and DELs, everything running; 2 cores × the round's wall time bounds it). The API server's includes the writes of a previous variant's round that spill into this one (variants rotate, so each precedes every other equally)."
    );
    Ok(())
}
