//! KubeVirt's DHCP and masquerade-addressing vectors, checked against the wire bytes.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, Message, MessageType};
use serde_json::Value;
use weft_dhcp::config::INFINITE_LEASE_SECONDS;
use weft_dhcp::{ClasslessRoute, ServerConfig, masquerade_addresses, options, v4};

fn load(name: &str) -> Vec<Value> {
    let path = format!("{}/../../vectors/kubevirt/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| items.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn bytes(value: &Value) -> Vec<u8> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap() as u8)
        .collect()
}

fn ip(value: &Value) -> Option<Ipv4Addr> {
    value.as_str().map(|s| s.parse().unwrap())
}

fn routes(value: &Value) -> Vec<ClasslessRoute> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|r| ClasslessRoute {
                    destination: r["dst"].as_str().map(|s| s.parse().unwrap()),
                    gateway: ip(&r["gw"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The options of an OFFER for `config`, as code → raw bytes read back from the encoded packet.
fn offered_options(config: &ServerConfig) -> BTreeMap<u8, Vec<u8>> {
    let mut discover = Message::new(
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        &[2, 0, 0, 0, 0, 1],
    );
    discover
        .opts_mut()
        .insert(DhcpOption::MessageType(MessageType::Discover));
    let offer = v4::reply(&discover, config).expect("an offer");
    let wire = v4::encode(&offer).unwrap();
    assert_eq!(&wire[236..240], &[99, 130, 83, 99]);
    let mut out = BTreeMap::new();
    let mut at = 240;
    while at < wire.len() && wire[at] != 255 {
        if wire[at] == 0 {
            at += 1;
            continue;
        }
        let (code, len) = (wire[at], usize::from(wire[at + 1]));
        out.entry(code)
            .or_insert_with(Vec::new)
            .extend_from_slice(&wire[at + 2..at + 2 + len]);
        at += 2 + len;
    }
    out
}

fn config_from(input: &Value) -> ServerConfig {
    let mut config = ServerConfig::new("192.168.2.10/24".parse().unwrap(), Ipv4Addr::new(192, 168, 2, 1));
    if input.get("mask").is_some() {
        config.prefix_len = input["mask"]
            .as_str()
            .map(|mask| u32::from(mask.parse::<Ipv4Addr>().unwrap()).count_ones() as u8);
    }
    config.router = ip(&input["router"]);
    config.routes = routes(&input["routes"]);
    config.search_domains = strings(&input["searchDomains"]);
    if let Some(mtu) = input["mtu"].as_u64() {
        config.mtu = mtu as u16;
    }
    if let Some(hostname) = input["hostname"].as_str() {
        config.hostname = hostname.into();
    }
    let custom = &input["dhcpOptions"];
    config.bootfile = custom["bootFileName"].as_str().map(String::from);
    config.tftp_server = custom["tftpServerName"].as_str().map(String::from);
    config.ntp_servers = custom["ntpServers"]
        .as_array()
        .map(|ips| {
            ips.iter()
                .map(|ip| ip.as_str().unwrap().parse().unwrap())
                .collect()
        })
        .unwrap_or_default();
    config.private_options = custom["privateOptions"]
        .as_array()
        .map(|opts| {
            opts.iter()
                .map(|o| {
                    (
                        o["option"].as_u64().unwrap() as u8,
                        o["value"].as_str().unwrap().into(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    config
}

fn check_prepared_options(input: &Value, expected: &Value) {
    let config = config_from(input);
    config.validate().unwrap();
    let offered = offered_options(&config);
    for (key, want) in expected.as_object().unwrap() {
        match key.as_str() {
            "absentOptions" => {
                for code in bytes(want) {
                    assert!(!offered.contains_key(&code), "option {code} must be absent");
                }
            }
            "alwaysPresent" => {
                // Deliberate difference (docs/compat.md): KubeVirt sends options 6 and 12 with
                // length 0 when empty; RFC 2132 forbids that, so weft omits them.
                let empty_dns = config.dns_servers.is_empty().then_some(6);
                let empty_hostname = config.hostname.is_empty().then_some(12);
                for code in bytes(want) {
                    if Some(code) == empty_dns || Some(code) == empty_hostname {
                        assert!(!offered.contains_key(&code), "empty option {code} is omitted");
                        continue;
                    }
                    assert!(offered.contains_key(&code), "option {code} must be present");
                }
            }
            "option15_domainName" => {
                assert_eq!(offered[&15], want.as_str().unwrap().as_bytes());
            }
            other => {
                let code: u8 = other.trim_start_matches("option").parse().unwrap();
                let want = match want {
                    Value::String(s) => s.as_bytes().to_vec(),
                    other => bytes(other),
                };
                assert_eq!(offered[&code], want, "option {code}");
            }
        }
    }
}

#[test]
fn dhcp_vectors() {
    let vectors = load("dhcp.json");
    assert_eq!(vectors.len(), 20);
    for vector in vectors {
        let (input, expected) = (&vector["input"], &vector["expected"]);
        let source = vector["source"].as_str().unwrap();
        match input["function"].as_str().unwrap() {
            "formClasslessRoutes" => {
                assert_eq!(
                    options::classless_routes(&routes(&input["routes"])),
                    bytes(expected),
                    "{source}"
                );
            }
            "convertSearchDomainsToBytes" => {
                let result = options::search_domains(&strings(&input["searchDomains"]));
                match expected.get("errorPrefix") {
                    Some(prefix) => {
                        let error = result.unwrap_err().to_string();
                        assert!(error.starts_with(prefix.as_str().unwrap()), "{source}: {error}");
                    }
                    None => assert_eq!(result.unwrap(), bytes(expected), "{source}"),
                }
            }
            "isValidSearchDomain" => {
                let domain = input["domain"].as_str().unwrap();
                assert_eq!(
                    options::is_valid_search_domain(domain),
                    expected.as_bool().unwrap(),
                    "{source}: {domain:?}"
                );
            }
            "prepareDHCPOptions" => check_prepared_options(input, expected),
            "leaseTimeOption51" => {
                assert_eq!(
                    u64::from(INFINITE_LEASE_SECONDS),
                    expected["seconds"].as_u64().unwrap()
                );
                let offered = offered_options(&ServerConfig::new(
                    "10.0.2.2/24".parse().unwrap(),
                    Ipv4Addr::new(10, 0, 2, 1),
                ));
                assert_eq!(offered[&51], bytes(&expected["bytes"]));
            }
            other => panic!("unknown vector function {other}"),
        }
    }
}

#[test]
fn masquerade_addressing_vectors() {
    for vector in load("masquerade_addressing.json") {
        let (input, expected) = (&vector["input"], &vector["expected"]);
        let cidr = match (
            input["vmNetworkCIDR"].as_str().unwrap(),
            input["family"].as_str().unwrap(),
        ) {
            ("", "v4") => weft_dhcp::config::DEFAULT_VM_CIDR_V4,
            ("", _) => weft_dhcp::config::DEFAULT_VM_CIDR_V6,
            (cidr, _) => cidr,
        };
        let result = masquerade_addresses(cidr.parse().unwrap());
        if expected.get("error").is_some() {
            assert!(result.is_err(), "{cidr} must be rejected");
        } else {
            let (gateway, guest) = result.unwrap();
            assert_eq!(gateway.to_string(), expected["gateway"].as_str().unwrap());
            assert_eq!(guest.to_string(), expected["guest"].as_str().unwrap());
        }
    }
}
