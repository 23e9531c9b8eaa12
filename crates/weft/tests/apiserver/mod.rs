//! The real kube-apiserver + etcd of `real_apiserver.rs` (weft-testing's, shared with the
//! benchmarks) and weft's components on it.
#![allow(dead_code)]

pub use weft_testing::real_apiserver::*;

mod components;
pub use components::*;
