//! CNI spec 1.1 wire types, version conversion, errors, and the runtime side that executes
//! delegate plugins.

mod args;
mod config;
mod convert;
mod error;
pub mod plugin;
mod request;
mod result;
pub mod runtime;
mod version;

pub use args::{ArgIp, ArgsError, CniArgs, MacAddr};
pub use config::{AnyNetworkConfig, ConfigError, JsonObject, NetworkConfig, NetworkConfigList};
pub use convert::{
    ResultError, parse_result, project_to_version, result_from_value, result_to_bytes, result_to_value,
};
pub use error::{CniError, codes};
pub use plugin::GcAttachment;
pub use request::{CniCommand, RequestEnv, split_path, validate_container_id, validate_ifname, vars};
pub use result::{CniResult, Dns, Interface, IpConfig, Route};
pub use runtime::{CniRuntime, Delegate, DelegateError, RuntimeConf};
pub use version::{CniVersion, VersionError, VersionReply, negotiate};
