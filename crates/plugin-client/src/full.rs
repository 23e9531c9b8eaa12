//! The full plugin: the weft multi-call binary installed next to the clients, which a client
//! becomes under its own name (the binary picks its role from `argv[0]`) for what it cannot do.
//!
//! The client *becomes* it (execve), so the runtime's process is the one doing the work: a
//! runtime that kills a plugin on its timeout kills it, and no second process outlives the
//! call holding the runtime's stdout. A client that already read stdin hands the bytes over in
//! an anonymous in-memory file (`memfd_create`) as the new stdin.

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
        }
    }
}

impl std::error::Error for FullError {}

/// The weft binary next to the running client.
pub fn path() -> Result<PathBuf, FullError> {
    let me = std::env::current_exe().map_err(FullError::NoSelf)?;
    let full = me.with_file_name(FULL_BINARY);
    if full.exists() {
        Ok(full)
    } else {
        Err(FullError::Missing(full))
    }
}

/// Become the weft binary as `name` with `args`, stdin untouched; returns only on failure.
pub fn exec(name: &str, args: impl IntoIterator<Item = std::ffi::OsString>) -> FullError {
    match path() {
        Ok(full) => {
            let e = Command::new(&full).arg0(name).args(args).exec();
            FullError::Exec(full, e)
        }
        Err(e) => e,
    }
}

/// Become the weft binary as `name` with `stdin` (the bytes already read) as its stdin, without
/// the variables `remove` and with `set`; returns only on failure.
pub fn exec_with(name: &str, stdin: &[u8], remove: &[&str], set: &[(&str, &str)]) -> FullError {
    let full = match path() {
        Ok(full) => full,
        Err(e) => return e,
    };
    let input = match memfd(stdin) {
        Ok(input) => input,
        Err(e) => return FullError::Stdin(e),
    };
    let mut command = Command::new(&full);
    command.arg0(name).stdin(input);
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
