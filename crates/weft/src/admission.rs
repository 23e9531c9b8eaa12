//! Admission of what `weft apply` writes (and `weft up`'s manifests): VirtualMachines and
//! VirtualMachineInstances as KubeVirt's webhooks admit them (the decision is
//! `weft_vm::admission`'s), and NetworkAttachmentDefinitions whose config could never attach
//! (the meta-plugin itself, `weft_netconf::DelegateConfigError::MetaPlugin`). This module
//! applies the decisions to objects and words a denial as kubectl prints one.

use serde_json::Value;
use weft_netconf::{DelegateConfig, DelegateConfigError, NetworkAttachmentDefinition};
use weft_store::{Object, Resource, StoreError};
use weft_vm::admission::{Cause, CauseType, Operation, admit_vm, admit_vmi};
use weft_vm::{ClusterConfig, VirtualMachine, VirtualMachineInstance};

/// The words the API server puts before a cause's detail (`field.ErrorType.String()`).
pub fn cause_phrase(cause_type: CauseType) -> &'static str {
    match cause_type {
        CauseType::FieldValueRequired => "Required value",
        CauseType::FieldValueInvalid => "Invalid value",
        CauseType::FieldValueDuplicate => "Duplicate value",
        CauseType::FieldValueNotSupported => "Unsupported value",
        CauseType::FieldValueNotFound => "Not found",
    }
}

/// A denial as kubectl words it, one line per cause:
/// `The VirtualMachine "bad" is invalid: <field>: Invalid value: <message>`.
pub fn invalid_lines(kind: &str, name: &str, causes: &[Cause]) -> Vec<String> {
    causes
        .iter()
        .map(|c| {
            format!(
                "The {kind} {name:?} is invalid: {}: {}: {}",
                c.field,
                cause_phrase(c.cause_type),
                c.message
            )
        })
        .collect()
}

/// Admit a write of `object` (VirtualMachines, VirtualMachineInstances and
/// NetworkAttachmentDefinitions are checked): returns the causes it is denied with (empty:
/// allowed). An allowed VMI gets the network defaults written into its body, as KubeVirt's
/// mutating webhook stores them.
pub fn admit_object(
    object: &mut Object,
    operation: Operation,
    config: &ClusterConfig,
) -> Result<Vec<Cause>, StoreError> {
    if object.api_version == NetworkAttachmentDefinition::API_VERSION
        && object.kind == NetworkAttachmentDefinition::KIND
    {
        return Ok(nad_causes(object));
    }
    if object.api_version != VirtualMachine::API_VERSION {
        return Ok(Vec::new());
    }
    match object.kind.as_str() {
        VirtualMachine::KIND => {
            let vm: VirtualMachine = object.to_typed()?;
            Ok(admit_vm(&vm.spec.template.spec, operation, config).causes)
        }
        VirtualMachineInstance::KIND => {
            let vmi: VirtualMachineInstance = object.to_typed()?;
            let decision = admit_vmi(&vmi.spec, operation, config);
            if decision.allowed() && decision.spec != vmi.spec {
                // Only the defaulted fields are touched: the rest of the body stays as written.
                let spec = object
                    .data
                    .entry("spec")
                    .or_insert_with(|| Value::Object(Default::default()));
                set_path(spec, &["networks"], json(&decision.spec.networks));
                set_path(
                    spec,
                    &["domain", "devices", "interfaces"],
                    json(&decision.spec.interfaces()),
                );
            }
            Ok(decision.causes)
        }
        _ => Ok(Vec::new()),
    }
}

