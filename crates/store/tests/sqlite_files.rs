//! The SQLite store's files under attack: who may own them, links, emptied or damaged files,
//! and a writer lock someone holds forever. Each test performs the attack on its own temp dir.

use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;
use std::time::{Duration, Instant};

use weft_store::conformance::{pod, pods};
use weft_store::{ListOptions, SqliteOptions, SqliteStore, Store, StoreError, prepare_state_dir_under};

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn refused(result: Result<SqliteStore, StoreError>) -> String {
    match result {
        Err(e @ StoreError::Refused(_)) => e.to_string(),
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, the store opened"),
    }
}

/// A store at `path` with `n` pods, all of it in the main file (no WAL) when this returns.
async fn filled(path: &Path, n: usize) {
    // One connection, closed on drop (a pooled store's writer thread closes after the drop).
    let options = SqliteOptions {
        single_connection: true,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(path, options).unwrap();
    for i in 0..n {
        let mut p = pod("ns", &format!("p{i}"), "x", "n1");
        p.data.insert("pad".into(), "x".repeat(600).into());
        store.create(&pods(), p).await.unwrap();
    }
    drop(store);
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    conn.close().unwrap();
}

#[tokio::test]
async fn new_store_files_and_directories_are_private() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("a/b");
    let path = state.join("store.db");
    let store = SqliteStore::open(&path).unwrap();
    store.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    assert_eq!(mode(&dir.path().join("a")), 0o700);
    assert_eq!(mode(&state), 0o700);
    for file in ["store.db", "store.db-wal", "store.db-shm", "store.db-writer.lock"] {
        assert_eq!(mode(&state.join(file)), 0o600, "{file}");
    }
    // No temporary file of the creation is left behind.
    let mut names: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["store.db", "store.db-shm", "store.db-wal", "store.db-writer.lock"]
    );
}

/// Stores of earlier versions were 0644: opening narrows them to 0600.
#[tokio::test]
async fn readable_stores_are_narrowed_to_the_owner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    filled(&path, 1).await;
    for file in ["store.db", "store.db-writer.lock"] {
        std::fs::set_permissions(dir.path().join(file), PermissionsExt::from_mode(0o644)).unwrap();
    }
    drop(SqliteStore::open(&path).unwrap());
    for file in ["store.db", "store.db-writer.lock"] {
        assert_eq!(mode(&dir.path().join(file)), 0o600, "{file}");
    }
}

#[tokio::test]
async fn an_emptied_store_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    filled(&path, 3).await;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    for single_connection in [true, false] {
        let options = SqliteOptions {
            single_connection,
            ..SqliteOptions::default()
        };
        let err = refused(SqliteStore::open_with(&path, options));
        assert!(err.contains("is empty (0 bytes)"), "{err}");
    }
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        0,
        "the file was not touched"
    );
}

