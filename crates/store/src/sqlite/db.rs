//! The SQL side of the SQLite store: connections, schema, reads (each a read transaction on a
//! pooled connection, run on a blocking thread) and the write operations (closures the writer
//! thread of [`super::commit`] runs inside its transaction). Nothing here runs on an async worker.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::watch;

use super::SqliteOptions;
use super::commit::{GroupCommit, Writer};
use super::files;
use crate::semantics::{self, DeleteOutcome, UpdateOutcome};
use crate::{ListOptions, Object, ObjectList, ResourceType, StoreError, WatchEvent};

/// Bumped when the schema changes; stored in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS weft_meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO weft_meta (key, value) VALUES ('revision', 0), ('compacted', 0);
CREATE TABLE IF NOT EXISTS objects (
    api_version TEXT NOT NULL,
    kind        TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    rv          INTEGER NOT NULL,
    body        TEXT NOT NULL,
    PRIMARY KEY (api_version, kind, namespace, name)
);
CREATE TABLE IF NOT EXISTS changes (
    rv          INTEGER PRIMARY KEY,
    api_version TEXT NOT NULL,
    kind        TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    event       INTEGER NOT NULL,
    body        TEXT NOT NULL
);
";

/// Most reader connections of one opened store; further readers wait for one to be free
/// (opening a connection costs more than waiting for a read to finish).
const MAX_READERS: usize = 8;

/// Most changes one watch poll reads at once.
const POLL_BATCH: i64 = 512;

/// How change-log rows name the event.
const EVENT_ADDED: i64 = 1;
const EVENT_MODIFIED: i64 = 2;
const EVENT_DELETED: i64 = 3;

/// The shared state of one opened store file.
pub(super) struct Db {
    path: PathBuf,
    options: SqliteOptions,
    connections: Connections,
    /// Started once, by the first watch: see [`super::watch::start_head_poller`].
    pub(super) head_poller: std::sync::Once,
    /// Read transactions run so far (what an idle process costs the file: see the watch tests).
    reads: std::sync::atomic::AtomicU64,
}

/// How an opened store uses its connections.
enum Connections {
    /// Long-running processes: writers of this process queue for one writer thread instead of
    /// all spinning on SQLITE_BUSY, readers share a pool.
    Pooled {
        writes: GroupCommit,
        readers: Mutex<ReaderPool>,
        reader_returned: Condvar,
    },
    /// Short-lived processes ([`SqliteOptions::single_connection`]): the one connection opened
    /// serves reads and writes on the calling thread.
    Single(Mutex<Writer>),
}

/// Idle reader connections, and how many exist in all.
#[derive(Default)]
struct ReaderPool {
    idle: Vec<Connection>,
    open: usize,
}

/// Key of an object row; cluster-scoped objects use the empty namespace.
struct RowKey<'a> {
    api_version: &'a str,
    kind: &'a str,
    namespace: String,
    name: String,
}

impl<'a> RowKey<'a> {
    fn new(ty: &'a ResourceType, namespace: Option<&str>, name: &str) -> Self {
        Self {
            api_version: &ty.api_version,
            kind: &ty.kind,
            namespace: namespace.unwrap_or("").into(),
            name: name.into(),
        }
    }
    fn of(ty: &'a ResourceType, obj: &Object) -> Self {
        Self::new(ty, obj.metadata.namespace.as_deref(), &obj.metadata.name)
    }
}

pub(super) fn backend(context: &str) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
    move |e| {
        if is_busy(&e) {
            StoreError::Unavailable(format!("{context}: {e}"))
        } else if is_damage(&e) {
            StoreError::Refused(format!(
                "{context}: the store file is damaged ({e}); restore it from a backup (`weft ipam check` verifies the restored store)"
            ))
        } else {
            StoreError::Backend(format!("{context}: {e}"))
        }
    }
}

