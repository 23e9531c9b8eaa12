//! Behaviour specific to the SQLite store: persistence, compaction, cross-instance watches and
//! several processes writing one file at once.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use weft_store::conformance::{Counter, describe, next_event, pod, pods};
use weft_store::{Api, ListOptions, SqliteOptions, SqliteStore, Store, WatchEvent};

/// Set (to the store path) when this binary runs as a child of `processes_share_one_store`.
const CHILD_ENV: &str = "WEFT_STORE_TEST_CHILD";
const CHILDREN: usize = 6;
const INCREMENTS: u64 = 60;
const NAMES: usize = 40;

fn open(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(dir.path().join("store.db")).expect("open the store")
}

#[tokio::test]
async fn data_and_revisions_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(&dir)
        .create(&pods(), pod("ns", "a", "x", "n1"))
        .await
        .unwrap();
    let store = open(&dir);
    assert_eq!(
        store.get(&pods(), Some("ns"), "a").await.unwrap(),
        Some(first.clone())
    );
    let second = store.create(&pods(), pod("ns", "b", "x", "n1")).await.unwrap();
    let rv = |o: &weft_store::Object| {
        o.metadata
            .resource_version
            .clone()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(rv(&second) > rv(&first));
}

/// Regression: short-lived single-connection openers skip SQLite's checkpoints, and every first
/// opener's WAL recovery forgets what was checkpointed; the WAL used to grow without end (and
/// each open to read all of it). The writers now truncate it once it passes 256 KiB.
#[tokio::test]
async fn one_shot_openers_keep_the_wal_small() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let options = SqliteOptions {
        single_connection: true,
        ..SqliteOptions::default()
    };
    let wal = dir.path().join("store.db-wal");
    let mut largest = 0;
    for i in 0..400 {
        let store = SqliteStore::open_with(&path, options.clone()).unwrap();
        let name = format!("p{i}");
        store.create(&pods(), pod("ns", &name, "x", "n1")).await.unwrap();
        store.delete(&pods(), Some("ns"), &name, None).await.unwrap();
        drop(store);
        largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
    }
    assert!(largest < 512 * 1024, "the WAL grew to {largest} bytes");
    let store = SqliteStore::open_with(&path, options).unwrap();
    let list = store.list(&pods(), None, &ListOptions::default()).await.unwrap();
    assert!(list.items.is_empty());
    assert_eq!(list.resource_version, "800", "every write was kept");
}

#[tokio::test]
async fn opening_a_directory_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    std::fs::create_dir(&path).unwrap();
    let err = SqliteStore::open(&path)
        .err()
        .expect("a directory is not a store file");
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
}

#[tokio::test]
async fn watch_from_a_compacted_version_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions {
        retain_changes: 10,
        trim_every: 5,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(dir.path().join("store.db"), options).unwrap();
    for i in 0..30 {
        store
            .create(&pods(), pod("ns", &format!("p{i}"), "x", "n1"))
            .await
            .unwrap();
    }
    let mut stream = store
        .watch(&pods(), None, &ListOptions::default(), Some("1"))
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
        .expect("an error item")
        .expect_err("the change log no longer reaches back to 1");
    assert!(err.is_expired(), "{err}");
    assert!(err.to_string().contains("re-list"), "{err}");
    assert!(stream.next().await.is_none(), "the stream ends after the error");

    // Recent versions are still served.
    let mut recent = store
        .watch(&pods(), None, &ListOptions::default(), Some("25"))
        .await
        .unwrap();
    assert_eq!(describe(&next_event(&mut recent).await), "+p25");
}

#[tokio::test]
async fn watch_sees_writes_of_another_instance() {
    let dir = tempfile::tempdir().unwrap();
    let (watcher, writer) = (open(&dir), open(&dir));
    let mut stream = watcher
        .watch(&pods(), None, &ListOptions::default(), Some("0"))
        .await
        .unwrap();
    writer.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    writer.delete(&pods(), Some("ns"), "a", None).await.unwrap();
    assert_eq!(describe(&next_event(&mut stream).await), "+a");
    assert_eq!(describe(&next_event(&mut stream).await), "-a");
}