#[tokio::test]
async fn a_file_without_the_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE other (x INTEGER)").unwrap();
    drop(conn);
    let before = std::fs::read(&path).unwrap();
    let err = refused(SqliteStore::open(&path));
    assert!(err.contains("has no weft schema"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // And a file that is not a database at all.
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let err = refused(SqliteStore::open(&path));
    assert!(err.contains("damaged"), "{err}");
}

/// Random bytes over middle pages: the integrity check on open refuses the store; a store
/// opened without it reports the damage on the read that meets it, never a success.
#[tokio::test]
async fn damaged_pages_are_reported_never_read_as_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    filled(&path, 300).await;
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len > 64 * 4096, "store of {len} bytes");
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    for page in [len / 4096 / 3, len / 4096 / 2, len / 4096 * 2 / 3] {
        file.seek(SeekFrom::Start(page * 4096 + 100)).unwrap();
        let noise: Vec<u8> = (0..2000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        file.write_all(&noise).unwrap();
    }
    drop(file);
    let err = refused(SqliteStore::open(&path));
    assert!(err.contains("failed its integrity check"), "{err}");
    let unchecked = SqliteStore::open_with(
        &path,
        SqliteOptions {
            single_connection: true,
            check_integrity: false,
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    let err = unchecked
        .list(&pods(), None, &ListOptions::default())
        .await
        .expect_err("a list over damaged pages");
    assert!(matches!(err, StoreError::Refused(_)), "{err}");
    assert!(err.to_string().contains("damaged"), "{err}");
}

/// A process that holds the writers' lock forever: a write waits the busy timeout, then fails
/// naming the lock; once the lock is free, writes go through again.
#[tokio::test]
async fn a_held_writer_lock_times_out_naming_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let lock = dir.path().join("store.db-writer.lock");
    for single_connection in [true, false] {
        let store = SqliteStore::open_with(
            &path,
            SqliteOptions {
                single_connection,
                busy_timeout: Duration::from_millis(700),
                ..SqliteOptions::default()
            },
        )
        .unwrap();
        let holder = std::fs::File::open(&lock).unwrap();
        holder.lock().unwrap();
        let started = Instant::now();
        let err = store
            .create(
                &pods(),
                pod("ns", &format!("held-{single_connection}"), "x", "n1"),
            )
            .await
            .expect_err("a write while another process holds the lock");
        let waited = started.elapsed();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
        assert!(
            err.to_string().contains(&format!(
                "store writer lock {} held by another process for 0.7 s",
                lock.display()
            )),
            "{err}"
        );
        assert!(
            waited >= Duration::from_millis(700) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        drop(holder);
        store
            .create(
                &pods(),
                pod("ns", &format!("free-{single_connection}"), "x", "n1"),
            )
            .await
            .expect("a write once the lock is free");
    }
}

#[tokio::test]
async fn links_are_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("victim"), b"keep").unwrap();
    // The store file, the lock and the store's directory, each a link.
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    symlink(target.join("victim"), state.join("store.db")).unwrap();
    let err = refused(SqliteStore::open(state.join("store.db")));
    assert!(err.contains("symbolic link"), "{err}");
    std::fs::remove_file(state.join("store.db")).unwrap();
    symlink(target.join("victim"), state.join("store.db-writer.lock")).unwrap();
    let err = refused(SqliteStore::open(state.join("store.db")));
    assert!(err.contains("symbolic link"), "{err}");
    symlink(&target, dir.path().join("linked")).unwrap();
    let err = refused(SqliteStore::open(dir.path().join("linked/store.db")));
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read(target.join("victim")).unwrap(), b"keep");
    let in_target: Vec<_> = std::fs::read_dir(&target).unwrap().collect();
    assert_eq!(in_target.len(), 1, "nothing was created through a link");
}

#[tokio::test]
async fn files_others_can_write_or_own_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    filled(&path, 1).await;
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o666)).unwrap();
    let err = refused(SqliteStore::open(&path));
    assert!(err.contains("writable by group or others"), "{err}");
    std::fs::set_permissions(&path, PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o777)).unwrap();
    let err = refused(SqliteStore::open(&path));
    assert!(err.contains("writable by group or others"), "{err}");
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o700)).unwrap();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("the ownership half needs root (chown)");
        return;
    }
    std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
    let err = refused(SqliteStore::open(&path));
    assert!(err.contains("owned by uid 65534"), "{err}");
}

#[test]
fn state_dirs_are_walked_under_their_root_without_links() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let made = prepare_state_dir_under(&root, &root.join("x/y")).unwrap();
    assert_eq!(made, root.join("x/y"));
    assert_eq!(mode(&root.join("x")), 0o700);
    // A link inside the root, to a directory elsewhere: refused, nothing made there.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    symlink(&elsewhere, root.join("link")).unwrap();
    let err = prepare_state_dir_under(&root, &root.join("link/new/tree")).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    let err = prepare_state_dir_under(&root, &root.join("x/../../elsewhere")).unwrap_err();
    assert!(err.to_string().contains("`..`"), "{err}");
    let err = prepare_state_dir_under(&root, &elsewhere).unwrap_err();
    assert!(err.to_string().contains("is not under"), "{err}");
}

fn turn_helpers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|t| {
            let comm = t.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|c| c.trim() == "weft-store-turn")
        })
        .count()
}

/// Writes that time out on a lock held for long leave one blocked helper thread, not one each;
/// and the helper never keeps the lock once it is free: another process gets it without this
/// store writing again.
#[tokio::test]
async fn timed_out_waits_share_one_helper_that_never_keeps_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let lock = dir.path().join("store.db-writer.lock");
    let store = SqliteStore::open_with(
        &path,
        SqliteOptions {
            busy_timeout: Duration::from_millis(200),
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    let holder = std::fs::File::open(&lock).unwrap();
    holder.lock().unwrap();
    for i in 0..4 {
        let err = store
            .create(&pods(), pod("ns", &format!("p{i}"), "x", "n1"))
            .await
            .expect_err("the lock is held");
        assert!(err.to_string().contains("held by another process"), "{err}");
    }
    assert_eq!(turn_helpers(), 1);
    drop(holder);
    let other = std::fs::File::open(&lock).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while other.try_lock().is_err() {
        assert!(
            Instant::now() < deadline,
            "the lock stayed taken after its holder let go"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(other);
    store
        .create(&pods(), pod("ns", "after", "x", "n1"))
        .await
        .unwrap();
}
