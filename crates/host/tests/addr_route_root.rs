//! Root tests for addresses and routes, checked through our API and `ip -j`.

mod common;

use common::TestNs;
use ipnet::IpNet;
use weft_host::{IpFamily, Netlink, Route};
use weft_testing::root_or_skip;

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

/// A netlink handle in `test` after creating the veth pair `eth0`/`peer0` there, both up.
fn eth0_up(test: &TestNs) -> Netlink {
    let mut nl = test.netlink();
    nl.create_veth("eth0", "peer0", None).unwrap();
    nl.set_up("peer0").unwrap();
    nl.set_up("eth0").unwrap();
    nl
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn addresses_add_list_delete_flush_v4_and_v6() {
    if !root_or_skip("addresses_add_list_delete_flush_v4_and_v6") {
        return;
    }
    let test = TestNs::new();
    let mut nl = test.netlink();
    nl.create_veth("eth0", "peer0", None).unwrap();
    nl.set_up("eth0").unwrap();
    nl.add_address("eth0", net("10.0.2.2/24")).unwrap();
    nl.add_address("eth0", net("10.0.3.2/32")).unwrap();
    nl.add_address("eth0", net("fd10:0:2::2/120")).unwrap();

    let err = nl.add_address("eth0", net("10.0.2.2/24")).unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    assert_eq!(
        err.to_string(),
        "add address 10.0.2.2/24 to eth0: File exists (os error 17) (ipv4: Address already assigned)"
    );

    let v4 = nl.addresses("eth0", Some(IpFamily::V4)).unwrap();
    assert_eq!(v4, [net("10.0.2.2/24"), net("10.0.3.2/32")]);
    let v6 = nl.addresses("eth0", Some(IpFamily::V6)).unwrap();
    assert!(v6.contains(&net("fd10:0:2::2/120")), "{v6:?}");

    let oracle = test.ip_json(&["addr", "show", "dev", "eth0"]);
    let infos = oracle[0]["addr_info"].as_array().unwrap();
    let v4_info = infos
        .iter()
        .find(|i| i["local"] == "10.0.2.2")
        .expect("10.0.2.2 in ip addr");
    assert_eq!(v4_info["prefixlen"], 24);
    assert_eq!(v4_info["broadcast"], "10.0.2.255");
    assert!(
        infos
            .iter()
            .any(|i| i["local"] == "fd10:0:2::2" && i["prefixlen"] == 120)
    );

    let eth0 = nl.link("eth0").unwrap().index;
    let all = nl.all_addresses(Some(IpFamily::V4)).unwrap();
    assert!(all.iter().any(|a| a.index == eth0 && a.net == net("10.0.3.2/32")));

    nl.delete_address("eth0", net("10.0.3.2/32")).unwrap();
    let err = nl.delete_address("eth0", net("10.0.3.2/32")).unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert_eq!(
        nl.addresses("eth0", Some(IpFamily::V4)).unwrap(),
        [net("10.0.2.2/24")]
    );

    nl.flush_addresses("eth0", Some(IpFamily::V4)).unwrap();
    assert!(nl.addresses("eth0", Some(IpFamily::V4)).unwrap().is_empty());
    assert!(!nl.addresses("eth0", Some(IpFamily::V6)).unwrap().is_empty());
    nl.flush_addresses("eth0", None).unwrap();
    assert!(nl.addresses("eth0", None).unwrap().is_empty());
    assert!(
        test.ip_json(&["addr", "show", "dev", "eth0"])[0]["addr_info"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    let err = nl.add_address("missing0", net("10.9.9.9/24")).unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn routes_add_list_delete_with_gateway_dev_metric() {
    if !root_or_skip("routes_add_list_delete_with_gateway_dev_metric") {
        return;
    }
    let test = TestNs::new();
    let mut nl = eth0_up(&test);
    nl.add_address("eth0", net("10.0.2.2/24")).unwrap();
    nl.add_address("eth0", net("fd10::2/64")).unwrap();
    let eth0 = nl.route_dev("eth0").unwrap();

    let default_v4 = Route::default_via("10.0.2.1".parse().unwrap()).dev(eth0);
    let on_link = Route::new(net("192.168.50.0/24")).dev(eth0).with_metric(50);
    let via = Route::new(net("172.16.0.0/12"))
        .via("10.0.2.1".parse().unwrap())
        .with_metric(7);
    for route in [&default_v4, &on_link, &via] {
        nl.add_route(route).unwrap();
    }
    let err = nl.add_route(&on_link).unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    // Replacing is idempotent and can move the default route to another gateway.
    nl.replace_route(&on_link).unwrap();
    let moved_default = Route::default_via("10.0.2.3".parse().unwrap()).dev(eth0);
    nl.replace_route(&moved_default).unwrap();
    let defaults: Vec<Route> = nl
        .routes(IpFamily::V4)
        .unwrap()
        .into_iter()
        .filter(|r| r.destination.prefix_len() == 0)
        .collect();
    assert_eq!(defaults, [moved_default]);
    nl.replace_route(&default_v4).unwrap();

    let routes = nl.routes(IpFamily::V4).unwrap();
    assert!(routes.contains(&default_v4), "{routes:?}");
    assert!(routes.contains(&on_link), "{routes:?}");
    // The kernel resolves the output device of a gateway route.
    assert!(routes.contains(&via.clone().dev(eth0)), "{routes:?}");
    // The subnet route the kernel made for the address is listed too.
    assert!(
        routes
            .iter()
            .any(|r| r.destination == net("10.0.2.0/24") && r.gateway.is_none())
    );

    let oracle = test.ip_json(&["route", "show"]);
    let oracle = oracle.as_array().unwrap();
    let default = oracle
        .iter()
        .find(|r| r["dst"] == "default")
        .expect("default route in ip route");
    assert_eq!(default["gateway"], "10.0.2.1");
    assert_eq!(default["dev"], "eth0");
    let on_link_oracle = oracle.iter().find(|r| r["dst"] == "192.168.50.0/24").unwrap();
    assert_eq!(on_link_oracle["metric"], 50);
    assert_eq!(on_link_oracle["scope"], "link");

    let default_v6 = Route::default_via("fd10::1".parse().unwrap())
        .dev(eth0)
        .with_metric(1024);
    nl.add_route(&default_v6).unwrap();
    assert!(nl.routes(IpFamily::V6).unwrap().contains(&default_v6));
    let oracle6 = test.ip_json(&["-6", "route", "show"]);
    assert!(
        oracle6
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["dst"] == "default" && r["gateway"] == "fd10::1")
    );

    nl.delete_route(&on_link).unwrap();
    nl.delete_route(&Route::default_via("10.0.2.1".parse().unwrap()))
        .unwrap();
    nl.delete_route(&default_v6).unwrap();
    let err = nl.delete_route(&on_link).unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(
        err.to_string()
            .starts_with("delete route 192.168.50.0/24 dev ifindex"),
        "{err}"
    );
    let routes = nl.routes(IpFamily::V4).unwrap();
    assert!(
        !routes
            .iter()
            .any(|r| r.destination == net("0.0.0.0/0") || r.destination == net("192.168.50.0/24"))
    );
    assert!(
        !nl.routes(IpFamily::V6)
            .unwrap()
            .iter()
            .any(|r| r.destination.prefix_len() == 0)
    );

    let err = nl
        .add_route(&Route::new(net("10.1.0.1/16")).dev(eth0))
        .unwrap_err();
    assert!(err.to_string().contains("host bits"), "{err}");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn ipv6_addresses_without_dad_are_not_tentative() {
    if !root_or_skip("ipv6_addresses_without_dad_are_not_tentative") {
        return;
    }
    let test = TestNs::new();
    let mut nl = eth0_up(&test);
    nl.add_address("eth0", net("fd20::1/64")).unwrap();
    nl.add_address_without_dad("eth0", net("fd30::1/64")).unwrap();
    let oracle = test.ip_json(&["-6", "addr", "show", "dev", "eth0"]);
    let infos = oracle[0]["addr_info"].as_array().unwrap();
    // (fd20::1 is tentative for about a second; not asserted, to stay
    // robust on a loaded machine.)
    assert!(infos.iter().any(|i| i["local"] == "fd20::1"));
    let without_dad = infos.iter().find(|i| i["local"] == "fd30::1").unwrap();
    assert_eq!(without_dad["tentative"], serde_json::Value::Null, "{without_dad}");
    assert_eq!(without_dad["nodad"], true, "{without_dad}");
    assert!(
        nl.addresses("eth0", Some(IpFamily::V6))
            .unwrap()
            .contains(&net("fd30::1/64"))
    );
}
