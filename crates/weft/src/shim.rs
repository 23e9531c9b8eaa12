//! The weft binary as `weft-cni`: the full CNI shim. A CNI plugin whose every verb is forwarded
//! to the node agent over its Unix socket (thick mode, `POST /cni`); the agent's result or CNI
//! error is printed on stdout in the config's version by the shared plugin-side code of
//! `weft_cni::plugin`.
//!
//! The `weft-cni` a node runs is the static shim of crates/plugin-client, which hands a call
//! here only for what needs this code: no agent listening (VERSION is answered without one),
//! a config it cannot read, an older agent, or an answer to write as a CNI error in the
//! config's version, passed in `WEFT_SHIM_ANSWER` ([`Handoff`]) so the call is not sent again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;
use weft_cni::plugin::{Plugin, PluginRequest};
use weft_cni::{CniError, CniResult, codes};
use weft_plugin_client::shim::{ANSWER_ENV, Handoff, SOCKET_ENV};

use crate::protocol::{self, CniRequest, CniResponse};

/// The shim: forwards requests to the agent.
struct Shim {
    env: BTreeMap<String, String>,
    /// What the static shim already got from the agent, if it handed the call over.
    handoff: Handoff,
}

/// Run the shim as the current process.
pub fn run() -> ExitCode {
    use std::io::{Read, Write};
    let mut stdin = Vec::new();
    // One byte over the limit is enough to know the config is too large.
    let read = std::io::stdin()
        .take(protocol::MAX_CONFIG_BYTES as u64 + 1)
        .read_to_end(&mut stdin);
    let outcome = match (read, cni_env(std::env::vars_os())) {
        (Err(e), _) => weft_cni::plugin::Outcome::failure(
            CniError::new(codes::IO_FAILURE, "cannot read stdin").with_details(e.to_string()),
            weft_cni::CniVersion::LATEST,
        ),
        (Ok(_), Err(error)) => weft_cni::plugin::Outcome::failure(error, weft_cni::CniVersion::LATEST),
        (Ok(_), Ok(_)) if stdin.len() > protocol::MAX_CONFIG_BYTES => weft_cni::plugin::Outcome::failure(
            protocol::config_size_error(stdin.len()),
            weft_cni::CniVersion::LATEST,
        ),
        (Ok(_), Ok(env)) => {
            let lookup = env.clone();
            let handoff = std::env::var(ANSWER_ENV).map_or(Handoff::Call, |v| Handoff::decode(&v));
            weft_cni::plugin::dispatch(&Shim { env, handoff }, |key| lookup.get(key).cloned(), &stdin)
        }
    };
    let mut stdout = std::io::stdout().lock();
    // A runtime that closed our stdout cannot be told anything more; the exit code still is.
    let _ = stdout.write_all(&outcome.stdout).and_then(|()| stdout.flush());
    ExitCode::from(outcome.exit_code)
}

