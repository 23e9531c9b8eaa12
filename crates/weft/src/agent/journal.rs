//! The agent's IPAM release journal (format and decisions: `weft_ipam::journal`): a DEL whose
//! release cannot reach the store is recorded here and answered as a success, so pod teardown
//! does not wait for the API server; the journal is replayed in order as soon as the store
//! answers (and before any ADD the agent serves), and survives agent restarts. The file is
//! 0600 in the agent's state directory.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use weft_cni::CniVersion;
use weft_cni::plugin::Decoded;
use weft_ipam::journal::{self, ReplayStep};
use weft_ipam::{IpamError, IpamRequest};
use weft_plugin_client::wire;

use super::Agent;

/// The journal file under the agent's state directory.
pub const JOURNAL_FILE: &str = "ipam-release-journal";

/// The first wait before replaying again while the store is unreachable; doubles up to
/// [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(30);

/// Releases waiting for the store.
pub struct ReleaseJournal {
    path: PathBuf,
    /// One appender or replayer at a time: replay rewrites the file.
    lock: tokio::sync::Mutex<()>,
    pending: AtomicBool,
}

impl ReleaseJournal {
    /// The journal of the agent whose state directory is `state_dir` (entries left by an
    /// earlier run are pending).
    pub fn open(state_dir: &Path) -> Self {
        let path = state_dir.join(JOURNAL_FILE);
        let pending = std::fs::metadata(&path).is_ok_and(|m| m.len() > 0);
        Self {
            path,
            lock: tokio::sync::Mutex::new(()),
            pending: AtomicBool::new(pending),
        }
    }

    /// True when releases wait to be replayed.
    pub fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Record `call` (as the installed `weft-ipam` sent it), durably, before DEL is answered.
    pub async fn append(&self, call: &[u8]) -> std::io::Result<()> {
        let _turn = self.lock.lock().await;
        let (path, line) = (self.path.clone(), journal::encode_entry(call));
        tokio::task::spawn_blocking(move || {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&path)?;
            file.write_all(&line)?;
            file.sync_data()
        })
        .await
        .map_err(std::io::Error::other)??;
        self.pending.store(true, Ordering::Release);
        Ok(())
    }

    /// Replay the journal in order until the store is unreachable again; returns how many
    /// releases were done and how many wait.
    pub async fn replay(&self, agent: &Agent) -> std::io::Result<(usize, usize)> {
        let _turn = self.lock.lock().await;
        let path = self.path.clone();
        let bytes = match tokio::task::spawn_blocking(move || std::fs::read(path))
            .await
            .map_err(std::io::Error::other)?
        {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let (calls, skipped) = journal::decode_journal(&bytes);
        for problem in skipped {
            tracing::warn!(journal = %self.path.display(), "{problem}");
        }
        let mut done = 0;
        for call in &calls {
            match journal::replay_step(&release(agent, call).await) {
                ReplayStep::Done => done += 1,
                ReplayStep::Drop => {
                    tracing::warn!("journaled IPAM release can never succeed; dropped");
                    done += 1;
                }
                ReplayStep::Wait => break,
            }
        }
        let rest = journal::remaining(&calls, done);
        let left = calls.len() - done;
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || rewrite(&path, &rest))
            .await
            .map_err(std::io::Error::other)??;
        self.pending.store(left > 0, Ordering::Release);
        Ok((done, left))
    }
}

/// Replace the journal with `rest` (atomically), or remove it when nothing is left.
fn rewrite(path: &Path, rest: &[u8]) -> std::io::Result<()> {
    if rest.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(rest)?;
    file.sync_data()?;
    std::fs::rename(&tmp, path)
}

/// Release what one journaled call held, on the agent's store.
async fn release(agent: &Agent, body: &[u8]) -> Result<(), IpamError> {
    let call = wire::decode_call(body).map_err(|e| IpamError::Request(format!("journaled call: {e}")))?;
    let lookup = |key: &str| call.var(key).map(str::to_string);
    let request = match weft_cni::plugin::decode(&CniVersion::SUPPORTED, lookup, call.stdin) {
        Decoded::Request(request) => request,
        Decoded::Answered(_) => return Err(IpamError::Request("journaled call is not a DEL request".into())),
    };
    let request = IpamRequest::from_plugin_request(&request, agent.args.node.clone());
    weft_ipam::plugin::release_held(&request, &agent.ipam_store, Some(&agent.ipam_held)).await
}

/// Replay pending releases until `stop`: soon after the store answers again, backing off while
/// it does not; one log line when releases start waiting and one when they are done.
pub async fn run(agent: Arc<Agent>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut wait = FIRST_RETRY;
    let mut waiting_reported = false;
    loop {
        if agent.journal.pending() {
            match agent.journal.replay(&agent).await {
                Ok((done, 0)) => {
                    if done > 0 || waiting_reported {
                        tracing::info!("replayed {done} journaled IPAM releases");
                    }
                    waiting_reported = false;
                    wait = FIRST_RETRY;
                }
                Ok((done, left)) => {
                    if !waiting_reported {
                        tracing::warn!(
                            "{left} IPAM releases wait for the store (their addresses stay reserved); replayed {done}; retrying with backoff"
                        );
                        waiting_reported = true;
                    }
                    wait = (wait * 2).min(MAX_RETRY);
                }
                Err(e) => {
                    tracing::warn!("IPAM release journal: {e}");
                    wait = (wait * 2).min(MAX_RETRY);
                }
            }
        } else {
            wait = FIRST_RETRY;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}
