//! The full plugin: the weft multi-call binary installed next to the clients, which a client
//! becomes under its own name (the binary picks its role from `argv[0]`) for what it cannot do.
//!
//! The client *becomes* it (execve), so the runtime's process is the one doing the work: a
//! runtime that kills a plugin on its timeout kills it, and no second process outlives the
//! call holding the runtime's stdout. A client that already read stdin hands the bytes over in
//! an anonymous in-memory file (`memfd_create`), or where there is none in a pipe made large
//! enough, as the new stdin.
//!
//! The weft binary is looked for next to the path the runtime ran the client by (`argv[0]`, a
//! full path as libcni gives it: a client installed as a symbolic link finds the `passthru` of
//! the bin dir, not of the link's target), else next to the executable itself. Every hand-over
//! sets [`HANDOFF_ENV`], which the weft binary drops at start: a client that finds it set was
//! handed a call by a client, so `passthru` is not the weft binary, and it says so instead of
//! handing the call on forever.

use std::fmt;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// The file name of the weft binary in the CNI bin dir: it is installed there as `passthru`
/// (the head of an auxiliary chain) by `weft install-cni` anyway, so the clients need no file of
/// their own for it.
pub const FULL_BINARY: &str = "passthru";
/// Set for the weft binary by every hand-over (see the module documentation).
pub const HANDOFF_ENV: &str = "WEFT_PLUGIN_HANDOFF";

/// The path the runtime ran this client by (`argv[0]`), when it names a file.
static INVOKED_AS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Remember `argv0` for [`path`] (called once, by `main`).
pub fn set_invoked_as(argv0: &std::ffi::OsStr) {
    if argv0.as_encoded_bytes().contains(&b'/') {
        let _ = INVOKED_AS.set(PathBuf::from(argv0));
    }
}

/// Whether this process was handed a call by a client (see [`HANDOFF_ENV`]).
pub fn handed_over() -> bool {
    std::env::var_os(HANDOFF_ENV).is_some()
}

/// Why the weft binary could not be run.
#[derive(Debug)]
pub enum FullError {
    /// This process cannot tell where it is (no `/proc/self/exe`).
    NoSelf(std::io::Error),
    /// The weft binary is not next to the client.
    Missing(PathBuf),
    /// The stdin for it could not be prepared.
    Stdin(std::io::Error),
    /// execve failed.
    Exec(PathBuf, std::io::Error),
    /// The `passthru` next to the client handed the call back: it is not the weft binary.
    Loop,
}

impl fmt::Display for FullError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSelf(e) => write!(f, "cannot locate the client itself: {e}"),
            Self::Missing(path) => write!(
                f,
                "{} (the weft binary, which does the call itself) is missing; install with `weft install-cni`",
                path.display()
            ),
            Self::Stdin(e) => write!(f, "cannot hand the config over: {e}"),
            Self::Exec(path, e) => write!(f, "{}: {e}", path.display()),
            Self::Loop => write!(
                f,
                "{FULL_BINARY} next to this plugin handed the call back: it is not the weft binary (reinstall with `weft install-cni`)"
            ),
        }
    }
}

impl std::error::Error for FullError {}

/// The weft binary next to the running client: beside the path it was run by, else beside the
/// executable.
pub fn path() -> Result<PathBuf, FullError> {
    if let Some(invoked) = INVOKED_AS.get() {
        let full = invoked.with_file_name(FULL_BINARY);
        if full.exists() {
            return Ok(full);
        }
    }
    let me = std::env::current_exe().map_err(FullError::NoSelf)?;
    path_in(&me)
}

/// The weft binary next to `me`.
fn path_in(me: &std::path::Path) -> Result<PathBuf, FullError> {
    let full = me.with_file_name(FULL_BINARY);
    if full.exists() {
        Ok(full)
    } else {
        Err(FullError::Missing(full))
    }
}

