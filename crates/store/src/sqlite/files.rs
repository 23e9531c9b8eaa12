//! The store's files on disk, and whom they may belong to.
//!
//! The rule: every file and directory weft creates is `0600`/`0700`; a store file, lock, WAL,
//! shared-memory file or state directory that is not owned by the effective user, is writable
//! by group or others, or is a symlink is refused, never followed or used. A directory holding
//! the store is trusted only when it is itself owned by us and writable by no one else: then
//! nobody else can swap a file in it between our check and SQLite's open by path, so path-based
//! opens below a checked directory are safe.
//!
//! [`check_entry`] is the pure decision; the rest applies it to what `lstat` says.

use std::fs::{DirBuilder, File, Metadata, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::StoreError;

/// Mode of every file weft creates for the store.
pub(super) const FILE_MODE: u32 = 0o600;
/// Mode of every directory weft creates for the store.
const DIR_MODE: u32 = 0o700;

/// What kind of entry a path must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    /// A directory.
    Dir,
    /// A regular file.
    File,
}

/// What `lstat` said about an entry, reduced to what [`check_entry`] decides on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryFacts {
    /// A symbolic link (not followed).
    pub symlink: bool,
    /// A directory.
    pub dir: bool,
    /// A regular file.
    pub file: bool,
    /// Owner uid.
    pub uid: u32,
    /// Permission bits.
    pub mode: u32,
}

impl EntryFacts {
    fn of(meta: &Metadata) -> Self {
        let ty = meta.file_type();
        Self {
            symlink: ty.is_symlink(),
            dir: ty.is_dir(),
            file: ty.is_file(),
            uid: meta.uid(),
            mode: meta.mode() & 0o7777,
        }
    }
}

/// Why an entry may not be used: `None` when it may. `euid` is the effective user.
pub(crate) fn check_entry(facts: EntryFacts, expect: Expect, euid: u32) -> Option<String> {
    if facts.symlink {
        return Some("is a symbolic link (weft never follows a link it did not create)".into());
    }
    match expect {
        Expect::Dir if !facts.dir => return Some("is not a directory".into()),
        Expect::File if !facts.file => return Some("is not a regular file".into()),
        _ => {}
    }
    if facts.uid != euid {
        return Some(format!(
            "is owned by uid {} (only files of uid {euid}, the user weft runs as, are trusted)",
            facts.uid
        ));
    }
    if facts.mode & 0o022 != 0 {
        return Some(format!(
            "is writable by group or others (mode {:04o})",
            facts.mode
        ));
    }
    None
}

/// The effective user id of this process.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn refused(path: &Path, why: impl std::fmt::Display) -> StoreError {
    StoreError::Refused(format!("{} {why}", path.display()))
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Unavailable(format!("{what} {}: {e}", path.display()))
}

/// Check the entry at `path` (not following a link); `Ok(None)` when there is none.
pub(crate) fn check_path(path: &Path, expect: Expect) -> Result<Option<Metadata>, StoreError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => match check_entry(EntryFacts::of(&meta), expect, euid()) {
            None => Ok(Some(meta)),
            Some(why) => Err(refused(path, why)),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("inspecting", path, e)),
    }
}

/// Make sure the directory `dir` exists (creating what is missing `0700`) and is trusted.
/// Its ancestors are whoever configured the path's business; the directory itself is checked.
pub(super) fn trusted_dir(dir: &Path) -> Result<(), StoreError> {
    if check_path(dir, Expect::Dir)?.is_none() {
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .map_err(|e| io_error("creating store directory", dir, e))?;
        check_path(dir, Expect::Dir)?;
    }
    Ok(())
}

