use super::*;
use proptest::prelude::*;

#[test]
fn text_interface_names_follow_multus_not_the_nad_client() {
    let e = parse_networks_annotation("net1@my_interface", "test").unwrap();
    assert_eq!(e[0].interface, "my_interface");
    assert!(parse_networks_annotation("net1@abcdefghijklmnop", "test").is_err());
    assert!(parse_networks_annotation("net1@abcdefghijklmno", "test").is_ok());
    assert!(parse_networks_annotation("net1@a\tb", "test").is_err());
}

#[test]
fn json_mode_keeps_every_field() {
    let value = r#"[{"name":"n","namespace":"x","ips":["10.0.0.1/24","fd00::1"],"mac":"02:00:00:00:00:01",
        "infiniband-guid":"00:00:00:00:00:00:00:01","interface":"eth9","portMappings":[{"hostPort":1,"containerPort":2}],
        "bandwidth":{"ingressRate":1},"cni-args":{"a":1},"default-route":["10.0.0.254"],"deviceID":"0000:00:01.0",
        "ipam-claim-reference":"claim"}]"#;
    let e = &parse_networks_annotation(value, "test").unwrap()[0];
    assert_eq!(e.namespace, "x");
    assert_eq!(e.ips.len(), 2);
    assert_eq!(e.interface, "eth9");
    assert_eq!(e.port_mappings[0].container_port, 2);
    assert_eq!(e.bandwidth.as_ref().unwrap().ingress_rate, 1);
    assert_eq!(e.cni_args.as_ref().unwrap()["a"], 1);
    assert_eq!(e.default_route.as_ref().unwrap().len(), 1);
    assert_eq!(e.device_id, "0000:00:01.0");
    assert_eq!(e.ipam_claim_reference, "claim");
}

