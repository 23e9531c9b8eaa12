//! `status.interfaces`: the controller's part (pod names, Multus) and the node's part
//! (domain, guest agent).

mod controller;
mod handler;

pub use controller::controller_status_interfaces;
pub use handler::{
    DomainInterface, DomainReport, GuestAgentInterface, MAX_GUEST_ONLY_INTERFACES, PodInterfaceCache,
    handler_status_interfaces, pod_interface_cache,
};
