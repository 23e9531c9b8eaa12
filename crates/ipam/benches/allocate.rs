//! In-process allocation throughput: N concurrent tasks allocating from one pool, on the
//! in-memory and the embedded (SQLite) store. Baseline in the same run: bare `create`s of
//! reservation-sized objects on the same store (the most an allocator doing one write per
//! allocation could reach).
//!
//! `cargo bench -p weft-ipam --bench allocate -- [tasks] [allocations per task]`

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use weft_ipam::allocator::list_reservations;
use weft_ipam::reservation::{IpReservation, IpReservationSpec};
use weft_ipam::{Holder, IpamConfig, allocate, parse_network_config, release};
use weft_store::{Api, MemoryStore, SqliteStore, Store};

fn config(range: &str) -> IpamConfig {
    parse_network_config(&json!({"name": "bench", "ipam": {"type": "weft-ipam", "range": range}}))
        .expect("config")
}

fn holder(id: String) -> Holder {
    Holder {
        container_id: id,
        ifname: "net1".into(),
        pod_ref: "ns/pod".into(),
        ..Default::default()
    }
}

/// Run `per_task` operations in each of `tasks` tasks; returns operations per second.
async fn run<F, Fut>(tasks: usize, per_task: usize, op: F) -> f64
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let op = op.clone();
            tokio::spawn(async move {
                for i in 0..per_task {
                    op(t, i).await;
                }
            })
        })
        .collect();
    for h in handles {
        h.await.expect("task");
    }
    (tasks * per_task) as f64 / started.elapsed().as_secs_f64()
}

async fn scenario(name: &str, make: impl Fn() -> Arc<dyn Store>, tasks: usize, per_task: usize) {
    // Baseline: bare creates of the same objects, no allocator logic.
    let store = make();
    let api: Arc<Api<IpReservation>> = Arc::new(Api::all(store.clone()));
    let baseline = run(tasks, per_task, move |t, i| {
        let api = api.clone();
        async move {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + (t * 1_000_000 + i) as u32);
            let r = IpReservation::new(IpReservationSpec {
                network: "bench".into(),
                ip: Some(ip.into()),
                container_id: format!("c{t}-{i}"),
                ifname: "net1".into(),
                ..Default::default()
            });
            api.create(&r).await.expect("create");
        }
    })
    .await;

    // Allocations from a sparse pool (a /8).
    let store = make();
    let c = Arc::new(config("10.0.0.0/8"));
    let (s, cc) = (store.clone(), c.clone());
    let sparse = run(tasks, per_task, move |t, i| {
        let (s, c) = (s.clone(), cc.clone());
        async move {
            allocate(&s, &c, &holder(format!("c{t}-{i}")), &[], None)
                .await
                .expect("allocate");
        }
    })
    .await;
    let held = list_reservations(&store, "bench").await.expect("list");
    let distinct: HashSet<_> = held.iter().filter_map(|r| r.spec.ip).collect();
    assert_eq!(
        (held.len(), distinct.len()),
        (tasks * per_task, tasks * per_task),
        "no duplicates"
    );

    // ADD+DEL churn on a /24 (occupancy stays at most `tasks`).
    let store = make();
    let c = Arc::new(config("10.1.0.0/24"));
    let (s, cc) = (store.clone(), c.clone());
    let churn = run(tasks, per_task / 2, move |t, i| {
        let (s, c) = (s.clone(), cc.clone());
        async move {
            let id = format!("c{t}-{i}");
            allocate(&s, &c, &holder(id.clone()), &[], None)
                .await
                .expect("allocate");
            release(&s, &c, &id, "net1").await.expect("release");
        }
    })
    .await;

    // Filling a /22 to the last address (dense: the list fallback does the end game).
    let store = make();
    let c = Arc::new(config("10.2.0.0/22"));
    let usable: usize = 1022;
    let (s, cc) = (store.clone(), c.clone());
    let fill = run(tasks, usable.div_ceil(tasks), move |t, i| {
        let (s, c) = (s.clone(), cc.clone());
        async move {
            let _ = allocate(&s, &c, &holder(format!("c{t}-{i}")), &[], None).await;
        }
    })
    .await;
    let held = list_reservations(&store, "bench").await.expect("list").len();
    assert_eq!(held, usable, "the pool is full, every address once");

    println!(
        "| {name} | {baseline:.0} | {sparse:.0} | {:.2} | {churn:.0} | {fill:.0} |",
        sparse / baseline
    );
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let tasks = args.first().copied().unwrap_or(16);
    let per_task = args.get(1).copied().unwrap_or(2000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(tasks)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    println!("{tasks} tasks x {per_task} allocations each, {tasks} worker threads");
    println!(
        "| store | baseline: bare creates/s | allocations/s (sparse /8) | ratio | ADD+DEL pairs/s (/24) | fill a /22, allocations/s |"
    );
    println!("|---|---|---|---|---|---|");
    runtime.block_on(async {
        scenario("memory", MemoryStore::shared, tasks, per_task).await;
        let counter = std::sync::atomic::AtomicUsize::new(0);
        scenario(
            "sqlite",
            || {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                SqliteStore::open(dir.path().join(format!("bench-{n}.db")))
                    .expect("open")
                    .shared()
            },
            tasks,
            per_task,
        )
        .await;
    });
}