/// Why a NAD is refused: a `spec.config` that names the meta-plugin as a plugin, or as what a
/// plugin execs, would fail the ADD of every pod selecting it. Other configs are the delegate's
/// to judge (and an empty one is read from the node's files, as Multus does).
fn nad_causes(object: &Object) -> Vec<Cause> {
    let config = object
        .data
        .get("spec")
        .and_then(|spec| spec.get("config"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    match DelegateConfig::parse(config) {
        Err(error @ DelegateConfigError::MetaPlugin) => vec![Cause {
            cause_type: CauseType::FieldValueInvalid,
            message: error.to_string(),
            field: "spec.config".into(),
        }],
        _ => Vec::new(),
    }
}

/// A value as JSON; the spec types always serialise (plain data, string keys).
fn json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_default()
}

/// Set `value` at `path` under `root`, creating objects on the way.
fn set_path(root: &mut Value, path: &[&str], value: Value) {
    let mut node = root;
    for key in path {
        if !node.is_object() {
            *node = Value::Object(Default::default());
        }
        node = node
            .as_object_mut()
            .expect("made an object above")
            .entry(key.to_string())
            .or_insert(Value::Null);
    }
    *node = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_like_kubectl() {
        let causes = vec![
            Cause {
                cause_type: CauseType::FieldValueInvalid,
                message: "interface x has malformed MAC address (zz).".into(),
                field: "spec.template.spec.domain.devices.interfaces[0].macAddress".into(),
            },
            Cause {
                cause_type: CauseType::FieldValueRequired,
                message: "m".into(),
                field: "spec.networks".into(),
            },
        ];
        assert_eq!(
            invalid_lines("VirtualMachine", "bad", &causes),
            [
                "The VirtualMachine \"bad\" is invalid: spec.template.spec.domain.devices.interfaces[0].macAddress: Invalid value: interface x has malformed MAC address (zz).",
                "The VirtualMachine \"bad\" is invalid: spec.networks: Required value: m",
            ]
        );
        assert_eq!(cause_phrase(CauseType::FieldValueDuplicate), "Duplicate value");
        assert_eq!(
            cause_phrase(CauseType::FieldValueNotSupported),
            "Unsupported value"
        );
        assert_eq!(cause_phrase(CauseType::FieldValueNotFound), "Not found");
    }

    #[test]
    fn a_nad_that_would_exec_the_meta_plugin_is_refused_others_are_the_delegates_to_judge() {
        let nad = |config: &str| -> Object {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": "loop", "namespace": "tenant"},
                "spec": {"config": config}
            }))
            .unwrap()
        };
        let admit = |config: &str| {
            admit_object(&mut nad(config), Operation::Create, &ClusterConfig::default()).unwrap()
        };
        for config in [
            r#"{"cniVersion":"1.0.0","type":"weft-cni"}"#,
            r#"{"cniVersion":"1.0.0","type":"bridge","ipam":{"type":"weft-cni"}}"#,
        ] {
            let causes = admit(config);
            assert_eq!(causes.len(), 1, "{config}");
            let lines = invalid_lines("NetworkAttachmentDefinition", "loop", &causes);
            assert!(
                lines[0].starts_with(
                    "The NetworkAttachmentDefinition \"loop\" is invalid: spec.config: Invalid value: plugin type \"weft-cni\" is the meta-plugin itself"
                ),
                "{lines:?}"
            );
        }
        for config in [
            r#"{"cniVersion":"1.0.0","type":"bridge","ipam":{"type":"weft-ipam"}}"#,
            "",
            "{not json",
        ] {
            assert!(admit(config).is_empty(), "{config:?}");
        }
    }

    #[test]
    fn an_allowed_vmi_is_stored_defaulted_and_other_fields_stay() {
        let mut object: Object = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "default"},
            "spec": {"domain": {"devices": {}, "cpu": {"cores": 2}}}
        }))
        .unwrap();
        let causes = admit_object(&mut object, Operation::Create, &ClusterConfig::default()).unwrap();
        assert!(causes.is_empty(), "{causes:?}");
        assert_eq!(
            object.data["spec"]["networks"],
            serde_json::json!([{"name": "default", "pod": {}}])
        );
        assert_eq!(
            object.data["spec"]["domain"]["devices"]["interfaces"][0]["name"],
            "default"
        );
        assert_eq!(object.data["spec"]["domain"]["cpu"]["cores"], 2);
    }

    #[test]
    fn other_kinds_pass_untouched() {
        let mut object: Object = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}
        }))
        .unwrap();
        let before = object.clone();
        assert!(
            admit_object(&mut object, Operation::Create, &ClusterConfig::default())
                .unwrap()
                .is_empty()
        );
        assert_eq!(object, before);
    }
}
