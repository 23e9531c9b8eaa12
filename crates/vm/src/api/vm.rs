//! `VirtualMachine`: the stateful owner of a VMI, with a VMI template.

use serde::{Deserialize, Serialize};
use weft_object::ObjectMeta;

use super::vmi::{Extra, VmiSpec};

/// A `kubevirt.io/v1` VirtualMachine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VirtualMachine {
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Desired state.
    #[serde(default)]
    pub spec: VmSpec,
    /// Observed state, kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Extra>,
    /// Every other top-level field.
    #[serde(flatten)]
    pub extra: Extra,
}

kubevirt_resource!(VirtualMachine, "VirtualMachine", "virtualmachines");

/// `spec` of a VirtualMachine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmSpec {
    /// Deprecated on/off switch (mutually exclusive with `runStrategy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    /// `Always`, `Halted`, `Manual`, `RerunOnFailure`, `Once`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<String>,
    /// Template the VMI is created from.
    #[serde(default)]
    pub template: VmiTemplate,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.template`: metadata and spec of the VMIs to create.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VmiTemplate {
    /// Labels and annotations copied to the VMI, kept verbatim (Kubernetes' ObjectMeta
    /// would add an empty `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Extra>,
    /// The VMI spec.
    #[serde(default)]
    pub spec: VmiSpec,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Extra,
}
