use std::net::IpAddr;

use ipnet::IpNet;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::result::Interface;

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

fn addr(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn route(dst: &str, gw: Option<&str>) -> Route {
    Route {
        dst: net(dst),
        gw: gw.map(addr),
        mtu: None,
        advmss: None,
        priority: None,
        table: None,
        scope: None,
    }
}

/// What the Debian bridge plugin prints for cniVersion 1.0.0.
const BRIDGE_1_0_0: &str = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"cs-br0","mac":"de:ad:be:ef:00:01"},{"name":"veth1","mac":"de:ad:be:ef:00:02"},{"name":"eth0","mac":"de:ad:be:ef:00:03","sandbox":"/var/run/netns/cs-pod1"}],"ips":[{"interface":2,"address":"10.99.0.10/24","gateway":"10.99.0.1"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{}}"#;

#[test]
fn reads_1_0_0_bridge_result() {
    let result = parse_result(BRIDGE_1_0_0.as_bytes()).unwrap();
    assert_eq!(result.cni_version, "1.0.0");
    assert_eq!(result.interfaces.len(), 3);
    assert_eq!(result.interfaces[2].sandbox, "/var/run/netns/cs-pod1");
    assert_eq!(result.ips[0].address, net("10.99.0.10/24"));
    assert_eq!(result.ips[0].interface, Some(2));
    assert_eq!(result.routes, vec![route("0.0.0.0/0", None)]);
}

#[test]
fn reads_0_4_0_with_ip_versions() {
    let text = json!({
        "cniVersion": "0.4.0",
        "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x"}],
        "ips": [
            {"version": "4", "interface": 0, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
            {"version": "6", "interface": 0, "address": "fd00::5/64"}
        ],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]
    });
    let result = result_from_value(text).unwrap();
    assert_eq!(result.ips.len(), 2);
    assert_eq!(result.ips[1].address, net("fd00::5/64"));
    assert_eq!(result.routes[0].gw, Some(addr("10.1.0.1")));
}

