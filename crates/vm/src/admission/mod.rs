//! Admission: KubeVirt's network validation rules, producing the same causes (type, field,
//! message) in the same order.

pub mod decision;
mod fields;
mod interfaces;
mod networks;

use serde::{Deserialize, Serialize};

pub use decision::{
    Decision, Operation, admit_vm, admit_vmi, missing_nad_condition, replace_condition,
    unknown_plugin_condition,
};

use crate::api::VmiSpec;
use crate::config::ClusterConfig;

/// Kubernetes `StatusCause` types used by the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CauseType {
    /// A required field is missing.
    FieldValueRequired,
    /// A field's value is invalid.
    FieldValueInvalid,
    /// A value is duplicated.
    FieldValueDuplicate,
    /// A value is not one of the supported ones.
    FieldValueNotSupported,
    /// A referenced object is not found.
    FieldValueNotFound,
}

/// One reason a spec is rejected (Kubernetes `StatusCause`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cause {
    /// Cause type.
    #[serde(rename = "type")]
    pub cause_type: CauseType,
    /// Human-readable message (KubeVirt's literal text).
    pub message: String,
    /// Field path, rooted at the caller's root (`spec`, `spec.template.spec`).
    pub field: String,
}

impl Cause {
    pub(crate) fn new(cause_type: CauseType, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            cause_type,
            message: message.into(),
            field: field.into(),
        }
    }
}

/// `field: message`, the form weft's conditions and errors show a cause in.
impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Causes as one message (`field: message; field: message`), e.g. a Failed VMI's reason.
pub fn causes_message<'a>(causes: impl IntoIterator<Item = &'a Cause>) -> String {
    causes
        .into_iter()
        .map(Cause::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Checks that only run when an object is created (discontinued bindings).
pub fn validate_creation(root: &str, spec: &VmiSpec) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (i, iface) in spec.interfaces().iter().enumerate() {
        let path = format!("{root}.domain.devices.interfaces[{i}]");
        if iface.slirp.is_some() {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                format!("{path}.slirp"),
                "Slirp interface support has been discontinued since v1.3",
            ));
        }
        if iface.passt.is_some() {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                format!("{path}.passt"),
                "Passt network binding has been discontinued since v1.3",
            ));
        }
        if iface.macvtap.is_some() {
            causes.push(Cause::new(
                CauseType::FieldValueInvalid,
                format!("{path}.macvtap"),
                "Macvtap network binding has been discontinued since v1.3",
            ));
        }
    }
    causes
}

/// The network rules that run on create and update, in KubeVirt's order.
pub fn validate(root: &str, spec: &VmiSpec, config: &ClusterConfig) -> Vec<Cause> {
    let mut causes = Vec::new();
    networks::single_pod_network(root, spec, &mut causes);
    networks::single_network_source(root, spec, &mut causes);
    networks::multus_network_name(root, spec, &mut causes);
    interfaces::states(root, spec, &mut causes);
    interfaces::bindings(root, spec, config, &mut causes);
    networks::unique_names(root, spec, &mut causes);
    networks::dra(root, spec, config, &mut causes);
    networks::every_network_has_interface(root, spec, &mut causes);
    interfaces::unique_names(root, spec, &mut causes);
    interfaces::every_interface_has_network(root, spec, &mut causes);
    fields::interface_fields(root, spec, config, &mut causes);
    causes
}

/// Admission of a new object: creation checks, then [`validate`] (each cause once; KubeVirt's
/// VMI webhook happens to report the [`validate`] causes twice).
pub fn validate_create(root: &str, spec: &VmiSpec, config: &ClusterConfig) -> Vec<Cause> {
    let mut causes = validate_creation(root, spec);
    causes.extend(validate(root, spec, config));
    causes
}

/// Field root of a VirtualMachine's VMI template.
pub const VM_TEMPLATE_ROOT: &str = "spec.template.spec";

/// Admission of a new VirtualMachine: creation checks short-circuit; otherwise the template
/// is validated once, rooted at `spec.template.spec`.
pub fn validate_vm_create(template: &VmiSpec, config: &ClusterConfig) -> Vec<Cause> {
    let causes = validate_creation(VM_TEMPLATE_ROOT, template);
    if !causes.is_empty() {
        return causes;
    }
    validate(VM_TEMPLATE_ROOT, template, config)
}

#[cfg(test)]
mod tests {
    #[test]
    fn causes_read_as_field_and_message_joined() {
        use super::{Cause, CauseType, causes_message};
        let a = Cause::new(
            CauseType::FieldValueRequired,
            "spec.networks[0].name",
            "must be set",
        );
        let b = Cause::new(CauseType::FieldValueInvalid, "spec.x", "bad");
        assert_eq!(a.to_string(), "spec.networks[0].name: must be set");
        assert_eq!(
            causes_message([&a, &b]),
            "spec.networks[0].name: must be set; spec.x: bad"
        );
        assert_eq!(causes_message(&[] as &[Cause]), "");
    }

    use super::*;
    use crate::api::{Interface, Marker, Network};

    #[test]
    fn vm_create_short_circuits_on_discontinued_bindings() {
        let mut spec = VmiSpec {
            networks: vec![Network::default_pod()],
            ..Default::default()
        };
        spec.interfaces_mut().push(Interface {
            name: "default".into(),
            slirp: Some(Marker::new()),
            ..Default::default()
        });
        let causes = validate_vm_create(&spec, &ClusterConfig::default());
        assert_eq!(causes.len(), 1);
        assert_eq!(
            causes[0].field,
            "spec.template.spec.domain.devices.interfaces[0].slirp"
        );
        spec.interfaces_mut()[0] = Interface::bridge("default");
        assert!(validate_vm_create(&spec, &ClusterConfig::default()).is_empty());
    }
}
