//! Upstream vectors: masquerade_nft.json, pod_setup.json, masquerade_addressing.json and the link
//! name cases of namescheme.json.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use weft_launcher::addressing::{VmNetworkCidrs, ipv4_pair, ipv6_pair};
use weft_launcher::names::{LinkNames, fake_bridge_ip};
use weft_launcher::nft::{
    ForwardedPort, ForwardedPortRange, NatAddresses, NatInput, NatOptions, masquerade_rules,
};
use weft_launcher::plan::{Binding, Op, TapOwner, TapSettings, WiringRequest, plan_wiring};
use weft_launcher::pod_link::{PodLink, PodRoute};

fn vectors(name: &str) -> Vec<Value> {
    let path = format!("{}/../../vectors/kubevirt/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn nat_addresses(bridge: &Value, pod: &Value) -> Option<NatAddresses> {
    let bridge: ipnet::IpNet = bridge.as_str()?.parse().unwrap();
    let (gateway, guest) = match bridge {
        ipnet::IpNet::V4(n) => {
            let p = ipv4_pair(n.trunc()).unwrap();
            (p.gateway.addr().into(), p.guest.addr().into())
        }
        ipnet::IpNet::V6(n) => {
            let p = ipv6_pair(n.trunc()).unwrap();
            (p.gateway.addr().into(), p.guest.addr().into())
        }
    };
    let pod = pod.as_str().map(|p| p.parse::<ipnet::IpNet>().unwrap().addr());
    Some(NatAddresses { gateway, guest, pod })
}

#[test]
fn masquerade_nft_vectors() {
    let cases = vectors("masquerade_nft.json");
    assert_eq!(cases.len(), 15);
    for case in cases {
        let i = &case["input"];
        let ports = i["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| ForwardedPort {
                protocol: p["protocol"].as_str().unwrap_or("").to_string(),
                port: p["port"].as_u64().unwrap() as u16,
            })
            .collect();
        let port_ranges = i["portRanges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| ForwardedPortRange {
                protocol: r["protocol"].as_str().unwrap_or("").to_string(),
                start: r["start"].as_u64().unwrap() as u16,
                end: r["end"].as_u64().unwrap() as u16,
            })
            .collect();
        let input = NatInput {
            pod_iface: i["pod"]["name"].as_str().unwrap().to_string(),
            bridge: i["bridge"]["name"].as_str().unwrap().to_string(),
            ipv4: nat_addresses(&i["bridgeIPv4"], &i["podIPv4"]),
            ipv6: nat_addresses(&i["bridgeIPv6"], &i["podIPv6"]),
            options: NatOptions {
                ports,
                port_ranges,
                port_ranges_enabled: i["portRangesGate"].as_bool().unwrap(),
                istio: i["istio"].as_bool().unwrap(),
                legacy_migration_ports: i["legacyMigrationPorts"].as_bool().unwrap(),
            },
        };
        let rules = masquerade_rules(&input);
        let source = case["source"].as_str().unwrap();
        assert_eq!(
            rules.table_lines(),
            strings(&case["expected"]["tables"]),
            "{source}"
        );
        assert_eq!(
            rules.chain_lines(),
            strings(&case["expected"]["chains"]),
            "{source}"
        );
        assert_eq!(
            rules.rule_lines(),
            strings(&case["expected"]["rules"]),
            "{source}"
        );
    }
}

#[test]
fn masquerade_addressing_vectors() {
    for case in vectors("masquerade_addressing.json") {
        let i = &case["input"];
        let cidr = i["vmNetworkCIDR"].as_str().unwrap();
        let result = if i["family"] == "v4" {
            VmNetworkCidrs::parse(cidr, "")
                .and_then(|c| c.ipv4_pair())
                .map(|p| (p.gateway.to_string(), p.guest.to_string()))
        } else {
            VmNetworkCidrs::parse("", cidr)
                .and_then(|c| c.ipv6_pair())
                .map(|p| (p.gateway.to_string(), p.guest.to_string()))
        };
        let e = &case["expected"];
        if e["error"] == true {
            let err = result.unwrap_err().to_string();
            assert!(err.contains("VM CIDR subnet is too small"), "{err}");
        } else {
            assert_eq!(
                result.unwrap(),
                (
                    e["gateway"].as_str().unwrap().into(),
                    e["guest"].as_str().unwrap().into()
                )
            );
        }
    }
}

#[test]
fn namescheme_link_name_vectors() {
    let mut seen = 0;
    for case in vectors("namescheme.json") {
        let i = &case["input"];
        match i["function"].as_str().unwrap() {
            "LinkNames" => {
                let primary = i["networkKind"] != "multus-secondary";
                let names = LinkNames::derive(i["podInterfaceName"].as_str().unwrap(), primary);
                let e = &case["expected"];
                assert_eq!(names.tap, e["tap"].as_str().unwrap());
                assert_eq!(names.bridge, e["bridge"].as_str().unwrap());
                assert_eq!(names.renamed_pod_nic, e["renamedPodNic"].as_str().unwrap());
                seen += 1;
            }
            "FakeBridgeIP" => {
                let ip = fake_bridge_ip(i["interfaceIndex"].as_u64().unwrap() as usize).unwrap();
                assert_eq!(ip.to_string(), case["expected"].as_str().unwrap());
                seen += 1;
            }
            _ => {}
        }
    }
    assert_eq!(seen, 10);
}