/// Runs only as a child process: CAS increments interleaved with racing creates.
#[test]
fn child_process_entry() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store: Arc<dyn Store> = SqliteStore::open(&path).unwrap().shared();
        let counters: Api<Counter> = Api::namespaced(store.clone(), "ns");
        let mut won = String::new();
        for i in 0..INCREMENTS as usize {
            counters
                .modify("c", |c| {
                    c.spec.count += 1;
                    true
                })
                .await
                .unwrap();
            if i < NAMES {
                match store
                    .create(&pods(), pod("ns", &format!("p{i}"), "x", "n1"))
                    .await
                {
                    Ok(_) => won.push_str(&format!("p{i}\n")),
                    Err(e) => assert!(e.is_already_exists(), "{e}"),
                }
            }
        }
        let report = format!("{path}.won.{}", std::process::id());
        std::fs::write(report, won).unwrap();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_share_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).unwrap();
    let counters: Api<Counter> = Api::namespaced(store.clone().shared(), "ns");
    let mut counter = Counter::default();
    counter.metadata.name = "c".into();
    let start = counters.create(&counter).await.unwrap();
    let mut pod_events = store
        .watch(
            &pods(),
            None,
            &ListOptions::default(),
            start.metadata.resource_version.as_deref(),
        )
        .await
        .unwrap();

    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..CHILDREN)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "child_process_entry",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, &path)
                .spawn_output()
        })
        .collect();
    let mut winners: BTreeMap<String, usize> = BTreeMap::new();
    for child in children {
        let output = child.join().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    for report in std::fs::read_dir(dir.path()).unwrap() {
        let report = report.unwrap().path();
        if report.to_string_lossy().contains(".won.") {
            for name in std::fs::read_to_string(&report).unwrap().lines() {
                *winners.entry(name.to_string()).or_default() += 1;
            }
        }
    }

    assert_eq!(
        counters.get_required("c").await.unwrap().spec.count,
        CHILDREN as u64 * INCREMENTS,
        "no increment is lost"
    );
    assert_eq!(winners.len(), NAMES, "every name was created: {winners:?}");
    assert!(
        winners.values().all(|&n| n == 1),
        "exactly one winner per name: {winners:?}"
    );
    let list = store
        .list(&pods(), Some("ns"), &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), NAMES);

    // The watch saw every create, written by other processes, once and in revision order.
    let mut last = 0;
    for _ in 0..NAMES {
        let event = next_event(&mut pod_events).await;
        assert!(matches!(event, WatchEvent::Added(_)));
        let rv: u64 = event
            .object()
            .metadata
            .resource_version
            .as_deref()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rv > last);
        last = rv;
    }
}

/// Spawn a child and collect its output on a thread, so children run at the same time.
trait SpawnOutput {
    fn spawn_output(&mut self) -> std::thread::JoinHandle<std::process::Output>;
}

impl SpawnOutput for Command {
    fn spawn_output(&mut self) -> std::thread::JoinHandle<std::process::Output> {
        let child = self
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the test binary");
        std::thread::spawn(move || child.wait_with_output().expect("child output"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_get_dense_unique_revisions_in_watch_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut stream = store
        .watch(&pods(), None, &ListOptions::default(), Some("0"))
        .await
        .unwrap();
    // Half of these creates collide, so batches mix failures with successes.
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut won = Vec::new();
                for i in 0..40 {
                    let name = format!("p{}", (t / 2) * 40 + i);
                    if let Ok(o) = store.create(&pods(), pod("ns", &name, "x", "n1")).await {
                        won.push(o.metadata.resource_version.unwrap().parse::<u64>().unwrap());
                    }
                }
                won
            })
        })
        .collect();
    let mut revisions = Vec::new();
    for task in tasks {
        revisions.extend(task.await.unwrap());
    }
    revisions.sort();
    assert_eq!(
        revisions,
        (1..=160).collect::<Vec<u64>>(),
        "one revision per successful write, no gaps"
    );
    for expected in 1..=160u64 {
        let event = next_event(&mut stream).await;
        assert_eq!(
            event.object().metadata.resource_version.as_deref(),
            Some(expected.to_string().as_str())
        );
    }
}
