//! Properties: interface names are valid, stable and distinct; rendering never panics.

use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;
use serde_json::{Value, json};
use weft_launcher::LinkNames;
use weft_object::ObjectMeta;
use weft_vm::ClusterConfig;
use weft_vm::api::{Network, VirtualMachineInstance};
use weft_vm::names::{hashed_pod_interface_name, hashed_scheme, ordinal_scheme};
use weft_vm::netstatus::parse_network_statuses;
use weft_vm::render::{RenderInput, render, render_input};

/// What the kernel accepts as an interface name (`dev_valid_name`).
fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace())
}

fn network_name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,64}"
}

fn multus(name: &str) -> Network {
    serde_json::from_value(json!({"name": name, "multus": {"networkName": "nad"}})).unwrap()
}

proptest! {
    #[test]
    fn hashed_names_are_valid_stable_and_distinct(names in proptest::collection::hash_set(network_name(), 1..12)) {
        let mut networks = vec![Network::default_pod()];
        networks.extend(names.iter().filter(|n| *n != "default").map(|n| multus(n)));
        let scheme = hashed_scheme(&networks);
        let mut seen = HashSet::new();
        for net in &networks {
            let name = &scheme[&net.name];
            prop_assert!(valid_ifname(name), "{name}");
            prop_assert!(seen.insert(name.clone()), "collision on {name}");
            prop_assert_eq!(name, &hashed_scheme(&networks)[&net.name]);
            let links = LinkNames::derive(name, net.is_primary());
            for link in [&links.tap, &links.bridge, &links.renamed_pod_nic] {
                prop_assert!(valid_ifname(link), "{link}");
            }
        }
        prop_assert_eq!(hashed_pod_interface_name("red"), "podb1f51a511f1");
    }

    #[test]
    fn ordinal_names_are_valid_and_distinct(count in 1usize..100) {
        let networks: Vec<Network> = (0..count).map(|i| multus(&format!("n{i}"))).collect();
        let scheme = ordinal_scheme(&networks);
        let distinct: HashSet<&String> = scheme.values().collect();
        prop_assert_eq!(distinct.len(), count);
        for name in scheme.values() {
            let links = LinkNames::derive(name, false);
            for link in [name, &links.tap, &links.bridge, &links.renamed_pod_nic] {
                prop_assert!(valid_ifname(link), "{link}");
            }
        }
    }

    #[test]
    fn network_status_parser_never_panics(raw in ".{0,200}") {
        let _ = parse_network_statuses(&raw);
    }

    #[test]
    fn render_never_panics_on_text(raw in ".{0,300}") {
        let _ = render(&raw);
    }

    #[test]
    fn render_never_panics_on_any_vmi(vmi in arbitrary_vmi(), annotations in pod_annotations(), gates in any::<[bool; 4]>()) {
        let vmi: VirtualMachineInstance = serde_json::from_value(vmi).unwrap();
        let mut config = ClusterConfig {
            permit_bridge_interface_on_pod_network: gates[0],
            ..Default::default()
        };
        config.gates.passt_binding = gates[1];
        config.gates.port_ranges_spec = gates[2];
        config.gates.network_devices_with_dra = gates[3];
        let pod = ObjectMeta { annotations, ..Default::default() };
        let out = render_input(&RenderInput { vmi: vmi.clone(), pod: Some(pod), config: config.clone() });
        prop_assert!(out.get("validation").is_some());
        let _ = render_input(&RenderInput { vmi, pod: None, config });
    }
}

fn binding() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({"bridge": {}})),
        Just(json!({"masquerade": {}})),
        Just(json!({"sriov": {}})),
        Just(json!({"passtBinding": {}})),
        Just(json!({"binding": {"name": "plug"}})),
        Just(json!({"slirp": {}})),
        Just(json!({})),
        Just(json!({"bridge": {}, "masquerade": {}})),
    ]
}

fn small_name() -> impl Strategy<Value = String> {
    prop_oneof![Just("default".to_string()), "[a-c]{1,2}", "[A-Za-z0-9._/-]{0,12}"]
}

