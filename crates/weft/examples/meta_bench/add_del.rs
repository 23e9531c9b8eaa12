//! Part 1: ADD+DEL of a pod with eth0 + 4 secondaries, shim → agent against the same delegates
//! run directly one by one, interleaved.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use weft_cni::runtime::exec::ProcessExec;
use weft_cni::{CniResult, CniRuntime, Delegate};
use weft_meta::executor::runtime_conf;
use weft_meta::{AttachmentRequest, DelegatePlan};

use crate::kube::{WRITER_POD_SET, Writer};
use crate::world::{self, World};
use crate::{Agent, Netns, PLUGIN_DIR, SECONDARIES, agent_mean_ms, agent_time, cpu_ms, mean_ms, median_p90};

/// What one ADD+DEL took; `master` is the eth0 (cluster network) ADD alone, direct only.
struct Timing {
    add: Duration,
    del: Duration,
    master: Option<Duration>,
}

/// The delegates of `plans`, parsed.
fn delegates_of(plans: &[DelegatePlan]) -> Result<Vec<Delegate>> {
    let delegates = plans
        .iter()
        .map(|p| Delegate::from_bytes(p.config.text().as_bytes()))
        .collect::<Result<_, _>>()?;
    Ok(delegates)
}

/// The direct runner's plugin executor: plugins are spawned (`posix_spawn`, no fork of this
/// process) by a thread that entered the node netns ([`enter_node_netns`]), as a runtime in
/// the node's netns execs them. Forking the bench from `pre_exec` instead made every plugin
/// cost the runner a copy of this process's page tables: a slower baseline than any runtime.
pub fn direct_cni() -> CniRuntime<ProcessExec> {
    CniRuntime::with_executor([PLUGIN_DIR], ProcessExec::default())
}

/// Move the calling thread (a short-lived one of its own: never the main thread, whose later
/// commands must stay in the host netns) into the node netns; what it spawns starts there.
pub fn enter_node_netns(world: &World) -> Result<()> {
    let node = std::fs::File::open(world.node.path())?;
    nix::sched::setns(&node, nix::sched::CloneFlags::CLONE_NEWNET)?;
    Ok(())
}

/// ADD then DEL of the delegates one by one, as a runtime would without a meta-plugin;
/// `after_add` is told the ADD's results the moment it is done (the runner that writes).
fn direct_add_del(
    cni: &CniRuntime<ProcessExec>,
    request: &AttachmentRequest,
    plans: &[DelegatePlan],
    after_add: &mut dyn FnMut(&[CniResult]),
) -> Result<Timing> {
    let conf = |plan: &DelegatePlan| runtime_conf(request, plan, plan.cni_args.clone());
    let delegates = delegates_of(plans)?;
    let started = Instant::now();
    let mut master = None;
    let mut results: Vec<CniResult> = Vec::new();
    for (d, p) in delegates.iter().zip(plans) {
        results.push(d.add(cni, &conf(p))?);
        master.get_or_insert_with(|| started.elapsed());
    }
    after_add(&results);
    let add = started.elapsed();
    let started = Instant::now();
    for ((d, p), r) in delegates.iter().zip(plans).zip(&results).rev() {
        d.del(cni, &conf(p), Some(r))?;
    }
    Ok(Timing {
        add,
        del: started.elapsed(),
        master,
    })
}

