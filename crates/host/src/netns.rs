//! Network namespaces: handles, named persistent namespaces (the
//! `ip netns add/del/list` layout under `/run/netns`), and running code or
//! child processes inside one.
//!
//! `setns(2)` only changes the calling *thread*, so everything that enters a
//! namespace does it on a fresh, short-lived OS thread ([`Netns::run_in`]):
//! the caller's thread (possibly an async worker) never changes namespace.
//! Sockets created there (netlink, UDP, raw) stay bound to that namespace and
//! can be handed back.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;

use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;

use crate::error::{HostError, Result};

/// Where named network namespaces are bind-mounted (same as iproute2).
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// Serialises the "make /run/netns a shared mount point" step within this
/// process, so parallel creators do not stack bind mounts.
static RUN_DIR_SETUP: Mutex<()> = Mutex::new(());

/// The identity of a namespace: device and inode of its `nsfs` file (equal for every path to
/// the same namespace: `/proc/<pid>/ns/net`, a bind mount under `/run/netns`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NsId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

impl NsId {
    /// The identity of the namespace file at `path` (symlinks such as `/proc/self/ns/net`
    /// followed).
    pub fn of(path: impl AsRef<Path>) -> io::Result<Self> {
        let meta = fs::metadata(path)?;
        Ok(NsId {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

/// Which of the `forbidden` namespaces (identity, description) `target` is, if any: e.g. a
/// `CNI_NETNS` that is the agent's own or the host's namespace.
pub fn forbidden_netns<'a>(target: NsId, forbidden: &[(NsId, &'a str)]) -> Option<&'a str> {
    forbidden
        .iter()
        .find(|(id, _)| *id == target)
        .map(|(_, what)| *what)
}

/// An open handle to a network namespace (an `nsfs` file descriptor).
///
/// Holding it keeps the namespace alive. It is cheap to keep and can be
/// shared between threads.
#[derive(Debug)]
pub struct Netns {
    fd: OwnedFd,
    label: String,
}

impl Netns {
    /// Opens the namespace at `path` (e.g. `/run/netns/x`, `/proc/<pid>/ns/net`,
    /// or a CNI `CNI_NETNS` path).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let label = path.display().to_string();
        let file = File::open(path).map_err(|e| HostError::os("open netns", &label, e))?;
        Ok(Netns {
            fd: file.into(),
            label,
        })
    }

    /// Opens the named namespace `/run/netns/<name>`.
    pub fn open_named(name: &str) -> Result<Self> {
        let path = named_path("open netns", name)?;
        let mut ns = Self::open(path)?;
        ns.label = name.to_owned();
        Ok(ns)
    }

    /// Opens the namespace of the calling thread (not of the process: a
    /// thread inside [`Netns::run_in`] gets the namespace it entered).
    pub fn current_thread() -> Result<Self> {
        Self::open("/proc/thread-self/ns/net")
    }

    /// Creates a new, empty, persistent namespace `/run/netns/<name>`, exactly
    /// like `ip netns add <name>`, and returns a handle to it.
    ///
    /// Fails with `EEXIST` if the name is taken.
    pub fn create_named(name: &str) -> Result<Self> {
        const OP: &str = "create netns";
        let path = named_path(OP, name)?;
        ensure_run_dir_is_shared_mount().map_err(|e| HostError::os(OP, name, e))?;
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o000)
            .open(&path)
            .map_err(|e| HostError::os(OP, name, e))?;
        let bound = std::thread::scope(|scope| {
            let worker = std::thread::Builder::new()
                .name("netns-create".into())
                .spawn_scoped(scope, || -> nix::Result<()> {
                    nix::sched::unshare(CloneFlags::CLONE_NEWNET)?;
                    nix::mount::mount(
                        Some("/proc/thread-self/ns/net"),
                        &path,
                        None::<&str>,
                        MsFlags::MS_BIND,
                        None::<&str>,
                    )
                })
                .map_err(|e| HostError::os(OP, name, e))?;
            join_or_resume_panic(worker).map_err(|e| HostError::os(OP, name, e))
        });
        if let Err(e) = bound {
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        Self::open_named(name)
    }

    /// Deletes the named namespace like `ip netns del <name>`: detaches the
    /// bind mount and removes the file. Deleting a missing namespace succeeds.
    ///
    /// The namespace itself lives on while a process, a handle or a socket
    /// still uses it.
    pub fn delete_named(name: &str) -> Result<()> {
        const OP: &str = "delete netns";
        let path = named_path(OP, name)?;
        match nix::mount::umount2(&path, MntFlags::MNT_DETACH) {
            Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
            Err(e) => return Err(HostError::os(OP, name, e)),
        }
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(HostError::os(OP, name, e)),
        }
    }

    /// Names of the namespaces under `/run/netns`, sorted (empty if the
    /// directory does not exist).
    pub fn list_named() -> Result<Vec<String>> {
        let entries = match fs::read_dir(NETNS_RUN_DIR) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(HostError::os("list netns", NETNS_RUN_DIR, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| HostError::os("list netns", NETNS_RUN_DIR, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    /// The name or path this handle was opened with (for messages).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The namespace's inode number: two handles refer to the same namespace
    /// exactly when their inodes are equal.
    pub fn inode(&self) -> Result<u64> {
        let file = File::from(
            self.fd
                .try_clone()
                .map_err(|e| HostError::os("stat netns", &self.label, e))?,
        );
        let meta = file
            .metadata()
            .map_err(|e| HostError::os("stat netns", &self.label, e))?;
        Ok(meta.ino())
    }

    /// Runs `f` inside this namespace on a fresh OS thread and returns its
    /// result; the caller's thread never changes namespace. A panic in `f`
    /// is resumed on the caller's thread.
    ///
    /// It blocks until `f` returns: from async code, call it (and the
    /// [`Netlink`](crate::Netlink) methods) inside `spawn_blocking`.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        const OP: &str = "enter netns";
        std::thread::scope(|scope| {
            let worker = std::thread::Builder::new()
                .name("netns-run".into())
                .spawn_scoped(scope, || -> Result<T> {
                    nix::sched::setns(self.fd.as_fd(), CloneFlags::CLONE_NEWNET)
                        .map_err(|e| HostError::os(OP, &self.label, e))?;
                    Ok(f())
                })
                .map_err(|e| HostError::os(OP, &self.label, e))?;
            join_or_resume_panic(worker)
        })
    }

    /// Spawns `command` with this namespace as its network namespace (for
    /// `nft`, `dnsmasq`, QEMU, test oracles). The child inherits the
    /// namespace from the short-lived thread that forks it.
    pub fn spawn(&self, command: &mut Command) -> Result<Child> {
        let program = command.get_program().to_string_lossy().into_owned();
        self.run_in(|| command.spawn())?
            .map_err(|e| HostError::os("spawn in netns", format!("{program} (netns {})", self.label), e))
    }

    /// Makes `command` enter this namespace in the child, between fork and
    /// exec (`pre_exec` + `setns`). Use this for commands spawned elsewhere,
    /// e.g. converted into a `tokio::process::Command`.
    pub fn enter_on_exec(&self, command: &mut Command) -> Result<()> {
        let fd = self
            .fd
            .try_clone()
            .map_err(|e| HostError::os("enter netns on exec", &self.label, e))?;
        // SAFETY: the hook runs in the forked child before exec; it only calls
        // setns(2), which is async-signal-safe, and builds an `io::Error` from
        // an errno, which does not allocate. `fd` is close-on-exec, so the
        // program does not inherit it.
        unsafe {
            command.pre_exec(move || {
                nix::sched::setns(fd.as_fd(), CloneFlags::CLONE_NEWNET).map_err(io::Error::from)
            });
        }
        Ok(())
    }
}

impl AsFd for Netns {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Runs `f` inside `ns` on a fresh OS thread (see [`Netns::run_in`]).
pub fn run_in<T: Send>(ns: &Netns, f: impl FnOnce() -> T + Send) -> Result<T> {
    ns.run_in(f)
}

/// Checks a namespace name the way it will be used: as one file name.
pub fn validate_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("name is empty".into());
    }
    if name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err("name must be a plain file name (no '/', '.', '..' or NUL)".into());
    }
    if name.len() > 255 {
        return Err("name is longer than 255 bytes".into());
    }
    Ok(())
}