/// The `CNI_*` variables of an environment. A `CNI_*` name or value that is not UTF-8 is a CNI
/// error naming the variable; other variables (`LANG`, …) are not the shim's business and are
/// ignored whatever bytes they hold.
pub fn cni_env(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<BTreeMap<String, String>, CniError> {
    use std::os::unix::ffi::OsStrExt;
    let mut env = BTreeMap::new();
    for (key, value) in vars {
        if !key.as_bytes().starts_with(b"CNI_") {
            continue;
        }
        let name = key.to_string_lossy().into_owned();
        let (Some(k), Some(v)) = (key.to_str(), value.to_str()) else {
            return Err(CniError::new(
                codes::INVALID_ENVIRONMENT,
                format!("environment variable {name} is not valid UTF-8"),
            )
            .with_details(format!("value: {:?}", value.to_string_lossy())));
        };
        env.insert(k.to_string(), v.to_string());
    }
    Ok(env)
}

/// The agent socket named by the config (`daemonSocketDir`), `$WEFT_SOCKET`, or the default.
pub fn socket_path(config: &Value) -> PathBuf {
    if let Some(path) = std::env::var_os(SOCKET_ENV) {
        return path.into();
    }
    match config.get("daemonSocketDir").and_then(Value::as_str) {
        Some(dir) if !dir.is_empty() => Path::new(dir).join(protocol::SOCKET_FILE),
        _ => protocol::DEFAULT_SOCKET.into(),
    }
}

impl Shim {
    fn forward(&self, request: &PluginRequest) -> Result<Option<Value>, CniError> {
        let config = Value::Object(request.config.as_object().clone());
        let socket = socket_path(&config);
        let bytes = request.config.to_bytes();
        if bytes.len() > protocol::MAX_CONFIG_BYTES {
            return Err(protocol::config_size_error(bytes.len()));
        }
        let answered = match &self.handoff {
            Handoff::Call => {
                let body = CniRequest::new(self.env.clone(), &bytes);
                call_agent(&socket, protocol::CNI_PATH, &body)
            }
            Handoff::Answered { status, body } => read_answer(*status, body.as_bytes()),
            Handoff::Unanswered(details) => Err(AgentCall::Failed(
                CniError::new(
                    codes::AGENT_UNREACHABLE,
                    format!("weft agent at {} did not answer", socket.display()),
                )
                .with_details(details.clone()),
            )),
        };
        answered.map_err(|failure| match failure {
            AgentCall::Unreachable(details) => CniError::new(
                codes::AGENT_UNREACHABLE,
                format!("weft agent unreachable at {}", socket.display()),
            )
            .with_details(details),
            AgentCall::Failed(error) => error,
        })
    }
}

/// Why a request to the agent has no answer.
pub enum AgentCall {
    /// No agent answered on the socket (nothing was done).
    Unreachable(String),
    /// The agent answered with a CNI error, or with something unreadable.
    Failed(CniError),
}

/// Send `request` to the agent's `path` and return the result it answered (ADD) or `None`.
pub fn call_agent(socket: &Path, path: &str, request: &CniRequest) -> Result<Option<Value>, AgentCall> {
    let body = serde_json::to_vec(request).unwrap_or_default();
    let (status, bytes) = post(socket, path, &body).map_err(AgentCall::Unreachable)?;
    read_answer(status, &bytes)
}

/// What the agent's answer `status` with `bytes` means.
fn read_answer(status: u16, bytes: &[u8]) -> Result<Option<Value>, AgentCall> {
    if status != 200 {
        return Err(AgentCall::Failed(
            serde_json::from_slice::<CniError>(bytes).unwrap_or_else(|_| {
                CniError::new(
                    codes::AGENT_UNREACHABLE,
                    format!("weft agent answered HTTP {status}"),
                )
                .with_details(String::from_utf8_lossy(bytes).into_owned())
            }),
        ));
    }
    let response: CniResponse = serde_json::from_slice(bytes).map_err(|e| {
        AgentCall::Failed(
            CniError::new(codes::DECODING_FAILURE, "weft agent sent an unreadable response")
                .with_details(e.to_string()),
        )
    })?;
    Ok(response.result)
}

impl Plugin for Shim {
    fn add(&self, request: &PluginRequest) -> Result<CniResult, CniError> {
        protocol::add_result(self.forward(request)?)
    }
    fn del(&self, request: &PluginRequest) -> Result<(), CniError> {
        self.forward(request).map(|_| ())
    }
    fn check(&self, request: &PluginRequest) -> Result<(), CniError> {
        self.forward(request).map(|_| ())
    }
    fn status(&self, request: &PluginRequest) -> Result<(), CniError> {
        self.forward(request).map(|_| ())
    }
    fn gc(&self, request: &PluginRequest) -> Result<(), CniError> {
        self.forward(request).map(|_| ())
    }
}

/// One HTTP/1.1 POST over a Unix socket (blocking: the shim runs once per CNI call and an
/// async runtime would cost more than the request); returns status and body. The client is
/// the IPAM client's (`weft_plugin_client::http`), chunked decoding included.
pub fn post(socket: &Path, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    use weft_plugin_client::http;
    let request = http::post_request(path, "application/json", body);
    let response =
        http::exchange(socket, &request, std::time::Duration::from_secs(300)).map_err(|e| e.to_string())?;
    let response = http::parse_response(&response).map_err(|e| e.to_string())?;
    Ok((response.status, response.body))
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    use super::*;

    fn os(bytes: &[u8]) -> OsString {
        OsString::from_vec(bytes.to_vec())
    }

    #[test]
    fn the_static_shims_version_reply_is_the_weft_binarys() {
        use weft_cni::{CniVersion, VersionReply};
        use weft_plugin_client::shim::{SUPPORTED_VERSIONS, version_reply};
        let supported: Vec<String> = CniVersion::SUPPORTED.iter().map(ToString::to_string).collect();
        assert_eq!(supported, SUPPORTED_VERSIONS);
        // What the weft binary prints for VERSION of a config.
        let printed = |config: &[u8]| {
            let lookup = |key: &str| (key == "CNI_COMMAND").then(|| "VERSION".to_string());
            match weft_cni::plugin::decode(&CniVersion::SUPPORTED, lookup, config) {
                weft_cni::plugin::Decoded::Answered(outcome) => outcome.stdout,
                weft_cni::plugin::Decoded::Request(_) => panic!("VERSION is answered"),
            }
        };
        let reply = |v| serde_json::to_vec(&VersionReply::new(v, &CniVersion::SUPPORTED)).unwrap();
        for version in CniVersion::SUPPORTED {
            let config = format!(r#"{{"cniVersion":"{version}","name":"weft","type":"weft-cni"}}"#);
            assert_eq!(
                version_reply(config.as_bytes()),
                Some(printed(config.as_bytes())),
                "{version}"
            );
            assert_eq!(printed(config.as_bytes()), reply(version));
        }
        let none = br#"{"name":"x"}"#;
        assert_eq!(version_reply(none), Some(printed(none)));
        // What it leaves to the weft binary.
        for config in [
            &br#"{"cniVersion":"9.9.9"}"#[..],
            br#"{"cniVersion":null}"#,
            br#"{"cniVersion":"1.0.0","cniVersion":"0.4.0"}"#,
            br#"{"cniVersion":"1.0.0""#,
            b"[]",
        ] {
            assert_eq!(version_reply(config), None, "{}", String::from_utf8_lossy(config));
        }
    }

    #[test]
    fn non_utf8_variables_outside_cni_are_ignored() {
        let env = cni_env([
            (os(b"LANG"), os(b"en_\xff")),
            (os(b"X\xfe"), os(b"y")),
            (os(b"CNI_COMMAND"), os(b"ADD")),
        ])
        .unwrap();
        assert_eq!(env.len(), 1);
        assert_eq!(env["CNI_COMMAND"], "ADD");
    }

    #[test]
    fn a_non_utf8_cni_variable_is_a_cni_error_naming_it() {
        let err = cni_env([(os(b"CNI_ARGS"), os(b"K8S_POD_NAME=\xff"))]).unwrap_err();
        assert_eq!(err.code, codes::INVALID_ENVIRONMENT);
        assert!(err.msg.contains("CNI_ARGS"), "{}", err.msg);
        let err = cni_env([(os(b"CNI_\xff"), os(b"x"))]).unwrap_err();
        assert_eq!(err.code, codes::INVALID_ENVIRONMENT);
    }
}
