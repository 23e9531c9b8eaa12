//! Group commit: writers of one process queue their operation; whoever holds the write
//! connection runs every queued operation in one `BEGIN IMMEDIATE` transaction (each under its
//! own savepoint, each with its own revision) and hands every caller its result after the
//! commit. Under load one file lock and one WAL commit serve many writes; alone, a write is a
//! transaction of its own.

use std::collections::VecDeque;
use std::sync::{Mutex, mpsc};

use rusqlite::{Connection, Transaction, TransactionBehavior};
use tokio::sync::watch;

use super::db::{backend, revision, trim};
use crate::{Object, StoreError};

/// Most operations committed together, so one transaction stays short.
const MAX_BATCH: usize = 64;

/// One write: given the transaction and the revision it gets, the object it stored or removed.
/// A failed operation leaves nothing behind (its savepoint is rolled back).
pub(super) type WriteOp = Box<dyn FnOnce(&Transaction<'_>, u64) -> Result<Object, StoreError> + Send>;

struct Pending {
    op: WriteOp,
    reply: mpsc::SyncSender<Result<Object, StoreError>>,
}

/// The write side of the store.
pub(super) struct GroupCommit {
    writer: Mutex<Connection>,
    queue: Mutex<VecDeque<Pending>>,
    /// The last revision this process committed: wakes local watchers without waiting for a poll.
    committed: watch::Sender<u64>,
    trim_every: u64,
    retain_changes: u64,
}

impl GroupCommit {
    pub(super) fn new(writer: Connection, revision: u64, trim_every: u64, retain_changes: u64) -> Self {
        Self {
            writer: Mutex::new(writer),
            queue: Mutex::new(VecDeque::new()),
            committed: watch::channel(revision).0,
            trim_every: trim_every.max(1),
            retain_changes,
        }
    }

    /// A receiver that changes whenever this process commits a write.
    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.committed.subscribe()
    }

    /// Run `op` in a committed transaction and return its result.
    pub(super) fn submit(&self, op: WriteOp) -> Result<Object, StoreError> {
        let (reply, result) = mpsc::sync_channel(1);
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(Pending { op, reply });
        loop {
            let mut conn = self.writer.lock().unwrap_or_else(|e| e.into_inner());
            // Leaders reply before they release the connection, so once we hold it our
            // operation is either answered or still queued.
            if let Ok(answer) = result.try_recv() {
                return answer;
            }
            let batch: Vec<Pending> = {
                let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                let n = queue.len().min(MAX_BATCH);
                queue.drain(..n).collect()
            };
            if batch.is_empty() {
                return Err(StoreError::Backend("write was lost by the group commit".into()));
            }
            self.run(&mut conn, batch);
        }
    }

    fn run(&self, conn: &mut Connection, batch: Vec<Pending>) {
        let (ops, replies): (Vec<WriteOp>, Vec<_>) = batch.into_iter().map(|p| (p.op, p.reply)).unzip();
        match self.transact(conn, ops) {
            Ok((results, head)) => {
                if let Some(head) = head {
                    self.committed.send_replace(head);
                }
                for (reply, result) in replies.into_iter().zip(results) {
                    let _ = reply.send(result);
                }
            }
            Err(e) => {
                for reply in replies {
                    let _ = reply.send(Err(same_failure(&e)));
                }
            }
        }
    }

    /// Every op in one transaction; the per-op results and the new head revision if any op wrote.
    #[allow(clippy::type_complexity)]
    fn transact(
        &self,
        conn: &mut Connection,
        ops: Vec<WriteOp>,
    ) -> Result<(Vec<Result<Object, StoreError>>, Option<u64>), StoreError> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend("begin write"))?;
        let first = revision(&tx)?;
        let mut head = first;
        let isolate = ops.len() > 1;
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            if isolate {
                statement(&tx, "SAVEPOINT weft_op")?;
            }
            let result = op(&tx, head + 1);
            if isolate {
                if result.is_err() {
                    statement(&tx, "ROLLBACK TO weft_op")?;
                }
                statement(&tx, "RELEASE weft_op")?;
            }
            if result.is_ok() {
                head += 1;
            }
            results.push(result);
        }
        if head == first {
            // Nothing succeeded: dropping the transaction rolls back whatever a lone op left.
            return Ok((results, None));
        }
        tx.prepare_cached("UPDATE weft_meta SET value = ?1 WHERE key = 'revision'")
            .and_then(|mut s| s.execute([head as i64]))
            .map_err(backend("bump revision"))?;
        if first / self.trim_every != head / self.trim_every {
            trim(&tx, head, self.retain_changes)?;
        }
        tx.commit().map_err(backend("commit"))?;
        Ok((results, Some(head)))
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
