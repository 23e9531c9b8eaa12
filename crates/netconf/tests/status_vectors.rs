//! Multus vectors `vectors/multus/14-network-status-single-interface.json`,
//! `15-network-status-multi-interface.json` and `16-network-status-annotation-format.json`
//! (network-status entries and the annotation text).

use serde_json::{Value, json};
use weft_cni::CniResult;
use weft_netconf::{
    NETWORK_STATUS_ANNOTATION, NetworkStatus, format_network_status_annotation, network_statuses,
    parse_network_status_annotation,
};

fn vector(name: &str) -> Value {
    let path = format!("{}/../../vectors/multus/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn v14_single_interface() {
    let v = vector("14-network-status-single-interface");
    let input = &v["input"];
    let name = input["networkName"].as_str().unwrap();
    let result: CniResult = serde_json::from_value(input["result"].clone()).unwrap();
    let got = network_statuses(&result, name, false, None);
    assert_eq!(got.len(), 1);
    assert_eq!(serde_json::to_value(&got[0]).unwrap(), v["expected"]["status"]);

    // Our Route type requires `dst` (spec); the dst-less route of the vector cannot be
    // represented, so the default-route variant is checked with its first route only.
    let mut with_routes = input["result"].clone();
    with_routes["routes"] = json!([input["variants"]["withRoutes"][0]]);
    let result: CniResult = serde_json::from_value(with_routes).unwrap();
    assert_eq!(
        network_statuses(&result, name, false, None)[0].gateway,
        vec!["10.10.10.10"]
    );
    let mut non_default = input["result"].clone();
    non_default["routes"] = input["variants"]["nonDefaultRoute"].clone();
    let result: CniResult = serde_json::from_value(non_default).unwrap();
    assert!(network_statuses(&result, name, false, None)[0].gateway.is_empty());
}

#[test]
fn v15_multi_interface() {
    let v = vector("15-network-status-multi-interface");
    let inputs = v["input"]["cases"].as_array().unwrap();
    let expected = v["expected"]["cases"].as_array().unwrap();
    for (input, want) in inputs.iter().zip(expected) {
        let result: CniResult = serde_json::from_value(input["result"].clone()).unwrap();
        let name = input["networkName"].as_str().unwrap();
        let got = network_statuses(&result, name, input["default"].as_bool().unwrap(), None);
        let want = want["statuses"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.name, name);
            assert_eq!(g.interface, w["interface"].as_str().unwrap());
            assert_eq!(json!(g.ips), w["ips"]);
            if let Some(d) = w.get("default") {
                assert_eq!(g.default, d.as_bool().unwrap());
            }
            if let Some(mac) = w.get("mac") {
                assert_eq!(g.mac, mac.as_str().unwrap());
            }
            if let Some(mtu) = w.get("mtu") {
                assert_eq!(u64::from(g.mtu), mtu.as_u64().unwrap());
            }
            assert_eq!(g.dns, result.dns, "dns copied to every entry");
        }
    }
}

#[test]
fn v16_annotation_is_byte_exact() {
    let v = vector("16-network-status-annotation-format");
    let statuses: Vec<NetworkStatus> = serde_json::from_value(v["input"]["statuses"].clone()).unwrap();
    assert_eq!(NETWORK_STATUS_ANNOTATION, v["expected"]["annotationKey"]);
    let text = format_network_status_annotation(&statuses);
    assert_eq!(text, v["expected"]["annotationValue"].as_str().unwrap());
    assert_eq!(parse_network_status_annotation(&text).unwrap(), statuses);
}
