//! The admission decision for one write of a VirtualMachine or VirtualMachineInstance, as data:
//! what KubeVirt's mutating webhook stores (network defaults) and the causes its validating
//! webhook denies with; and the condition a VMI gets while a NAD it names does not exist.

use crate::admission::{Cause, CauseType, VM_TEMPLATE_ROOT, validate, validate_create, validate_vm_create};
use crate::api::{Condition, VmiSpec};
use crate::config::ClusterConfig;
use crate::defaults::apply_network_defaults;
use weft_netconf::split_namespaced;

/// VMI condition type KubeVirt's VMI controller reports sync failures with.
pub const SYNCHRONIZED: &str = "Synchronized";
/// VM condition type set when the VM's VMI cannot be created.
pub const VM_FAILURE: &str = "Failure";
/// Reason of both conditions when the object (pod, VMI) cannot be created.
pub const FAILED_CREATE: &str = "FailedCreate";

/// Which write is admitted: creation checks (discontinued bindings) only run on create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// The object does not exist yet.
    Create,
    /// The object exists and is replaced.
    Update,
}

/// What admission decides for one write.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The spec to store (a VMI's with network defaults applied; a VM's template unchanged).
    pub spec: VmiSpec,
    /// Why the write is denied, in KubeVirt's order; empty when it is allowed.
    pub causes: Vec<Cause>,
}

impl Decision {
    /// Whether the write may be stored.
    pub fn allowed(&self) -> bool {
        self.causes.is_empty()
    }
}

/// Admission of a VMI write rooted at `spec`: the network defaults of KubeVirt's mutating
/// webhook (a defaulting error denies the write, reported on `spec.domain.devices.interfaces`
/// as `weft vm render` does), then the validating webhook's network rules.
pub fn admit_vmi(spec: &VmiSpec, operation: Operation, config: &ClusterConfig) -> Decision {
    let mut spec = spec.clone();
    if let Err(error) = apply_network_defaults(&mut spec, config) {
        let cause = Cause::new(
            CauseType::FieldValueInvalid,
            "spec.domain.devices.interfaces",
            error.to_string(),
        );
        return Decision {
            spec,
            causes: vec![cause],
        };
    }
    let causes = match operation {
        Operation::Create => validate_create("spec", &spec, config),
        Operation::Update => validate("spec", &spec, config),
    };
    Decision { spec, causes }
}

/// Admission of a VirtualMachine write: its template is validated rooted at
/// `spec.template.spec` and stored as given (KubeVirt defaults the VMI, not the template).
pub fn admit_vm(template: &VmiSpec, operation: Operation, config: &ClusterConfig) -> Decision {
    let causes = match operation {
        Operation::Create => validate_vm_create(template, config),
        Operation::Update => validate(VM_TEMPLATE_ROOT, template, config),
    };
    Decision {
        spec: template.clone(),
        causes,
    }
}

/// `(namespace, name)` of the NAD of every secondary multus network, in network order.
pub fn nad_references(namespace: &str, spec: &VmiSpec) -> Vec<(String, String)> {
    spec.networks
        .iter()
        .filter_map(|n| n.multus.as_ref())
        .map(|m| {
            let (ns, name) = split_namespaced(&m.network_name, namespace);
            (ns.to_string(), name.to_string())
        })
        .collect()
}

/// KubeVirt's VMI controller cannot render the launcher pod while a multus network's NAD is
/// missing (`multus.NetworkToResource`, first missing one): the VMI stays Pending with
/// `Synchronized=False`, reason `FailedCreate`. `None` when every NAD exists. The condition has
/// no transition time; the caller stamps it when it is new.
pub fn missing_nad_condition(
    namespace: &str,
    spec: &VmiSpec,
    exists: impl Fn(&str, &str) -> bool,
) -> Option<Condition> {
    let (ns, name) = nad_references(namespace, spec)
        .into_iter()
        .find(|(ns, name)| !exists(ns, name))?;
    Some(Condition {
        type_: SYNCHRONIZED.into(),
        status: "False".into(),
        reason: FAILED_CREATE.into(),
        message: format!(
            "failed to render launch manifest: failed to locate network attachment definition {ns}/{name}"
        ),
        ..Default::default()
    })
}

/// The condition of a VMI naming a network binding plugin the KubeVirt CR does not register.
/// KubeVirt's admission lets it through (no webhook rule checks plugin names); rendering the
/// launcher pod fails, and the VMI waits with `Synchronized=False` (`FailedCreate`) until the
/// plugin is registered.
pub fn unknown_plugin_condition(spec: &VmiSpec, config: &ClusterConfig) -> Option<Condition> {
    let name = spec
        .interfaces()
        .iter()
        .filter_map(|i| i.binding.as_ref())
        .map(|b| b.name.as_str())
        .find(|name| !config.binding_plugins.contains_key(*name))?;
    Some(Condition {
        type_: SYNCHRONIZED.into(),
        status: "False".into(),
        reason: FAILED_CREATE.into(),
        message: format!(
            "failed to render launch manifest: {}",
            crate::annotations::AnnotationError::UnknownBindingPlugin(name.to_string())
        ),
        ..Default::default()
    })
}

