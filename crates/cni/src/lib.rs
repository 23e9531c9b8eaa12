//! CNI spec 1.1 wire types, version conversion, errors, and the runtime side that executes
//! delegate plugins.

mod error;
mod result;

pub use error::{CniError, codes};
pub use result::{CniResult, Dns, Interface, IpConfig, Route};