/// The state directory `dir`, which must lie under the trusted `root` (a directory the node's
/// administrator configured): `root` is checked, then every component below it is checked (or
/// created `0700`) one by one, never through a symbolic link. Returns the directory.
pub fn prepare_state_dir_under(root: &Path, dir: &Path) -> Result<PathBuf, StoreError> {
    let rest = dir.strip_prefix(root).map_err(|_| {
        StoreError::Refused(format!(
            "state directory {} is not under {}",
            dir.display(),
            root.display()
        ))
    })?;
    // The root is the administrator's path: its own ancestors may be links, it may not.
    trusted_dir(root)?;
    let mut at = root.to_path_buf();
    for part in rest.components() {
        let Component::Normal(name) = part else {
            return Err(StoreError::Refused(format!(
                "state directory {} has a `{}` component",
                dir.display(),
                part.as_os_str().to_string_lossy()
            )));
        };
        at.push(name);
        if check_path(&at, Expect::Dir)?.is_none() {
            match DirBuilder::new().mode(DIR_MODE).create(&at) {
                Ok(()) => {}
                // Someone made it meanwhile: the check below decides whether it is ours.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_error("creating state directory", &at, e)),
            }
            check_path(&at, Expect::Dir)?;
        }
    }
    Ok(at)
}

/// `<store><suffix>`: SQLite's `-wal` and `-shm`, weft's `-writer.lock`.
pub(super) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Check the store file and SQLite's files next to it; a trusted file that others may read is
/// narrowed to `0600` (stores made before weft created them so were `0644`). Returns the store
/// file's size, `None` when there is no store file.
pub(super) fn check_store_files(path: &Path) -> Result<Option<u64>, StoreError> {
    let mut size = None;
    for (file, is_store) in [
        (path.to_path_buf(), true),
        (sibling(path, "-wal"), false),
        (sibling(path, "-shm"), false),
    ] {
        let Some(meta) = check_path(&file, Expect::File)? else {
            continue;
        };
        narrow(&file, &meta)?;
        if is_store {
            size = Some(meta.len());
        }
    }
    Ok(size)
}

/// Take away the group and other bits of a trusted file.
fn narrow(path: &Path, meta: &Metadata) -> Result<(), StoreError> {
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(FILE_MODE))
            .map_err(|e| io_error("narrowing the permissions of", path, e))?;
    }
    Ok(())
}

/// Open (creating `0600` if missing) the writers' lock file, never through a link, and check it.
pub(super) fn open_lock_file(path: &Path) -> Result<File, StoreError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                refused(
                    path,
                    "is a symbolic link (weft never follows a link it did not create)",
                )
            } else {
                io_error("opening", path, e)
            }
        })?;
    let meta = file.metadata().map_err(|e| io_error("inspecting", path, e))?;
    if let Some(why) = check_entry(EntryFacts::of(&meta), Expect::File, euid()) {
        return Err(refused(path, why));
    }
    if meta.mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))
            .map_err(|e| io_error("narrowing the permissions of", path, e))?;
    }
    Ok(file)
}

/// Create a new, empty file `0600` that did not exist (never through a link).
pub(super) fn create_new(path: &Path) -> Result<File, StoreError> {
    OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| io_error("creating", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u32 = 1000;

    fn facts(mode: u32) -> EntryFacts {
        EntryFacts {
            symlink: false,
            dir: false,
            file: true,
            uid: ME,
            mode,
        }
    }

    #[test]
    fn own_private_files_are_trusted_and_nothing_else() {
        assert_eq!(check_entry(facts(0o600), Expect::File, ME), None);
        assert_eq!(check_entry(facts(0o644), Expect::File, ME), None);
        let why = |f, e| check_entry(f, e, ME).unwrap();
        assert!(why(facts(0o666), Expect::File).contains("writable by group or others"));
        assert!(why(facts(0o620), Expect::File).contains("mode 0620"));
        assert!(
            why(
                EntryFacts {
                    uid: 1001,
                    ..facts(0o600)
                },
                Expect::File
            )
            .contains("owned by uid 1001")
        );
        assert!(
            why(
                EntryFacts {
                    symlink: true,
                    file: false,
                    ..facts(0o777)
                },
                Expect::File
            )
            .contains("symbolic link")
        );
        assert!(why(facts(0o700), Expect::Dir).contains("not a directory"));
        let dir = EntryFacts {
            dir: true,
            file: false,
            ..facts(0o755)
        };
        assert_eq!(check_entry(dir, Expect::Dir, ME), None);
        assert!(why(dir, Expect::File).contains("not a regular file"));
        assert!(why(EntryFacts { mode: 0o1777, ..dir }, Expect::Dir).contains("writable"));
    }
}