fn named_path(op: &'static str, name: &str) -> Result<PathBuf> {
    validate_name(name).map_err(|reason| HostError::invalid(op, name, reason))?;
    Ok(Path::new(NETNS_RUN_DIR).join(name))
}

/// Like iproute2: the bind mounts under /run/netns must propagate to every
/// mount namespace, so the directory is made a shared mount point, bind
/// mounting it onto itself first if it is not a mount point yet.
fn ensure_run_dir_is_shared_mount() -> io::Result<()> {
    let _guard = RUN_DIR_SETUP
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    fs::create_dir_all(NETNS_RUN_DIR)?;
    let make_shared = || {
        nix::mount::mount(
            None::<&str>,
            NETNS_RUN_DIR,
            None::<&str>,
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
    };
    match make_shared() {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EINVAL) => {
            nix::mount::mount(
                Some(NETNS_RUN_DIR),
                NETNS_RUN_DIR,
                Some("none"),
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )?;
            Ok(make_shared()?)
        }
        Err(e) => Err(e.into()),
    }
}

fn join_or_resume_panic<T>(worker: std::thread::ScopedJoinHandle<'_, T>) -> T {
    match worker.join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_known_by_identity_whatever_the_path() {
        let own = NsId::of("/proc/self/ns/net").unwrap();
        let same = NsId::of("/proc/thread-self/ns/net").unwrap();
        let other = NsId {
            ino: own.ino + 1,
            ..own
        };
        let forbidden = [(other, "other"), (own, "the agent's own")];
        assert_eq!(forbidden_netns(same, &forbidden), Some("the agent's own"));
        assert_eq!(forbidden_netns(NsId { dev: 1, ino: 2 }, &forbidden), None);
    }

    #[test]
    fn names_must_be_plain_file_names() {
        assert!(validate_name("wt-1-2").is_ok());
        for bad in ["", ".", "..", "a/b", "/x", "a\0b"] {
            assert!(validate_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_name(&"x".repeat(256)).is_err());
    }

    #[test]
    fn bad_names_are_rejected_before_touching_the_system() {
        let err = Netns::create_named("../etc").unwrap_err();
        assert!(matches!(err, HostError::Invalid { .. }), "{err}");
        assert!(err.to_string().starts_with("create netns ../etc:"));
    }
}
