//! The plugin side: read a request from the environment and stdin, call the plugin's handler,
//! print the result (in the config's `cniVersion`) or the error on stdout, and exit.
//!
//! [`dispatch`] decides everything purely (environment lookup and stdin in, bytes and exit
//! code out); [`run`] is the thin process wrapper. Logs belong on stderr, never stdout.

use std::io::{Read, Write};
use std::process::ExitCode;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::NetworkConfig;
use crate::convert::{result_from_value, result_to_bytes};
use crate::error::{CniError, codes};
use crate::request::{CniCommand, RequestEnv};
use crate::result::CniResult;
use crate::version::{CniVersion, VersionReply};

/// The GC input key listing attachments that are still valid.
pub const VALID_ATTACHMENTS_KEY: &str = "cni.dev/valid-attachments";
/// The spec's earlier spelling of [`VALID_ATTACHMENTS_KEY`]; libcni sends both.
pub const LEGACY_ATTACHMENTS_KEY: &str = "cni.dev/attachments";

/// One attachment named in a GC request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GcAttachment {
    /// Container id of the attachment.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// Interface name of the attachment.
    pub ifname: String,
}

/// A validated request as a plugin sees it.
#[derive(Clone, Debug)]
pub struct PluginRequest {
    /// The environment parameters.
    pub env: RequestEnv,
    /// The network configuration from stdin.
    pub config: NetworkConfig,
    /// The configuration's spec version (what the reply is written in).
    pub version: CniVersion,
}

impl PluginRequest {
    /// `prevResult`, converted to the canonical form. Code 6 when it does not decode.
    pub fn prev_result(&self) -> Result<Option<CniResult>, CniError> {
        self.config
            .prev_result()
            .map(|value| {
                result_from_value(value.clone()).map_err(|e| {
                    CniError::new(codes::DECODING_FAILURE, "invalid prevResult").with_details(e.to_string())
                })
            })
            .transpose()
    }

    /// GC: the attachments that are still valid (either key is accepted).
    pub fn valid_attachments(&self) -> Result<Vec<GcAttachment>, CniError> {
        let object = self.config.as_object();
        let Some(list) = object
            .get(VALID_ATTACHMENTS_KEY)
            .or_else(|| object.get(LEGACY_ATTACHMENTS_KEY))
        else {
            return Ok(Vec::new());
        };
        serde_json::from_value(list.clone()).map_err(|e| {
            CniError::new(
                codes::DECODING_FAILURE,
                format!("invalid {VALID_ATTACHMENTS_KEY}"),
            )
            .with_details(e.to_string())
        })
    }
}

/// A CNI plugin's handlers. Only `add`, `del` and `check` are mandatory.
pub trait Plugin {
    /// Versions the plugin accepts (default: all weft supports).
    fn supported_versions(&self) -> &[CniVersion] {
        &CniVersion::SUPPORTED
    }
    /// ADD.
    fn add(&self, request: &PluginRequest) -> Result<CniResult, CniError>;
    /// DEL.
    fn del(&self, request: &PluginRequest) -> Result<(), CniError>;
    /// CHECK.
    fn check(&self, request: &PluginRequest) -> Result<(), CniError>;
    /// STATUS (default: ready).
    fn status(&self, _request: &PluginRequest) -> Result<(), CniError> {
        Ok(())
    }
    /// GC (default: nothing to collect).
    fn gc(&self, _request: &PluginRequest) -> Result<(), CniError> {
        Ok(())
    }
}

/// What the process prints on stdout and its exit code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Bytes for stdout (a result, a VERSION reply, an error, or nothing).
    pub stdout: Vec<u8>,
    /// 0 on success, 1 on error.
    pub exit_code: u8,
}

impl Outcome {
    fn success(stdout: Vec<u8>) -> Self {
        Self { stdout, exit_code: 0 }
    }

    /// The outcome of a failed request: the error as JSON, exit code 1.
    pub fn failure(error: CniError, version: CniVersion) -> Self {
        let mut error = error;
        if error.cni_version.is_empty() {
            error.cni_version = version.to_string();
        }
        Self {
            stdout: serde_json::to_vec(&error).expect("CniError serializes"),
            exit_code: 1,
        }
    }
}

/// Decides a request purely: `lookup` reads environment variables, `stdin` is the config.
pub fn dispatch(plugin: &impl Plugin, lookup: impl Fn(&str) -> Option<String>, stdin: &[u8]) -> Outcome {
    let request = match decode(plugin.supported_versions(), lookup, stdin) {
        Decoded::Answered(outcome) => return outcome,
        Decoded::Request(request) => request,
    };
    let handled = match request.env.command {
        CniCommand::Add => plugin.add(&request).map(Some),
        CniCommand::Del => plugin.del(&request).map(|()| None),
        CniCommand::Check => plugin.check(&request).map(|()| None),
        CniCommand::Status => plugin.status(&request).map(|()| None),
        CniCommand::Gc => plugin.gc(&request).map(|()| None),
        CniCommand::Version => unreachable!("answered by decode"),
    };
    finish(&request, handled)
}

