//! The attachment record files (`<cache dir>/<container id>.json`, `weft_meta::CacheRecord`):
//! written by ADD and hot-plug, read by DEL, CHECK, GC and the hot-plug resync, cleared of a
//! written network-status by the deferred writer (status_writes.rs). Every function reads or
//! writes files: call them on a blocking thread.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use weft_meta::CacheRecord;

/// Every write and removal of a record, one at a time: the deferred network-status writer
/// clears its value from a record by reading and rewriting it ([`clear_pending_status`]),
/// which must never undo a later ADD's record or bring back one a DEL removed.
static RECORDS: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    RECORDS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The record file of `container_id` in `cache_dir`.
pub fn path(cache_dir: &Path, container_id: &str) -> PathBuf {
    cache_dir.join(format!("{container_id}.json"))
}

/// Write `bytes` as the record at `path` (in `dir`), atomically (a rename), readable by root
/// only.
pub fn write(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let _records = lock();
    write_unlocked(dir, path, bytes)
}

fn write_unlocked(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
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
    std::io::Write::write_all(&mut file, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Remove the record at `path` (a missing one is no error: DEL is idempotent).
pub fn remove(path: &Path) {
    let _records = lock();
    let _ = std::fs::remove_file(path);
}

/// `container_id`'s record in `cache_dir`, if there is a readable one.
pub fn read(cache_dir: &Path, container_id: &str) -> Option<CacheRecord> {
    let bytes = std::fs::read(path(cache_dir, container_id)).ok()?;
    CacheRecord::decode(&bytes, container_id).ok()
}

/// [`write`], only if the record is still there (hot-plug rewrites a record it read before
/// running delegates: a DEL meanwhile removed it, and it must stay removed). Returns whether
/// it wrote.
pub fn replace(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    let _records = lock();
    if !path.exists() {
        return Ok(false);
    }
    write_unlocked(dir, path, bytes).map(|()| true)
}

/// Every readable record in `cache_dir` (one per attached sandbox).
pub fn all(cache_dir: &Path) -> Vec<CacheRecord> {
    super::autoconf::read_dir_files(cache_dir)
        .into_iter()
        .filter_map(|(name, bytes)| {
            let container = name.strip_suffix(".json")?;
            CacheRecord::decode(&bytes, container).ok()
        })
        .collect()
}

/// Record that the pod's network-status holds `written`, if that is still the value pending
/// in `container_id`'s record (not a later ADD's; the record not removed by a DEL).
pub fn clear_pending_status(cache_dir: &Path, container_id: &str, written: &str) -> std::io::Result<()> {
    let _records = lock();
    let Some(updated) = read(cache_dir, container_id).and_then(|r| r.status_written(written)) else {
        return Ok(());
    };
    write_unlocked(cache_dir, &path(cache_dir, container_id), &updated.to_bytes())
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
    use super::*;

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