#[test]
fn json_mode_tolerates_nulls_like_go() {
    assert!(parse_networks_annotation("[]", "t").unwrap().is_empty());
    // Without `[`, `{` or `"` the value is text: "null" is a network name.
    assert_eq!(parse_networks_annotation("null", "t").unwrap()[0].name, "null");
    let e = parse_networks_annotation(r#"[{"name":"n","mac":null,"ips":null}]"#, "t").unwrap();
    assert_eq!(e[0].mac, "");
    assert_eq!(
        parse_networks_annotation("[null]", "t").unwrap_err(),
        AnnotationError::NullElement { index: 0 }
    );
}

#[test]
fn interface_request_is_the_legacy_alias() {
    let e = parse_networks_annotation(r#"[{"name":"n","interfaceRequest":"foo"}]"#, "t").unwrap();
    assert_eq!(e[0].interface, "foo");
    assert_eq!(
        serde_json::to_string(&e[0]).unwrap(),
        r#"{"name":"n","namespace":"t","interface":"foo"}"#
    );
    let e = parse_networks_annotation(
        r#"[{"name":"n","interfaceRequest":"foo","interface":"bar"}]"#,
        "t",
    )
    .unwrap();
    assert_eq!(e[0].interface, "bar");
}

#[test]
fn post_processing_errors_name_the_item() {
    let err = parse_networks_annotation(r#"[{"name":"n","mac":"zz"}]"#, "t").unwrap_err();
    assert_eq!(
        err.to_string(),
        "parsePodNetworkAnnotation: failed to mac: address zz: invalid MAC address (network 't/n')"
    );
    let err = parse_networks_annotation(r#"[{"name":"n","infiniband-guid":"zz"}]"#, "t").unwrap_err();
    assert!(err.to_string().starts_with(
        "parsePodNetworkAnnotation: failed to validate infiniband GUID: address zz: invalid MAC address"
    ));
    let err = parse_networks_annotation(r#"[{"name":"n","ips":["10.0.0.1/33"]}]"#, "t").unwrap_err();
    assert!(
        err.to_string()
            .starts_with(r#"failed to parse CIDR "10.0.0.1/33": invalid CIDR address: 10.0.0.1/33"#)
    );
    let err = parse_networks_annotation(r#"[{"name":"n","ips":["10.0.0"]}]"#, "t").unwrap_err();
    assert!(
        err.to_string()
            .starts_with(r#"failed to parse IP address "10.0.0""#)
    );
    let err = parse_networks_annotation("a/b/c", "t").unwrap_err();
    assert!(err.to_string().contains("'a/b/c'"));
}

#[test]
fn json_type_mismatch_is_an_error() {
    let err = parse_networks_annotation(r#"{"name":"n"}"#, "t").unwrap_err();
    assert!(matches!(err, AnnotationError::Json { .. }));
    let err = parse_networks_annotation(r#"[{"name":"n","default-route":["x"]}]"#, "t").unwrap_err();
    assert!(matches!(err, AnnotationError::Json { .. }));
}

#[test]
fn default_network_annotation() {
    let e = parse_default_network_annotation("net1", "kube-system")
        .unwrap()
        .unwrap();
    assert_eq!((e.namespace.as_str(), e.name.as_str()), ("kube-system", "net1"));
    assert_eq!(parse_default_network_annotation("", "kube-system").unwrap(), None);
    assert_eq!(
        parse_default_network_annotation("a,b", "kube-system")
            .unwrap_err()
            .to_string(),
        "tryLoadK8sPodDefaultNetwork: more than one default network is specified: a,b"
    );
    let e = parse_default_network_annotation("other/net1@eth5", "kube-system")
        .unwrap()
        .unwrap();
    assert_eq!((e.namespace.as_str(), e.interface.as_str()), ("other", "eth5"));
}

proptest! {
    #[test]
    fn never_panics(value in ".{0,64}") {
        let _ = parse_networks_annotation(&value, "ns");
    }

    #[test]
    fn well_formed_text_lists_round_trip(
        items in proptest::collection::vec(
            ("([a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?)?", "[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?", "[a-z0-9_]{0,15}"),
            1..5)
    ) {
        let text: Vec<String> = items.iter().map(|(ns, name, ifname)| {
            let mut s = String::new();
            if !ns.is_empty() { s.push_str(ns); s.push('/'); }
            s.push_str(name);
            if !ifname.is_empty() { s.push('@'); s.push_str(ifname); }
            s
        }).collect();
        let parsed = parse_networks_annotation(&text.join(" , "), "pod-ns").unwrap();
        prop_assert_eq!(parsed.len(), items.len());
        for (e, (ns, name, ifname)) in parsed.iter().zip(&items) {
            prop_assert_eq!(&e.namespace, if ns.is_empty() { "pod-ns" } else { ns.as_str() });
            prop_assert_eq!(&e.name, name);
            prop_assert_eq!(&e.interface, ifname);
        }
    }

    #[test]
    fn json_round_trips_through_serialisation(name in "[a-z]{1,8}", ns in "[a-z]{1,8}", ifname in "[a-z0-9]{1,15}") {
        let element = NetworkSelectionElement { name, namespace: ns, interface: ifname, ..Default::default() };
        let value = serde_json::to_string(&vec![element.clone()]).unwrap();
        prop_assert_eq!(parse_networks_annotation(&value, "x").unwrap(), vec![element]);
    }
}

proptest! {
    #[test]
    fn delegate_config_parse_never_panics(text in ".{0,64}") {
        if let Ok(c) = crate::DelegateConfig::parse(text) {
            let _ = c.capabilities();
            let _ = c.map_plugins(|p| { p.insert("k".into(), serde_json::Value::Null); });
        }
    }

    #[test]
    fn json_elements_never_panic(
        mac in "[0-9a-fA-F:.-]{0,20}", ip in "[0-9a-f:./]{0,20}", ifname in ".{0,20}"
    ) {
        let value = serde_json::json!([{"name": "n", "mac": mac, "ips": [ip], "interface": ifname}]).to_string();
        let _ = parse_networks_annotation(&value, "ns");
    }
}