/// [`direct_add_del`] for one of several pods at once: ADD, then `barrier` (every pod has
/// ADDed, failed or not), then DEL. Returns when the ADD and the DEL ended.
pub fn direct_add_del_at(
    cni: &CniRuntime<ProcessExec>,
    request: &AttachmentRequest,
    plans: &[DelegatePlan],
    barrier: &std::sync::Barrier,
) -> Result<(Instant, Instant)> {
    let conf = |plan: &DelegatePlan| runtime_conf(request, plan, plan.cni_args.clone());
    let add = || -> Result<(Vec<Delegate>, Vec<CniResult>)> {
        let delegates = delegates_of(plans)?;
        let mut results = Vec::new();
        for (d, p) in delegates.iter().zip(plans) {
            results.push(d.add(cni, &conf(p))?);
        }
        Ok((delegates, results))
    };
    let added = add();
    let added_at = Instant::now();
    barrier.wait();
    let (delegates, results) = added?;
    for ((d, p), r) in delegates.iter().zip(plans).zip(&results).rev() {
        d.del(cni, &conf(p), Some(r))?;
    }
    Ok((added_at, Instant::now()))
}

/// The samples of one variant.
#[derive(Default)]
struct Samples {
    add: Vec<Duration>,
    del: Vec<Duration>,
    total: Vec<Duration>,
    master: Vec<Duration>,
}

impl Samples {
    fn push(&mut self, timing: Timing) {
        self.add.push(timing.add);
        self.del.push(timing.del);
        self.total.push(timing.add + timing.del);
        self.master.extend(timing.master);
    }
}

/// The network-status and the per-pod `AddedInterface` message a weft agent writes for an ADD
/// of `plans` with `results`.
fn status_of(plans: &[DelegatePlan], results: &[CniResult]) -> (String, String) {
    let statuses: Vec<_> = plans
        .iter()
        .zip(results)
        .flat_map(|(plan, result)| {
            weft_netconf::network_statuses(result, &plan.display_name, plan.is_master, None)
        })
        .collect();
    let message: Vec<String> = statuses
        .iter()
        .map(weft::agent::pod_events::added_message)
        .collect();
    (
        weft_netconf::format_network_status_annotation(&statuses),
        message.join("; "),
    )
}