/// Put `wanted` (or nothing) in place of the condition of type `type_`: an identical
/// condition (status, reason, message) is kept with its transition time; returns whether
/// `conditions` changed. A new condition gets `now` as transition time.
pub fn replace_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    wanted: Option<Condition>,
    now: &str,
) -> bool {
    let current = conditions.iter().position(|c| c.type_ == type_);
    match (current, wanted) {
        (None, None) => false,
        (Some(i), None) => {
            conditions.remove(i);
            true
        }
        (Some(i), Some(w))
            if conditions[i].status == w.status
                && conditions[i].reason == w.reason
                && conditions[i].message == w.message =>
        {
            false
        }
        (current, Some(mut w)) => {
            if let Some(i) = current {
                conditions.remove(i);
            }
            w.last_transition_time = Some(serde_json::Value::String(now.into()));
            conditions.push(w);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Interface, Network};

    fn spec(mac: &str, nad: &str) -> VmiSpec {
        let mut spec = VmiSpec {
            networks: vec![
                Network::default_pod(),
                serde_json::from_value(serde_json::json!({"name": "data", "multus": {"networkName": nad}}))
                    .unwrap(),
            ],
            ..Default::default()
        };
        let mut data = Interface::bridge("data");
        data.mac_address = mac.into();
        spec.interfaces_mut().push(Interface {
            name: "default".into(),
            masquerade: Some(crate::api::Marker::new()),
            ..Default::default()
        });
        spec.interfaces_mut().push(data);
        spec
    }

    #[test]
    fn vmi_gets_defaults_and_vm_template_does_not() {
        let empty = VmiSpec::default();
        let vmi = admit_vmi(&empty, Operation::Create, &ClusterConfig::default());
        assert!(vmi.allowed(), "{:?}", vmi.causes);
        assert_eq!(vmi.spec.networks, vec![Network::default_pod()]);
        assert_eq!(vmi.spec.interfaces()[0].name, "default");
        let vm = admit_vm(&empty, Operation::Create, &ClusterConfig::default());
        assert!(vm.allowed());
        assert_eq!(vm.spec, empty);
    }

    #[test]
    fn bad_mac_is_a_cause_on_the_callers_root() {
        let vm = admit_vm(&spec("zz", "nope"), Operation::Create, &ClusterConfig::default());
        assert_eq!(vm.causes.len(), 1, "{:?}", vm.causes);
        assert_eq!(
            vm.causes[0].field,
            "spec.template.spec.domain.devices.interfaces[1].macAddress"
        );
        assert_eq!(vm.causes[0].cause_type, CauseType::FieldValueInvalid);
        assert_eq!(
            vm.causes[0].message,
            "interface spec.template.spec.domain.devices.interfaces[1].name has malformed MAC address (zz)."
        );
        let vmi = admit_vmi(&spec("zz", "nope"), Operation::Update, &ClusterConfig::default());
        assert_eq!(
            vmi.causes[0].field,
            "spec.domain.devices.interfaces[1].macAddress"
        );
        assert!(
            admit_vm(
                &spec("02:00:00:00:00:01", "nope"),
                Operation::Update,
                &ClusterConfig::default()
            )
            .allowed()
        );
    }

    #[test]
    fn defaulting_error_denies() {
        let config = ClusterConfig {
            permit_bridge_interface_on_pod_network: false,
            ..Default::default()
        };
        let d = admit_vmi(&VmiSpec::default(), Operation::Create, &config);
        assert_eq!(d.causes.len(), 1);
        assert_eq!(d.causes[0].field, "spec.domain.devices.interfaces");
        assert_eq!(
            d.causes[0].message,
            "bridge interface is not enabled in kubevirt-config"
        );
    }

    #[test]
    fn missing_nad_condition_names_the_first_missing_nad() {
        let s = spec("", "nope");
        let c = missing_nad_condition("default", &s, |_, _| false).unwrap();
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("Synchronized", "False", "FailedCreate")
        );
        assert_eq!(
            c.message,
            "failed to render launch manifest: failed to locate network attachment definition default/nope"
        );
        let other = spec("", "team/nope");
        let c = missing_nad_condition("default", &other, |ns, _| ns != "team").unwrap();
        assert!(c.message.ends_with("team/nope"), "{}", c.message);
        assert_eq!(
            missing_nad_condition("default", &s, |ns, name| (ns, name) == ("default", "nope")),
            None
        );
    }

    #[test]
    fn replace_condition_keeps_an_identical_one() {
        let mut conditions = Vec::new();
        let c = missing_nad_condition("default", &spec("", "nope"), |_, _| false);
        assert!(replace_condition(&mut conditions, SYNCHRONIZED, c.clone(), "t1"));
        assert!(!replace_condition(&mut conditions, SYNCHRONIZED, c, "t2"));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, Some(serde_json::json!("t1")));
        assert!(replace_condition(&mut conditions, SYNCHRONIZED, None, "t3"));
        assert!(conditions.is_empty());
        assert!(!replace_condition(&mut conditions, SYNCHRONIZED, None, "t3"));
    }

    #[test]
    fn an_unregistered_binding_plugin_waits_with_kubevirts_message() {
        let mut spec = VmiSpec {
            networks: vec![crate::api::Network::default_pod()],
            ..Default::default()
        };
        spec.interfaces_mut().push(crate::api::Interface {
            name: "default".into(),
            binding: Some(crate::api::PluginBinding {
                name: "passt".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        let condition = unknown_plugin_condition(&spec, &ClusterConfig::default()).unwrap();
        assert_eq!(
            (condition.type_.as_str(), condition.status.as_str()),
            ("Synchronized", "False")
        );
        assert_eq!(condition.reason, "FailedCreate");
        assert_eq!(
            condition.message,
            "failed to render launch manifest: unable to find the network binding plugin 'passt' in Kubevirt configuration"
        );
        assert!(
            validate_create("spec", &spec, &ClusterConfig::default()).is_empty(),
            "admission lets it through"
        );
        let mut config = ClusterConfig::default();
        config.binding_plugins.insert("passt".into(), Default::default());
        assert_eq!(unknown_plugin_condition(&spec, &config), None);
    }
}
