//! Benchmark: ADD+DEL of a pod with eth0 + 4 secondaries (reference `bridge` + `host-local`)
//! through plan + executor (sequential, then 4 concurrent secondaries) against the same
//! delegates run directly one by one through the CNI runtime, in the same run, interleaved.
//!
//! Root only. `cargo run -p weft-meta --example executor_bench [iterations]`

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use weft_cni::runtime::exec::ProcessExec;
use weft_cni::{CniRuntime, Delegate};
use weft_meta::executor::runtime_conf;
use weft_meta::{
    AttachmentRequest, DelegatePlan, Executor, MemoryCatalog, MetaConfig, NoRouteEditor, Pod, plan_add,
};

const PLUGIN_DIR: &str = "/usr/lib/cni";

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("iproute2");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Netns(String);
impl Netns {
    fn new(name: String) -> Self {
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        Self(name)
    }
    fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }
}
impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn main() {
    let iterations: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    let pid = std::process::id();
    let host = Netns::new(format!("wt-{pid}-bench-host"));
    let state = std::env::temp_dir().join(format!("wt-{pid}-bench-ipam"));
    let bridge = |n: u32| {
        json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": format!("wtbb{n}"),
               "ipam": {"type": "host-local", "dataDir": state, "ranges": [[{"subnet": format!("10.216.{n}.0/24")}]]}})
    };
    let mut cluster = bridge(0);
    cluster["name"] = json!("cluster");
    let mut catalog = MemoryCatalog::default().with_conf_file("10-cluster.conf", &cluster.to_string());
    for n in 1..=4 {
        catalog = catalog.with_nad("ns", &format!("sec{n}"), &bridge(n).to_string());
    }
    let config = MetaConfig::parse(br#"{"cniVersion":"1.0.0","clusterNetwork":"cluster"}"#).unwrap();
    let pod = Pod {
        namespace: "ns".into(),
        name: "p".into(),
        uid: "u".into(),
        annotations: BTreeMap::from([(
            weft_netconf::NETWORKS_ANNOTATION.into(),
            "sec1,sec2,sec3,sec4".into(),
        )]),
    };
    let cni = CniRuntime::with_executor([PLUGIN_DIR], ProcessExec::in_netns(PathBuf::from(host.path())));

    let mut direct = Duration::ZERO;
    let mut sequential = Duration::ZERO;
    let mut concurrent = Duration::ZERO;
    for i in 0..iterations {
        for mode in 0..3 {
            let pod_ns = Netns::new(format!("wt-{pid}-bench-pod{i}-{mode}"));
            let request =
                AttachmentRequest::for_pod(&format!("bench{i}m{mode}"), &pod_ns.path(), "eth0", "ns", "p");
            let start = Instant::now();
            match mode {
                0 => {
                    // Baseline: the same delegates, computed once outside the timing.
                    let plans = plan_add(&config, &request, Some(&pod), &catalog).unwrap();
                    let start = Instant::now();
                    run_direct(&cni, &request, &plans);
                    direct += start.elapsed();
                    continue;
                }
                _ => {
                    let plans = plan_add(&config, &request, Some(&pod), &catalog).unwrap();
                    let executor =
                        Executor::new(&cni, &NoRouteEditor).with_parallelism(if mode == 1 { 1 } else { 4 });
                    let outcome = executor.add(&request, &plans).unwrap();
                    let cached: Vec<_> = outcome.results.into_iter().map(Some).collect();
                    executor.del(&request, &plans, &cached).unwrap();
                }
            }
            let elapsed = start.elapsed();
            if mode == 1 {
                sequential += elapsed;
            } else {
                concurrent += elapsed;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&state);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0 / iterations as f64;
    println!("iterations: {iterations} (pod with eth0 + 4 secondaries, bridge + host-local)");
    println!("direct, one by one:         {:8.1} ms per ADD+DEL", ms(direct));
    println!(
        "plan + executor, sequential: {:8.1} ms  ({:.2}x)",
        ms(sequential),
        sequential.as_secs_f64() / direct.as_secs_f64()
    );
    println!(
        "plan + executor, 4 parallel: {:8.1} ms  ({:.2}x)",
        ms(concurrent),
        concurrent.as_secs_f64() / direct.as_secs_f64()
    );
}

fn run_direct(cni: &CniRuntime<ProcessExec>, request: &AttachmentRequest, plans: &[DelegatePlan]) {
    let conf = |plan: &DelegatePlan| runtime_conf(request, plan, plan.cni_args.clone());
    let delegates: Vec<Delegate> = plans
        .iter()
        .map(|p| Delegate::from_bytes(p.config.text().as_bytes()).unwrap())
        .collect();
    let results: Vec<_> = delegates
        .iter()
        .zip(plans)
        .map(|(d, p)| d.add(cni, &conf(p)).unwrap())
        .collect();
    for ((d, p), r) in delegates.iter().zip(plans).zip(&results).rev() {
        d.del(cni, &conf(p), Some(r)).unwrap();
    }
}
