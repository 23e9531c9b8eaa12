//! CNI spec 1.1 wire types, version conversion, errors, and the runtime side that executes
//! delegate plugins.
//!
//! The layout follows the protocol:
//! - [`CniVersion`], [`VersionReply`], [`negotiate`]: spec versions 0.1.0 … 1.1.0.
//! - [`CniResult`] is the canonical (1.1.0-shaped) result; [`parse_result`] /
//!   [`result_from_value`] read a result of any version and [`result_to_value`] /
//!   [`result_to_bytes`] write one in a requested version (down-conversion per the spec).
//! - [`CniError`] and [`codes`]: the error object and its codes.
//! - [`RequestEnv`], [`CniCommand`], [`CniArgs`]: the request environment, per-verb validation,
//!   `CNI_ARGS` with libcni `LoadArgs` semantics.
//! - [`NetworkConfig`], [`NetworkConfigList`], [`AnyNetworkConfig`]: configs kept losslessly as
//!   JSON objects with typed accessors.
//! - [`plugin`]: the plugin side (`skel`): implement [`plugin::Plugin`], call [`plugin::run`].
//! - [`runtime`]: the runtime side (libcni): [`CniRuntime`] runs a [`Delegate`]'s plugins.
//!
//! Running a delegate network:
//!
//! ```no_run
//! use weft_cni::{CniArgs, CniRuntime, Delegate, RuntimeConf};
//!
//! let cni = CniRuntime::new(["/opt/cni/bin", "/usr/lib/cni"]);
//! let delegate = Delegate::from_bytes(br#"{"cniVersion":"1.1.0","name":"br","plugins":[
//!     {"type":"bridge","bridge":"br0","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}},
//!     {"type":"tuning","capabilities":{"mac":true}}]}"#)?;
//! let runtime = RuntimeConf {
//!     container_id: "ctr-1".into(),
//!     netns: "/run/netns/pod".into(),
//!     ifname: "net1".into(),
//!     args: CniArgs::from_pairs([("IgnoreUnknown", "1")]),
//!     capability_args: serde_json::from_str(r#"{"mac":"02:00:00:00:00:01"}"#)?,
//! };
//! let result = delegate.add(&cni, &runtime)?; // canonical CniResult, whatever version
//! delegate.check(&cni, &runtime, Some(&result))?;
//! delegate.del(&cni, &runtime, Some(&result))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod args;
mod config;
mod convert;
mod error;
pub mod mac;
pub mod plugin;
mod request;
mod result;
pub mod runtime;
mod version;

pub use args::{ArgIp, ArgsError, CniArgs};
pub use config::{AnyNetworkConfig, ConfigError, JsonObject, NetworkConfig, NetworkConfigList};
pub use convert::{
    ResultError, parse_result, project_to_version, result_from_value, result_to_bytes, result_to_value,
};
pub use error::{CniError, codes};
pub use mac::{MacAddr, MacParseError};
pub use plugin::GcAttachment;
pub use request::{CniCommand, RequestEnv, split_path, validate_container_id, validate_ifname, vars};
pub use result::{CniResult, Dns, Interface, IpConfig, Route};
pub use runtime::{CniRuntime, Delegate, DelegateError, RuntimeConf};
pub use version::{CniVersion, VersionError, VersionReply, negotiate};