#[test]
fn reads_0_2_0_ip4_ip6() {
    let text = json!({
        "cniVersion": "0.2.0",
        "ip4": {"ip": "10.0.0.2/24", "gateway": "10.0.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
        "ip6": {"ip": "fd00::2/64", "routes": [{"dst": "::/0", "gw": "fd00::1"}]},
        "dns": {"nameservers": ["10.0.0.53"]}
    });
    let result = result_from_value(text).unwrap();
    assert_eq!(result.cni_version, "0.2.0");
    assert!(result.interfaces.is_empty());
    assert_eq!(
        result.ips.iter().map(|ip| ip.address).collect::<Vec<_>>(),
        vec![net("10.0.0.2/24"), net("fd00::2/64")]
    );
    assert_eq!(result.ips[0].gateway, Some(addr("10.0.0.1")));
    assert_eq!(
        result.routes,
        vec![route("0.0.0.0/0", None), route("::/0", Some("fd00::1"))]
    );
    assert_eq!(result.dns.nameservers, vec!["10.0.0.53"]);
}

#[test]
fn versionless_result_is_read_by_shape() {
    let legacy = result_from_value(json!({"ip4": {"ip": "10.0.0.2/24"}})).unwrap();
    assert_eq!(legacy.ips[0].address, net("10.0.0.2/24"));
    let modern = result_from_value(json!({"ips": [{"address": "10.0.0.3/24"}]})).unwrap();
    assert_eq!(modern.ips[0].address, net("10.0.0.3/24"));
}

#[test]
fn rejects_unknown_versions_and_bad_fields() {
    assert!(matches!(
        result_from_value(json!({"cniVersion": "2.0.0"})),
        Err(ResultError::UnsupportedVersion(_))
    ));
    assert!(matches!(
        result_from_value(json!({"cniVersion": "1.0.0", "ips": [{"address": "nope"}]})),
        Err(ResultError::Decode { .. })
    ));
    assert!(parse_result(b"not json").is_err());
}

#[test]
fn writes_0_3_1_with_version_field_first() {
    let result = parse_result(BRIDGE_1_0_0.as_bytes()).unwrap();
    let value = result_to_value(&result, CniVersion::V0_3_1).unwrap();
    assert_eq!(value["cniVersion"], "0.3.1");
    let ip = value["ips"][0].as_object().unwrap();
    assert_eq!(ip.keys().next().map(String::as_str), Some("version"));
    assert_eq!(ip["version"], "4");
    assert_eq!(ip["interface"], 2);
}

#[test]
fn writes_1_0_0_without_1_1_fields() {
    let mut result = parse_result(BRIDGE_1_0_0.as_bytes()).unwrap();
    result.interfaces[2].mtu = Some(1400);
    result.interfaces[2].pci_id = "0000:00:01.0".into();
    result.routes[0].table = Some(100);
    let v1_0 = result_to_value(&result, CniVersion::V1_0_0).unwrap();
    assert!(v1_0["interfaces"][2].get("mtu").is_none());
    assert!(v1_0["interfaces"][2].get("pciID").is_none());
    assert!(v1_0["routes"][0].get("table").is_none());
    let v1_1 = result_to_value(&result, CniVersion::V1_1_0).unwrap();
    assert_eq!(v1_1["interfaces"][2]["mtu"], 1400);
    assert_eq!(v1_1["interfaces"][2]["pciID"], "0000:00:01.0");
    assert_eq!(v1_1["routes"][0]["table"], 100);
}

#[test]
fn writes_0_2_0_with_first_address_of_each_family() {
    let result = CniResult {
        ips: vec![
            IpConfig {
                address: net("10.0.0.2/24"),
                gateway: Some(addr("10.0.0.1")),
                interface: Some(0),
            },
            IpConfig {
                address: net("10.0.0.3/24"),
                gateway: None,
                interface: Some(0),
            },
            IpConfig {
                address: net("fd00::2/64"),
                gateway: None,
                interface: Some(0),
            },
        ],
        routes: vec![route("0.0.0.0/0", Some("10.0.0.1")), route("fd01::/64", None)],
        interfaces: vec![Interface {
            name: "eth0".into(),
            ..Interface::default()
        }],
        ..CniResult::default()
    };
    let value = result_to_value(&result, CniVersion::V0_2_0).unwrap();
    assert_eq!(
        value,
        json!({
            "cniVersion": "0.2.0",
            "ip4": {"ip": "10.0.0.2/24", "gateway": "10.0.0.1", "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}]},
            "ip6": {"ip": "fd00::2/64", "routes": [{"dst": "fd01::/64"}]}
        })
    );
}

#[test]
fn writing_0_2_0_without_addresses_is_impossible() {
    let result = CniResult::default();
    assert!(matches!(
        result_to_value(&result, CniVersion::V0_1_0),
        Err(ResultError::Unconvertible { .. })
    ));
    assert!(result_to_value(&result, CniVersion::V0_3_0).is_ok());
}

fn arb_net() -> impl Strategy<Value = IpNet> {
    prop_oneof![
        (any::<[u8; 4]>(), 0u8..=32).prop_map(|(o, p)| IpNet::new(IpAddr::from(o), p).unwrap()),
        (any::<[u8; 16]>(), 0u8..=128).prop_map(|(o, p)| IpNet::new(IpAddr::from(o), p).unwrap()),
    ]
}

fn arb_addr() -> impl Strategy<Value = IpAddr> {
    arb_net().prop_map(|n| n.addr())
}

fn arb_text() -> impl Strategy<Value = String> {
    "[a-z0-9:/._-]{0,12}"
}

prop_compose! {
    fn arb_interface()(
        name in "[a-z][a-z0-9]{0,14}",
        mac in arb_text(),
        mtu in proptest::option::of(any::<u32>()),
        sandbox in arb_text(),
        socket_path in arb_text(),
        pci_id in arb_text(),
    ) -> Interface {
        Interface { name, mac, mtu, sandbox, socket_path, pci_id }
    }
}

prop_compose! {
    fn arb_route()(
        dst in arb_net(),
        gw in proptest::option::of(arb_addr()),
        mtu in proptest::option::of(any::<u32>()),
        advmss in proptest::option::of(any::<u32>()),
        priority in proptest::option::of(any::<u32>()),
        table in proptest::option::of(any::<u32>()),
        scope in proptest::option::of(any::<u8>()),
    ) -> Route {
        Route { dst, gw, mtu, advmss, priority, table, scope }
    }
}

prop_compose! {
    fn arb_result()(
        interfaces in proptest::collection::vec(arb_interface(), 0..4),
        ips in proptest::collection::vec(
            (arb_net(), proptest::option::of(arb_addr()), proptest::option::of(0usize..4)), 0..4),
        routes in proptest::collection::vec(arb_route(), 0..4),
        nameservers in proptest::collection::vec(arb_text(), 0..3),
        domain in arb_text(),
    ) -> CniResult {
        CniResult {
            cni_version: String::new(),
            interfaces,
            ips: ips.into_iter().map(|(address, gateway, interface)| IpConfig { address, gateway, interface }).collect(),
            routes,
            dns: Dns { nameservers, domain, ..Dns::default() },
        }
    }
}

fn arb_version() -> impl Strategy<Value = CniVersion> {
    proptest::sample::select(CniVersion::SUPPORTED.to_vec())
}

proptest! {
    #[test]
    fn latest_version_round_trips_losslessly(result in arb_result()) {
        let bytes = result_to_bytes(&result, CniVersion::V1_1_0).unwrap();
        let mut back = parse_result(&bytes).unwrap();
        back.cni_version.clear();
        prop_assert_eq!(back, result);
    }

    #[test]
    fn modern_versions_keep_everything_but_1_1_fields(result in arb_result(), version in arb_version()) {
        prop_assume!(!version.has_legacy_result());
        let bytes = result_to_bytes(&result, version).unwrap();
        let back = parse_result(&bytes).unwrap();
        prop_assert_eq!(&back.cni_version, &version.to_string());
        let mut expected = result.clone();
        if version < CniVersion::V1_1_0 {
            strip_1_1_fields(&mut expected);
        }
        expected.cni_version = version.to_string();
        prop_assert_eq!(back, expected);
    }

    #[test]
    fn conversion_through_any_version_is_idempotent(result in arb_result(), version in arb_version()) {
        match result_to_value(&result, version) {
            Ok(first) => {
                let reread = result_from_value(first.clone()).unwrap();
                prop_assert_eq!(result_to_value(&reread, version).unwrap(), first);
            }
            Err(ResultError::Unconvertible { .. }) => prop_assert!(result.ips.is_empty()),
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
    }

    #[test]
    fn legacy_keeps_first_address_per_family(result in arb_result()) {
        prop_assume!(!result.ips.is_empty());
        let back = project_to_version(&result, CniVersion::V0_2_0).unwrap();
        let first4 = result.ips.iter().find(|ip| ip.address.addr().is_ipv4()).map(|ip| ip.address);
        let first6 = result.ips.iter().find(|ip| ip.address.addr().is_ipv6()).map(|ip| ip.address);
        let expected: Vec<IpNet> = first4.into_iter().chain(first6).collect();
        prop_assert_eq!(back.ips.iter().map(|ip| ip.address).collect::<Vec<_>>(), expected);
    }

    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_result(&bytes);
    }
}
