//! Write throughput of the embedded store: creates of small objects (one IPAM allocation is
//! about one such create), from many tasks in one process and from many processes at once,
//! with the in-memory store measured in the same run as the baseline.
//!
//! ```text
//! cargo run --release -p weft-store --example store_bench -- [threads] [ops-per-thread] [processes]
//! ```

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use weft_store::{MemoryStore, Object, ResourceType, SqliteStore, Store};

fn reservations() -> ResourceType {
    ResourceType::new("ipam.weft.dev/v1alpha1", "IPReservation", "ipreservations", false)
}

fn reservation(worker: usize, i: usize) -> Object {
    serde_json::from_value(json!({
        "apiVersion": "ipam.weft.dev/v1alpha1", "kind": "IPReservation",
        "metadata": {"name": format!("net1-10-{worker}-{i}"), "labels": {"weft.dev/network": "net1"}},
        "spec": {"network": "net1", "ip": format!("10.{worker}.{}.{}", i / 256, i % 256),
                 "containerID": format!("c{worker}x{i}"), "ifName": "net1", "podRef": "ns/pod"}
    }))
    .expect("reservation literal")
}

/// Creates from `threads` tasks on a runtime with as many workers; returns ops/s.
fn in_process(store: Arc<dyn Store>, threads: usize, ops: usize) -> f64 {
    ops_per_second(store, threads, ops, |store, worker, i| async move {
        store
            .create(&reservations(), reservation(worker, i))
            .await
            .expect("create");
    })
}

/// Gets of the objects `in_process` created, from `threads` tasks; returns ops/s.
fn reads(store: Arc<dyn Store>, threads: usize, ops: usize) -> f64 {
    ops_per_second(store, threads, ops, |store, worker, i| async move {
        let name = reservation(worker, i).metadata.name;
        store
            .get(&reservations(), None, &name)
            .await
            .expect("get")
            .expect("present");
    })
}

/// `op(store, worker, i)` for `i` in `0..ops` from `threads` tasks (one per `worker`) on a
/// runtime with as many workers; returns ops/s.
fn ops_per_second<F>(
    store: Arc<dyn Store>,
    threads: usize,
    ops: usize,
    op: impl Fn(Arc<dyn Store>, usize, usize) -> F + Copy + Send + 'static,
) -> f64
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async move {
        let started = Instant::now();
        let tasks: Vec<_> = (0..threads)
            .map(|worker| {
                let store = store.clone();
                tokio::spawn(async move {
                    for i in 0..ops {
                        op(store.clone(), worker, i).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("worker");
        }
        (threads * ops) as f64 / started.elapsed().as_secs_f64()
    })
}

/// One child process: open the store and create `ops` objects sequentially.
fn child(path: &str, worker: usize, ops: usize) {
    let store = SqliteStore::open(path).expect("open store");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        for i in 0..ops {
            store
                .create(&reservations(), reservation(worker, i))
                .await
                .expect("create");
        }
    });
}

/// `processes` children of this program creating `ops` objects each; returns ops/s.
fn multi_process(path: &str, processes: usize, ops: usize) -> f64 {
    let exe = std::env::current_exe().expect("own path");
    let started = Instant::now();
    let children: Vec<_> = (0..processes)
        .map(|worker| {
            Command::new(&exe)
                .args(["--child", path, &(100 + worker).to_string(), &ops.to_string()])
                .spawn()
                .expect("spawn child")
        })
        .collect();
    for mut c in children {
        assert!(c.wait().expect("child").success(), "child failed");
    }
    (processes * ops) as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let worker = args[2].parse().expect("worker id");
        let ops = args[3].parse().expect("ops");
        return child(&args[1], worker, ops);
    }
    let number = |i: usize, default: usize| args.get(i).map_or(default, |a| a.parse().expect("a number"));
    let (threads, ops, processes) = (number(0, 16), number(1, 1000), number(2, 16));
    let dir = tempfile::tempdir().expect("temporary directory");

    let sqlite_path = dir.path().join("threads.db");
    let memory_store = MemoryStore::shared();
    let memory = in_process(memory_store.clone(), threads, ops);
    let sqlite_store = SqliteStore::open(&sqlite_path).expect("open").shared();
    let sqlite = in_process(sqlite_store.clone(), threads, ops);
    println!(
        "creates, {threads} tasks x {ops}: memory {memory:.0}/s, sqlite {sqlite:.0}/s (sqlite/memory {:.3})",
        sqlite / memory
    );
    let memory_reads = reads(memory_store, threads, ops);
    let sqlite_reads = reads(sqlite_store, threads, ops);
    println!(
        "gets, {threads} tasks x {ops}: memory {memory_reads:.0}/s, sqlite {sqlite_reads:.0}/s (sqlite/memory {:.3})",
        sqlite_reads / memory_reads
    );

    let mp_path = dir.path().join("processes.db");
    SqliteStore::open(&mp_path).expect("create the store file");
    let path = mp_path.to_str().expect("utf-8 temp path");
    let per_process = ops.max(1);
    let mp = multi_process(path, processes, per_process);
    println!("creates, {processes} processes x {per_process} (incl. process start + open): sqlite {mp:.0}/s");

    // What every short-lived process (the IPAM plugin) pays before its first operation.
    let opens = 200;
    let started = Instant::now();
    for _ in 0..opens {
        drop(SqliteStore::open(&mp_path).expect("open"));
    }
    println!("open of an existing store: {:?} each", started.elapsed() / opens);

    // The latency a single caller sees when nobody else writes.
    let single = in_process(
        SqliteStore::open(dir.path().join("single.db"))
            .expect("open")
            .shared(),
        1,
        ops,
    );
    println!(
        "creates, 1 task x {ops}: sqlite {single:.0}/s ({:?} per create)",
        Duration::from_secs_f64(1.0 / single)
    );
}
