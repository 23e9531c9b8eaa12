//! Group commit: one writer thread per opened store owns the write connection. Callers queue
//! their operation and await the answer; the thread runs every queued operation in one
//! `BEGIN IMMEDIATE` transaction (each under its own savepoint, each with its own revision)
//! and answers after the commit. Under load one file lock and one WAL commit serve many writes;
//! alone, a write is a transaction of its own.

use std::fs::{File, TryLockError};
use std::os::fd::AsRawFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rusqlite::{Connection, Transaction, TransactionBehavior};
use tokio::sync::{oneshot, watch};

use super::db::{backend, install_busy_handler, revision, trim};
use crate::{Object, StoreError};

/// WAL size past which a single-connection writer truncates the WAL when no one is reading: the
/// next process to open the file first reads the whole WAL (recovery), so it is kept small.
const TRIM_WAL_IF_IDLE: u64 = 256 * 1024;

/// WAL size past which a single-connection writer waits for readers to truncate it.
const TRIM_WAL_ALWAYS: u64 = 16 * 1024 * 1024;

/// Most operations committed together, so one transaction stays short.
const MAX_BATCH: usize = 128;

/// One write: given the transaction and the revision it gets, the object it stored or removed.
/// A failed operation leaves nothing behind (its savepoint is rolled back).
pub(super) type WriteOp = Box<dyn FnOnce(&Transaction<'_>, u64) -> Result<Object, StoreError> + Send>;

type Answer = Result<Object, StoreError>;

struct Pending {
    op: WriteOp,
    reply: oneshot::Sender<Answer>,
}

/// The write side of the store; the writer thread stops when this is dropped.
pub(super) struct GroupCommit {
    queue: mpsc::Sender<Pending>,
    /// The last revision this process committed: wakes local watchers without waiting for a poll.
    committed: Arc<watch::Sender<u64>>,
}

/// The write connection and what committing on it needs: owned by the writer thread of a
/// [`GroupCommit`], or used inline by a single-connection store.
pub(super) struct Writer {
    conn: Connection,
    /// Writers of every process take this `flock` around their transaction: the kernel hands
    /// it over the moment it is released, where SQLite's own lock makes waiters poll.
    turn: TurnLock,
    committed: Arc<watch::Sender<u64>>,
    trim_every: u64,
    retain_changes: u64,
}

impl GroupCommit {
    /// Start the writer thread on `writer`.
    pub(super) fn start(mut writer: Writer) -> Result<Self, StoreError> {
        let (queue, pending) = mpsc::channel();
        let committed = writer.committed.clone();
        std::thread::Builder::new()
            .name("weft-store-writer".into())
            .spawn(move || writer.serve(pending))
            .map_err(|e| StoreError::Unavailable(format!("starting the store writer thread: {e}")))?;
        Ok(Self { queue, committed })
    }

    /// A receiver that changes whenever this process commits a write.
    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.committed.subscribe()
    }

    /// The sender of [`GroupCommit::subscribe`]'s receivers.
    pub(super) fn sender(&self) -> Arc<watch::Sender<u64>> {
        self.committed.clone()
    }

    /// Run `op` in a committed transaction and return its result.
    pub(super) async fn submit(&self, op: WriteOp) -> Answer {
        let (reply, answer) = oneshot::channel();
        let stopped = || StoreError::Backend("the store writer thread has stopped".into());
        self.queue.send(Pending { op, reply }).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

impl Writer {
    /// `conn` is ready (WAL, schema) and at `revision`; `turn` is the writers' `flock` file
    /// (and its path), waited for at most `turn_timeout`.
    pub(super) fn new(
        conn: Connection,
        (turn, turn_path): (File, PathBuf),
        revision: u64,
        turn_timeout: Duration,
        (trim_every, retain_changes): (u64, u64),
    ) -> Self {
        Self {
            conn,
            turn: TurnLock {
                file: turn,
                path: turn_path,
                timeout: turn_timeout,
                waiting: None,
            },
            committed: Arc::new(watch::channel(revision).0),
            trim_every: trim_every.max(1),
            retain_changes,
        }
    }

    /// The connection, for reads between writes.
    pub(super) fn connection(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// A receiver that changes whenever this writer commits.
    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.committed.subscribe()
    }

    /// Run one write now, on the calling thread, in a transaction of its own.
    pub(super) fn write_now(&mut self, op: WriteOp) -> Answer {
        match self.transact(vec![op]) {
            Ok((answers, head)) => {
                if let Some(head) = head {
                    self.committed.send_replace(head);
                }
                answers
                    .into_iter()
                    .next()
                    .unwrap_or_else(|| Err(StoreError::Backend("a store write gave no answer".into())))
            }
            Err(e) => Err(e),
        }
    }

    /// Housekeeping of single-connection stores, after each write.
    ///
    /// Short-lived processes skip SQLite's checkpoint on close (two fsyncs whenever a process
    /// happens to be the last to close the file) and its automatic checkpoints: every process
    /// that opens the file first runs WAL recovery, which forgets what was checkpointed, so an
    /// automatic checkpoint would copy the whole WAL again each time and the WAL would never
    /// restart. Instead, once the WAL passes [`TRIM_WAL_IF_IDLE`], the writer checkpoints and
    /// truncates it if no other connection is reading (else a later writer will), and past
    /// [`TRIM_WAL_ALWAYS`] waits for readers to do so. Best effort: a failure only leaves the
    /// WAL as it was.
    pub(super) fn keep_wal_small(&mut self, wal: &Path, busy_timeout: Duration) {
        let Ok(size) = std::fs::metadata(wal).map(|m| m.len()) else {
            return;
        };
        if size <= TRIM_WAL_IF_IDLE {
            return;
        }
        let wait_for_readers = size > TRIM_WAL_ALWAYS;
        let Ok(_turn) = self.turn.take() else {
            return;
        };
        if !wait_for_readers {
            let _ = self.conn.busy_handler(None::<fn(i32) -> bool>);
        }
        let _ = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        if !wait_for_readers {
            let _ = install_busy_handler(&mut self.conn, busy_timeout);
        }
    }

    fn serve(&mut self, pending: mpsc::Receiver<Pending>) {
        while let Ok(first) = pending.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match pending.try_recv() {
                    Ok(more) => batch.push(more),
                    Err(_) => break,
                }
            }
            self.run(batch);
        }
    }

    fn run(&mut self, batch: Vec<Pending>) {
        let (ops, replies): (Vec<WriteOp>, Vec<_>) = batch.into_iter().map(|p| (p.op, p.reply)).unzip();
        match self.transact(ops) {
            Ok((answers, head)) => {
                if let Some(head) = head {
                    self.committed.send_replace(head);
                }
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(answer);
                }
            }
            Err(e) => {
                for reply in replies {
                    let _ = reply.send(Err(same_failure(&e)));
                }
            }
        }
    }

    /// Every op in one transaction; the per-op answers and the new head revision if any op wrote.
    fn transact(&mut self, ops: Vec<WriteOp>) -> Result<(Vec<Answer>, Option<u64>), StoreError> {
        let _turn = self.turn.take()?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend("begin write"))?;
        let first = revision(&tx)?;
        let mut head = first;
        let isolate = ops.len() > 1;
        let mut answers = Vec::with_capacity(ops.len());
        for op in ops {
            if isolate {
                statement(&tx, "SAVEPOINT weft_op")?;
            }
            let answer = catch_unwind(AssertUnwindSafe(|| op(&tx, head + 1)))
                .unwrap_or_else(|_| Err(StoreError::Backend("a store write panicked".into())));
            if isolate {
                if answer.is_err() {
                    statement(&tx, "ROLLBACK TO weft_op")?;
                }
                statement(&tx, "RELEASE weft_op")?;
            }
            if answer.is_ok() {
                head += 1;
            }
            answers.push(answer);
        }
        if head == first {
            // Nothing succeeded: dropping the transaction rolls back whatever a lone op left.
            return Ok((answers, None));
        }
        tx.prepare_cached("UPDATE weft_meta SET value = ?1 WHERE key = 'revision'")
            .and_then(|mut s| s.execute([head as i64]))
            .map_err(backend("bump revision"))?;
        if first / self.trim_every != head / self.trim_every {
            trim(&tx, head, self.retain_changes)?;
        }
        tx.commit().map_err(backend("commit"))?;
        Ok((answers, Some(head)))
    }
}

