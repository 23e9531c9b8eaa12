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

/// Async locks by key, in a fixed set of stripes (no per-key state to clean up): what the
/// pod lock of network-status writes and the sandbox lock of DEL and hot-plug are made of.
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

/// One lock per sandbox: a DEL and a hot-plug pass of the same sandbox do not overlap (a
/// hot-plug pass reads the record, runs delegates and writes it back; a DEL between would miss
/// what it plugged and remove the record under it).
#[derive(Default)]
pub struct Sandboxes(Stripes);

impl Sandboxes {
    /// Hold `container_id`'s lock.
    pub async fn lock(&self, container_id: &str) -> tokio::sync::MutexGuard<'_, ()> {
        self.0.lock(&container_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_lands_in_the_same_stripe() {
        assert_eq!(Stripes::of(&("default", "web")), Stripes::of(&("default", "web")));
        assert!(Stripes::of(&"c1") < STRIPES);
    }
}
