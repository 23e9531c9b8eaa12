//! `weft-cni`: the CNI shim. A CNI plugin whose every verb is forwarded to the node agent over
//! its Unix socket (thick mode); the agent's result or CNI error is printed on stdout in the
//! config's version by the shared plugin-side code of `weft_cni::plugin`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::Value;
use weft_cni::plugin::{Plugin, PluginRequest};
use weft_cni::{CniError, CniResult, codes};

use crate::protocol::{self, CniRequest, CniResponse};

/// The shim: forwards requests to the agent.
struct Shim {
    env: BTreeMap<String, String>,
}

/// Run the shim as the current process.
pub fn run() -> ExitCode {
    let env = std::env::vars().filter(|(k, _)| k.starts_with("CNI_")).collect();
    weft_cni::plugin::run(&Shim { env })
}

/// The agent socket named by the config (`daemonSocketDir`), `$WEFT_SOCKET`, or the default.
pub fn socket_path(config: &Value) -> PathBuf {
    if let Ok(path) = std::env::var("WEFT_SOCKET") {
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
        let body = CniRequest::new(self.env.clone(), &request.config.to_bytes());
        let (status, bytes) = post(
            &socket,
            protocol::CNI_PATH,
            &serde_json::to_vec(&body).unwrap_or_default(),
        )
        .map_err(|e| {
            CniError::new(
                codes::AGENT_UNREACHABLE,
                format!("weft agent unreachable at {}", socket.display()),
            )
            .with_details(e)
        })?;
        if status != 200 {
            return Err(serde_json::from_slice::<CniError>(&bytes).unwrap_or_else(|_| {
                CniError::new(
                    codes::AGENT_UNREACHABLE,
                    format!("weft agent answered HTTP {status}"),
                )
                .with_details(String::from_utf8_lossy(&bytes).into_owned())
            }));
        }
        let response: CniResponse = serde_json::from_slice(&bytes).map_err(|e| {
            CniError::new(codes::DECODING_FAILURE, "weft agent sent an unreadable response")
                .with_details(e.to_string())
        })?;
        Ok(response.result)
    }
}

impl Plugin for Shim {
    fn add(&self, request: &PluginRequest) -> Result<CniResult, CniError> {
        let result = self
            .forward(request)?
            .ok_or_else(|| CniError::new(codes::DECODING_FAILURE, "weft agent returned no result for ADD"))?;
        weft_cni::result_from_value(result).map_err(|e| {
            CniError::new(codes::DECODING_FAILURE, "weft agent returned an invalid result")
                .with_details(e.to_string())
        })
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

/// One HTTP/1.1 POST over a Unix socket; returns status and body.
pub fn post(socket: &Path, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| e.to_string())?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let request = hyper::Request::post(format!("http://weft{path}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::copy_from_slice(body)))
            .map_err(|e| e.to_string())?;
        let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body.to_vec()))
    })
}
