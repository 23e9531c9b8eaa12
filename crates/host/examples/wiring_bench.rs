//! Wall-clock comparison of a launcher-like wiring sequence done through
//! `weft-host` (one netlink socket per namespace, TAP ioctls) and the same
//! steps as `ip` commands. Needs root; creates and deletes `wt-bench-*`
//! namespaces.
//!
//! `cargo run -p weft-host --example wiring_bench [-- ITERATIONS]`

use std::process::Command;
use std::time::{Duration, Instant};

use weft_host::{Netlink, Netns, Route, TapOptions, create_tap};

/// Wiring of one VM NIC in a pod namespace (bridge binding shape): a
/// bridge, a TAP, a veth pair, ports, addresses, a default route, all up.
fn wire_with_netlink(pod: &Netns, nl: &mut Netlink) -> anyhow::Result<()> {
    nl.create_bridge("k6t-eth0")?;
    pod.run_in(|| {
        create_tap(
            "tap0",
            &TapOptions {
                multi_queue: true,
                owner: Some(107),
                ..TapOptions::default()
            },
        )
    })??;
    nl.create_veth("eth0", "eth0-peer", None)?;
    nl.set_master("tap0", "k6t-eth0")?;
    nl.set_master("eth0", "k6t-eth0")?;
    nl.set_bridge_port_learning("eth0", false)?;
    nl.set_mtu("tap0", 1450)?;
    for link in ["k6t-eth0", "tap0", "eth0", "eth0-peer"] {
        nl.set_up(link)?;
    }
    nl.add_address("k6t-eth0", "169.254.75.10/32".parse()?)?;
    nl.add_address("eth0-peer", "10.0.2.2/24".parse()?)?;
    let peer = nl.route_dev("eth0-peer")?;
    nl.add_route(&Route::default_via("10.0.2.1".parse()?).dev(peer))?;
    Ok(())
}

/// Teardown: dominated by the kernel's per-device unregistration (RCU
/// grace periods), the same for both ways.
fn unwire_with_netlink(nl: &mut Netlink) -> anyhow::Result<()> {
    nl.delete_link("tap0")?;
    nl.delete_link("eth0")?;
    nl.delete_link("k6t-eth0")?;
    Ok(())
}

fn run_ip(pod: &str, steps: &[&[&str]]) -> anyhow::Result<()> {
    for step in steps {
        let status = Command::new("ip").args(["-n", pod]).args(*step).status()?;
        anyhow::ensure!(status.success(), "ip {step:?} failed");
    }
    Ok(())
}

fn wire_with_ip(pod: &str) -> anyhow::Result<()> {
    let steps: &[&[&str]] = &[
        &["link", "add", "k6t-eth0", "type", "bridge"],
        &[
            "tuntap",
            "add",
            "tap0",
            "mode",
            "tap",
            "multi_queue",
            "vnet_hdr",
            "user",
            "107",
        ],
        &["link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"],
        &["link", "set", "tap0", "master", "k6t-eth0"],
        &["link", "set", "eth0", "master", "k6t-eth0"],
        &["link", "set", "eth0", "type", "bridge_slave", "learning", "off"],
        &["link", "set", "tap0", "mtu", "1450"],
        &["link", "set", "k6t-eth0", "up"],
        &["link", "set", "tap0", "up"],
        &["link", "set", "eth0", "up"],
        &["link", "set", "eth0-peer", "up"],
        &["addr", "add", "169.254.75.10/32", "dev", "k6t-eth0"],
        &["addr", "add", "10.0.2.2/24", "dev", "eth0-peer"],
        &["route", "add", "default", "via", "10.0.2.1", "dev", "eth0-peer"],
    ];
    run_ip(pod, steps)
}

fn unwire_with_ip(pod: &str) -> anyhow::Result<()> {
    run_ip(
        pod,
        &[
            &["link", "del", "tap0"],
            &["link", "del", "eth0"],
            &["link", "del", "k6t-eth0"],
        ],
    )
}

/// Mean setup and teardown time of `iterations` runs.
fn measure(
    iterations: u32,
    mut setup: impl FnMut() -> anyhow::Result<()>,
    mut teardown: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<(Duration, Duration)> {
    let (mut setup_total, mut teardown_total) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..iterations {
        let start = Instant::now();
        setup()?;
        setup_total += start.elapsed();
        let start = Instant::now();
        teardown()?;
        teardown_total += start.elapsed();
    }
    Ok((setup_total / iterations, teardown_total / iterations))
}

fn main() -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return Ok(());
    }
    let iterations: u32 = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(20);
    let name = format!("wt-bench-{}", std::process::id());
    let pod = Netns::create_named(&name)?;
    let result = (|| -> anyhow::Result<_> {
        let nl = std::cell::RefCell::new(Netlink::open_in(&pod)?);
        let ours = measure(
            iterations,
            || wire_with_netlink(&pod, &mut nl.borrow_mut()),
            || unwire_with_netlink(&mut nl.borrow_mut()),
        )?;
        let batched = measure(
            iterations,
            || {
                let mut nl = nl.borrow_mut();
                wire_with_netlink(&pod, &mut nl)?;
                for link in ["tap0", "eth0", "k6t-eth0"] {
                    nl.set_group(link, 7)?;
                }
                Ok(())
            },
            || Ok(nl.borrow_mut().delete_links_in_group(7)?),
        )?;
        let theirs = measure(iterations, || wire_with_ip(&name), || unwire_with_ip(&name))?;
        Ok((ours, batched.1, theirs))
    })();
    Netns::delete_named(&name)?;
    let ((setup, teardown), group_teardown, (ip_setup, ip_teardown)) = result?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("mean of {iterations} runs        weft-host      ip     ratio");
    println!(
        "setup (14 steps)     {:>9.3} ms {:>7.3} ms {:>6.1}x",
        ms(setup),
        ms(ip_setup),
        ms(ip_setup) / ms(setup)
    );
    println!(
        "teardown (3 deletes) {:>9.3} ms {:>7.3} ms {:>6.1}x",
        ms(teardown),
        ms(ip_teardown),
        ms(ip_teardown) / ms(teardown)
    );
    println!(
        "teardown (1 group)   {:>9.3} ms {:>7.3} ms {:>6.1}x",
        ms(group_teardown),
        ms(ip_teardown),
        ms(ip_teardown) / ms(group_teardown)
    );
    Ok(())
}
