//! The attachment record files (`<cache dir>/<container id>.json`, `weft_meta::CacheRecord`):
//! written by ADD and hot-plug, read by DEL, CHECK, GC and the hot-plug resync, cleared of a
//! written network-status by the deferred writer (status_writes.rs). Every function reads or
//! writes files: call them on a blocking thread.
//!
//! Records read or written are also kept decoded in memory, each with the identity of the file
//! it came from (device, inode, size, modification and change times): a read of an unchanged
//! record is a `stat(2)`, not a JSON decode, and finding a pod's records passes over the ones
//! known to be other pods' without even that ([`of_pod`]). That matters because the hot-plug
//! reconciler looks at a pod's records on every change of the pod; the deferred
//! network-status writer reads a record several times per write. The file stays the truth: a record replaced or edited by anyone else is a new
//! identity and is read again, and a removed one is gone.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use weft_meta::CacheRecord;

/// Every write and removal of a record, one at a time: the deferred network-status writer
/// clears its value from a record by reading and rewriting it ([`clear_pending_status`]),
/// which must never undo a later ADD's record or bring back one a DEL removed.
static RECORDS: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    RECORDS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Which file a record was decoded from. A rename (every write here) makes a new inode; an
/// edit in place changes the size or the times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileId {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// The records decoded so far, by path, with the identity of their file.
type Decoded = HashMap<PathBuf, (FileId, Arc<CacheRecord>)>;

static DECODED: LazyLock<Mutex<Decoded>> = LazyLock::new(Mutex::default);

fn decoded() -> MutexGuard<'static, Decoded> {
    DECODED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The record file of `container_id` in `cache_dir`.
pub fn path(cache_dir: &Path, container_id: &str) -> PathBuf {
    cache_dir.join(format!("{container_id}.json"))
}

/// Write `record` as its container's record in `dir`, atomically (a rename), readable by root
/// only.
pub fn write(dir: &Path, record: &CacheRecord) -> std::io::Result<()> {
    let _records = lock();
    write_unlocked(dir, record)
}

fn write_unlocked(dir: &Path, record: &CacheRecord) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = path(dir, &record.container_id);
    let tmp = path.with_extension("tmp");
    std::fs::create_dir_all(dir)?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)?;
    // No fsync: the record must survive agent restarts (the page cache does); after a node
    // crash DEL plans from the pod and its NADs instead. Rename keeps it atomic.
    std::io::Write::write_all(&mut file, &record.to_bytes())?;
    std::fs::rename(&tmp, &path)?;
    // The identity after the rename (it changes the inode's change time). Every write here
    // holds the lock, so the file is still this one.
    match std::fs::metadata(&path) {
        Ok(meta) => {
            decoded().insert(path, (FileId::of(&meta), Arc::new(record.clone())));
        }
        Err(_) => {
            decoded().remove(&path);
        }
    }
    Ok(())
}

/// Remove `container_id`'s record in `dir` (a missing one is no error: DEL is idempotent).
pub fn remove(dir: &Path, container_id: &str) {
    let _records = lock();
    let path = path(dir, container_id);
    let _ = std::fs::remove_file(&path);
    decoded().remove(&path);
}

/// The record at `path`, which names `container_id`'s: `Ok(None)` when there is none, an
/// error naming why when it cannot be read or decoded; from memory while the file is the one
/// it was decoded from.
fn load(path: &Path, container_id: &str) -> Result<Option<Arc<CacheRecord>>, String> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => {
            decoded().remove(path);
            return match e.kind() {
                std::io::ErrorKind::NotFound => Ok(None),
                _ => Err(format!("{}: {e}", path.display())),
            };
        }
    };
    if let Some((seen, record)) = decoded().get(path)
        && *seen == FileId::of(&meta)
    {
        return Ok(Some(record.clone()));
    }
    // The identity of the file actually read (it may have been replaced since the stat).
    let read = || -> std::io::Result<(FileId, Vec<u8>)> {
        let mut file = std::fs::File::open(path)?;
        let id = FileId::of(&file.metadata()?);
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok((id, bytes))
    };
    let decoded_record = read()
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|(id, bytes)| {
            CacheRecord::decode(&bytes, container_id)
                .map(|record| (id, Arc::new(record)))
                .map_err(|e| e.to_string())
        });
    match decoded_record {
        Ok((id, record)) => {
            decoded().insert(path.to_path_buf(), (id, record.clone()));
            Ok(Some(record))
        }
        Err(e) => {
            decoded().remove(path);
            Err(e)
        }
    }
}

