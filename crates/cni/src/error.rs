//! The CNI error object (`{cniVersion, code, msg, details}`) and the spec's well-known codes.

use serde::{Deserialize, Serialize};

/// Error codes defined by the CNI spec (0–99 are reserved; ≥100 are plugin-specific).
pub mod codes {
    /// Incompatible CNI version.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// Unsupported field in network configuration.
    pub const UNSUPPORTED_FIELD: u32 = 2;
    /// Container unknown or does not exist.
    pub const UNKNOWN_CONTAINER: u32 = 3;
    /// Invalid necessary environment variables.
    pub const INVALID_ENVIRONMENT: u32 = 4;
    /// I/O failure.
    pub const IO_FAILURE: u32 = 5;
    /// Failed to decode content.
    pub const DECODING_FAILURE: u32 = 6;
    /// Invalid network config.
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    /// Try again later.
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin is not available (cannot serve ADD).
    pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
    /// STATUS: not available, existing containers may have limited connectivity.
    pub const PLUGIN_NOT_AVAILABLE_LIMITED: u32 = 51;
    /// weft: a delegate plugin failed (its own error is in `details`).
    pub const DELEGATE_FAILED: u32 = 100;
    /// weft: the node agent cannot be reached.
    pub const AGENT_UNREACHABLE: u32 = 101;
    /// weft: a Kubernetes/store object the request needs is missing or invalid.
    pub const OBJECT_INVALID: u32 = 102;
    /// weft: policy (namespace isolation) forbids the request.
    pub const FORBIDDEN: u32 = 103;
    /// weft: no address is free in the pool.
    pub const POOL_EXHAUSTED: u32 = 104;
    /// weft: a requested address is taken by someone else.
    pub const ADDRESS_TAKEN: u32 = 105;
}

/// A CNI error, printed on stdout by a failing plugin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{msg}{}", if details.is_empty() { String::new() } else { format!(": {details}") })]
pub struct CniError {
    /// Version of the spec the error is written in.
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    /// Error code (see [`codes`]).
    pub code: u32,
    /// Short message.
    pub msg: String,
    /// Longer details.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    /// An error with a code and message.
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        Self {
            cni_version: String::new(),
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }
    /// Attach details.
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }
    /// Set the version it is reported in.
    pub fn with_version(mut self, version: impl Into<String>) -> Self {
        self.cni_version = version.into();
        self
    }
}
