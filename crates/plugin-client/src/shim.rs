//! `weft-cni` as installed: the meta-plugin's shim (thick mode), statically linked.
//!
//! The runtime's call goes to the node agent as it came — the `CNI_*` variables and stdin,
//! byte for byte ([`wire::encode_call`]) — on [`wire::CNI_CALL_PATH`]; the agent decodes the
//! config, answers VERSION, runs the call and answers with the exact bytes to print. The shim
//! only has to find the agent's socket: `$WEFT_SOCKET`, the config's `daemonSocketDir`, or
//! [`DEFAULT_SOCKET`] (read with [`crate::json`], which checks the whole config).
//!
//! VERSION it answers itself when the config's `cniVersion` is one it knows by name (the reply
//! is [`version_reply`], byte for byte the weft binary's): a runtime validating its configs
//! needs no agent, as with Multus' shim.
//!
//! What the shim cannot answer by printing the agent's bytes goes to the weft binary run as
//! `weft-cni` ([`crate::full`]), the same shim with a JSON library and the CNI types:
//! * a config it cannot read, one over [`MAX_CONFIG_BYTES`], or no agent listening: the full
//!   shim handles the call from the start (it answers VERSION without an agent, and writes
//!   its errors in the config's version);
//! * an agent older than [`wire::CNI_CALL_PATH`] (404): the full shim sends the call to `/cni`;
//! * any other answer (busy, a refusal before the call was read, a connection lost before an
//!   answer): the full shim gets it in [`ANSWER_ENV`] and writes it as the CNI error it is,
//!   without sending the call again.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::http::{self, ExchangeError};
use crate::{full, json, wire};

/// The name the shim is installed under, and the name it gives the full shim.
pub const SHIM_NAME: &str = "weft-cni";
/// Overrides the socket the shim dials (tests, the local cluster).
pub const SOCKET_ENV: &str = "WEFT_SOCKET";
/// The config member naming the directory of the agent's socket.
pub const SOCKET_DIR_KEY: &str = "daemonSocketDir";
/// Default socket of the node agent.
pub const DEFAULT_SOCKET: &str = "/run/weft/weft.sock";
/// Name of the socket file inside a socket directory.
pub const SOCKET_FILE: &str = "weft.sock";
/// The largest network configuration the shim forwards and the agent accepts (1 MiB; real
/// configs are a few KiB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;
/// Set for the full shim with an answer the static shim got but does not print itself (see
/// [`Handoff`]).
pub const ANSWER_ENV: &str = "WEFT_SHIM_ANSWER";
/// How long the agent may be silent before the shim gives up on it (a CNI call can wait for
/// delegates that wait for DHCP).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);
/// At most this much of an unprintable answer's body is handed to the full shim.
const HANDOFF_BODY_BYTES: usize = 8 << 10;
/// The CNI versions the shim accepts, oldest first (the weft binary's
/// `weft_cni::CniVersion::SUPPORTED`; a test in crates/weft checks they are the same).
pub const SUPPORTED_VERSIONS: [&str; 7] = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The VERSION reply for a config (`stdin`), when the shim can write it itself: the config
/// is a JSON object whose one `cniVersion` is one of [`SUPPORTED_VERSIONS`] spelled exactly, or
/// that has none (the reply is then in the newest). `None`: the weft binary answers.
pub fn version_reply(stdin: &[u8]) -> Option<Vec<u8>> {
    // The weft binary reads the version as a struct field: a repeated one is its decision.
    if json::top_level_count(stdin, "cniVersion").ok()? > 1 {
        return None;
    }
    let version = match json::top_level_member(stdin, "cniVersion").ok()? {
        json::Member::String(version) => *SUPPORTED_VERSIONS.iter().find(|v| **v == version)?,
        json::Member::Absent => SUPPORTED_VERSIONS[SUPPORTED_VERSIONS.len() - 1],
        // Present but not a string: the weft binary decides.
        json::Member::Other => return None,
    };
    let list: Vec<String> = SUPPORTED_VERSIONS.iter().map(|v| format!("\"{v}\"")).collect();
    Some(
        format!(
            "{{\"cniVersion\":\"{version}\",\"supportedVersions\":[{}]}}",
            list.join(",")
        )
        .into_bytes(),
    )
}

/// Whether a call with this environment is a VERSION the shim may answer itself:
/// `CNI_COMMAND=VERSION`, every `CNI_*` variable UTF-8 and no `CNI_ARGS` to check (the weft
/// binary validates those, and answers such calls).
pub fn is_plain_version(env: &[(OsString, OsString)]) -> bool {
    let var = |key: &str| env.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v);
    var("CNI_COMMAND").is_some_and(|c| c == "VERSION")
        && var("CNI_ARGS").is_none_or(|a| a.is_empty())
        && env.iter().all(|(k, v)| {
            !k.as_bytes().starts_with(b"CNI_") || (k.to_str().is_some() && v.to_str().is_some())
        })
}

/// The socket for a call: `socket_env` ([`SOCKET_ENV`]) if set, else the config's non-empty
/// string [`SOCKET_DIR_KEY`] joined with [`SOCKET_FILE`], else [`DEFAULT_SOCKET`] — exactly the
/// full shim's choice. An error when the config is not a JSON object.
pub fn socket_path(socket_env: Option<OsString>, config: &[u8]) -> Result<PathBuf, json::JsonError> {
    if let Some(path) = socket_env {
        return Ok(path.into());
    }
    Ok(match json::top_level_string(config, SOCKET_DIR_KEY)? {
        Some(dir) if !dir.is_empty() => Path::new(&dir).join(SOCKET_FILE),
        _ => PathBuf::from(DEFAULT_SOCKET),
    })
}