/// The writers' `flock` file and how it is waited for.
struct TurnLock {
    file: File,
    /// Where `file` is, for errors.
    path: PathBuf,
    /// Longest wait.
    timeout: Duration,
    /// The helper of a wait that timed out, still blocked on the lock: the next wait goes on
    /// with it rather than starting another (a lock held for hours leaves one blocked thread,
    /// not one per write).
    waiting: Option<mpsc::Receiver<()>>,
}

impl TurnLock {
    /// Take the turn, waiting at most the timeout: an unbounded wait would let whoever holds the
    /// lock (a stuck process, or anyone who could open the file) stop every writer.
    fn take(&mut self) -> Result<Turn<'_>, StoreError> {
        let deadline = std::time::Instant::now() + self.timeout;
        loop {
            match self.file.try_lock() {
                Ok(()) => return Ok(Turn(&self.file)),
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(self.failed(e)),
            }
            let freed = match self.waiting.take() {
                Some(freed) => freed,
                None => self.watch_for_release()?,
            };
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match freed.recv_timeout(left) {
                // Free a moment ago: try again (another process may have been quicker).
                Ok(()) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.waiting = Some(freed);
                    return Err(StoreError::Unavailable(format!(
                        "store writer lock {} held by another process for {} s",
                        self.path.display(),
                        self.timeout.as_secs_f64()
                    )));
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(StoreError::Unavailable(format!(
                        "taking the store writer lock {}: the wait failed",
                        self.path.display()
                    )));
                }
            }
        }
    }

    /// flock has no timeout. A helper thread blocks on a new open file description of the same
    /// file (so it wakes the moment the lock is free, no polling), releases it at once and says
    /// so; the lock is never kept by a helper nobody waits for.
    fn watch_for_release(&self) -> Result<mpsc::Receiver<()>, StoreError> {
        let waiter =
            File::open(format!("/proc/self/fd/{}", self.file.as_raw_fd())).map_err(|e| self.failed(e))?;
        let (freed, watch) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("weft-store-turn".into())
            .spawn(move || {
                if waiter.lock().is_ok() {
                    drop(waiter);
                    let _ = freed.send(());
                }
            })
            .map_err(|e| self.failed(e))?;
        Ok(watch)
    }

    fn failed(&self, e: std::io::Error) -> StoreError {
        StoreError::Unavailable(format!(
            "taking the store writer lock {}: {e}",
            self.path.display()
        ))
    }
}

/// Holding the cross-process writer turn; released on drop.
struct Turn<'a>(&'a File);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

fn statement(tx: &Transaction<'_>, sql: &str) -> Result<(), StoreError> {
    tx.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .map(drop)
        .map_err(backend("savepoint"))
}

/// The error every operation of a failed transaction reports (errors are not `Clone`).
fn same_failure(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
        other => StoreError::Backend(other.to_string()),
    }
}