fn pod_link(v: &Value, routes: &Value) -> PodLink {
    let substitute = |s: &str| {
        s.replace("<primaryIPv4>", "10.222.222.1")
            .replace("<primaryIPv6>", "2001::1")
    };
    let addresses = ["ipv4", "ipv6"]
        .iter()
        .flat_map(|f| {
            v[f].as_array()
                .unwrap()
                .iter()
                .map(|a| substitute(a.as_str().unwrap()).parse().unwrap())
        })
        .collect();
    let routes = routes
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| PodRoute {
                    destination: r["dst"].as_str().unwrap().parse().unwrap(),
                    gateway: r["via"].as_str().map(|g| g.parse().unwrap()),
                })
                .collect()
        })
        .unwrap_or_default();
    PodLink {
        name: v["name"].as_str().unwrap().to_string(),
        index: v["index"].as_u64().unwrap_or(0) as u32,
        mac: v["mac"].as_str().unwrap().parse().unwrap(),
        mtu: v["mtu"].as_u64().unwrap() as u32,
        addresses,
        routes,
    }
}

/// Render a plan in the shape of the vectors' nmstate-like desired interfaces + sysctls.
fn summarize(steps: &[Op], pod_index: u32) -> (Vec<Value>, BTreeMap<String, Value>) {
    let mut links: Vec<Map<String, Value>> = Vec::new();
    let mut sysctl = BTreeMap::new();
    fn entry<'a>(links: &'a mut Vec<Map<String, Value>>, name: &str) -> &'a mut Map<String, Value> {
        if let Some(i) = links.iter().position(|l| l["name"] == name) {
            return &mut links[i];
        }
        links.push(Map::from_iter([("name".to_string(), json!(name))]));
        links.last_mut().unwrap()
    }
    for op in steps {
        match op {
            Op::CreateBridge { name, mac, mtu } => {
                let e = entry(&mut links, name);
                e.insert("type".into(), json!("bridge"));
                if let Some(mac) = mac {
                    e.insert("mac".into(), json!(mac.to_string()));
                }
                if let Some(mtu) = mtu {
                    e.insert("mtu".into(), json!(mtu));
                }
            }
            Op::CreateTap {
                name,
                owner,
                queues,
                mtu,
            } => {
                let e = entry(&mut links, name);
                e.insert("type".into(), json!("tap"));
                e.insert("mtu".into(), json!(mtu));
                e.insert(
                    "tap".into(),
                    json!({"queues": queues, "uid": owner.uid, "gid": owner.gid}),
                );
            }
            Op::AddAddresses { link, addresses } => {
                let e = entry(&mut links, link);
                for (family, v4) in [("ipv4", true), ("ipv6", false)] {
                    let list: Vec<String> = addresses
                        .iter()
                        .filter(|a| a.addr().is_ipv4() == v4)
                        .map(|a| a.to_string())
                        .collect();
                    if !list.is_empty() {
                        e.insert(family.into(), json!(list));
                    }
                }
            }
            Op::SetUp { name } => {
                entry(&mut links, name).insert("state".into(), json!("up"));
            }
            Op::SetDown { .. } => {}
            Op::Rename { to, .. } => {
                entry(&mut links, to).insert("index".into(), json!(pod_index));
            }
            Op::CopyMac { link, from } => {
                entry(&mut links, link).insert("copyMacFrom".into(), json!(from));
            }
            Op::SetMaster { link, master } => {
                entry(&mut links, link).insert("controller".into(), json!(master));
            }
            Op::FlushAddresses { link } => {
                let e = entry(&mut links, link);
                e.insert("ipv4".into(), json!("disabled"));
                e.insert("ipv6".into(), json!("disabled"));
            }
            Op::SetLearning { link, enabled } => {
                entry(&mut links, link).insert("portLearning".into(), json!(enabled));
            }
            Op::Sysctl { key, value } => {
                if let Some(bridge) = key
                    .strip_prefix("net/ipv4/conf/")
                    .and_then(|k| k.strip_suffix("/route_localnet"))
                    && bridge != "all"
                {
                    entry(&mut links, bridge).insert("route_localnet".into(), json!(value == "1"));
                } else {
                    sysctl.insert(key.clone(), json!(value.parse::<u64>().unwrap()));
                }
            }
            Op::InstallNat { .. } => {}
            other => panic!("unexpected op in a plan: {other:?}"),
        }
    }
    (links.into_iter().map(Value::Object).collect(), sysctl)
}

