//! The agent's Unix socket on disk: which directory may hold it, what may be replaced at its
//! path, and removing it when the agent stops. The decisions are pure ([`check_dir`],
//! [`decide_at_path`]); [`prepare`] and [`BoundSocket::remove`] apply them.

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Why the socket cannot be bound.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The path has no directory part.
    #[error("socket path {0} has no parent directory")]
    NoParent(PathBuf),
    /// The directory is not one only root controls.
    #[error(
        "socket directory {dir} {why}: refusing it (only root may be able to reach or replace the agent's socket)"
    )]
    UnsafeDir {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// Something other than a socket is at the path.
    #[error("{0} exists and is not a socket: refusing to replace it")]
    NotASocket(PathBuf),
    /// A live agent answers on the path.
    #[error("another process is serving on {0}: refusing to replace its socket")]
    Live(PathBuf),
    /// A filesystem operation failed.
    #[error("{op} {path}")]
    Io {
        /// The operation.
        op: &'static str,
        /// Its path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> SocketError + 'a {
    move |source| SocketError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// What the socket directory is (from `lstat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirFacts {
    /// A directory (not a symlink to one).
    pub is_dir: bool,
    /// Owner.
    pub uid: u32,
    /// Permission bits.
    pub mode: u32,
}

/// Whether an existing directory may hold the socket: a real directory, root's, that neither
/// group nor others can write (they could replace the socket). `Err` says what is wrong. The
/// directory's mode is never changed: `/run` stays 0755.
pub fn check_dir(facts: DirFacts) -> Result<(), String> {
    if !facts.is_dir {
        return Err("is not a directory".into());
    }
    if facts.uid != 0 {
        return Err(format!("is owned by uid {}, not root", facts.uid));
    }
    if facts.mode & 0o022 != 0 {
        return Err(format!(
            "is writable by group or others (mode {:o})",
            facts.mode & 0o7777
        ));
    }
    Ok(())
}

/// What is at the socket path before binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtPath {
    /// Nothing.
    Nothing,
    /// A socket; `answering`: a connection to it was accepted.
    Socket {
        /// Someone accepted a connection.
        answering: bool,
    },
    /// A regular file, directory, symlink, …
    Other,
}

/// Whether to unlink what is at `path` before binding (`Ok(true)`: a stale socket nobody
/// answers on), bind at once (`Ok(false)`), or refuse: never a file that is not a socket, never
/// a live socket.
pub fn decide_at_path(path: &Path, at: AtPath) -> Result<bool, SocketError> {
    match at {
        AtPath::Nothing => Ok(false),
        AtPath::Socket { answering: false } => Ok(true),
        AtPath::Socket { answering: true } => Err(SocketError::Live(path.to_path_buf())),
        AtPath::Other => Err(SocketError::NotASocket(path.to_path_buf())),
    }
}

/// Make `socket` bindable: create its directory 0700 if missing (only then is its mode weft's to
/// set), else check it ([`check_dir`]); unlink a stale socket ([`decide_at_path`]).
pub fn prepare(socket: &Path) -> Result<(), SocketError> {
    let dir = socket
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| SocketError::NoParent(socket.to_path_buf()))?;
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io("create", dir))?,
        Err(e) => return Err(io("stat", dir)(e)),
        Ok(meta) => check_dir(DirFacts {
            is_dir: meta.file_type().is_dir(),
            uid: meta.uid(),
            mode: meta.mode(),
        })
        .map_err(|why| SocketError::UnsafeDir {
            dir: dir.to_path_buf(),
            why,
        })?,
    }
    let at = match std::fs::symlink_metadata(socket) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => AtPath::Nothing,
        Err(e) => return Err(io("stat", socket)(e)),
        Ok(meta) if meta.file_type().is_socket() => match std::os::unix::net::UnixStream::connect(socket) {
            Ok(_) => AtPath::Socket { answering: true },
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                AtPath::Socket { answering: false }
            }
            Err(e) => return Err(io("probe", socket)(e)),
        },
        Ok(_) => AtPath::Other,
    };
    if decide_at_path(socket, at)? {
        std::fs::remove_file(socket).map_err(io("remove stale socket", socket))?;
    }
    Ok(())
}

/// The socket this agent bound (its inode), to remove exactly it when the agent stops.
pub struct BoundSocket {
    path: PathBuf,
    id: (u64, u64),
}

impl BoundSocket {
    /// Remember the socket just bound at `path`.
    pub fn new(path: &Path) -> Result<Self, SocketError> {
        let meta = std::fs::symlink_metadata(path).map_err(io("stat", path))?;
        Ok(Self {
            path: path.to_path_buf(),
            id: (meta.dev(), meta.ino()),
        })
    }

    /// Remove the socket if it is still the one this agent bound (not a successor's).
    pub fn remove(&self) {
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.id);
        if !ours {
            return;
        }
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!(socket = %self.path.display(), "cannot remove the socket: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(uid: u32, mode: u32) -> DirFacts {
        DirFacts {
            is_dir: true,
            uid,
            mode: 0o040000 | mode,
        }
    }

    #[test]
    fn only_root_only_writable_directories_hold_the_socket() {
        assert_eq!(check_dir(dir(0, 0o700)), Ok(()));
        assert_eq!(check_dir(dir(0, 0o755)), Ok(()), "/run is fine as it is");
        assert!(check_dir(dir(0, 0o1777)).unwrap_err().contains("writable"));
        assert!(check_dir(dir(0, 0o775)).unwrap_err().contains("writable"));
        assert!(check_dir(dir(1000, 0o700)).unwrap_err().contains("uid 1000"));
        let link = DirFacts {
            is_dir: false,
            ..dir(0, 0o777)
        };
        assert!(check_dir(link).unwrap_err().contains("not a directory"));
    }

    #[test]
    fn only_a_stale_socket_is_replaced() {
        let p = Path::new("/run/weft/weft.sock");
        assert!(!decide_at_path(p, AtPath::Nothing).unwrap());
        assert!(decide_at_path(p, AtPath::Socket { answering: false }).unwrap());
        assert!(matches!(
            decide_at_path(p, AtPath::Socket { answering: true }),
            Err(SocketError::Live(_))
        ));
        assert!(matches!(
            decide_at_path(p, AtPath::Other),
            Err(SocketError::NotASocket(_))
        ));
    }
}
