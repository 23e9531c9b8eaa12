//! The repository's manifests agree with the code: the example NAD parses as a weft-ipam config,
//! and the IPReservation CRD requires exactly what the allocator writes.

use serde_json::Value;
use weft_ipam::parse_network_config;
use weft_ipam::reservation::{IpReservation, IpReservationSpec};

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))).expect(path)
}

#[test]
fn example_nad_is_a_valid_persistent_ip_config() {
    let nad: Value = serde_saphyr::from_str(&read("examples/nad-data.yaml")).unwrap();
    let config: Value = serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
    let c = parse_network_config(&config).unwrap();
    assert!(c.allow_persistent_ips);
    assert_eq!(c.network, "data");
    assert!(!c.ranges[0].contains("192.168.100.1".parse().unwrap()), "gateway");
    assert!(
        !c.ranges[0].contains("192.168.100.9".parse().unwrap()),
        "below range_start"
    );
    assert!(c.ranges[0].contains("192.168.100.10".parse().unwrap()));
}

#[test]
fn reservation_crd_matches_the_wire_format() {
    let crd: Value = serde_saphyr::from_str(&read("deploy/crds/ipam.weft.dev_ipreservations.yaml")).unwrap();
    assert_eq!(crd["spec"]["scope"], "Cluster");
    let version = &crd["spec"]["versions"][0];
    assert_eq!(
        format!(
            "{}/{}",
            crd["spec"]["group"].as_str().unwrap(),
            version["name"].as_str().unwrap()
        ),
        "ipam.weft.dev/v1alpha1"
    );
    let spec_schema = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let r = IpReservation::new(IpReservationSpec {
        network: "n".into(),
        ip: Some("10.0.0.1".parse().unwrap()),
        container_id: "c".into(),
        ifname: "eth1".into(),
        pod_ref: "ns/p".into(),
        pod_uid: "u".into(),
        node: "n1".into(),
        claim: Some("ns/c".into()),
    });
    let json = serde_json::to_value(&r).unwrap();
    for (field, _) in json["spec"].as_object().unwrap() {
        assert!(
            spec_schema["properties"].get(field).is_some(),
            "field {field} missing from the CRD"
        );
    }
    for required in spec_schema["required"].as_array().unwrap() {
        assert!(
            json["spec"].get(required.as_str().unwrap()).is_some(),
            "{required}"
        );
    }
    let claims: Value = serde_saphyr::from_str(&read("deploy/crds/k8s.cni.cncf.io_ipamclaims.yaml")).unwrap();
    assert_eq!(claims["spec"]["names"]["kind"], "IPAMClaim");
}