fn request(binding: Binding, link: PodLink) -> WiringRequest {
    WiringRequest {
        binding,
        pod_iface: link.name.clone(),
        primary: true,
        interface_index: 0,
        pod_link: link,
        guest_mac: None,
        vm_cidrs: VmNetworkCidrs::default(),
        tap: TapSettings {
            owner: TapOwner { uid: 0, gid: 0 },
            queues: 0,
        },
    }
}

#[test]
fn pod_setup_masquerade_vector() {
    let case = &vectors("pod_setup.json")[0];
    let link = pod_link(&case["input"]["podLinks"][0], &Value::Null);
    let plan = plan_wiring(&request(Binding::Masquerade(NatOptions::default()), link)).unwrap();
    let ops: Vec<Op> = plan.steps.iter().map(|s| s.op.clone()).collect();
    let (links, sysctl) = summarize(&ops, 0);
    let e = &case["expected"];
    assert_eq!(Value::Array(links), e["interfaces"]);
    assert_eq!(serde_json::to_value(&sysctl).unwrap(), e["sysctl"]);
    assert!(
        matches!(ops.last(), Some(Op::InstallNat { .. })),
        "NAT is installed last"
    );
    let ips: Vec<String> = plan.pod_ips.iter().map(|a| a.to_string()).collect();
    assert_eq!(ips, ["10.222.222.1", "2001::1"]);
    let lease = plan.lease.unwrap();
    let v4 = lease.ipv4.unwrap();
    assert_eq!(
        (v4.address.to_string(), v4.router.unwrap().to_string()),
        ("10.0.2.2/24".into(), "10.0.2.1".into())
    );
    assert_eq!(lease.ipv6.unwrap().address.to_string(), "fd10:0:2::2/120");
    // KubeVirt's masquerade server answers any MAC; weft's only the guest's (docs/compat.md).
    assert_eq!((lease.client_mac, lease.mtu), (Some(plan.guest_mac), 1500));
}

#[test]
fn pod_setup_bridge_vector() {
    let case = &vectors("pod_setup.json")[1];
    let link = pod_link(&case["input"]["podLinks"][0], &case["input"]["routes"]);
    let plan = plan_wiring(&request(Binding::Bridge, link.clone())).unwrap();
    let ops: Vec<Op> = plan.steps.iter().map(|s| s.op.clone()).collect();
    let (links, sysctl) = summarize(&ops, 0);
    let e = &case["expected"];
    // weft keeps the dummy's record in the plan instead of creating a dummy link (docs/compat.md).
    let expected: Vec<Value> = e["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["type"] != "dummy")
        .cloned()
        .collect();
    assert_eq!(links, expected);
    let dummy = e["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["type"] == "dummy")
        .unwrap();
    let record = plan.detached_pod_link.as_ref().unwrap();
    assert_eq!(record.name, dummy["name"].as_str().unwrap());
    assert_eq!(record.mac.to_string(), dummy["mac"].as_str().unwrap());
    assert_eq!(record.mtu as u64, dummy["mtu"].as_u64().unwrap());
    assert_eq!(record.addresses, link.addresses);
    assert_eq!(serde_json::to_value(&sysctl).unwrap(), e["sysctl"]);

    let ips: Vec<String> = plan.pod_ips.iter().map(|a| a.to_string()).collect();
    assert_eq!(ips, strings(&e["podInterfaceCache"]["podIPs"]));
    let cache = &e["dhcpCache"];
    let lease = plan.lease.unwrap();
    assert_eq!(
        lease.client_mac.unwrap().to_string(),
        cache["MAC"].as_str().unwrap()
    );
    assert_eq!(lease.server_interface, "k6t-eth0");
    let v4 = lease.ipv4.unwrap();
    assert_eq!(v4.server_ip.to_string(), "169.254.75.10");
    assert_eq!(v4.address.to_string(), cache["IP"].as_str().unwrap());
    assert_eq!(v4.router.unwrap().to_string(), cache["Gateway"].as_str().unwrap());
    let routes: Vec<Value> = v4
        .routes
        .iter()
        .map(|r| {
            let dst = (r.destination.prefix_len() > 0).then(|| r.destination.to_string());
            json!({"dst": dst, "gw": r.gateway.map(|g| g.to_string())})
        })
        .collect();
    assert_eq!(Value::Array(routes), cache["Routes"]);
}

#[test]
fn pod_setup_unplug_vector_names() {
    let case = &vectors("pod_setup.json")[2];
    let pod_iface = case["input"]["secondaryPodIface"].as_str().unwrap();
    let names = LinkNames::derive(pod_iface, false);
    let removed = strings(&case["expected"]["secondaryInterfacesSetAbsent"]);
    assert_eq!(removed[0], format!("{} (bridge)", names.bridge));
    assert_eq!(removed[1], format!("{} (tap)", names.tap));
}