/// `container_id`'s record in `cache_dir`, if there is a readable one.
pub fn read(cache_dir: &Path, container_id: &str) -> Option<CacheRecord> {
    read_checked(cache_dir, container_id).ok().flatten()
}

/// `container_id`'s record in `cache_dir`: `Ok(None)` when there is none, an error when it is
/// unreadable (corrupt, another version, another container's).
pub fn read_checked(cache_dir: &Path, container_id: &str) -> Result<Option<CacheRecord>, String> {
    load(&path(cache_dir, container_id), container_id).map(|r| r.map(|r| (*r).clone()))
}

/// [`write`], only if the record is still there (hot-plug rewrites a record it read before
/// running delegates: a DEL meanwhile removed it, and it must stay removed). Returns whether
/// it wrote.
pub fn replace(dir: &Path, record: &CacheRecord) -> std::io::Result<bool> {
    let _records = lock();
    if !path(dir, &record.container_id).exists() {
        return Ok(false);
    }
    write_unlocked(dir, record).map(|()| true)
}

/// The readable records in `cache_dir` that `keep` selects (each cloned only when kept); files
/// `look` turns down are not even looked at.
fn select(
    cache_dir: &Path,
    look: impl Fn(&Path) -> bool,
    keep: impl Fn(&CacheRecord) -> bool,
) -> Vec<CacheRecord> {
    let mut names: Vec<String> = std::fs::read_dir(cache_dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| name.ends_with(".json"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    // Forget records whose files are gone (removed by someone else).
    let present: std::collections::HashSet<PathBuf> = names.iter().map(|n| cache_dir.join(n)).collect();
    decoded().retain(|path, _| path.parent() != Some(cache_dir) || present.contains(path));
    names
        .iter()
        .filter_map(|name| {
            let container = name.strip_suffix(".json")?;
            let path = cache_dir.join(name);
            if !look(&path) {
                return None;
            }
            let record = load(&path, container).ok().flatten()?;
            keep(&record).then(|| (*record).clone())
        })
        .collect()
}

/// Every readable record in `cache_dir` (one per attached sandbox).
pub fn all(cache_dir: &Path) -> Vec<CacheRecord> {
    select(cache_dir, |_| true, |_| true)
}

/// The readable records in `cache_dir` of pod `namespace`/`name` (its sandboxes on this node).
/// A record names one pod for its life (its sandbox's): a record known decoded as another
/// pod's is passed over without a `stat`, so a pod's change costs a directory read and a look
/// at its own records, not one at every record of the node. ([`all`], the resync's read, looks
/// at every file.)
pub fn of_pod(cache_dir: &Path, namespace: &str, name: &str) -> Vec<CacheRecord> {
    select(
        cache_dir,
        |path| {
            decoded()
                .get(path)
                .is_none_or(|(_, record)| record.is_pod(namespace, name))
        },
        |record| record.is_pod(namespace, name),
    )
}

/// Record that the pod's network-status holds `written`, if that is still the value pending
/// in `container_id`'s record (not a later ADD's; the record not removed by a DEL).
pub fn clear_pending_status(cache_dir: &Path, container_id: &str, written: &str) -> std::io::Result<()> {
    let _records = lock();
    let Some(updated) = read(cache_dir, container_id).and_then(|r| r.status_written(written)) else {
        return Ok(());
    };
    write_unlocked(cache_dir, &updated)
}

/// Async locks by key, in a fixed set of stripes (no per-key state to clean up): the pod lock
/// of network-status writes, held only for a write (keys that share a stripe wait that long).
pub struct Stripes {
    stripes: Vec<tokio::sync::Mutex<()>>,
}

/// Keys are serialised in this many stripes.
const STRIPES: usize = 256;

impl Default for Stripes {
    fn default() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
        }
    }
}

impl Stripes {
    /// The stripe of `key` (always the same one).
    fn of(key: &impl std::hash::Hash) -> usize {
        use std::hash::Hasher;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        (hasher.finish() % STRIPES as u64) as usize
    }

