//! The `kubevirt.io/v1` API subset weft reads and writes (serde wire types).

/// `impl Resource` for a `kubevirt.io/v1` object type whose metadata is its `metadata` field:
/// the boilerplate every KubeVirt kind here repeats (the types themselves stay spelled out,
/// each with its own `spec`/`status` and doc comments).
macro_rules! kubevirt_resource {
    ($type:ty, $kind:literal, $plural:literal) => {
        impl weft_object::Resource for $type {
            const API_VERSION: &'static str = "kubevirt.io/v1";
            const KIND: &'static str = $kind;
            const PLURAL: &'static str = $plural;
            fn metadata(&self) -> &weft_object::ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut weft_object::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

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