/// Become the weft binary as `name` with `args`, stdin untouched; returns only on failure.
pub fn exec(name: &str, args: impl IntoIterator<Item = std::ffi::OsString>) -> FullError {
    if handed_over() {
        return FullError::Loop;
    }
    match path() {
        Ok(full) => {
            let e = Command::new(&full)
                .arg0(name)
                .args(args)
                .env(HANDOFF_ENV, "1")
                .exec();
            FullError::Exec(full, e)
        }
        Err(e) => e,
    }
}

/// Become the weft binary as `name` with `stdin` (the bytes already read) as its stdin, without
/// the variables `remove` and with `set`; returns only on failure.
pub fn exec_with(name: &str, stdin: &[u8], remove: &[&str], set: &[(&str, &str)]) -> FullError {
    if handed_over() {
        return FullError::Loop;
    }
    let full = match path() {
        Ok(full) => full,
        Err(e) => return e,
    };
    let input: std::process::Stdio = match memfd(stdin) {
        Ok(file) => file.into(),
        Err(_) => match pipe_holding(stdin) {
            Ok(reader) => reader.into(),
            Err(e) => return FullError::Stdin(e),
        },
    };
    let mut command = Command::new(&full);
    command.arg0(name).stdin(input).env(HANDOFF_ENV, "1");
    for key in remove {
        command.env_remove(key);
    }
    for (key, value) in set {
        command.env(key, value);
    }
    let e = command.exec();
    FullError::Exec(full, e)
}

unsafe extern "C" {
    /// glibc's wrapper of memfd_create(2) (Linux 3.17, glibc 2.27); std links libc anyway.
    fn memfd_create(name: *const std::ffi::c_char, flags: std::ffi::c_uint) -> std::ffi::c_int;
    /// fcntl(2), for a pipe's capacity.
    fn fcntl(fd: std::ffi::c_int, cmd: std::ffi::c_int, ...) -> std::ffi::c_int;
}

/// A pipe whose read end holds `bytes` (its capacity raised to fit them first: a write to a pipe
/// nobody reads yet must not block), for a kernel without memfd_create.
fn pipe_holding(bytes: &[u8]) -> std::io::Result<std::io::PipeReader> {
    use std::os::fd::AsRawFd;
    const F_SETPIPE_SZ: std::ffi::c_int = 1031;
    let (reader, mut writer) = std::io::pipe()?;
    let wanted = std::ffi::c_int::try_from(bytes.len().max(4096)).unwrap_or(std::ffi::c_int::MAX);
    // SAFETY: a valid descriptor and F_SETPIPE_SZ with an int argument.
    let capacity = unsafe { fcntl(writer.as_raw_fd(), F_SETPIPE_SZ, wanted) };
    if capacity < 0 || (capacity as usize) < bytes.len() {
        return Err(std::io::Error::other(format!(
            "a pipe cannot hold the {} bytes of the config",
            bytes.len()
        )));
    }
    writer.write_all(bytes)?;
    Ok(reader)
}

/// An anonymous file holding `bytes`, positioned at its start, closed on exec (the copy the
/// child gets as fd 0 is not).
fn memfd(bytes: &[u8]) -> std::io::Result<File> {
    const MFD_CLOEXEC: std::ffi::c_uint = 1;
    // SAFETY: the name is a NUL-terminated literal; the flags are valid.
    let fd = unsafe { memfd_create(c"weft-plugin-stdin".as_ptr(), MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(bytes)?;
    file.seek(SeekFrom::Start(0))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn the_handed_over_stdin_reads_back_from_its_start() {
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut file = memfd(&bytes).unwrap();
        let mut back = Vec::new();
        file.read_to_end(&mut back).unwrap();
        assert_eq!(back, bytes);
    }

    #[test]
    fn a_missing_weft_binary_is_named() {
        // The test binary has no `passthru` next to it.
        let error = path().unwrap_err();
        assert!(error.to_string().contains("passthru"), "{error}");
        assert!(matches!(
            exec_with("weft-cni", b"{}", &[], &[]),
            FullError::Missing(_)
        ));
    }
}