/// What the shim does after asking the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The agent's answer: print it and exit with the code.
    Print {
        /// What the plugin prints on stdout.
        stdout: Vec<u8>,
        /// 0 on success, 1 on a CNI error.
        exit_code: u8,
    },
    /// Hand the call to the full shim.
    Full(Handoff),
}

/// What the full shim is handed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handoff {
    /// Nothing was done: the full shim makes the call itself.
    Call,
    /// The agent answered `status` with `body`, which the full shim writes as a CNI error.
    Answered {
        /// The HTTP status.
        status: u16,
        /// The body (at most [`HANDOFF_BODY_BYTES`], lossily UTF-8).
        body: String,
    },
    /// The call may have reached the agent but no answer came back: an error, the call is not
    /// sent again.
    Unanswered(String),
}

impl Handoff {
    /// The value of [`ANSWER_ENV`] for the full shim (`None`: the full shim makes the call).
    /// NUL bytes, which no environment value can hold, are dropped.
    pub fn encode(&self) -> Option<String> {
        let value = match self {
            Self::Call => return None,
            Self::Answered { status, body } => format!("{status}\n{body}"),
            Self::Unanswered(details) => format!("unanswered\n{details}"),
        };
        Some(value.replace('\0', ""))
    }

    /// Read an [`ANSWER_ENV`] value (the inverse of [`Handoff::encode`]). A success status is
    /// never handed over, so one here is not believed: it reads as no answer.
    pub fn decode(value: &str) -> Self {
        let (head, rest) = value.split_once('\n').unwrap_or((value, ""));
        match head.parse::<u16>() {
            Ok(status) if !(200..300).contains(&status) => Self::Answered {
                status,
                body: rest.to_string(),
            },
            Ok(status) => Self::Unanswered(format!("the handed-over answer claims HTTP {status}")),
            Err(_) => Self::Unanswered(rest.to_string()),
        }
    }
}

/// Decide what to do with the result of the exchange with the agent on `socket`.
pub fn next(socket: &Path, exchanged: Result<Vec<u8>, ExchangeError>) -> Next {
    let response = match exchanged {
        Ok(response) => response,
        Err(ExchangeError::Connect(_)) => return Next::Full(Handoff::Call),
        Err(ExchangeError::Io(e)) => {
            return Next::Full(Handoff::Unanswered(format!(
                "the agent on {} did not answer: {e}",
                socket.display()
            )));
        }
    };
    let response = match wire::read_response(&response) {
        Ok(response) => response,
        Err(why) => {
            return Next::Full(Handoff::Unanswered(format!(
                "{why} from the agent on {}",
                socket.display()
            )));
        }
    };
    match response.status {
        200 => Next::Print {
            stdout: response.body,
            exit_code: 0,
        },
        // Every 400 of this endpoint is a complete CNI error (cniVersion included).
        400 if response.body.first() == Some(&b'{') => Next::Print {
            stdout: response.body,
            exit_code: 1,
        },
        404 => Next::Full(Handoff::Call),
        status => {
            let body = &response.body[..response.body.len().min(HANDOFF_BODY_BYTES)];
            Next::Full(Handoff::Answered {
                status,
                body: String::from_utf8_lossy(body).into_owned(),
            })
        }
    }
}

/// Run one CNI call as the current process and return its exit code.
pub fn run() -> ExitCode {
    let mut stdin = Vec::new();
    // One byte over the limit is enough to know the config is too large.
    let read = std::io::stdin()
        .take(MAX_CONFIG_BYTES as u64 + 1)
        .read_to_end(&mut stdin);
    if let Err(e) = read {
        // As the full shim answers it (in the newest version: no config was read).
        return crate::report(&wire::cni_error(
            crate::IO_FAILURE,
            "cannot read stdin",
            &e.to_string(),
        ));
    }
    if stdin.len() > MAX_CONFIG_BYTES {
        // The full shim reads what it is given, finds it over the limit too and says so.
        return hand_off(&stdin, &Handoff::Call);
    }
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    if is_plain_version(&env)
        && let Some(reply) = version_reply(&stdin)
    {
        return crate::print(&reply, 0);
    }
    let Ok(socket) = socket_path(std::env::var_os(SOCKET_ENV), &stdin) else {
        return hand_off(&stdin, &Handoff::Call);
    };
    let body = wire::encode_call(env.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())), &stdin);
    let request = http::post_request(wire::CNI_CALL_PATH, wire::CONTENT_TYPE, &body);
    match next(&socket, http::exchange(&socket, &request, ANSWER_TIMEOUT)) {
        Next::Print { stdout, exit_code } => crate::print(&stdout, exit_code),
        Next::Full(handoff) => hand_off(&stdin, &handoff),
    }
}

/// Become the full shim on the call (with the answer to write, if any).
fn hand_off(stdin: &[u8], handoff: &Handoff) -> ExitCode {
    let answer = handoff.encode();
    let set: Vec<(&str, &str)> = answer.iter().map(|a| (ANSWER_ENV, a.as_str())).collect();
    let error = full::exec_with(SHIM_NAME, stdin, &[ANSWER_ENV], &set);
    crate::report(&wire::cni_error(
        crate::IO_FAILURE,
        "weft-cni: cannot run the weft binary",
        &error.to_string(),
    ))
}

#[cfg(test)]
#[path = "shim_tests.rs"]
mod tests;
