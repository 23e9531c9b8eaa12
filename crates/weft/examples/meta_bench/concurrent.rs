//! Part 1b: 8 pods ADDing at once (then DELing at once), each eth0 + 4 secondaries in its own
//! netns: 8 shims at once against one agent, against 8 threads running the same delegates
//! directly one by one, interleaved.

use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, ensure};
use weft_cni::CniRuntime;
use weft_cni::runtime::exec::ProcessExec;

use crate::add_del::direct_add_del_at;
use crate::world::World;
use crate::{Agent, BURST_WORKERS, Netns, PLUGIN_DIR, SECONDARIES, median_p90};

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

/// Run part 1b and print its table. `agents`: (label, agent) of each shim variant.
pub fn run(world: &World, agents: &[(&str, &Agent)], rounds: usize) -> Result<()> {
    let netns: Vec<Netns> = (0..BURST_WORKERS)
        .map(|p| Netns::new(10 + p))
        .collect::<Result<_>>()?;
    let cni = CniRuntime::with_executor([PLUGIN_DIR], ProcessExec::in_netns(world.node.path()));
    let variants = agents.len() + 1;
    let mut add: Vec<Vec<Duration>> = vec![Vec::new(); variants];
    let mut del: Vec<Vec<Duration>> = vec![Vec::new(); variants];
    let warmup = 1;
    for i in 0..warmup + rounds {
        for k in 0..variants {
            let variant = (i + k) % variants;
            let container = |p: usize| format!("mb{}c{i}v{variant}p{p}", std::process::id());
            let pod = |p: usize| format!("burst-{p}");
            let (a, d) = if variant == 0 {
                round(&|p, barrier| {
                    let env = world.env("ADD", &container(p), &netns[p].path(), &pod(p));
                    let (request, plans) = match world.plans(&agents[0].1.conf, &env, SECONDARIES) {
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
            }
        }
    }
    println!(
        "\n## 1b. {BURST_WORKERS} pods ADDing at once, then DELing at once (eth0 + {SECONDARIES} secondaries each), {rounds} rounds, interleaved\n"
    );
    println!(
        "| variant | all ADDs done, median | p90 | ADD / direct | all DELs done, median | DEL / direct |"
    );
    println!("|---|---|---|---|---|---|");
    let direct_add = median_p90(&add[0]).0;
    let direct_del = median_p90(&del[0]).0;
    let labels = std::iter::once("direct, 8 threads, each one by one (baseline)")
        .chain(agents.iter().map(|(l, _)| *l));
    for ((label, a), d) in labels.zip(&add).zip(&del) {
        let (am, ap) = median_p90(a);
        let dm = median_p90(d).0;
        println!(
            "| {label} | {am:.1} ms | {ap:.1} ms | **{:.2}×** | {dm:.1} ms | {:.2}× |",
            am / direct_add,
            dm / direct_del
        );
    }
    Ok(())
}
