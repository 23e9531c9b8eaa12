//! Multus vectors `vectors/multus/01-annotation-comma-list.json` to
//! `07-annotation-json-full-element.json` (annotation parsing).

use serde_json::{Value, json};
use weft_netconf::{NetworkSelectionElement, parse_networks_annotation};

fn vector(name: &str) -> Value {
    let path = format!("{}/../../vectors/multus/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The (name, namespace, interface) view the vectors use.
fn view(elements: &[NetworkSelectionElement]) -> Value {
    Value::Array(
        elements
            .iter()
            .map(|e| {
                let mut v = json!({"name": e.name, "namespace": e.namespace});
                if !e.interface.is_empty() {
                    v["interface"] = json!(e.interface);
                }
                v
            })
            .collect(),
    )
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap()
}

#[test]
fn v01_comma_list() {
    let v = vector("01-annotation-comma-list");
    let got = parse_networks_annotation(
        str_of(&v["input"]["annotation"]),
        str_of(&v["input"]["podNamespace"]),
    )
    .unwrap();
    assert_eq!(view(&got), v["expected"]["elements"]);
}

fn run_cases(name: &str) {
    let v = vector(name);
    let ns = str_of(&v["input"]["podNamespace"]);
    let inputs = v["input"]["cases"].as_array().unwrap();
    let expected = v["expected"]["cases"].as_array().unwrap();
    assert_eq!(inputs.len(), expected.len());
    for (input, want) in inputs.iter().zip(expected) {
        let got = parse_networks_annotation(str_of(input), ns);
        if let Some(err) = want.get("error") {
            let err = str_of(err);
            let got = got.expect_err(str_of(input)).to_string();
            assert!(got.starts_with(err), "{input}: got {got}, want {err}");
        } else if let Some(prefix) = want.get("errorPrefix") {
            let got = got.expect_err(str_of(input)).to_string();
            assert!(got.starts_with(str_of(prefix)), "{input}: {got}");
        } else if want.get("noNetworks").is_some() {
            assert!(got.unwrap().is_empty());
        } else if let Some(elements) = want.get("elements") {
            assert_eq!(&view(&got.unwrap()), elements, "{input}");
        } else {
            assert_eq!(view(&got.unwrap())[0], *want, "{input}");
        }
    }
}

#[test]
fn v02_text_forms_accepted() {
    run_cases("02-annotation-text-forms-accepted");
}

#[test]
fn v03_text_forms_rejected() {
    run_cases("03-annotation-text-forms-rejected");
}

#[test]
fn v04_text_edge_cases() {
    run_cases("04-annotation-text-edge-cases");
}

#[test]
fn v05_json_list_ignores_unknown_keys() {
    let v = vector("05-annotation-json-list");
    let got = parse_networks_annotation(
        str_of(&v["input"]["annotation"]),
        str_of(&v["input"]["podNamespace"]),
    )
    .unwrap();
    assert_eq!(view(&got), v["expected"]["elements"]);
    assert!(got[1].mac.is_empty() && got[1].ips.is_empty());
}

#[test]
fn v06_json_invalid_has_gos_message() {
    let v = vector("06-annotation-json-invalid");
    let err = parse_networks_annotation(
        str_of(&v["input"]["annotation"]),
        str_of(&v["input"]["podNamespace"]),
    )
    .unwrap_err();
    assert_eq!(err.to_string(), str_of(&v["expected"]["error"]));
}

#[test]
fn v07_json_full_element_parses() {
    let v = vector("07-annotation-json-full-element");
    let got = parse_networks_annotation(
        str_of(&v["input"]["annotation"]),
        str_of(&v["input"]["podNamespace"]),
    )
    .unwrap();
    let e = &got[0];
    assert_eq!(e.mac, "c2:11:22:33:44:66");
    assert_eq!(e.ips, vec!["10.0.0.1"]);
    assert_eq!(e.port_mappings.len(), 2);
    assert_eq!(e.bandwidth.as_ref().unwrap().egress_rate, 4096);
}
