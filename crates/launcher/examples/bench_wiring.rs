//! Benchmark: wiring 1 masquerade + 3 bridge NICs (discover, plan, apply, then teardown) in a
//! fresh netns with the netlink backend vs the same steps as `ip`/`nft`/`sysctl` commands.
//!
//! Run as root: `cargo run --release -p weft-launcher --example bench_wiring [ITERATIONS]`

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use weft_launcher::exec::{CommandBackend, NetlinkBackend, NetnsBackend, apply, teardown};
use weft_launcher::{Binding, NatOptions, TapOwner, TapSettings, VmNetworkCidrs, WiringRequest, plan_wiring};

const SECONDARIES: [&str; 3] = ["podb1f51a511f1", "pod16477688c0e", "podba4788b226a"];

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.0]);
    }
}

fn setup(name: &str) -> Result<Netns> {
    ip(&["netns", "add", name])?;
    let ns = Netns(name.to_string());
    let n = |args: &[&str]| {
        let mut full = vec!["-n", name];
        full.extend_from_slice(args);
        ip(&full)
    };
    for (i, pod) in ["eth0"].iter().chain(SECONDARIES.iter()).enumerate() {
        let peer = format!("wt-peer{i}");
        n(&["link", "add", pod, "type", "veth", "peer", "name", &peer])?;
        n(&["link", "set", &peer, "up"])?;
        n(&["link", "set", pod, "up"])?;
        let address = format!("10.{}.0.5/24", 100 + i);
        let gateway = format!("10.{}.0.1", 100 + i);
        n(&["addr", "add", &address, "dev", pod])?;
        let destination = if i == 0 {
            "default".to_string()
        } else {
            format!("10.{}.0.0/16", 200 + i)
        };
        n(&["route", "add", &destination, "via", &gateway, "dev", pod])?;
    }
    Ok(ns)
}

/// Wire all four NICs, then tear them down; returns the time of each phase.
fn wire_and_unwire(backend: &mut dyn NetnsBackend) -> Result<(Duration, Duration)> {
    let start = Instant::now();
    let mut plans = Vec::new();
    for (index, pod) in ["eth0"].iter().chain(SECONDARIES.iter()).enumerate() {
        let binding = if index == 0 {
            Binding::Masquerade(NatOptions::default())
        } else {
            Binding::Bridge
        };
        let pod_link = backend.discover(pod)?.context("pod link missing")?;
        let plan = plan_wiring(&WiringRequest {
            binding,
            pod_iface: pod.to_string(),
            primary: index == 0,
            interface_index: index,
            pod_link,
            guest_mac: None,
            vm_cidrs: VmNetworkCidrs::default(),
            tap: TapSettings {
                owner: TapOwner { uid: 107, gid: 107 },
                queues: 1,
            },
        })?;
        apply(backend, &plan)?;
        plans.push(plan);
    }
    let wired = start.elapsed();
    let start = Instant::now();
    for plan in plans.iter().rev() {
        teardown(backend, plan)?;
    }
    Ok((wired, start.elapsed()))
}

/// Median apply and teardown times.
fn measure(iterations: usize, backend: &mut dyn NetnsBackend) -> Result<(Duration, Duration)> {
    wire_and_unwire(backend)?; // warm-up
    let (mut applies, mut teardowns) = (Vec::new(), Vec::new());
    for _ in 0..iterations {
        let (apply, teardown) = wire_and_unwire(backend)?;
        applies.push(apply);
        teardowns.push(teardown);
    }
    applies.sort();
    teardowns.sort();
    Ok((applies[iterations / 2], teardowns[iterations / 2]))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Timed<'a> {
    inner: &'a mut dyn NetnsBackend,
    per_op: std::collections::BTreeMap<String, Duration>,
}

impl NetnsBackend for Timed<'_> {
    fn run(&mut self, op: &weft_launcher::Op) -> Result<(), weft_launcher::exec::BackendError> {
        let start = Instant::now();
        let result = self.inner.run(op);
        let label = weft_launcher::exec::op_label(op)
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        *self.per_op.entry(label).or_default() += start.elapsed();
        result
    }
    fn read_sysctl(&mut self, key: &str) -> Result<String, weft_launcher::exec::BackendError> {
        let start = Instant::now();
        let r = self.inner.read_sysctl(key);
        *self.per_op.entry("read sysctl".into()).or_default() += start.elapsed();
        r
    }
    fn discover(
        &mut self,
        name: &str,
    ) -> Result<Option<weft_launcher::PodLink>, weft_launcher::exec::BackendError> {
        let start = Instant::now();
        let r = self.inner.discover(name);
        *self.per_op.entry("discover".into()).or_default() += start.elapsed();
        r
    }
}

fn main() -> Result<()> {
    if std::env::var_os("WEFT_BENCH_BREAKDOWN").is_some() {
        let ns = setup(&format!("wt-bench-{}", std::process::id()))?;
        let path = format!("/run/netns/{}", ns.0);
        let mut inner = NetlinkBackend::open(&path)?;
        let mut timed = Timed {
            inner: &mut inner,
            per_op: Default::default(),
        };
        for _ in 0..5 {
            wire_and_unwire(&mut timed)?;
        }
        for (op, t) in &timed.per_op {
            println!("{op:30} {:8.2} ms per round", t.as_secs_f64() * 1e3 / 5.0);
        }
        return Ok(());
    }
    let iterations: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20);
    let ns = setup(&format!("wt-bench-{}", std::process::id()))?;
    let path = format!("/run/netns/{}", ns.0);
    let (netlink_apply, netlink_teardown) = measure(iterations, &mut NetlinkBackend::open(&path)?)?;
    let (command_apply, command_teardown) = measure(iterations, &mut CommandBackend::new(&path))?;
    println!("1 masquerade + 3 bridge NICs in one netns, median of {iterations} (ms):");
    println!("  {:<44} {:>8} {:>9}", "backend", "wire", "teardown");
    println!(
        "  {:<44} {:>8.2} {:>9.2}",
        "netlink (weft-host; nft -f once per NAT op)",
        ms(netlink_apply),
        ms(netlink_teardown)
    );
    println!(
        "  {:<44} {:>8.2} {:>9.2}",
        "ip/nft/sysctl commands via nsenter",
        ms(command_apply),
        ms(command_teardown)
    );
    println!(
        "  speed-up: wire {:.1}x, teardown {:.1}x",
        ms(command_apply) / ms(netlink_apply),
        ms(command_teardown) / ms(netlink_teardown)
    );
    Ok(())
}
