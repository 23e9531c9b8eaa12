//! The controller at scale (issue 9): 10,000 VMs × 2 networks allowing persistent IPs in the
//! fake API (over TCP on 127.0.0.1, no root needed), `weft controller --roles beside-kubevirt`
//! run against it as a process. Measured: the time until all 20,000 IPAMClaims exist, the
//! requests made, peak and steady RSS (`/proc/<pid>/status` VmHWM / VmRSS) and CPU over 30 s of
//! steady state (`/proc/<pid>/stat` utime + stime). Targets asserted: ≤ 100 MiB, steady state
//! ≈ 0 % CPU and no requests besides the open watches.
//!
//! A benchmark (minutes, much memory in the test process for the fake API's store):
//! `cargo nextest run -p weft --release --test controller_scale --run-ignored all --no-capture`
//! (`WEFT_SCALE_VMS` changes the count).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use weft_store::fake_api::FakeApiServer;
use weft_store::{ListOptions, MemoryStore, Object, Resource};

/// VMs per namespace (each namespace has its own two NADs).
const PER_NAMESPACE: usize = 1000;

fn obj(value: serde_json::Value) -> Object {
    serde_json::from_value(value).unwrap()
}

fn vm(ns: &str, name: &str) -> Object {
    obj(json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "scale", "tier": "bench"}},
        "spec": {"runStrategy": "Always", "template": {
            "metadata": {"labels": {"kubevirt.io/vm": name}},
            "spec": {
                "domain": {"cpu": {"cores": 1}, "memory": {"guest": "1Gi"},
                    "devices": {
                        "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                        "interfaces": [{"name": "default", "masquerade": {}},
                                       {"name": "blue", "bridge": {}},
                                       {"name": "green", "bridge": {}}]}},
                "networks": [{"name": "default", "pod": {}},
                             {"name": "blue", "multus": {"networkName": "blue"}},
                             {"name": "green", "multus": {"networkName": "green"}}],
                "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:40"}}]}}}}))
}

fn nad(ns: &str, name: &str, range: &str) -> Object {
    let config = json!({"cniVersion": "1.0.0", "name": format!("{ns}-{name}"), "type": "bridge",
        "bridge": format!("br-{name}"), "allowPersistentIPs": true,
        "ipam": {"type": "weft-ipam", "range": range}});
    obj(
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": ns}, "spec": {"config": config.to_string()}}),
    )
}

/// (VmHWM, VmRSS) in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// utime + stime in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// /proc counts CPU time in USER_HZ ticks, 100 per second on every Linux architecture.
fn ticks_per_second() -> u64 {
    100
}

#[test]
#[ignore = "benchmark (minutes): cargo nextest run -p weft --release --test controller_scale --run-ignored all --no-capture"]
fn controller_with_10000_vms_converges_within_memory_and_idles() {
    let vms: usize = std::env::var("WEFT_SCALE_VMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let objects = MemoryStore::shared();
    let api = FakeApiServer::new(objects.clone(), controller_kinds());
    let tcp = {
        let _entered = runtime.enter();
        api.serve_tcp().unwrap()
    };
    let nads = weft_netconf::NetworkAttachmentDefinition::resource_type();
    let vm_type = weft_vm::VirtualMachine::resource_type();
    let namespaces = vms.div_ceil(PER_NAMESPACE);
    let filled = Instant::now();
    runtime.block_on(async {
        for n in 0..namespaces {
            let ns = format!("scale-{n}");
            objects
                .create(&nads, nad(&ns, "blue", &format!("10.{}.0.0/16", 100 + n % 100)))
                .await
                .unwrap();
            objects
                .create(&nads, nad(&ns, "green", &format!("10.{}.0.0/16", 200 + n % 50)))
                .await
                .unwrap();
            for i in 0..PER_NAMESPACE.min(vms - n * PER_NAMESPACE) {
                objects
                    .create(&vm_type, vm(&ns, &format!("vm-{i:05}")))
                    .await
                    .unwrap();
            }
        }
    });
    eprintln!("filled the fake API with {vms} VMs in {:?}", filled.elapsed());

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    tcp.write_kubeconfig(&kubeconfig).unwrap();
    let log = dir.path().join("controller.log");
    api.clear_requests();
    let started = Instant::now();
    let controller = KillOnDrop(
        std::process::Command::new(weft_bin())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--state-dir")
            .arg(dir.path())
            .args(["--log", "warn", "controller", "--roles", "beside-kubevirt"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let pid = controller.0.id();
    let claims = weft_ipam::IpamClaim::resource_type();
    let want = 2 * vms;
    let count = || {
        runtime
            .block_on(objects.list(&claims, None, &ListOptions::default()))
            .unwrap()
            .items
            .len()
    };
    let deadline = started + Duration::from_secs(600);
    let mut peak_while_converging = 0;
    loop {
        let made = count();
        peak_while_converging = peak_while_converging.max(memory_kib(pid).0);
        if made >= want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{made}/{want} claims after 10 min\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let converged = started.elapsed();
    let requests = api.requests();
    let watches = requests.iter().filter(|r| r.contains("watch=true")).count();
    let posts = requests.iter().filter(|r| r.starts_with("POST ")).count();
    let others: Vec<&String> = requests
        .iter()
        .filter(|r| !r.contains("watch=true") && !r.starts_with("POST "))
        .collect();
    let (hwm_converged, rss_converged) = memory_kib(pid);

    // Steady state: the claims' own watch events are reconciled (each checks its VM) after the
    // last claim is made; wait until the controller spends under 2 % CPU over 2 s (bounded),
    // then measure 30 s with nothing changing.
    let quiet_deadline = Instant::now() + Duration::from_secs(600);
    let settled = loop {
        let before = cpu_ticks(pid);
        std::thread::sleep(Duration::from_secs(2));
        if cpu_ticks(pid) - before <= 4 {
            break started.elapsed();
        }
        assert!(Instant::now() < quiet_deadline, "the controller never went quiet");
    };
    api.clear_requests();
    let ticks = ticks_per_second();
    let (cpu0, t0) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(30));
    let (cpu1, window) = (cpu_ticks(pid), t0.elapsed());
    let steady_requests: Vec<String> = api
        .requests()
        .into_iter()
        .filter(|r| !r.contains("watch=true"))
        .collect();
    let (hwm, rss) = memory_kib(pid);
    let cpu_seconds = (cpu1 - cpu0) as f64 / ticks as f64;
    let cpu_percent = 100.0 * cpu_seconds / window.as_secs_f64();
    let warnings = std::fs::read_to_string(&log).unwrap_or_default();
    eprintln!(
        "controller_scale: {vms} VMs, {want} claims in {converged:.2?}, quiet after {settled:.2?}; requests: {posts} POST, {watches} watch, {} other ({:?}); \
         RSS at convergence {} KiB (peak {} KiB); steady: RSS {} KiB, peak {} KiB, CPU {cpu_seconds:.2} s in {window:.1?} ({cpu_percent:.2} %), \
         {} requests besides watches; log lines: {}",
        others.len(),
        others.iter().take(20).collect::<Vec<_>>(),
        rss_converged,
        hwm_converged.max(peak_while_converging),
        rss,
        hwm,
        steady_requests.len(),
        warnings.lines().count(),
    );
    assert_eq!(posts, want, "one POST per claim: {others:?}");
    assert!(steady_requests.is_empty(), "idle requests: {steady_requests:?}");
    assert!(hwm <= 100 * 1024, "peak RSS {hwm} KiB > 100 MiB");
    assert!(cpu_percent < 1.0, "steady CPU {cpu_percent:.2} %");
    let _ = tcp;
}
