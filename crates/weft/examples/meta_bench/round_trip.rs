//! Part 2: the shim's exec + round trip alone, against exec of a static no-op binary.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use base64::Engine;
use serde_json::{Value, json};

use crate::world::{World, exec_wall};
use crate::{Agent, BUSYBOX, Netns, agent_mean_ms, agent_time, http, mean_ms, median_p90};

/// The four subjects, interleaved.
const SUBJECTS: [&str; 4] = [
    "`busybox true` (static, baseline)",
    "the weft binary as `weft-cni`, the same ADD (the shim before 2026-12-04: JSON, `POST /cni`)",
    "`weft-cni` ADD of an unknown pod (the static shim: agent round trip, no delegate)",
    "the same request in process (one `POST /cni` on a blocking socket, no exec)",
];

/// Run part 2 and print its table.
pub fn run(world: &World, agent: &Agent, iterations: usize) -> Result<()> {
    let pod_ns = Netns::new(2)?;
    let rounds = iterations * 3;
    let warmup = 5;
    let mut samples: [Vec<Duration>; 4] = Default::default();
    let mut before = agent_time(agent, "ADD")?;
    for i in 0..warmup + rounds {
        if i == warmup {
            before = agent_time(agent, "ADD")?;
        }
        for k in 0..SUBJECTS.len() {
            let subject = (i + k) % SUBJECTS.len();
            let container = format!("mb{}ghost{i}", std::process::id());
            let env = world.env("ADD", &container, &pod_ns.path(), "ghost");
            let took = match subject {
                0 => {
                    let (took, out) = exec_wall(Path::new(BUSYBOX), &["true"], &BTreeMap::new(), b"")?;
                    ensure!(out.status.success(), "busybox true failed");
                    took
                }
                1 | 2 => {
                    // The agent answers an ADD of a pod no store has with CNI error 11 (retry
                    // later), having run no delegate: the shim's round trip alone.
                    let (took, out) = if subject == 1 {
                        world.full_shim(agent, &env)?
                    } else {
                        world.shim(agent, &env)?
                    };
                    let result: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
                    ensure!(
                        !out.status.success() && result["code"] == 11,
                        "ADD of an unknown pod: {}",
                        String::from_utf8_lossy(&out.stdout)
                    );
                    took
                }
                _ => {
                    let config = base64::engine::general_purpose::STANDARD.encode(&agent.conf);
                    let body = json!({"env": env, "config": config}).to_string();
                    let started = Instant::now();
                    let (status, reply) = http(&agent.socket, "POST", "/cni", body.as_bytes())?;
                    let took = started.elapsed();
                    ensure!(
                        status == 400 && reply.contains("\"code\":11"),
                        "POST /cni: {status} {reply}"
                    );
                    took
                }
            };
            if i >= warmup {
                samples[subject].push(took);
            }
        }
    }
    // Three of the four subjects were ADDs on the agent: its mean time per ADD.
    let inside = agent_mean_ms(before, agent_time(agent, "ADD")?);
    ensure!(
        pod_ns.link_names()? == ["lo"],
        "an unknown pod's ADD attached something"
    );

    println!("\n## 2. Shim exec + round trip, {rounds} rounds, interleaved\n");
    println!("| exec | median | p90 | median − busybox true |");
    println!("|---|---|---|---|");
    let (base, _) = median_p90(&samples[0]);
    for (name, s) in SUBJECTS.iter().zip(&samples) {
        let (median, p90) = median_p90(s);
        println!(
            "| {name} | {median:.2} ms | {p90:.2} ms | **{:+.2} ms** |",
            median - base
        );
    }
    println!(
        "\nAgent's own time per such ADD (mean): {inside:.2} ms; shim wall mean {:.2} ms.",
        mean_ms(&samples[2])
    );
    Ok(())
}
