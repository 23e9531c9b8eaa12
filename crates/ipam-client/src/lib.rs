//! `weft-ipam` as installed in the CNI bin dir: a small, statically linked client.
//!
//! The node agent keeps the IPAM store open and gives every delegate it runs the variable
//! [`SOCKET_ENV`]. Run with it, this client sends the CNI call (environment and stdin) to the
//! agent's [`wire::PATH`] and prints the agent's answer as its own. Without it, or when the
//! agent declines the call (the config names another store) or cannot be reached, it runs the
//! full plugin — the weft multi-call binary installed next to it as [`FULL_PLUGIN`], under the
//! name `weft-ipam` — which opens the store itself.
//!
//! Why a separate executable: a CNI plugin is exec'd once per call, so its start-up is most of
//! its cost. This one uses std only and is linked statically (no dynamic loader, no shared
//! libraries to map and relocate), which is what makes a delegated IPAM call several times
//! cheaper than starting the full binary (figures in docs/benchmarks.md). It is also why the
//! crate has no dependencies: its build is a plain `rustc` call from crates/weft/build.rs.

pub mod http;
pub mod wire;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

pub use wire::Answer;

/// Set by the node agent for its delegates: the agent's socket.
pub const SOCKET_ENV: &str = "WEFT_IPAM_SOCKET";
/// The name this client is installed under, and the name it gives the full plugin.
pub const PLUGIN_NAME: &str = "weft-ipam";
/// The weft multi-call binary, installed next to this client.
pub const FULL_PLUGIN: &str = "weft-cni";
/// How long the agent may take to answer (a call it holds longer is stuck on its store).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
/// CNI error code for the client's own failures (I/O failure).
const IO_FAILURE: u32 = 5;

/// Run one CNI call as the current process and return its exit code.
pub fn run() -> ExitCode {
    let Some(socket) = std::env::var_os(SOCKET_ENV) else {
        return exec_full_plugin();
    };
    let mut stdin = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut stdin) {
        return report(&wire::cni_error(
            IO_FAILURE,
            "weft-ipam: cannot read stdin",
            &e.to_string(),
        ));
    }
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let body = wire::encode_call(env.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())), &stdin);
    match ask_agent(Path::new(&socket), &body) {
        Answer::Print { stdout, exit_code } => {
            let mut out = std::io::stdout().lock();
            // A runtime that closed our stdout cannot be told more; the exit code still is.
            let _ = out.write_all(&stdout).and_then(|()| out.flush());
            ExitCode::from(exit_code)
        }
        Answer::Fallback(reason) => {
            eprintln!("weft-ipam: {reason}; running {FULL_PLUGIN} as {PLUGIN_NAME}");
            run_full_plugin(&stdin)
        }
    }
}

/// One request on a fresh connection; every failure to get an answer is a fallback.
fn ask_agent(socket: &Path, body: &[u8]) -> Answer {
    match http::exchange(socket, &wire::http_request(body), ANSWER_TIMEOUT) {
        Ok(response) => wire::read_answer(&response),
        Err(http::ExchangeError::Connect(e)) => {
            Answer::Fallback(format!("no agent on {}: {e}", socket.display()))
        }
        Err(http::ExchangeError::Io(e)) => {
            Answer::Fallback(format!("the agent on {} did not answer: {e}", socket.display()))
        }
    }
}

fn full_plugin() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot locate weft-ipam itself: {e}"))?;
    let full = me.with_file_name(FULL_PLUGIN);
    if full.exists() {
        Ok(full)
    } else {
        Err(format!(
            "{} (the weft binary, which does the call itself) is missing; install with `weft install-cni`",
            full.display()
        ))
    }
}

/// Become the full plugin, stdin untouched (no agent announced: the common case off the agent).
fn exec_full_plugin() -> ExitCode {
    let error = match full_plugin() {
        Ok(full) => Command::new(&full).arg0(PLUGIN_NAME).exec().to_string(),
        Err(missing) => missing,
    };
    report(&wire::cni_error(
        IO_FAILURE,
        "weft-ipam: cannot run the weft plugin",
        &error,
    ))
}

/// Run the full plugin on the stdin already read, and exit as it did.
fn run_full_plugin(stdin: &[u8]) -> ExitCode {
    let spawned = full_plugin().and_then(|full| {
        Command::new(&full)
            .arg0(PLUGIN_NAME)
            .env_remove(SOCKET_ENV)
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", full.display()))
    });
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            return report(&wire::cni_error(
                IO_FAILURE,
                "weft-ipam: cannot run the weft plugin",
                &e,
            ));
        }
    };
    if let Some(mut input) = child.stdin.take() {
        // A plugin that exits without reading its stdin has still answered on stdout.
        let _ = input.write_all(stdin);
    }
    match child.wait() {
        Ok(status) => ExitCode::from(status.code().map_or(1, |code| code.clamp(0, 255) as u8)),
        Err(e) => report(&wire::cni_error(
            IO_FAILURE,
            "weft-ipam: lost the weft plugin",
            &e.to_string(),
        )),
    }
}

fn report(error: &[u8]) -> ExitCode {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(error).and_then(|()| out.flush());
    ExitCode::from(1)
}