fn interface() -> impl Strategy<Value = Value> {
    (
        small_name(),
        binding(),
        prop_oneof![Just(""), Just("up"), Just("down"), Just("absent"), Just("bogus")],
        prop_oneof![Just(String::new()), "[0-9a-fA-F:.-]{0,24}"],
        proptest::collection::vec((0i64..70000, "[a-zA-Z-]{0,5}", prop_oneof![Just(""), Just("TCP"), Just("udp")]), 0..3),
        proptest::collection::vec((0i64..70000, 0i64..70000), 0..3),
        prop_oneof![Just(String::new()), "[0-9a-f:.]{0,14}"],
        proptest::collection::vec(200i64..260, 0..3),
    )
        .prop_map(|(name, binding, state, mac, ports, ranges, pci, options)| {
            let mut iface = binding;
            iface["name"] = json!(name);
            iface["state"] = json!(state);
            iface["macAddress"] = json!(mac);
            iface["pciAddress"] = json!(pci);
            iface["ports"] = json!(ports.iter().map(|(p, n, proto)| json!({"port": p, "name": n, "protocol": proto})).collect::<Vec<_>>());
            iface["portRanges"] = json!(ranges.iter().map(|(s, e)| json!({"protocol": "TCP", "start": s, "end": e})).collect::<Vec<_>>());
            iface["dhcpOptions"] = json!({"privateOptions": options.iter().map(|o| json!({"option": o, "value": "v"})).collect::<Vec<_>>(), "ntpServers": ["1.2.3.4", "x"]});
            iface
        })
}

fn network() -> impl Strategy<Value = Value> {
    (
        small_name(),
        prop_oneof![
            Just(json!({"pod": {}})),
            Just(json!({"multus": {"networkName": "nad"}})),
            Just(json!({"multus": {"networkName": "ns/nad", "default": true}})),
            Just(json!({"multus": {"networkName": ""}})),
            Just(json!({"resourceClaim": {"claimName": "c", "requestName": ""}})),
            Just(json!({})),
            Just(json!({"pod": {}, "multus": {"networkName": "x"}})),
        ],
    )
        .prop_map(|(name, mut source)| {
            source["name"] = json!(name);
            source
        })
}

fn status_interface() -> impl Strategy<Value = Value> {
    (
        small_name(),
        prop_oneof![
            Just(""),
            Just("domain"),
            Just("multus-status"),
            Just("domain, guest-agent, multus-status")
        ],
        prop_oneof![Just(""), Just("eth0"), Just("net1"), Just("pod123")],
    )
        .prop_map(|(name, source, pod)| json!({"name": name, "infoSource": source, "podInterfaceName": pod}))
}

fn arbitrary_vmi() -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec(interface(), 0..5),
        proptest::collection::vec(network(), 0..5),
        proptest::collection::vec(status_interface(), 0..4),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(|(interfaces, networks, status, autoattach)| {
            json!({
                "metadata": {"name": "vm", "namespace": "ns", "annotations": {"kubectl.kubernetes.io/x": "y", "a": "b"}},
                "spec": {"domain": {"devices": {"interfaces": interfaces, "autoattachPodInterface": autoattach}}, "networks": networks},
                "status": {"interfaces": status}
            })
        })
}

fn pod_annotations() -> impl Strategy<Value = BTreeMap<String, String>> {
    let status_entry = (small_name(), prop_oneof![Just("eth0"), Just("net1"), Just("net2"), Just("pod123"), Just("")], any::<bool>())
        .prop_map(|(name, iface, default)| json!({"name": name, "interface": iface, "default": default, "device-info": {"type": "pci"}}));
    (
        proptest::collection::vec(status_entry, 0..4),
        ".{0,20}",
        any::<bool>(),
    )
        .prop_map(|(entries, junk, valid)| {
            let mut annotations = BTreeMap::new();
            let status = if valid {
                serde_json::to_string(&entries).unwrap()
            } else {
                junk.clone()
            };
            annotations.insert("k8s.v1.cni.cncf.io/network-status".to_string(), status);
            annotations.insert("k8s.v1.cni.cncf.io/networks".to_string(), junk);
            annotations
        })
}
