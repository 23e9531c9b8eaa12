//! Watches on the SQLite store: replay the change log after a revision, then poll it.

use std::collections::VecDeque;
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::watch;

use super::db::Db;
use crate::{ListOptions, ResourceType, StoreError, WatchEvent, WatchStream};

/// Which changes a watch delivers.
pub(super) struct Filter {
    pub(super) ty: ResourceType,
    pub(super) namespace: Option<String>,
    pub(super) opts: ListOptions,
}

struct State {
    db: Arc<Db>,
    filter: Arc<Filter>,
    pending: VecDeque<WatchEvent>,
    /// Every change up to this revision has been read from the log.
    seen: u64,
    wake: watch::Receiver<u64>,
    failed: bool,
}

/// A stream of `backlog` then every change of the filter's type after revision `from`.
pub(super) fn stream(
    db: Arc<Db>,
    filter: Filter,
    backlog: Vec<WatchEvent>,
    from: u64,
    wake: watch::Receiver<u64>,
) -> WatchStream {
    let state = State {
        db,
        filter: Arc::new(filter),
        pending: backlog.into(),
        seen: from,
        wake,
        failed: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        let item = next(&mut state).await?;
        Some((item, state))
    })
    .boxed()
}

async fn next(state: &mut State) -> Option<Result<WatchEvent, StoreError>> {
    loop {
        if let Some(event) = state.pending.pop_front() {
            return Some(Ok(event));
        }
        if state.failed {
            return None;
        }
        state.wake.borrow_and_update();
        let (db, filter, after) = (state.db.clone(), state.filter.clone(), state.seen);
        let polled = tokio::task::spawn_blocking(move || {
            db.changes_after(&filter.ty, filter.namespace.as_deref(), after)
        })
        .await
        .unwrap_or_else(|e| Err(StoreError::Backend(format!("watch poll task failed: {e}"))));
        match polled {
            Err(e) => {
                state.failed = true;
                return Some(Err(e));
            }
            Ok((events, seen)) => {
                let advanced = seen > state.seen;
                state.seen = seen;
                let opts = &state.filter.opts;
                state
                    .pending
                    .extend(events.into_iter().filter(|e| opts.matches(e.object())));
                if !advanced {
                    let interval = state.db.options().poll_interval;
                    tokio::select! {
                        _ = state.wake.changed() => {}
                        _ = tokio::time::sleep(interval) => {}
                    }
                }
            }
        }
    }
}
