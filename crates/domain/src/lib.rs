//! libvirt domain XML for guest NICs (KubeVirt-compatible `<interface>` and SR-IOV `<hostdev>`)
//! and a minimal directly-booted `<domain>` for local guests.
//!
//! - [`xml`]: the element structs and their serde/quick-xml rendering;
//! - [`interface`]: pure conversion of VMI interfaces (+ what the launcher found in the pod) to
//!   elements;
//! - [`passt`]: the passt binding plugin's `<interface type='user'>`;
//! - [`sriov`]: the VF pool from the network-info file and the SR-IOV `<hostdev>`s;
//! - [`document`]: the whole `<domain type='qemu'>` document.

pub mod document;
pub mod interface;
pub mod passt;
pub mod sriov;
pub mod xml;

pub use document::{DirectKernelBoot, Domain};
pub use interface::{
    ConvertOptions, InterfaceBinding, InterfaceState, PodInterface, VmiInterface, domain_interfaces,
    sriov_hostdev,
};
pub use xml::{HostDev, Interface, XmlError};