/// SQLite found malformed pages, or a file that is not a database at all.
fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(code, _)
            if matches!(code.code, rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

fn decode(body: &str) -> Result<Object, StoreError> {
    serde_json::from_str(body)
        .map_err(|e| StoreError::Backend(format!("stored object is not valid JSON: {e}")))
}

fn encode(obj: &Object) -> Result<String, StoreError> {
    serde_json::to_string(obj).map_err(|e| StoreError::Invalid(format!("{} {}: {e}", obj.kind, obj.key())))
}

/// Parse a resourceVersion given by a caller.
pub(super) fn parse_rv(rv: &str) -> Result<u64, StoreError> {
    rv.parse()
        .map_err(|_| StoreError::Invalid(format!("resourceVersion {rv:?} is not a number")))
}

/// SQLite's own busy handler sleeps 1, 2, 5, 10... ms; writers of other processes hold the lock
/// for tens of microseconds, so short jittered naps keep throughput up under contention.
pub(super) fn install_busy_handler(conn: &mut Connection, timeout: Duration) -> rusqlite::Result<()> {
    let mut started = Instant::now();
    conn.busy_handler(Some(move |attempt: i32| {
        if attempt == 0 {
            started = Instant::now();
        }
        if started.elapsed() >= timeout {
            return false;
        }
        let cap = (50 + 25 * attempt.min(78) as u64).min(2_000);
        std::thread::sleep(Duration::from_micros(20 + rand::random::<u64>() % cap));
        true
    }))
}

fn open_connection(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let context = path.display().to_string();
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let mut conn = Connection::open_with_flags(path, flags).map_err(backend(&context))?;
    install_busy_handler(&mut conn, options.busy_timeout).map_err(backend(&context))?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(backend(&context))?;
    // Check each b-tree cell's size as pages are read: more damage is reported as such
    // instead of being read as data, for little work.
    conn.pragma_update(None, "cell_size_check", true)
        .map_err(backend(&context))?;
    // After a checkpoint, a WAL that grew under a burst shrinks back to this size.
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)
        .map_err(backend(&context))?;
    if options.single_connection {
        // See `Writer::keep_wal_small`: a short-lived process neither checkpoints on close nor
        // automatically; it truncates the WAL itself when the WAL has grown.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(backend(&context))?;
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(backend(&context))?;
    }
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

impl Db {
    /// Open (creating if needed) the store file and its schema.
    pub(super) fn open(path: &Path, options: SqliteOptions) -> Result<Self, StoreError> {
        let context = path.display().to_string();
        let lock_path = files::sibling(path, "-writer.lock");
        let mut existing = files::check_store_files(path)?;
        let turn = files::open_lock_file(&lock_path)?;
        if existing.is_none() {
            super::fresh::create_store(path, &context)?;
            // Ours, or another process's made at the same moment: checked like any store.
            existing = files::check_store_files(path)?;
        }
        match existing {
            None => {
                return Err(StoreError::Unavailable(format!(
                    "{context} vanished right after it was created"
                )));
            }
            Some(0) => {
                return Err(StoreError::Refused(format!(
                    "{context} is empty (0 bytes): a store that existed is never started afresh \
                     (its reservations would be handed out again); restore it from a backup, or \
                     remove it and its -wal and -shm files to start an empty store"
                )));
            }
            Some(_) => {}
        }
        // A few SQLite paths report SQLITE_BUSY without calling the busy handler (a reader meeting
        // another process's WAL recovery or close-time checkpoint, a mode switch in progress):
        // the whole first open is retried until the busy timeout.
        let deadline = Instant::now() + options.busy_timeout;
        let mut attempt = 0u32;
        let (writer, revision) = loop {
            match ready_writer(path, &options, &context) {
                Ok(ready) => break ready,
                Err(Attempt::Busy(_)) if Instant::now() < deadline => {
                    attempt += 1;
                    busy_nap(attempt);
                }
                Err(Attempt::Busy(e) | Attempt::Failed(e)) => return Err(e),
            }
        };
        let writer = Writer::new(
            writer,
            (turn, lock_path),
            revision,
            options.busy_timeout,
            (options.trim_every, options.retain_changes),
        );
        let connections = if options.single_connection {
            Connections::Single(Mutex::new(writer))
        } else {
            Connections::Pooled {
                writes: GroupCommit::start(writer)?,
                readers: Mutex::default(),
                reader_returned: Condvar::new(),
            }
        };
        Ok(Self {
            path: path.to_path_buf(),
            options,
            connections,
            head_poller: std::sync::Once::new(),
            reads: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// SQLite's write-ahead log next to the store file.
    fn wal_path(&self) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push("-wal");
        PathBuf::from(name)
    }

    /// True when calls run on the caller's thread ([`SqliteOptions::single_connection`]).
    pub(super) fn is_single_connection(&self) -> bool {
        matches!(self.connections, Connections::Single(_))
    }

    pub(super) fn options(&self) -> &SqliteOptions {
        &self.options
    }

    /// How many read transactions this opened store has run.
    #[cfg(test)]
    pub(super) fn reads(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The sender behind [`Db::subscribe`] of a pooled store (none for a single connection).
    pub(super) fn head_sender(&self) -> Option<std::sync::Arc<watch::Sender<u64>>> {
        match &self.connections {
            Connections::Pooled { writes, .. } => Some(writes.sender()),
            Connections::Single(_) => None,
        }
    }

    /// The store's current revision (every process's commits).
    pub(super) fn head(&self) -> Result<u64, StoreError> {
        self.read(revision)
    }

    /// A receiver that changes whenever this process commits a write.
    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        match &self.connections {
            Connections::Pooled { writes, .. } => writes.subscribe(),
            Connections::Single(writer) => lock(writer).subscribe(),
        }
    }

    /// Run `read` in a read transaction (one consistent snapshot) on a pooled connection.
    fn read<R>(
        &self,
        mut read: impl FnMut(&Transaction<'_>) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.with_reader(|conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Deferred)
                .map_err(backend("begin read"))?;
            let out = read(&tx)?;
            tx.finish().map_err(backend("end read"))?;
            Ok(out)
        })
    }

    /// Run `read` on a pooled connection (lending it out and taking it back), or on the single
    /// connection. A read that met SQLITE_BUSY (see [`Db::open`]) is run again until the busy
    /// timeout: reads have no effects.
    fn with_reader<R>(
        &self,
        mut read: impl FnMut(&mut Connection) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let deadline = Instant::now() + self.options.busy_timeout;
        let mut attempt = 0u32;
        loop {
            let result = match &self.connections {
                Connections::Pooled {
                    readers,
                    reader_returned,
                    ..
                } => {
                    let mut conn = self.take_reader(readers, reader_returned)?;
                    let result = read(&mut conn);
                    lock(readers).idle.push(conn);
                    reader_returned.notify_one();
                    result
                }
                Connections::Single(writer) => read(lock(writer).connection()),
            };
            match result {
                Err(StoreError::Unavailable(_)) if Instant::now() < deadline => {
                    attempt += 1;
                    busy_nap(attempt);
                }
                other => return other,
            }
        }
    }

    /// An idle reader, a new one while fewer than [`MAX_READERS`] exist, or the next one returned.
    fn take_reader(
        &self,
        readers: &Mutex<ReaderPool>,
        reader_returned: &Condvar,
    ) -> Result<Connection, StoreError> {
        let mut pool = lock(readers);
        loop {
            if let Some(conn) = pool.idle.pop() {
                return Ok(conn);
            }
            if pool.open < MAX_READERS {
                pool.open += 1;
                drop(pool);
                return open_connection(&self.path, &self.options).inspect_err(|_| {
                    lock(readers).open -= 1;
                    reader_returned.notify_one();
                });
            }
            pool = reader_returned.wait(pool).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Run one write through the group commit, or at once on the single connection.
    async fn write(
        &self,
        op: impl FnOnce(&Transaction<'_>, u64) -> Result<Object, StoreError> + Send + 'static,
    ) -> Result<Object, StoreError> {
        match &self.connections {
            Connections::Pooled { writes, .. } => writes.submit(Box::new(op)).await,
            Connections::Single(writer) => {
                let mut writer = lock(writer);
                let answer = writer.write_now(Box::new(op));
                writer.keep_wal_small(&self.wal_path(), self.options.busy_timeout);
                answer
            }
        }
    }

    pub(super) fn get(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, StoreError> {
        let key = RowKey::new(ty, namespace, name);
        // One statement is its own snapshot: no explicit transaction needed.
        self.with_reader(|conn| fetch(conn, &key))
    }

    pub(super) fn list(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError> {
        self.read(|tx| {
            let revision = revision(tx)?;
            let items = select_objects(tx, ty, namespace, opts)?;
            Ok(ObjectList {
                items,
                resource_version: revision.to_string(),
            })
        })
    }

    pub(super) async fn create(&self, ty: ResourceType, obj: Object) -> Result<Object, StoreError> {
        semantics::check_identity(&ty, &obj)?;
        self.write(move |tx, next| {
            let ty = &ty;
            let key = RowKey::of(ty, &obj);
            let exists = tx
                .prepare_cached(
                    "SELECT 1 FROM objects WHERE api_version = ?1 AND kind = ?2 AND namespace = ?3 AND name = ?4",
                )
                .and_then(|mut s| s.exists(params![key.api_version, key.kind, key.namespace, key.name]))
                .map_err(backend("look up object"))?;
            if exists {
                return Err(StoreError::AlreadyExists {
                    kind: ty.kind.clone(),
                    key: obj.key(),
                });
            }
            let stored = semantics::created(ty, obj, next)?;
            let body = encode(&stored)?;
            put(tx, &key, next, &body)?;
            log(tx, &key, next, EVENT_ADDED, &body)?;
            Ok(stored)
        })
        .await
    }

    pub(super) async fn update(
        &self,
        ty: ResourceType,
        obj: Object,
        status_only: bool,
    ) -> Result<Object, StoreError> {
        semantics::check_identity(&ty, &obj)?;
        self.write(move |tx, next| {
            let ty = &ty;
            let key = RowKey::of(ty, &obj);
            let stored = fetch(tx, &key)?.ok_or_else(|| StoreError::NotFound {
                kind: ty.kind.clone(),
                key: obj.key(),
            })?;
            match semantics::updated(ty, &stored, obj, status_only, next)? {
                UpdateOutcome::Stored(next_obj) => {
                    let body = encode(&next_obj)?;
                    put(tx, &key, next, &body)?;
                    log(tx, &key, next, EVENT_MODIFIED, &body)?;
                    Ok(next_obj)
                }
                UpdateOutcome::Removed(last) => {
                    let body = encode(&last)?;
                    remove(tx, &key)?;
                    log(tx, &key, next, EVENT_DELETED, &body)?;
                    Ok(last)
                }
            }
        })
        .await
    }

    pub(super) async fn delete(
        &self,
        ty: ResourceType,
        namespace: Option<String>,
        name: String,
        precondition: Option<String>,
    ) -> Result<Option<Object>, StoreError> {
        let result = self
            .write(move |tx, next| {
                let ty = &ty;
                let key = RowKey::new(ty, namespace.as_deref(), &name);
                let Some(stored) = fetch(tx, &key)? else {
                    return Err(StoreError::NotFound {
                        kind: ty.kind.clone(),
                        key: ty.key(namespace.as_deref(), &name),
                    });
                };
                Ok(
                    match semantics::deleted(ty, &stored, precondition.as_deref(), next)? {
                        DeleteOutcome::Removed(last) => {
                            remove(tx, &key)?;
                            log(tx, &key, next, EVENT_DELETED, &encode(&last)?)?;
                            last
                        }
                        DeleteOutcome::Terminating(next_obj) => {
                            let body = encode(&next_obj)?;
                            put(tx, &key, next, &body)?;
                            log(tx, &key, next, EVENT_MODIFIED, &body)?;
                            next_obj
                        }
                    },
                )
            })
            .await;
        match result {
            // Absent: nothing was written and no revision was used.
            Err(StoreError::NotFound { .. }) => Ok(None),
            other => other.map(Some),
        }
    }

    /// The current objects (as `Added`) and the revision they are at, from one snapshot.
    pub(super) fn snapshot(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<(Vec<WatchEvent>, u64), StoreError> {
        let list = self.list(ty, namespace, opts)?;
        let rv = parse_rv(&list.resource_version)?;
        Ok((list.items.into_iter().map(WatchEvent::Added).collect(), rv))
    }

    /// Changes of `ty` (in `namespace`) after revision `after`, and the revision the caller has
    /// now seen up to. Fails with [`StoreError::Expired`] when `after` was trimmed from the log.
    pub(super) fn changes_after(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        after: u64,
    ) -> Result<(Vec<WatchEvent>, u64), StoreError> {
        self.read(|tx| {
            let head = revision(tx)?;
            if head <= after {
                return Ok((Vec::new(), after));
            }
            let compacted: i64 = tx
                .prepare_cached("SELECT value FROM weft_meta WHERE key = 'compacted'")
                .and_then(|mut s| s.query_row([], |r| r.get(0)))
                .map_err(backend("read compaction mark"))?;
            if after < compacted as u64 {
                return Err(StoreError::Expired(format!(
                    "{} changes after resourceVersion {after} were compacted (oldest kept is {}); re-list and watch again",
                    ty.kind,
                    compacted + 1
                )));
            }
            let mut stmt = tx
                .prepare_cached(
                    "SELECT rv, event, body FROM changes
                     WHERE rv > ?1 AND rv <= ?2 AND api_version = ?3 AND kind = ?4
                       AND (?5 IS NULL OR namespace = ?5)
                     ORDER BY rv LIMIT ?6",
                )
                .map_err(backend("prepare change query"))?;
            let rows = stmt
                .query_map(
                    params![after as i64, head as i64, ty.api_version, ty.kind, namespace, POLL_BATCH],
                    |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?)),
                )
                .map_err(backend("read changes"))?;
            let mut events = Vec::new();
            let mut last_rv = after;
            for row in rows {
                let (rv, event, body) = row.map_err(backend("read change"))?;
                let obj = decode(&body)?;
                last_rv = rv as u64;
                events.push(match event {
                    EVENT_ADDED => WatchEvent::Added(obj),
                    EVENT_DELETED => WatchEvent::Deleted(obj),
                    _ => WatchEvent::Modified(obj),
                });
            }
            let seen = if events.len() as i64 == POLL_BATCH { last_rv } else { head };
            Ok((events, seen))
        })
    }
}

fn current_journal_mode(conn: &Connection) -> rusqlite::Result<String> {
    conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))
}

fn schema_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// Lock a mutex whose holder may have panicked (the state it guards stays usable).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A short jittered sleep before the `attempt`th retry of an operation that met SQLITE_BUSY.
fn busy_nap(attempt: u32) {
    let cap = 200 * u64::from(attempt.clamp(1, 50));
    std::thread::sleep(Duration::from_micros(100 + rand::random::<u64>() % cap));
}

/// Why one attempt at opening the store failed: worth another try, or not.
pub(super) enum Attempt {
    Busy(StoreError),
    Failed(StoreError),
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(code, _)
            if matches!(code.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Classify an SQLite error met while opening, keeping [`backend`]'s message.
fn attempt_error(context: &str) -> impl FnOnce(rusqlite::Error) -> Attempt + '_ {
    move |e| {
        if is_busy(&e) {
            Attempt::Busy(backend(context)(e))
        } else {
            Attempt::Failed(backend(context)(e))
        }
    }
}

/// One attempt at the writer connection of a ready file (WAL mode, current schema) and the
/// store's revision.
fn ready_writer(path: &Path, options: &SqliteOptions, context: &str) -> Result<(Connection, u64), Attempt> {
    let writer = open_connection(path, options).map_err(Attempt::Failed)?;
    // Journal mode and schema persist in the file, set up before it was linked into place
    // (`create_store`): an existing store needs two cheap reads, and one without them is damaged.
    let mode = current_journal_mode(&writer).map_err(attempt_error(context))?;
    let version = schema_version(&writer).map_err(attempt_error(context))?;
    if version > SCHEMA_VERSION {
        return Err(Attempt::Failed(StoreError::Unavailable(format!(
            "{context}: store schema version {version} is newer than this program's ({SCHEMA_VERSION})"
        ))));
    }
    if version != SCHEMA_VERSION || !mode.eq_ignore_ascii_case("wal") {
        return Err(Attempt::Failed(StoreError::Refused(format!(
            "{context} has no weft schema (schema version {version}, journal mode {mode}): a store \
             that existed is never set up afresh; restore it from a backup, or remove it and its \
             -wal and -shm files to start an empty store"
        ))));
    }
    if options.check_integrity {
        quick_check(&writer, context)?;
    }
    let revision: i64 = writer
        .query_row("SELECT value FROM weft_meta WHERE key = 'revision'", [], |r| {
            r.get(0)
        })
        .map_err(attempt_error(context))?;
    Ok((writer, revision as u64))
}

/// SQLite's `quick_check` (every page and b-tree, without comparing indexes to tables).
fn quick_check(conn: &Connection, context: &str) -> Result<(), Attempt> {
    let mut stmt = conn
        .prepare("PRAGMA quick_check(5)")
        .map_err(attempt_error(context))?;
    let found: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(attempt_error(context))?;
    if found.len() == 1 && found[0] == "ok" {
        return Ok(());
    }
    Err(Attempt::Failed(StoreError::Refused(format!(
        "{context} failed its integrity check: {}; restore it from a backup (`weft ipam check` verifies the restored store)",
        found.join("; ")
    ))))
}

/// Switch a new file to WAL and create the schema.
pub(super) fn set_up(conn: &mut Connection, context: &str) -> Result<(), Attempt> {
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(attempt_error(context))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Attempt::Failed(StoreError::Unavailable(format!(
            "{context}: cannot switch to WAL journal mode (got {mode})"
        ))));
    }
    ensure_schema(conn, &format!("{context}: creating the schema"))
}

fn ensure_schema(conn: &mut Connection, context: &str) -> Result<(), Attempt> {
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(attempt_error(context))?;
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    if version > SCHEMA_VERSION {
        return Err(Attempt::Failed(StoreError::Unavailable(format!(
            "store schema version {version} is newer than this program's ({SCHEMA_VERSION})"
        ))));
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(attempt_error(context))?;
    tx.execute_batch(SCHEMA).map_err(attempt_error(context))?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(attempt_error(context))?;
    tx.commit().map_err(attempt_error(context))
}

pub(super) fn revision(tx: &Transaction<'_>) -> Result<u64, StoreError> {
    tx.prepare_cached("SELECT value FROM weft_meta WHERE key = 'revision'")
        .and_then(|mut s| s.query_row([], |r| r.get::<_, i64>(0)))
        .map(|v| v as u64)
        .map_err(backend("read revision"))
}

fn fetch(tx: &Connection, key: &RowKey<'_>) -> Result<Option<Object>, StoreError> {
    let body: Option<String> = tx
        .prepare_cached(
            "SELECT body FROM objects WHERE api_version = ?1 AND kind = ?2 AND namespace = ?3 AND name = ?4",
        )
        .and_then(|mut s| {
            s.query_row(params![key.api_version, key.kind, key.namespace, key.name], |r| {
                r.get(0)
            })
            .optional()
        })
        .map_err(backend("read object"))?;
    body.as_deref().map(decode).transpose()
}

fn select_objects(
    tx: &Transaction<'_>,
    ty: &ResourceType,
    namespace: Option<&str>,
    opts: &ListOptions,
) -> Result<Vec<Object>, StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT body FROM objects WHERE api_version = ?1 AND kind = ?2 AND (?3 IS NULL OR namespace = ?3)
             ORDER BY namespace, name",
        )
        .map_err(backend("prepare list"))?;
    let rows = stmt
        .query_map(params![ty.api_version, ty.kind, namespace], |r| {
            r.get::<_, String>(0)
        })
        .map_err(backend("list objects"))?;
    let mut items = Vec::new();
    for body in rows {
        let obj = decode(&body.map_err(backend("list objects"))?)?;
        if opts.matches(&obj) {
            items.push(obj);
        }
    }
    Ok(items)
}

fn put(tx: &Transaction<'_>, key: &RowKey<'_>, rv: u64, body: &str) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO objects (api_version, kind, namespace, name, rv, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (api_version, kind, namespace, name) DO UPDATE SET rv = excluded.rv, body = excluded.body",
    )
    .and_then(|mut s| s.execute(params![key.api_version, key.kind, key.namespace, key.name, rv as i64, body]))
    .map(drop)
    .map_err(backend("write object"))
}

fn remove(tx: &Transaction<'_>, key: &RowKey<'_>) -> Result<(), StoreError> {
    tx.prepare_cached(
        "DELETE FROM objects WHERE api_version = ?1 AND kind = ?2 AND namespace = ?3 AND name = ?4",
    )
    .and_then(|mut s| s.execute(params![key.api_version, key.kind, key.namespace, key.name]))
    .map(drop)
    .map_err(backend("delete object"))
}

fn log(tx: &Transaction<'_>, key: &RowKey<'_>, rv: u64, event: i64, body: &str) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO changes (rv, api_version, kind, namespace, name, event, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .and_then(|mut s| {
        s.execute(params![rv as i64, key.api_version, key.kind, key.namespace, key.name, event, body])
    })
    .map(drop)
    .map_err(backend("append change"))
}

/// Drop change-log entries older than the newest `retain`, remembering where the log now starts.
pub(super) fn trim(tx: &Transaction<'_>, head: u64, retain: u64) -> Result<(), StoreError> {
    let Some(cut) = head.checked_sub(retain.max(1)) else {
        return Ok(());
    };
    tx.prepare_cached("DELETE FROM changes WHERE rv <= ?1")
        .and_then(|mut s| s.execute([cut as i64]))
        .map_err(backend("trim changes"))?;
    tx.prepare_cached("UPDATE weft_meta SET value = MAX(value, ?1) WHERE key = 'compacted'")
        .and_then(|mut s| s.execute([cut as i64]))
        .map(drop)
        .map_err(backend("mark compaction"))
}
