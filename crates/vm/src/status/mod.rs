//! `status.interfaces`: the controller's part (pod names, Multus) and the node's part
//! (domain, guest agent); and the lifecycle status ([`lifecycle`]: VM printable status, VMI
//! phase, `Ready`, `Failed`).

mod controller;
mod handler;
pub mod lifecycle;

pub use controller::controller_status_interfaces;
pub use handler::{
    DomainInterface, DomainReport, GuestAgentInterface, MAX_GUEST_ONLY_INTERFACES, PodInterfaceCache,
    handler_status_interfaces, pod_interface_cache,
};
pub use lifecycle::{
    VmStatusUpdate, mark_vmi_failed, plan_vm_status, set_ready_condition, vm_printable_status,
    vmi_phase_from_pod, wants_running,
};
