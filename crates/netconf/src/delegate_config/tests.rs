use super::*;
use serde_json::json;

fn nad(ns: &str, name: &str, config: &str) -> NetworkAttachmentDefinition {
    let mut nad = NetworkAttachmentDefinition::default();
    nad.metadata.name = name.into();
    nad.metadata.namespace = Some(ns.into());
    nad.spec.config = config.into();
    nad
}

#[test]
fn name_is_injected_only_when_absent_or_empty() {
    let c = delegate_config_from_nad(
        &nad("ns", "net1", r#"{"type":"bridge","x":{"b":1,"a":2}}"#),
        "/d",
        &[],
    )
    .unwrap();
    assert_eq!(c.text(), r#"{"name":"net1","type":"bridge","x":{"b":1,"a":2}}"#);
    assert_eq!(c.name(), "net1");
    let c =
        delegate_config_from_nad(&nad("ns", "net1", r#"{"name":"","type":"bridge"}"#), "/d", &[]).unwrap();
    assert_eq!(c.name(), "net1");
    let original = "{ \"type\": \"bridge\",\n  \"name\": \"other\", \"n\": 1.50 }";
    let c = delegate_config_from_nad(&nad("ns", "net1", original), "/d", &[]).unwrap();
    assert_eq!(c.text(), original, "bytes pass through untouched");
    assert_eq!(c.name(), "other");
}

#[test]
fn bad_json_names_the_nad() {
    let err = delegate_config_from_nad(&nad("ns", "net1", "{nope"), "/d", &[]).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with(
        "NetworkAttachmentDefinition ns/net1: GetCNIConfig: err in getCNIConfigFromSpec: failed to unmarshal Spec.Config: "
    ), "{msg}");
}

#[test]
fn a_nad_naming_the_meta_plugin_itself_is_refused_as_a_plugin_or_in_a_list() {
    for config in [
        r#"{"cniVersion":"1.0.0","type":"weft-cni","clusterNetwork":"x"}"#,
        r#"{"cniVersion":"1.0.0","plugins":[{"type":"bridge"},{"type":"weft-cni"}]}"#,
        // Nested: the plugin would exec it as its IPAM plugin, or as its delegate.
        r#"{"cniVersion":"1.0.0","type":"bridge","ipam":{"type":"weft-cni"}}"#,
        r#"{"cniVersion":"1.0.0","plugins":[{"type":"tuning"},{"type":"macvlan","ipam":{"type":"weft-cni"}}]}"#,
        r#"{"cniVersion":"1.0.0","type":"flannel","delegate":{"type":"weft-cni"}}"#,
    ] {
        let err = delegate_config_from_nad(&nad("tenant", "loop", config), "/d", &[]).unwrap_err();
        assert_eq!(
            err,
            NadConfigError::Invalid {
                nad: "tenant/loop".into(),
                source: DelegateConfigError::MetaPlugin
            }
        );
        assert!(matches!(
            DelegateConfig::parse(config),
            Err(DelegateConfigError::MetaPlugin)
        ));
        assert!(err.to_string().contains("tenant/loop"), "{err}");
        assert!(err.to_string().contains("meta-plugin itself"), "{err}");
    }
    // Names that only look alike are plugins like any other, and so are weft-ipam and a
    // nested type under another field.
    for ok in [
        r#"{"cniVersion":"1.0.0","type":"weft-cni-helper"}"#,
        r#"{"cniVersion":"1.0.0","type":"bridge","ipam":{"type":"weft-ipam"}}"#,
        r#"{"cniVersion":"1.0.0","type":"bridge","args":{"type":"weft-cni"}}"#,
    ] {
        assert!(
            delegate_config_from_nad(&nad("tenant", "ok", ok), "/d", &[]).is_ok(),
            "{ok}"
        );
    }
}

#[test]
fn classification_errors_match_multus() {
    let err = DelegateConfig::parse(r#"{"_not_type":"weave-net"}"#).unwrap_err();
    assert!(
        err.to_string()
            .contains("delegate must have the 'type' or 'plugin' field")
    );
    let err = DelegateConfig::parse(r#"{"name":"l","plugins":[{"x":1}]}"#).unwrap_err();
    assert!(
        err.to_string()
            .contains("a plugin delegate must have the 'type' field")
    );
    let err = DelegateConfig::parse(r#"{"name":"l","plugins":[]}"#).unwrap_err();
    assert!(
        err.to_string()
            .contains("a plugin delegate must have the 'type' field")
    );
    let c = DelegateConfig::parse(r#"{"name":"weave-list","plugins":[{"type":"weave"},{"type":"portmap"}]}"#)
        .unwrap();
    assert!(c.is_list());
    assert_eq!(c.first_type(), "weave");
    let err = delegate_config_from_nad(&nad("ns", "n", r#"{"name":"x"}"#), "/d", &[]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("NetworkAttachmentDefinition ns/n: LoadDelegateNetConf")
    );
}

fn files(list: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    list.iter()
        .map(|(f, c)| (f.to_string(), c.as_bytes().to_vec()))
        .collect()
}

#[test]
fn config_less_nad_is_found_in_the_conf_dir_in_sorted_order() {
    let dir = files(&[
        (
            "20-b.conflist",
            r#"{"name":"net1","plugins":[{"type":"from-list"}]}"#,
        ),
        ("10-a.conf", r#"{"name":"net1","type":"from-conf"}"#),
        ("05-x.txt", "garbage"),
    ]);
    let c = delegate_config_from_nad(&nad("ns", "net1", ""), "/etc/cni/multus/net.d", &dir).unwrap();
    assert_eq!(c.first_type(), "from-conf");
    let dir = files(&[
        ("10-a.json", r#"{"name":"other","type":"x"}"#),
        (
            "20-b.conflist",
            r#"{"name":"net1","plugins":[{"type":"from-list"}]}"#,
        ),
    ]);
    let c = delegate_config_from_nad(&nad("ns", "net1", ""), "/d", &dir).unwrap();
    assert!(c.is_list());
}

#[test]
fn conf_dir_errors() {
    let err = find_config_in_dir("/d", &[], "n").unwrap_err();
    assert_eq!(err.to_string(), "No networks found in /d");
    let dir = files(&[("a.conf", r#"{"name":"x","type":"t"}"#)]);
    assert_eq!(
        find_config_in_dir("/d", &dir, "n").unwrap_err().to_string(),
        "no network available in the name n in cni dir /d"
    );
    let dir = files(&[("a.conf", r#"{"name":"n"}"#)]);
    assert_eq!(
        find_config_in_dir("/d", &dir, "n").unwrap_err().to_string(),
        "Error loading CNI config file /d/a.conf: no 'type'; perhaps this is a .conflist?"
    );
    let dir = files(&[("a.conf", "{bad"), ("b.conf", r#"{"name":"n","type":"t"}"#)]);
    assert!(
        find_config_in_dir("/d", &dir, "n")
            .unwrap_err()
            .to_string()
            .starts_with("Error loading CNI config file /d/a.conf: error parsing configuration: ")
    );
    let err = delegate_config_from_nad(&nad("ns", "n", ""), "/d", &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "NetworkAttachmentDefinition ns/n: GetCNIConfig: err in GetCNIConfigFromFile: No networks found in /d"
    );
}

#[test]
fn capabilities_are_the_union_of_true_ones() {
    let c = DelegateConfig::parse(
        r#"{"name":"l","plugins":[{"type":"a","capabilities":{"ips":true,"mac":false}},{"type":"b","capabilities":{"portMappings":true}}]}"#,
    )
    .unwrap();
    assert_eq!(
        c.capabilities().into_iter().collect::<Vec<_>>(),
        vec!["ips".to_string(), "portMappings".to_string()]
    );
}

#[test]
fn edits_keep_key_order_and_reach_every_plugin() {
    let c = DelegateConfig::parse(
        r#"{"name":"l","cniVersion":"1.0.0","plugins":[{"type":"a","z":1},{"type":"b"}]}"#,
    )
    .unwrap();
    let edited = c
        .map_plugins(|p| {
            p.insert("k".into(), json!(true));
        })
        .unwrap();
    assert_eq!(
        edited.text(),
        r#"{"name":"l","cniVersion":"1.0.0","plugins":[{"type":"a","z":1,"k":true},{"type":"b","k":true}]}"#
    );
    let c = DelegateConfig::parse(r#"{"name":"l","plugins":[{"type":"a"}]}"#).unwrap();
    assert_eq!(c.with_cni_version_if_missing("1.0.0").cni_version(), "1.0.0");
}

#[test]
fn serde_round_trip_is_the_text() {
    let c = DelegateConfig::parse(r#"{"name":"n","type":"t"}"#).unwrap();
    let s = serde_json::to_string(&c).unwrap();
    assert_eq!(s, r#""{\"name\":\"n\",\"type\":\"t\"}""#);
    assert_eq!(serde_json::from_str::<DelegateConfig>(&s).unwrap(), c);
}

#[test]
fn plan_order_is_needed_for_link_in_container_vrf_and_sbr_without_a_table() {
    let needs = |text: &str| DelegateConfig::parse(text).unwrap().needs_plan_order();
    assert!(needs(
        r#"{"name":"v","type":"vlan","master":"net1","linkInContainer":true}"#
    ));
    assert!(needs(
        r#"{"name":"l","plugins":[{"type":"macvlan","master":"eth0","linkInContainer":true},{"type":"tuning"}]}"#
    ));
    assert!(!needs(r#"{"name":"v","type":"vlan","master":"eth0"}"#));
    assert!(!needs(r#"{"name":"v","type":"vlan","linkInContainer":false}"#));
    // Only the boolean counts (the plugins parse it as a bool).
    assert!(!needs(r#"{"name":"v","type":"vlan","linkInContainer":"true"}"#));
    assert!(!needs(
        r#"{"name":"l","plugins":[{"type":"bridge"},{"type":"tuning"}]}"#
    ));
    assert!(needs(
        r#"{"name":"l","plugins":[{"type":"macvlan"},{"type":"vrf","vrfname":"blue"}]}"#
    ));
    assert!(needs(
        r#"{"name":"l","plugins":[{"type":"bridge"},{"type":"sbr"}]}"#
    ));
    assert!(!needs(
        r#"{"name":"l","plugins":[{"type":"bridge"},{"type":"sbr","table":101}]}"#
    ));
}

#[test]
fn a_default_route_of_its_own_is_seen_in_gateway_dhcp_and_zero_prefix_routes() {
    let adds = |text: &str| DelegateConfig::parse(text).unwrap().may_add_default_route();
    assert!(adds(r#"{"name":"b","type":"bridge","isDefaultGateway":true}"#));
    assert!(adds(r#"{"name":"m","type":"macvlan","ipam":{"type":"dhcp"}}"#));
    assert!(adds(
        r#"{"name":"b","type":"bridge","ipam":{"type":"host-local","routes":[{"dst":"10.0.0.0/8"},{"dst":"0.0.0.0/0"}]}}"#
    ));
    assert!(adds(
        r#"{"name":"l","plugins":[{"type":"bridge","ipam":{"type":"static","routes":[{"dst":"::/0"}]}},{"type":"tuning"}]}"#
    ));
    assert!(!adds(
        r#"{"name":"b","type":"bridge","isGateway":true,"ipam":{"type":"host-local","routes":[{"dst":"10.0.0.0/8"}]}}"#
    ));
    assert!(!adds(r#"{"name":"b","type":"bridge","isDefaultGateway":false}"#));
}
