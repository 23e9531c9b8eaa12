//! KubeVirt's VM network control plane as pure decisions: API subset, defaults, validation,
//! names, annotations, status, migration.
//!
//! Everything here is a pure function of its inputs (objects, configuration, and time where it
//! matters); the controller and agents act on the results.

pub mod api;
pub mod config;

pub use api::{KubeVirt, VirtualMachine, VirtualMachineInstance};
pub use config::{ClusterConfig, FeatureGates};
