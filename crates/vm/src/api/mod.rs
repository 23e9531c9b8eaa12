//! The `kubevirt.io/v1` API subset weft reads and writes (serde wire types).

mod kubevirt;
mod vm;
mod vmi;
mod vmim;

pub use kubevirt::{
    DeveloperConfiguration, InterfaceBindingPlugin, KubeVirt, KubeVirtConfiguration, KubeVirtSpec,
    NetworkConfiguration,
};
pub use vm::{VirtualMachine, VmSpec, VmiTemplate};
pub use vmi::{
    BindingKind, Condition, Devices, DhcpOptions, DhcpPrivateOption, DomainSpec, Extra, Interface,
    InterfaceStatus, Marker, MultusNetwork, Network, PluginBinding, PodNetwork, Port, PortRange,
    ResourceClaimNetwork, STATE_ABSENT, STATE_DOWN, STATE_UP, VirtualMachineInstance, VmiSpec, VmiStatus,
};
pub use vmim::{
    MigrationSpec, MigrationState, MigrationStatus, PhaseTransition, VirtualMachineInstanceMigration,
};
