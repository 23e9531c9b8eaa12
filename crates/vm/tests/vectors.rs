//! Every KubeVirt vector this crate owns, from `vectors/kubevirt/`.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use weft_vm::admission::validate_create;
use weft_vm::annotations::{
    migration_target_annotations, network_annotations, networks_annotation, running_pod_annotations,
};
use weft_vm::api::{
    Condition, InterfaceBindingPlugin, InterfaceStatus, Network, VirtualMachineInstance, VmiSpec, VmiStatus,
};
use weft_vm::config::{ClusterConfig, FeatureGates};
use weft_vm::migration::evaluate_migration;
use weft_vm::names;
use weft_vm::netstatus::{network_statuses, parse_network_statuses};
use weft_vm::status::{DomainInterface, DomainReport, GuestAgentInterface, PodInterfaceCache};
use weft_vm::{controller_status_interfaces, handler_status_interfaces, infosource};

fn load(name: &str) -> Vec<Value> {
    let path = format!(
        "{}/../../vectors/kubevirt/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn from<T: serde::de::DeserializeOwned>(v: &Value) -> T {
    if v.is_null() {
        let empty = [Value::Null, json!([]), json!({})];
        return empty
            .into_iter()
            .find_map(|e| serde_json::from_value(e).ok())
            .unwrap();
    }
    serde_json::from_value(v.clone()).unwrap()
}

fn spec_of(networks: &Value, interfaces: &Value) -> VmiSpec {
    let mut spec = VmiSpec {
        networks: from(networks),
        ..Default::default()
    };
    spec.domain.devices.interfaces = from(interfaces);
    spec
}

fn statuses_of(v: &Value) -> Vec<weft_netconf::NetworkStatus> {
    parse_network_statuses(&v.to_string())
}

fn vmi(input: &Value) -> VirtualMachineInstance {
    let spec = spec_of(&input["networks"], &input["interfaces"]);
    let status: Vec<InterfaceStatus> = from(&input["vmiStatusInterfaces"]);
    let mut vmi = VirtualMachineInstance {
        spec,
        status: Some(VmiStatus {
            interfaces: status,
            ..Default::default()
        }),
        ..Default::default()
    };
    vmi.metadata.namespace = input["namespace"].as_str().map(Into::into);
    vmi
}

fn pod_annotations(input: &Value) -> BTreeMap<String, String> {
    from::<Option<BTreeMap<String, String>>>(&input["podAnnotations"]).unwrap_or_default()
}

fn plugins_config(input: &Value) -> ClusterConfig {
    let plugins: Option<BTreeMap<String, InterfaceBindingPlugin>> = from(&input["bindingPlugins"]);
    ClusterConfig {
        binding_plugins: plugins.unwrap_or_default(),
        ..Default::default()
    }
}

#[test]
fn namescheme() {
    for case in load("namescheme") {
        let (input, expected) = (&case["input"], &case["expected"]);
        let networks: Vec<Network> = from(&input["networks"]);
        let got = match input["function"].as_str().unwrap() {
            "GenerateHashedInterfaceName" => json!(names::hashed_pod_interface_name(
                input["networkName"].as_str().unwrap()
            )),
            // The link names and the fake bridge address are the launcher's
            // (`weft_launcher::names`); its vectors test runs those cases.
            "LinkNames" | "FakeBridgeIP" => continue,
            "CreateOrdinalNetworkNameScheme" => json!(names::ordinal_scheme(&networks)),
            "CreateHashedNetworkNameScheme" => json!(names::hashed_scheme(&networks)),
            "OrdinalPodInterfaceName" => json!(names::ordinal_pod_interface_name(
                input["name"].as_str().unwrap(),
                &networks
            )),
            "CreateFromNetworkStatuses" => {
                json!(names::scheme_from_network_statuses(
                    &networks,
                    &statuses_of(&input["networkStatuses"])
                ))
            }
            "PodHasOrdinalInterfaceName" => {
                json!(
                    names::scheme_of_pod(&statuses_of(&input["networkStatuses"]))
                        == names::NameScheme::Ordinal
                )
            }
            other => panic!("unknown function {other}"),
        };
        assert_eq!(&got, expected, "{}", case["source"]);
    }
}

#[test]
fn infosource_vectors() {
    for case in load("infosource") {
        let input = &case["input"];
        let (s, item) = (
            input["infoSource"].as_str().unwrap(),
            input["item"].as_str().unwrap(),
        );
        let got = match input["function"].as_str().unwrap() {
            "AddInfoSource" => infosource::add(s, item),
            "RemoveInfoSource" => infosource::remove(s, item),
            other => panic!("unknown function {other}"),
        };
        assert_eq!(json!(got), case["expected"], "{}", case["source"]);
    }
}

#[test]
fn multus_annotation() {
    for case in load("multus_annotation") {
        let (input, expected) = (&case["input"], &case["expected"]);
        let vmi = vmi(input);
        let config = plugins_config(input);
        let ns = input["namespace"].as_str().unwrap();
        match input["function"].as_str().unwrap() {
            "GenerateCNIAnnotation" => {
                let nets: Vec<&Network> = vmi.spec.networks.iter().collect();
                let names = names::hashed_scheme(&vmi.spec.networks);
                let got =
                    networks_annotation(ns, vmi.spec.interfaces(), &nets, &names, &config.binding_plugins);
                if let Some(err) = expected.get("error") {
                    assert_eq!(got.unwrap_err().to_string(), err.as_str().unwrap());
                    continue;
                }
                let got = got.unwrap();
                assert_eq!(
                    got,
                    expected["exactString"].as_str().unwrap(),
                    "{}",
                    case["source"]
                );
            }
            "Generator.Generate" => {
                check_annotations(&network_annotations(&vmi, &config).unwrap(), expected, &case)
            }
            "Generator.GenerateFromActivePod" => check_annotations(
                &running_pod_annotations(&vmi, &pod_annotations(input), &config),
                expected,
                &case,
            ),
            "Generator.GenerateFromSource" => {
                let mut config = config;
                config.gates.pod_secondary_interface_naming_upgrade =
                    input["podSecondaryInterfaceNamingUpgradeEnabled"]
                        .as_bool()
                        .unwrap();
                let source: BTreeMap<String, String> = from(&input["sourcePodAnnotations"]);
                let got = migration_target_annotations(&vmi, &source, &config).unwrap();
                let value: Value = serde_json::from_str(&got[weft_netconf::NETWORKS_ANNOTATION]).unwrap();
                assert_eq!(value, expected["annotationJSON"], "{}", case["source"]);
            }
            other => panic!("unknown function {other}"),
        }
    }
}

fn check_annotations(got: &BTreeMap<String, String>, expected: &Value, case: &Value) {
    if let Some(want) = expected.get("annotations").and_then(Value::as_object) {
        for (k, v) in want {
            assert_eq!(
                got.get(k).map(String::as_str),
                v.as_str(),
                "{k}: {}",
                case["source"]
            );
        }
    }
    if let Some(absent) = expected.get("absentKeys").and_then(Value::as_array) {
        for k in absent {
            assert!(
                !got.contains_key(k.as_str().unwrap()),
                "{k} present: {}",
                case["source"]
            );
        }
    }
}

#[test]
fn admission() {
    for case in load("admission") {
        let input = &case["input"];
        let spec_in = &input["spec"];
        let spec = spec_of(&spec_in["networks"], &spec_in["interfaces"]);
        let cc = &input["clusterConfig"];
        let flag = |k: &str| cc[k].as_bool().unwrap_or(false);
        let gates = FeatureGates {
            passt_binding: flag("passtBindingGate"),
            network_devices_with_dra: flag("networkDevicesWithDRAGate"),
            port_ranges_spec: flag("portRangesSpecGate"),
            ..Default::default()
        };
        let config = ClusterConfig {
            permit_bridge_interface_on_pod_network: flag("permitBridgeInterfaceOnPodNetwork"),
            gates,
            ..Default::default()
        };
        let got: Vec<Value> = validate_create(input["fieldRoot"].as_str().unwrap(), &spec, &config)
            .iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();
        if let Some(want) = case["expected"]["causes"].as_array() {
            assert_eq!(&got, want, "{}", case["source"]);
        } else {
            for want in case["expected"]["causesContain"].as_array().unwrap() {
                assert!(got.contains(want), "{want} not in {got:?}: {}", case["source"]);
            }
        }
    }
}

#[test]
fn vmi_status_controller() {
    for case in load("vmi_status_controller") {
        let input = &case["input"];
        let vmi = vmi(input);
        let statuses = network_statuses(&pod_annotations(input));
        let got = controller_status_interfaces(&vmi.spec.networks, vmi.status_interfaces(), &statuses);
        // Compared as structs: the vectors spell Go's omitted empty `name` as `""`.
        let want: Vec<InterfaceStatus> = from(&case["expected"]["statusInterfaces"]);
        assert_eq!(got, want, "{}", case["source"]);
    }
}

#[test]
fn vmi_status_handler() {
    for case in load("vmi_status_handler") {
        let input = &case["input"];
        let spec = spec_of(&input["spec"]["networks"], &input["spec"]["interfaces"]);
        let report = DomainReport {
            interfaces: from::<Vec<DomainInterface>>(&input["domainInterfaces"]),
            hostdev_aliases: Vec::new(),
            guest_agent_interfaces: from::<Vec<GuestAgentInterface>>(&input["guestAgentInterfaces"]),
            pod_interface_cache: from::<BTreeMap<String, PodInterfaceCache>>(&input["podInterfaceCache"]),
        };
        let previous: Vec<InterfaceStatus> = from(&input["previousStatus"]);
        let got = json!(handler_status_interfaces(&spec, &previous, &report));
        if let Some(want) = case["expected"].get("statusInterfaces") {
            assert_eq!(&got, want, "{}", case["source"]);
        } else {
            let want = case["expected"]["statusInterfacesSet"].as_array().unwrap();
            let got = got.as_array().unwrap();
            assert_eq!(got.len(), want.len(), "{}", case["source"]);
            for w in want {
                assert!(got.contains(w), "{w} missing: {}", case["source"]);
            }
        }
    }
}

#[test]
fn migration_evaluator() {
    for case in load("migration_evaluator") {
        let input = &case["input"];
        let vmi = vmi(input);
        let statuses = network_statuses(&pod_annotations(input));
        let existing: Option<Condition> = from(&input["existingMigrationRequiredCondition"]);
        let now = input["now"]
            .as_str()
            .unwrap_or("2025-01-01T00:00:00Z")
            .parse()
            .unwrap();
        let got = evaluate_migration(&vmi, &statuses, existing.as_ref(), now);
        assert_eq!(
            json!(got.as_condition_status()),
            case["expected"],
            "{}",
            case["source"]
        );
    }
}

#[test]
fn has_ordinal_secondary_ifaces_vector() {
    for case in load("hotplug_vm_controller") {
        let input = &case["input"];
        if input["function"] != "namescheme.HasOrdinalSecondaryIfaces" {
            continue;
        }
        let networks: Vec<Network> = from(&input["networks"]);
        let statuses: Vec<InterfaceStatus> = from(&input["statuses"]);
        assert_eq!(
            json!(names::has_ordinal_secondary_ifaces(&networks, &statuses)),
            case["expected"]
        );
    }
}
