//! Benchmark: host time from QEMU start to the guest's first console report, its DHCP lease and
//! its first guest-agent line, for a 1-NIC guest (TCG, PVH kernel, weft initramfs), with the
//! lease served by weft-dhcp and, as the baseline in the same run, by dnsmasq.
//!
//! Run as root: `cargo run --release -p weft-guest --example boot_time [BOOTS]` (default 3 per
//! server, alternating).

use weft_testing as common;

use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use common::Netns;
use weft_dhcp::{ServerConfig, bind_server_socket, spawn};
use weft_guest::initramfs::DEFAULT_BUSYBOX;
use weft_guest::kernel::kernel_dir;
use weft_guest::{GuestNic, GuestSpec, RunningGuest, prepare_boot_files};

const MAC: &str = "52:54:00:77:10:01";

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Milliseconds from start to: first report, lease, first agent line.
fn boot_once(spec: &GuestSpec, netns: &str) -> Result<[u128; 3]> {
    let start = Instant::now();
    let mut guest = RunningGuest::spawn(spec, Some(netns))?;
    let mut times: [Option<u128>; 3] = [None; 3];
    while times.iter().any(Option::is_none) {
        if start.elapsed() > Duration::from_secs(60) {
            bail!("guest not ready after 60 s: {:?}", guest.report()?);
        }
        let report = guest.report()?;
        let now = start.elapsed().as_millis();
        let reached = [
            report.booted,
            report.lease("eth0").is_some(),
            report
                .agent_interface("eth0")
                .is_some_and(|ga| !ga.addresses.is_empty()),
        ];
        for (slot, reached) in times.iter_mut().zip(reached) {
            if reached && slot.is_none() {
                *slot = Some(now);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    guest.stop()?;
    Ok(times.map(|t| t.unwrap_or_default()))
}

fn main() -> Result<()> {
    let boots: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let dir = tempfile::tempdir()?;
    let boot = prepare_boot_files(&kernel_dir(), DEFAULT_BUSYBOX.as_ref(), dir.path())?;
    let launcher = Netns::new("gb");
    launcher.ip(&["link", "add", "wt-br0", "type", "bridge"]);
    launcher.ip(&["addr", "add", "10.0.2.1/24", "dev", "wt-br0"]);
    launcher.ip(&["link", "set", "wt-br0", "up"]);
    launcher.ip(&["tuntap", "add", "dev", "wt-tap0", "mode", "tap"]);
    launcher.ip(&["link", "set", "wt-tap0", "master", "wt-br0", "up"]);
    let mut spec = GuestSpec::new("bench", &boot.kernel.vmlinux, &boot.initrd, dir.path());
    spec.nics = vec![GuestNic::virtio("wt-tap0", MAC)];
    let mut config = ServerConfig::new("10.0.2.2/24".parse()?, Ipv4Addr::new(10, 0, 2, 1));
    config.router = Some(Ipv4Addr::new(10, 0, 2, 1));
    config.mtu = 1400;

    let (mut weft, mut dnsmasq) = (Vec::new(), Vec::new());
    for _ in 0..boots {
        let socket = launcher.enter(|| bind_server_socket("wt-br0"))?;
        let server = spawn(socket, config.clone())?;
        weft.push(boot_once(&spec, &launcher.name)?);
        server.stop()?;
        let daemon = Daemon(
            Command::new("ip")
                .args(["netns", "exec", &launcher.name, "dnsmasq", "--keep-in-foreground"])
                .args([
                    "--conf-file=/dev/null",
                    "--port=0",
                    "--bind-interfaces",
                    "--interface=wt-br0",
                ])
                .args([
                    "--except-interface=lo",
                    "--dhcp-range=10.0.2.2,10.0.2.2,255.255.255.0,999d",
                ])
                .arg(format!("--dhcp-host={MAC},10.0.2.2"))
                .args([
                    "--dhcp-option=option:router,10.0.2.1",
                    "--dhcp-option=option:mtu,1400",
                ])
                .arg(format!(
                    "--dhcp-leasefile={}",
                    dir.path().join("leases").display()
                ))
                .args(["--pid-file=", "--dhcp-authoritative", "--user=root"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        std::thread::sleep(Duration::from_millis(300));
        dnsmasq.push(boot_once(&spec, &launcher.name)?);
        drop(daemon);
    }
    println!("| DHCP server | boots | first report ms | lease ms | agent line ms |");
    println!("|---|---|---|---|---|");
    for (name, runs) in [("weft-dhcp", &weft), ("dnsmasq", &dnsmasq)] {
        let median = |i: usize| {
            let mut values: Vec<u128> = runs.iter().map(|r| r[i]).collect();
            values.sort();
            values[values.len() / 2]
        };
        println!(
            "| {name} | {} | {} | {} | {} |",
            runs.len(),
            median(0),
            median(1),
            median(2)
        );
    }
    Ok(())
}
