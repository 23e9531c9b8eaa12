//! Group commit: one writer thread per opened store owns the write connection. Callers queue
//! their operation and await the answer; the thread runs every queued operation in one
//! `BEGIN IMMEDIATE` transaction (each under its own savepoint, each with its own revision)
//! and answers after the commit. Under load one file lock and one WAL commit serve many writes;
//! alone, a write is a transaction of its own.

use std::fs::File;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, mpsc};

use rusqlite::{Connection, Transaction, TransactionBehavior};
use tokio::sync::{oneshot, watch};

use super::db::{backend, revision, trim};
use crate::{Object, StoreError};

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

/// What the writer thread needs besides its queue.
struct WriterThread {
    conn: Connection,
    /// Writers of every process take this `flock` around their transaction: the kernel hands
    /// it over the moment it is released, where SQLite's own lock makes waiters poll.
    turn: File,
    committed: Arc<watch::Sender<u64>>,
    trim_every: u64,
    retain_changes: u64,
}

impl GroupCommit {
    /// Start the writer thread on `conn`.
    pub(super) fn start(
        conn: Connection,
        turn: File,
        revision: u64,
        trim_every: u64,
        retain_changes: u64,
    ) -> Result<Self, StoreError> {
        let (queue, pending) = mpsc::channel();
        let committed = Arc::new(watch::channel(revision).0);
        let mut writer = WriterThread {
            conn,
            turn,
            committed: committed.clone(),
            trim_every: trim_every.max(1),
            retain_changes,
        };
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

    /// Run `op` in a committed transaction and return its result.
    pub(super) async fn submit(&self, op: WriteOp) -> Answer {
        let (reply, answer) = oneshot::channel();
        let stopped = || StoreError::Backend("the store writer thread has stopped".into());
        self.queue.send(Pending { op, reply }).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

impl WriterThread {
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
        let _turn = Turn::take(&self.turn)?;
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

/// Holding the cross-process writer turn; released on drop.
struct Turn<'a>(&'a File);

impl<'a> Turn<'a> {
    fn take(file: &'a File) -> Result<Self, StoreError> {
        file.lock()
            .map_err(|e| StoreError::Unavailable(format!("taking the store writer lock: {e}")))?;
        Ok(Self(file))
    }
}

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