/// A call as read by [`decode`].
#[derive(Debug)]
pub enum Decoded {
    /// VERSION, or a call that cannot be handled: the outcome to print.
    Answered(Outcome),
    /// A request for the plugin's handlers (never VERSION).
    Request(PluginRequest),
}

/// Read a call for a plugin accepting the `supported` versions: the environment through
/// `lookup`, the config from `stdin`. The first half of [`dispatch`], for callers that handle
/// the request themselves (asynchronously, elsewhere) and then [`finish`] it.
pub fn decode(supported: &[CniVersion], lookup: impl Fn(&str) -> Option<String>, stdin: &[u8]) -> Decoded {
    let env = match RequestEnv::from_lookup(lookup) {
        Ok(env) => env,
        Err(error) => return Decoded::Answered(Outcome::failure(error, version_hint(stdin))),
    };
    if env.command == CniCommand::Version {
        let reply = VersionReply::new(version_hint(stdin), supported);
        let stdout = serde_json::to_vec(&reply).expect("VersionReply serializes");
        return Decoded::Answered(Outcome::success(stdout));
    }
    match decode_request(supported, env, stdin) {
        Ok(request) => Decoded::Request(request),
        Err((error, version)) => Decoded::Answered(Outcome::failure(error, version)),
    }
}

/// The outcome of a handled request: `handled` holds ADD's result (`None` for other verbs),
/// written in the request's version.
pub fn finish(request: &PluginRequest, handled: Result<Option<CniResult>, CniError>) -> Outcome {
    let version = request.version;
    let stdout = handled.and_then(|result| match result {
        Some(result) => result_to_bytes(&result, version).map_err(|e| {
            CniError::new(codes::INCOMPATIBLE_VERSION, "cannot write the result").with_details(e.to_string())
        }),
        None => Ok(Vec::new()),
    });
    match stdout {
        Ok(stdout) => Outcome::success(stdout),
        Err(error) => Outcome::failure(error, version),
    }
}

fn decode_request(
    supported: &[CniVersion],
    env: RequestEnv,
    stdin: &[u8],
) -> Result<PluginRequest, (CniError, CniVersion)> {
    let fallback = version_hint(stdin);
    let object = match serde_json::from_slice::<Value>(stdin) {
        Ok(Value::Object(object)) => object,
        Ok(_) => {
            let error = CniError::new(codes::DECODING_FAILURE, "network config must be a JSON object");
            return Err((error, fallback));
        }
        Err(e) => {
            let error = CniError::new(codes::DECODING_FAILURE, "cannot decode network config")
                .with_details(e.to_string());
            return Err((error, fallback));
        }
    };
    let config = NetworkConfig::from_object(object).map_err(|e| {
        let error = CniError::new(codes::INVALID_NETWORK_CONFIG, e.to_string());
        (error, fallback)
    })?;
    let version = config.cni_version();
    if !supported.contains(&version) {
        let list: Vec<String> = supported.iter().map(ToString::to_string).collect();
        let error = CniError::new(codes::INCOMPATIBLE_VERSION, "incompatible CNI versions")
            .with_details(format!("config is \"{version}\", plugin supports {list:?}"));
        return Err((error, fallback));
    }
    let command = env.command;
    let too_old = match command {
        CniCommand::Check => !version.supports_check(),
        CniCommand::Status | CniCommand::Gc => !version.supports_status_and_gc(),
        _ => false,
    };
    if too_old {
        let error = CniError::new(
            codes::INCOMPATIBLE_VERSION,
            format!("config version does not allow {command}"),
        );
        return Err((error, version));
    }
    Ok(PluginRequest { env, config, version })
}

/// The version to answer in when the config cannot be fully read: its `cniVersion` if it
/// parses and is known, else the newest.
fn version_hint(stdin: &[u8]) -> CniVersion {
    #[derive(Deserialize)]
    struct VersionOnly {
        #[serde(rename = "cniVersion")]
        cni_version: Option<String>,
    }
    serde_json::from_slice::<VersionOnly>(stdin)
        .ok()
        .and_then(|v| v.cni_version)
        .and_then(|v| v.parse::<CniVersion>().ok())
        .filter(|v| v.is_supported())
        .unwrap_or(CniVersion::LATEST)
}

/// Runs `plugin` as the current process: reads the environment and stdin, writes the outcome
/// on stdout, and returns the exit code for `main`.
pub fn run(plugin: &impl Plugin) -> ExitCode {
    let mut stdin = Vec::new();
    let outcome = match std::io::stdin().read_to_end(&mut stdin) {
        Ok(_) => dispatch(plugin, |key| std::env::var(key).ok(), &stdin),
        Err(e) => Outcome::failure(
            CniError::new(codes::IO_FAILURE, "cannot read stdin").with_details(e.to_string()),
            CniVersion::LATEST,
        ),
    };
    let mut stdout = std::io::stdout().lock();
    // A runtime that closed our stdout cannot be told anything more; the exit code still is.
    let _ = stdout.write_all(&outcome.stdout).and_then(|()| stdout.flush());
    ExitCode::from(outcome.exit_code)
}

#[cfg(test)]
#[path = "plugin_tests.rs"]
mod tests;
