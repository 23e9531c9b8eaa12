//! A brand-new store: made only where no store file exists, set up in a private temporary file
//! and linked into place, so that a store file without its schema is known to be damaged.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::db::{Attempt, backend, set_up};
use super::files;
use crate::StoreError;

/// Make the store file at `path`, which does not exist: set up (WAL, schema) in a private
/// temporary file, then linked into place, so `path` never exists without its schema and a
/// store file that is empty or schema-less is known to be damaged. Concurrent first opens each
/// make one; the first link wins and the others use it.
pub(super) fn create_store(path: &Path, context: &str) -> Result<(), StoreError> {
    // A WAL without its store means the store went away — unless another process has just
    // linked its new store into place and opened it (it links before it opens): look again.
    if files::check_path(&files::sibling(path, "-wal"), files::Expect::File)?.is_some() {
        if files::check_path(path, files::Expect::File)?.is_some() {
            return Ok(());
        }
        return Err(StoreError::Refused(format!(
            "{context} is missing but its write-ahead log {context}-wal is there: the store was \
             removed or moved; restore it, or remove the -wal and -shm files to start an empty store"
        )));
    }
    let temp = files::sibling(
        path,
        &format!(".new-{}-{:08x}", std::process::id(), rand::random::<u32>()),
    );
    let made = (|| {
        drop(files::create_new(&temp)?);
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(&temp, flags).map_err(backend(context))?;
        set_up(&mut conn, context).map_err(|(Attempt::Busy(e) | Attempt::Failed(e))| e)?;
        // Everything into the main file, so the linked file is whole without its WAL.
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(backend(context))?;
        conn.close().map_err(|(_, e)| backend(context)(e))?;
        match std::fs::hard_link(&temp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(StoreError::Unavailable(format!(
                "{context}: linking the new store: {e}"
            ))),
        }
    })();
    for leftover in [
        temp.clone(),
        files::sibling(&temp, "-wal"),
        files::sibling(&temp, "-shm"),
    ] {
        let _ = std::fs::remove_file(leftover);
    }
    made
}
