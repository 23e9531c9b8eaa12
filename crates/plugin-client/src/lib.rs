//! weft's CNI plugins as installed in the CNI bin dir: one small, statically linked client of
//! the node agent (src/main.rs, compiled by crates/weft/build.rs), installed as `weft-cni` and
//! `weft-ipam` and choosing its role by the name it runs under ([`main`]).
//!
//! * `weft-cni` ([`shim`]): the meta-plugin's shim. It sends the runtime's call (its `CNI_*`
//!   variables and stdin, untouched) to the agent's [`wire::CNI_CALL_PATH`] and prints the
//!   agent's answer as its own; the agent decodes the config, runs the call and writes the
//!   result in the config's version. A plain VERSION it answers itself.
//! * `weft-ipam` ([`run`]): the IPAM plugin. The node agent keeps the IPAM store open and gives
//!   every delegate it runs the variable [`IPAM_SOCKET_ENV`]. Run with it, this client sends the call
//!   to the agent's [`wire::PATH`] and prints the agent's answer as its own.
//!
//! Whatever a client cannot do itself — no agent to ask, a call the agent declines, an answer
//! that needs a CNI error written in the config's version — it hands to the full plugin: it
//! becomes (execve) the weft multi-call binary installed next to it ([`full::FULL_BINARY`])
//! under its own name, which does the call (or writes the error) itself.
//!
//! Why a separate executable: a CNI plugin is exec'd once per call, so its start-up is most of
//! its cost. This one uses std only and is linked statically (no dynamic loader, no shared
//! libraries to map and relocate), which is what makes a call several times cheaper than
//! starting the full binary (figures in docs/benchmarks.md). It is also why the crate has no
//! dependencies: its build is a plain `rustc` call from crates/weft/build.rs.

pub mod full;
pub mod http;
pub mod json;
pub mod shim;
pub mod wire;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

pub use wire::Answer;

/// Set by the node agent for its delegates: the agent's socket.
pub const IPAM_SOCKET_ENV: &str = "WEFT_IPAM_SOCKET";
/// The name this client is installed under, and the name it gives the full plugin.
pub const PLUGIN_NAME: &str = "weft-ipam";
/// How long the agent may take to answer (a call it holds longer is stuck on its store).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
/// CNI error code for the client's own failures (I/O failure).
pub(crate) const IO_FAILURE: u32 = 5;

/// Run one CNI call as the current process and return its exit code.
pub fn run() -> ExitCode {
    let Some(socket) = std::env::var_os(IPAM_SOCKET_ENV) else {
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
        Answer::Print { stdout, exit_code } => print(&stdout, exit_code),
        Answer::Fallback(reason) => {
            eprintln!("weft-ipam: {reason}; running the weft binary as {PLUGIN_NAME}");
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

/// Become the full plugin, stdin untouched (no agent announced: the common case off the agent).
fn exec_full_plugin() -> ExitCode {
    let error = full::exec(PLUGIN_NAME, []);
    report(&wire::cni_error(
        IO_FAILURE,
        "weft-ipam: cannot run the weft plugin",
        &error.to_string(),
    ))
}

/// Become the full plugin on the stdin already read.
fn run_full_plugin(stdin: &[u8]) -> ExitCode {
    let error = full::exec_with(PLUGIN_NAME, stdin, &[IPAM_SOCKET_ENV], &[]);
    report(&wire::cni_error(
        IO_FAILURE,
        "weft-ipam: cannot run the weft plugin",
        &error.to_string(),
    ))
}

/// The executable's `main` for its command line `args`: the role named by `argv[0]`'s file name
/// — `weft-cni` the shim, `weft-ipam` the IPAM client — and for any other name the weft binary
/// under that name with the same arguments (so an older install that runs `weft-cni` as
/// `weft-ipam` or `passthru` still gets what it asked for).
pub fn main(mut args: impl Iterator<Item = OsString>) -> ExitCode {
    let argv0 = args.next().unwrap_or_default();
    full::set_invoked_as(&argv0);
    let from_exe = || {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(OsString::from))
    };
    let file_name = Path::new(&argv0)
        .file_name()
        .map(OsString::from)
        .or_else(from_exe)
        .unwrap_or_default();
    let name = file_name.to_str().unwrap_or_default().to_string();
    if full::handed_over() {
        // A client handed this call to `passthru`, and `passthru` is a client.
        return report(&wire::cni_error(
            IO_FAILURE,
            "cannot run the weft binary",
            &full::FullError::Loop.to_string(),
        ));
    }
    match name.as_str() {
        shim::SHIM_NAME => shim::run(),
        PLUGIN_NAME => run(),
        other => report(&wire::cni_error(
            IO_FAILURE,
            "cannot run the weft binary",
            &full::exec(other, args).to_string(),
        )),
    }
}

/// Print `stdout` and exit with `exit_code`.
pub(crate) fn print(stdout: &[u8], exit_code: u8) -> ExitCode {
    let mut out = std::io::stdout().lock();
    // A runtime that closed our stdout cannot be told more; the exit code still is.
    let _ = out.write_all(stdout).and_then(|()| out.flush());
    ExitCode::from(exit_code)
}

/// Print `error` (a CNI error object) and exit 1.
pub(crate) fn report(error: &[u8]) -> ExitCode {
    print(error, 1)
}