    /// Hold `key`'s lock.
    pub async fn lock(&self, key: &impl std::hash::Hash) -> tokio::sync::MutexGuard<'_, ()> {
        self.stripes[Self::of(key)].lock().await
    }
}

/// One lock per sandbox: its ADD, DEL and hot-plug passes do not overlap. A hot-plug pass
/// reads the record, runs delegates and writes it back; a DEL between would miss what it
/// plugged and remove the record under it. A DEL beside its sandbox's ADD (a runtime that gave
/// up waiting for the ADD and tears the sandbox down) would DEL the delegates before they were
/// attached and remove the record, then the ADD would attach them and write the record again:
/// the attachments would stay for good. Keyed by container id, not striped: an ADD holds its
/// lock for as long as its delegates run, and unrelated sandboxes must never wait for it.
#[derive(Default)]
pub struct Sandboxes {
    held: Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
}

/// A sandbox's lock, held until dropped; the last holder (or waiter) removes its entry.
pub struct SandboxGuard<'a> {
    owner: &'a Sandboxes,
    container_id: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Sandboxes {
    /// Hold `container_id`'s lock (waiting, in arrival order, for whoever holds it).
    pub async fn lock(&self, container_id: &str) -> SandboxGuard<'_> {
        let mutex = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(container_id.to_string())
            .or_default()
            .clone();
        // Built before waiting, so a caller that stops waiting still removes an unused entry.
        let mut guard = SandboxGuard {
            owner: self,
            container_id: container_id.to_string(),
            guard: None,
        };
        guard.guard = Some(mutex.lock_owned().await);
        guard
    }

    /// How many sandboxes have a lock entry (held or waited for).
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Drop for SandboxGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut held = self.owner.held.lock().unwrap_or_else(PoisonError::into_inner);
        // Nobody else holds or waits for it: only the map's own reference is left (others
        // take theirs under this same mutex).
        if held
            .get(&self.container_id)
            .is_some_and(|m| std::sync::Arc::strong_count(m) == 1)
        {
            held.remove(&self.container_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn record(container: &str, pod: &str, status: Option<&str>) -> CacheRecord {
        CacheRecord {
            version: weft_meta::cache::CACHE_VERSION,
            container_id: container.into(),
            netns: format!("/run/netns/{container}"),
            ifname: "eth0".into(),
            k8s: weft_meta::K8sArgs {
                pod_namespace: "default".into(),
                pod_name: pod.into(),
                pod_uid: format!("uid-{pod}"),
                ..Default::default()
            },
            delegates: Vec::new(),
            results: Vec::new(),
            network_status: status.map(str::to_string),
            added_ms: None,
        }
    }

    #[test]
    fn a_record_is_read_back_as_written_and_as_anyone_else_left_it() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let first = record("c1", "web", Some("[1]"));
        write(dir, &first).unwrap();
        assert_eq!(read(dir, "c1"), Some(first.clone()));
        assert_eq!(read(dir, "c1"), Some(first.clone()), "read again, unchanged");
        let file = path(dir, "c1");
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );

        // Replaced by someone else (a new file renamed over it): read again.
        let second = record("c1", "web", Some("[22]"));
        std::fs::write(dir.join("other"), second.to_bytes()).unwrap();
        std::fs::rename(dir.join("other"), &file).unwrap();
        assert_eq!(read(dir, "c1"), Some(second.clone()));

        // Edited in place (same inode, another size): read again.
        let third = record("c1", "web", Some("[333]"));
        std::fs::write(&file, third.to_bytes()).unwrap();
        assert_eq!(read(dir, "c1"), Some(third));

        // Truncated: unreadable, not an old copy.
        std::fs::write(&file, b"{\"version\": 1, \"contai").unwrap();
        assert_eq!(read(dir, "c1"), None);
        let error = read_checked(dir, "c1").unwrap_err();
        assert!(error.contains("corrupt"), "{error}");
        assert!(all(dir).is_empty());

        // Removed by someone else: gone.
        write(dir, &first).unwrap();
        std::fs::remove_file(&file).unwrap();
        assert_eq!(read(dir, "c1"), None);
        assert_eq!(read_checked(dir, "c1"), Ok(None));
        assert!(all(dir).is_empty());
    }

    #[test]
    fn a_pods_records_are_its_sandboxes_only_and_a_cleared_status_stays_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        for (container, pod) in [("c1", "web"), ("c2", "db"), ("c3", "web")] {
            write(dir, &record(container, pod, Some("[s]"))).unwrap();
        }
        // Not records: other files in the directory are left alone.
        std::fs::write(dir.join("c9.tmp"), b"partial").unwrap();
        let ids = |records: Vec<CacheRecord>| -> Vec<String> {
            records.into_iter().map(|r| r.container_id).collect()
        };
        assert_eq!(ids(of_pod(dir, "default", "web")), ["c1", "c3"]);
        assert_eq!(ids(of_pod(dir, "default", "db")), ["c2"]);
        assert!(of_pod(dir, "other", "web").is_empty());
        assert_eq!(ids(all(dir)), ["c1", "c2", "c3"]);

        // Another value pending (a later ADD): not cleared.
        clear_pending_status(dir, "c1", "[other]").unwrap();
        assert_eq!(read(dir, "c1").unwrap().network_status.as_deref(), Some("[s]"));
        clear_pending_status(dir, "c1", "[s]").unwrap();
        assert_eq!(read(dir, "c1").unwrap().network_status, None);
        // A removed record is not brought back by a late clear or a replace.
        remove(dir, "c2");
        clear_pending_status(dir, "c2", "[s]").unwrap();
        assert!(!replace(dir, &record("c2", "db", None)).unwrap());
        assert_eq!(read(dir, "c2"), None);
        assert_eq!(ids(all(dir)), ["c1", "c3"]);
    }

    #[test]
    fn a_pods_records_are_found_without_a_look_at_other_pods_known_records() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        for (container, pod) in [("c1", "web"), ("c2", "db")] {
            write(dir, &record(container, pod, None)).unwrap();
        }
        let ids = |records: Vec<CacheRecord>| -> Vec<String> {
            records.into_iter().map(|r| r.container_id).collect()
        };
        // A record this process never decoded (another agent's, before a restart) is looked at.
        std::fs::write(path(dir, "c3"), record("c3", "web", None).to_bytes()).unwrap();
        assert_eq!(ids(of_pod(dir, "default", "web")), ["c1", "c3"]);
        // c2 is known as db's: a web lookup passes it over, even if someone rewrote it as a
        // web record behind the agent's back (a sandbox's record never changes pods)...
        std::fs::write(path(dir, "c2"), record("c2", "web", None).to_bytes()).unwrap();
        assert_eq!(ids(of_pod(dir, "default", "web")), ["c1", "c3"]);
        // ... until a read of every record (the resync's) sees the new file.
        assert_eq!(ids(all(dir)), ["c1", "c2", "c3"]);
        assert_eq!(ids(of_pod(dir, "default", "web")), ["c1", "c2", "c3"]);
        assert!(of_pod(dir, "default", "db").is_empty());
    }

    #[tokio::test]
    async fn a_sandbox_lock_serialises_its_sandbox_only_and_leaves_no_entry_behind() {
        let sandboxes = std::sync::Arc::new(Sandboxes::default());
        let first = sandboxes.lock("c1").await;
        // Another sandbox does not wait.
        let other = tokio::time::timeout(std::time::Duration::from_secs(5), sandboxes.lock("c2"))
            .await
            .expect("another sandbox's lock is free");
        drop(other);
        // The same sandbox waits until the holder lets go.
        let waiter = {
            let sandboxes = sandboxes.clone();
            tokio::spawn(async move {
                let _second = sandboxes.lock("c1").await;
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "c1 is held: the second lock waits");
        drop(first);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("the waiter gets the lock once it is let go")
            .unwrap();
        assert_eq!(
            sandboxes.entries(),
            0,
            "no entry is left once nobody holds or waits"
        );
        // A waiter that gives up leaves nothing either.
        let held = sandboxes.lock("c3").await;
        let gave_up = tokio::time::timeout(std::time::Duration::from_millis(20), sandboxes.lock("c3")).await;
        assert!(gave_up.is_err());
        drop(held);
        assert_eq!(sandboxes.entries(), 0);
    }

    #[test]
    fn a_key_always_lands_in_the_same_stripe() {
        assert_eq!(Stripes::of(&("default", "web")), Stripes::of(&("default", "web")));
        assert!(Stripes::of(&"c1") < STRIPES);
    }
}
