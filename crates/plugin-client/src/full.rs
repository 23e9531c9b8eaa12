//! The full plugin: the weft multi-call binary installed next to the clients, which a client
//! runs under its own name (the binary picks its role from `argv[0]`) for what it cannot do.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

/// The file name of the weft binary in the CNI bin dir: it is installed there as `passthru`
/// (the head of an auxiliary chain) anyway, so the clients need no file of their own for it.
pub const FULL_BINARY: &str = "passthru";

/// The weft binary next to the running client.
pub fn path() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot locate the client itself: {e}"))?;
    let full = me.with_file_name(FULL_BINARY);
    if full.exists() {
        Ok(full)
    } else {
        Err(format!(
            "{} (the weft binary, which does the call itself) is missing; install with `weft install-cni`",
            full.display()
        ))
    }
}

/// Become the weft binary as `name`, stdin untouched; returns only on failure, with why.
pub fn exec(name: &str) -> String {
    match path() {
        Ok(full) => Command::new(&full).arg0(name).exec().to_string(),
        Err(missing) => missing,
    }
}

/// Run the weft binary as `name` on the stdin already read, without the variables `remove` and
/// with `set`, its stdout and stderr the client's own; the exit code to exit with.
pub fn run(name: &str, stdin: &[u8], remove: &[&str], set: &[(&str, &str)]) -> Result<ExitCode, String> {
    let full = path()?;
    let mut command = Command::new(&full);
    command.arg0(name).stdin(Stdio::piped());
    for key in remove {
        command.env_remove(key);
    }
    for (key, value) in set {
        command.env(key, value);
    }
    let mut child = command.spawn().map_err(|e| format!("{}: {e}", full.display()))?;
    if let Some(mut input) = child.stdin.take() {
        // A plugin that exits without reading its stdin has still answered on stdout.
        let _ = input.write_all(stdin);
    }
    let status = child
        .wait()
        .map_err(|e| format!("lost {}: {e}", full.display()))?;
    Ok(ExitCode::from(
        status.code().map_or(1, |code| code.clamp(0, 255) as u8),
    ))
}
