//! The embedded store: one SQLite file in WAL mode, shared safely by several processes (the IPAM
//! plugin processes, node agents and the controller all open the same file).
//!
//! Design, as etcd does it: a global revision bumped by every write is the resourceVersion of
//! what was written; every write also appends to a change log (trimmed to the newest entries),
//! and a watch replays that log after the given revision, then polls it for new changes (woken
//! at once by writes from the same process).

mod commit;
mod db;
mod files;
mod fresh;
mod watch;

pub use files::prepare_state_dir_under;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{ListOptions, Object, ObjectList, ResourceType, Store, StoreError, WatchStream};
use db::Db;

/// Tuning of a [`SqliteStore`]; the defaults suit every weft component.
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// How long a write waits for SQLite's write lock, and for the writers' turn (an `flock` of
    /// `<store>-writer.lock`, held only for one transaction and released by the kernel if its
    /// holder dies), before failing with [`StoreError::Unavailable`] naming what it waited for.
    pub busy_timeout: Duration,
    /// How often a watch looks for changes written by other processes.
    pub poll_interval: Duration,
    /// How many change-log entries are kept for watches that resume from a resourceVersion.
    pub retain_changes: u64,
    /// Trim the change log every this many revisions.
    pub trim_every: u64,
    /// Use the one connection opened for reads and writes alike, on the calling thread: no
    /// writer thread, no reader pool, no blocking-pool hops. For short-lived processes that make
    /// a few calls (the `weft-ipam` plugin); each call blocks the async worker it runs on.
    pub single_connection: bool,
    /// Run SQLite's `quick_check` when opening (a scan of every page: cheap for a store of
    /// reservations, but it grows with the file); a damaged store is then refused at once.
    /// Without it, damage is still reported by whichever read or write meets it.
    pub check_integrity: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_millis(25),
            retain_changes: 50_000,
            trim_every: 1_000,
            single_connection: false,
            check_integrity: true,
        }
    }
}

/// The SQLite-backed [`Store`]. Cloning shares the same connections.
///
/// Files: the database at the given path, SQLite's `<path>-wal` and `<path>-shm`, and
/// `<path>-writer.lock` (the writers' turn). Each opened store runs one writer thread (none with
/// [`SqliteOptions::single_connection`]); reads and
/// watches run on Tokio's blocking pool, so the store is used from within a Tokio runtime (a
/// `current_thread` one is enough). A write whose caller stops waiting still completes.
#[derive(Clone)]
pub struct SqliteStore {
    db: Arc<Db>,
}

impl SqliteStore {
    /// Open the store at `path` with default options, creating the file and schema if there is
    /// no file (see [`SqliteStore::open_with`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Open the store at `path` with explicit options.
    ///
    /// Its directory is created `0700` if missing; the directory, the store file, SQLite's
    /// `-wal`/`-shm` and the `-writer.lock` must be ours and writable by no one else, and never
    /// links ([`StoreError::Refused`] otherwise). A new store (schema included) is made only
    /// when there is no store file at all; an existing file that is empty, lacks the schema or
    /// fails the integrity check is refused, never started afresh.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        let path = path.as_ref();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            files::trusted_dir(dir)?;
        }
        Ok(Self {
            db: Arc::new(Db::open(path, options)?),
        })
    }

    /// Shared as a trait object.
    pub fn shared(self) -> Arc<dyn Store> {
        Arc::new(self)
    }

    async fn blocking<R: Send + 'static>(
        &self,
        op: impl FnOnce(&Db) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        if self.db.is_single_connection() {
            return op(&self.db);
        }
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || op(&db))
            .await
            .map_err(|e| StoreError::Backend(format!("store task failed: {e}")))?
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, StoreError> {
        let (ty, namespace, name) = (ty.clone(), namespace.map(String::from), name.to_string());
        self.blocking(move |db| db.get(&ty, namespace.as_deref(), &name))
            .await
    }

    async fn list(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError> {
        let (ty, namespace, opts) = (ty.clone(), namespace.map(String::from), opts.clone());
        self.blocking(move |db| db.list(&ty, namespace.as_deref(), &opts))
            .await
    }

    async fn create(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        self.db.create(ty.clone(), obj).await
    }

    async fn update(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        self.db.update(ty.clone(), obj, false).await
    }

    async fn update_status(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        self.db.update(ty.clone(), obj, true).await
    }

    async fn delete(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        precondition: Option<&str>,
    ) -> Result<Option<Object>, StoreError> {
        let (ty, namespace, name) = (ty.clone(), namespace.map(String::from), name.to_string());
        let precondition = precondition.map(String::from);
        self.db.delete(ty, namespace, name, precondition).await
    }

    async fn watch(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
        resource_version: Option<&str>,
    ) -> Result<WatchStream, StoreError> {
        let (ty, namespace, opts) = (ty.clone(), namespace.map(String::from), opts.clone());
        let from = resource_version.map(db::parse_rv).transpose()?;
        let wake = self.db.subscribe();
        watch::start_head_poller(&self.db);
        let (backlog, from) = match from {
            Some(rv) => (Vec::new(), rv),
            None => {
                let (ty, namespace, opts) = (ty.clone(), namespace.clone(), opts.clone());
                self.blocking(move |db| db.snapshot(&ty, namespace.as_deref(), &opts))
                    .await?
            }
        };
        Ok(watch::stream(
            self.db.clone(),
            watch::Filter { ty, namespace, opts },
            backlog,
            from,
            wake,
        ))
    }
}
