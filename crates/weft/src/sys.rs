//! Process-level helpers every role uses: blocking work off the async workers, PATH lookups.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// Run blocking work (netlink, netns switches, QMP, QEMU, initramfs building) on tokio's blocking
/// pool, never on an async worker. A panic in `work` resumes in the caller, as if it had run
/// inline; the only other failure is a runtime shutting down.
pub async fn blocking<R: Send + 'static>(work: impl FnOnce() -> R + Send + 'static) -> anyhow::Result<R> {
    match tokio::task::spawn_blocking(work).await {
        Ok(out) => Ok(out),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(e).context("blocking task"),
    }
}

/// [`blocking`] with `state` moved to the blocking thread and back (the work borrows it
/// mutably, as it did inline).
pub async fn blocking_with<T, R>(
    state: &mut T,
    work: impl FnOnce(&mut T) -> R + Send + 'static,
) -> anyhow::Result<R>
where
    T: Default + Send + 'static,
    R: Send + 'static,
{
    let mut owned = std::mem::take(state);
    let (owned, out) = blocking(move || {
        let out = work(&mut owned);
        (owned, out)
    })
    .await?;
    *state = owned;
    Ok(out)
}

/// A program on PATH.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.exists())
}