/// Run part 1 and print its tables. `agents`: (label, agent) of each shim variant; with
/// `writer`, a last variant: the direct runner making an agent's API writes for each ADD.
pub fn run(
    world: &World,
    agents: &[(&str, &Agent)],
    writer: Option<&Writer>,
    iterations: usize,
) -> Result<()> {
    let pod_ns = Netns::new(1)?;
    let cni = direct_cni();
    let warmup = 2;
    let writes_variant = agents.len() + 1;
    let variants = agents.len() + 1 + usize::from(writer.is_some());
    let mut samples: Vec<Samples> = (0..variants).map(|_| Samples::default()).collect();
    let mut agent_before = Vec::new();
    let mut direct_cpu = 0.0;
    for i in 0..warmup + iterations {
        if i == warmup {
            for (_, agent) in agents {
                agent_before.push((
                    agent_time(agent, "ADD")?,
                    agent_time(agent, "DEL")?,
                    cpu_ms(agent.pid())?,
                ));
            }
        }
        // Rotate the order every iteration so drift and "who runs after whom" even out.
        for k in 0..variants {
            let variant = (i + k) % variants;
            let container = format!("mb{}i{i}v{variant}", std::process::id());
            let env = world.env("ADD", &container, &pod_ns.path(), "bench");
            let timing = if variant == 0 || variant == writes_variant {
                let (request, plans) = world.plans(&agents[0].1.conf, &env, SECONDARIES)?;
                ensure!(plans.len() == 1 + SECONDARIES as usize, "{} plans", plans.len());
                let cpu_before = cpu_ms(std::process::id())?;
                let mut pending = None;
                let mut after_add = |results: &[CniResult]| {
                    if let (true, Some(writer)) = (variant == writes_variant, writer) {
                        let (value, message) = status_of(&plans, results);
                        pending = Some(writer.write(
                            &world::run_pod(&format!("{WRITER_POD_SET}-bench")),
                            value,
                            message,
                        ));
                    }
                };
                // On a thread of its own that enters the node netns (see `direct_cni`).
                let timing = std::thread::scope(|scope| {
                    scope
                        .spawn(|| {
                            enter_node_netns(world)?;
                            direct_add_del(&cni, &request, &plans, &mut after_add)
                        })
                        .join()
                        .map_err(|_| anyhow::anyhow!("the direct runner's thread panicked"))?
                })?;
                if i >= warmup && variant == 0 {
                    direct_cpu += cpu_ms(std::process::id())? - cpu_before;
                }
                // Not into the next variant's window (the agents' writes are not waited for:
                // they are done during their DEL).
                if let Some(pending) = pending {
                    pending.wait();
                }
                timing
            } else {
                let agent = agents[variant - 1].1;
                let env = world.env("ADD", &container, &pod_ns.path(), &agent.pod("bench"));
                let add = world.shim_ok(agent, &env)?;
                let del_env = world.env("DEL", &container, &pod_ns.path(), &agent.pod("bench"));
                let del = world.shim_ok(agent, &del_env)?;
                Timing {
                    add,
                    del,
                    master: None,
                }
            };
            if i == warmup {
                let left = pod_ns.link_names()?;
                ensure!(
                    left == ["lo"],
                    "variant {variant}: left in the pod netns: {left:?}"
                );
            }
            if i >= warmup {
                samples[variant].push(timing);
            }
        }
    }
    let left = pod_ns.link_names()?;
    ensure!(left == ["lo"], "left behind in the pod netns: {left:?}");

    println!(
        "\n## 1. ADD+DEL, pod with eth0 + {SECONDARIES} secondaries (bridge + host-local), {iterations} iterations, interleaved\n"
    );
    println!("| variant | ADD+DEL median | p90 | ADD median | DEL median | median / direct |");
    println!("|---|---|---|---|---|---|");
    let (direct_median, _) = median_p90(&samples[0].total);
    let labels = std::iter::once("direct, one by one, spawned in the node netns (baseline)")
        .chain(agents.iter().map(|(l, _)| *l))
        .chain(writer.map(|_| "direct, making an agent's two API writes after each ADD (not waited for)"));
    for (label, s) in labels.zip(&samples) {
        let (median, p90) = median_p90(&s.total);
        println!(
            "| {label} | {median:.1} ms | {p90:.1} ms | {:.1} ms | {:.1} ms | **{:.2}×** |",
            median_p90(&s.add).0,
            median_p90(&s.del).0,
            median / direct_median
        );
    }
    let master = median_p90(&samples[0].master).0;
    let secondaries = median_p90(&samples[0].add).0 - master;
    println!(
        "\nDirect ADD: eth0 alone {master:.1} ms, the {SECONDARIES} secondaries {secondaries:.1} ms (medians); \
         on 2 cores a concurrent ADD cannot beat about {:.1} ms (all 5 at once: `weft_meta::schedule` runs \
         the cluster network beside these secondaries).",
        (master + secondaries) / 2.0
    );
    println!(
        "\nThe direct runner's own CPU per ADD+DEL (this process: spawning, pipes, reaping the plugins): {:.1} ms.",
        direct_cpu / iterations as f64
    );
    println!(
        "\nShim wall time against the agent's own time (`weft_agent_cni_request_duration_seconds`), means:\n"
    );
    println!("| agent | verb | shim wall | agent | shim + exec + HTTP | agent CPU per ADD+DEL |");
    println!("|---|---|---|---|---|---|");
    for (a, ((label, agent), before)) in agents.iter().zip(&agent_before).enumerate() {
        let cpu = (cpu_ms(agent.pid())? - before.2) / iterations as f64;
        for (verb, wall, before) in [
            ("ADD", &samples[a + 1].add, before.0),
            ("DEL", &samples[a + 1].del, before.1),
        ] {
            let wall = mean_ms(wall);
            let inside = agent_mean_ms(before, agent_time(agent, verb)?);
            println!(
                "| {label} | {verb} | {wall:.1} ms | {inside:.1} ms | {:.1} ms | {cpu:.1} ms |",
                wall - inside
            );
        }
    }
    Ok(())
}
