//! `status.interfaces`: the controller's part (pod names, Multus) and the node's part
//! (domain, guest agent); the lifecycle status ([`lifecycle`]: VM printable status, VMI
//! phase, `Ready`, `Failed`); the guest's part ([`guest`]: `AgentConnected`, `guestOSInfo`,
//! the agent-absent mark, whether every NIC is leased); and the launcher's whole report
//! ([`report`]).

mod controller;
pub mod guest;
mod handler;
pub mod lifecycle;
pub mod report;

pub use controller::controller_status_interfaces;
pub use guest::{
    AGENT_ABSENT_ANNOTATION, AGENT_CONNECTED, AgentView, GUEST_OS_INFO, agent_absent, all_nics_leased,
    apply_agent_view, mark_absent, nic_leased,
};
pub use handler::{
    DomainInterface, DomainReport, GuestAgentInterface, MAX_GUEST_ONLY_INTERFACES, PodInterfaceCache,
    handler_status_interfaces, pod_interface_cache,
};
pub use lifecycle::{
    VmAction, VmStatusUpdate, mark_vmi_failed, plan_vm_status, set_ready_condition, vm_action,
    vm_printable_status, vmi_phase_from_pod, wants_running,
};
pub use report::{DHCP_RECORD_ANNOTATION, GUEST_REPORT_ANNOTATION, LauncherReport, apply_launcher_report};
