//! The shim ↔ agent protocol (thick mode), the same shape as Multus' thick plugin:
//! `POST /cni` over the agent's Unix socket with the CNI environment and the config (base64);
//! `200 {"Result": …}` on success (ADD carries the result), `400` with a CNI error otherwise.
//! The installed static shim uses `/cni-call` instead (`weft_plugin_client::wire`: the call as
//! it came, answered with the bytes to print); `/cni` serves the weft binary run as `weft-cni`
//! and hot-plug's `/delegate` shape.

use std::collections::BTreeMap;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_cni::{CniError, codes};

/// Path of the CNI endpoint.
pub const CNI_PATH: &str = "/cni";
/// Set by the agent for its delegates: the agent's store (`cluster::store_identity`), the
/// default of a `weft-ipam` call whose config names no store.
pub const IPAM_DEFAULT_STORE_ENV: &str = "WEFT_IPAM_DEFAULT_STORE";
/// Path of the single-attachment (hot-plug) endpoint.
pub const DELEGATE_PATH: &str = "/delegate";
// The socket and the config limit are the installed shim's (crates/plugin-client), which
// cannot depend on this crate.
pub use weft_plugin_client::shim::{DEFAULT_SOCKET, MAX_CONFIG_BYTES, SOCKET_FILE};
/// The largest request body the agent reads: a config at the limit in base64 plus the
/// environment.
pub const MAX_REQUEST_BYTES: usize = MAX_CONFIG_BYTES / 3 * 4 + (256 << 10);

/// The CNI error for a configuration of `len` bytes over [`MAX_CONFIG_BYTES`].
pub fn config_size_error(len: usize) -> CniError {
    CniError::new(
        codes::INVALID_NETWORK_CONFIG,
        format!("network configuration is too large: over the limit of {MAX_CONFIG_BYTES} bytes"),
    )
    .with_details(format!("at least {len} bytes"))
}

/// A CNI request forwarded by the shim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CniRequest {
    /// The CNI_* environment of the shim.
    pub env: BTreeMap<String, String>,
    /// The network configuration the runtime passed on stdin, base64.
    pub config: String,
    /// Hot-plug only: the attachment's requested ips, mac and cni-args.
    #[serde(
        rename = "interfaceAttributes",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub interface_attributes: Option<Value>,
}

impl CniRequest {
    /// A request from an environment and raw stdin bytes.
    pub fn new(env: BTreeMap<String, String>, stdin: &[u8]) -> Self {
        Self {
            env,
            config: base64::engine::general_purpose::STANDARD.encode(stdin),
            interface_attributes: None,
        }
    }
    /// The config bytes.
    pub fn config_bytes(&self) -> Result<Vec<u8>, CniError> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.config)
            .map_err(|e| {
                CniError::new(codes::DECODING_FAILURE, "request config is not valid base64")
                    .with_details(e.to_string())
            })
    }
    /// An environment variable, or `""`.
    pub fn var(&self, key: &str) -> &str {
        self.env.get(key).map(String::as_str).unwrap_or("")
    }
}

/// ADD's result as the agent answered it (`CniResponse::result`), read as a CNI result: both
/// shims' answer to the runtime.
pub fn add_result(result: Option<Value>) -> Result<weft_cni::CniResult, CniError> {
    let result = result
        .ok_or_else(|| CniError::new(codes::DECODING_FAILURE, "weft agent returned no result for ADD"))?;
    weft_cni::result_from_value(result).map_err(|e| {
        CniError::new(codes::DECODING_FAILURE, "weft agent returned an invalid result")
            .with_details(e.to_string())
    })
}

/// The success body.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CniResponse {
    /// The ADD result (spec 1.x form), absent for other verbs.
    #[serde(rename = "Result", default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}
