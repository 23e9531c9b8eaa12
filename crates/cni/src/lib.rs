//! CNI spec 1.1 wire types, version conversion, errors, and the runtime side that executes
//! delegate plugins.

mod convert;
mod error;
mod result;
mod version;

pub use convert::{
    ResultError, parse_result, project_to_version, result_from_value, result_to_bytes, result_to_value,
};
pub use error::{CniError, codes};
pub use result::{CniResult, Dns, Interface, IpConfig, Route};
pub use version::{CniVersion, VersionError, VersionReply, negotiate};
