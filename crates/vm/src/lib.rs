//! KubeVirt's VM network control plane as pure decisions: API subset, defaults, validation,
//! names, annotations, status, migration.
//!
//! Everything here is a pure function of its inputs (objects, configuration, and time where it
//! matters); the controller and agents act on the results. The entry points:
//!
//! - [`apply_network_defaults`] then [`validate_create`] / [`validate`]: admission of a VMI;
//!   [`admission::admit_vmi`] / [`admission::admit_vm`]: the whole decision for one write, and
//!   [`admission::missing_nad_condition`] for a VMI whose NAD does not exist yet.
//! - [`launcher_pod_annotations`]: annotations of a new launcher pod;
//!   [`running_pod_annotations`]: what to patch on a running one (hot-plug/unplug, network-info).
//! - [`hashed_scheme`] / [`pod_interface_names`]: pod interface names (the in-pod link names
//!   derived from them are `weft_launcher::LinkNames`).
//! - [`controller_status_interfaces`] (from the pod's network-status) and
//!   [`handler_status_interfaces`] (from the domain and the guest agent): `status.interfaces`.
//! - [`evaluate_migration`] + [`migration_condition_update`]: the `MigrationRequired` condition.
//! - [`sync_vm_to_vmi`] and [`is_restart_required`]: VM template changes.
//! - [`setup`]: which networks the node agent wires (start, migration target, hot-plug,
//!   unplug) and [`verify_migratable`].
//! - [`plan_vmi_sync`]: all of the controller's per-sync decisions for a VMI with a pod (its
//!   phase, node, interfaces, `MigrationRequired`, pod annotations);
//!   [`plan_vm_status`]: the VM's printable status; [`status::lifecycle`]: `Ready`, `Failed`.
//! - [`status::apply_launcher_report`]: the node launcher's report into its VMI (interfaces,
//!   `AgentConnected`, `guestOSInfo`, `Ready`, its annotations); [`status::all_nics_leased`]:
//!   whether every NIC has its guest's address (`weft up`).
//! - [`render()`]: `weft vm render`.
//! - [`vmim::migration_step`]: the `VirtualMachineInstanceMigration` phase machine.

pub mod admission;
pub mod annotations;
pub mod api;
pub mod config;
pub mod defaults;
pub mod hotplug;
pub mod infosource;
pub mod migration;
pub mod names;
pub mod netstatus;
pub mod render;
pub mod setup;
pub mod status;
pub mod sync;
pub mod vmim;

pub use admission::{Cause, CauseType, validate, validate_create, validate_creation, validate_vm_create};
pub use annotations::{
    AnnotationError, Annotations, launcher_pod_annotations, network_annotations, running_pod_annotations,
};
pub use api::{KubeVirt, VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceMigration};
pub use config::{ClusterConfig, FeatureGates};
pub use defaults::{DefaultingError, apply_network_defaults};
pub use hotplug::{HotplugSync, is_restart_required, sync_vm_to_vmi, vmi_network_patch};
pub use migration::{ConditionUpdate, MigrationRequirement, evaluate_migration, migration_condition_update};
pub use names::{
    NameScheme, PodInterfaceNames, hashed_pod_interface_name, hashed_scheme, pod_interface_names,
};
pub use netstatus::network_statuses;
pub use render::{RenderError, render};
pub use setup::{HotplugPlan, plan_hotplug, verify_migratable};
pub use status::{
    DomainReport, VmStatusUpdate, controller_status_interfaces, handler_status_interfaces, plan_vm_status,
    vmi_phase_from_pod, wants_running,
};
pub use sync::{PodView, VmiSyncPlan, plan_vmi_sync};
