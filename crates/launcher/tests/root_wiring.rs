//! Root tests: the masquerade and bridge wiring applied in a fresh netns (veths standing in for
//! the CNI-made pod interfaces), checked with `ip -j` / `nft -j`, then torn down to the state
//! before. Each scenario runs on both backends.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;
use weft_launcher::exec::{CommandBackend, NetlinkBackend, NetnsBackend, apply, teardown};
use weft_launcher::{Binding, NatOptions, TapOwner, TapSettings, VmNetworkCidrs, WiringRequest, plan_wiring};
use weft_testing::{Netns, root_or_skip};

/// Links, global addresses, main-table routes and the nft ruleset, without volatile fields.
fn snapshot(ns: &Netns) -> Value {
    let links: Vec<Value> = ns
        .ip_json(&["link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            serde_json::json!({
                "name": l["ifname"], "mac": l["address"], "mtu": l["mtu"],
                "flags": l["flags"], "master": l["master"],
            })
        })
        .collect();
    let addrs: Vec<Value> = ns
        .ip_json(&["addr", "show", "scope", "global"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let list: Vec<Value> = l["addr_info"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a["local"].is_string())
                .map(|a| serde_json::json!([a["local"], a["prefixlen"]]))
                .collect();
            serde_json::json!({"name": l["ifname"], "addrs": list})
        })
        .collect();
    let sorted = |v: Value| {
        let mut list: Vec<String> = v.as_array().unwrap().iter().map(|r| r.to_string()).collect();
        list.sort();
        list
    };
    let routes4 = sorted(ns.ip_json(&["-4", "route", "show"]));
    let routes6 = sorted(ns.ip_json(&["-6", "route", "show"]));
    let nft = ns.exec(&["nft", "list", "ruleset"]);
    serde_json::json!({"links": links, "addrs": addrs, "routes4": routes4, "routes6": routes6, "nft": nft})
}

/// Two veth pairs in the netns: `eth0` (10.222.222.1/30 + 2001:db8::1/64, default route) and
/// `pod16477688c0e` (192.168.50.5/24, a route to 10.99.0.0/16), as CNI plugins would leave them.
fn pod_interfaces(ns: &Netns) {
    for (name, peer) in [("eth0", "wt-peer0"), ("pod16477688c0e", "wt-peer1")] {
        ns.ip(&[
            "link", "add", name, "mtu", "1450", "type", "veth", "peer", "name", peer,
        ]);
        ns.ip(&["link", "set", peer, "up"]);
        ns.ip(&["link", "set", name, "up"]);
    }
    ns.ip(&["addr", "add", "10.222.222.1/30", "dev", "eth0"]);
    ns.ip(&["addr", "add", "2001:db8::1/64", "dev", "eth0", "nodad"]);
    ns.ip(&["route", "add", "default", "via", "10.222.222.2", "dev", "eth0"]);
    ns.ip(&["addr", "add", "192.168.50.5/24", "dev", "pod16477688c0e"]);
    ns.ip(&[
        "route",
        "add",
        "10.99.0.0/16",
        "via",
        "192.168.50.1",
        "dev",
        "pod16477688c0e",
    ]);
}

fn request(
    backend: &mut dyn NetnsBackend,
    binding: Binding,
    pod_iface: &str,
    index: usize,
) -> Result<WiringRequest> {
    let pod_link = backend.discover(pod_iface)?.context("pod link missing")?;
    Ok(WiringRequest {
        binding,
        pod_iface: pod_iface.to_string(),
        primary: pod_iface == "eth0",
        interface_index: index,
        pod_link,
        guest_mac: None,
        vm_cidrs: VmNetworkCidrs::default(),
        tap: TapSettings {
            owner: TapOwner { uid: 107, gid: 107 },
            queues: 2,
        },
    })
}

fn addresses(ns: &Netns, link: &str) -> Vec<String> {
    let v = ns.ip_json(&["addr", "show", "dev", link, "scope", "global"]);
    v[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| Some(format!("{}/{}", a["local"].as_str()?, a["prefixlen"])))
        .collect()
}

fn link(ns: &Netns, name: &str) -> Value {
    ns.ip_json(&["-d", "link", "show", "dev", name])[0].clone()
}

fn scenario(make_backend: fn(&Path) -> Box<dyn NetnsBackend>) -> Result<()> {
    let ns = Netns::new("launch-");
    pod_interfaces(&ns);
    let before = snapshot(&ns);
    let mut backend = make_backend(&ns.path());

    let masquerade_request = request(
        backend.as_mut(),
        Binding::Masquerade(NatOptions::default()),
        "eth0",
        0,
    )?;
    assert_eq!(masquerade_request.pod_link.mtu, 1450);
    assert_eq!(
        masquerade_request
            .pod_link
            .routes
            .iter()
            .map(|r| r.gateway.map(|g| g.to_string()))
            .collect::<Vec<_>>(),
        [Some("10.222.222.2".to_string())],
        "discovery keeps the default route and drops the kernel's connected routes"
    );
    let masquerade = plan_wiring(&masquerade_request)?;
    apply(backend.as_mut(), &masquerade)?;

    let bridge_request = request(backend.as_mut(), Binding::Bridge, "pod16477688c0e", 1)?;
    let bridge = plan_wiring(&bridge_request)?;
    apply(backend.as_mut(), &bridge)?;

    // masquerade
    assert_eq!(addresses(&ns, "k6t-eth0"), ["10.0.2.1/24", "fd10:0:2::1/120"]);
    let k6t = link(&ns, "k6t-eth0");
    assert_eq!(
        (k6t["address"].as_str(), k6t["mtu"].as_u64()),
        (Some("02:00:00:00:00:00"), Some(1450))
    );
    let tap0 = link(&ns, "tap0");
    assert_eq!(tap0["master"], "k6t-eth0");
    assert_eq!(tap0["mtu"], 1450);
    assert_eq!(tap0["linkinfo"]["info_data"]["user"], 107, "{tap0}");
    assert_eq!(tap0["linkinfo"]["info_data"]["multi_queue"], true, "{tap0}");
    assert_eq!(
        addresses(&ns, "eth0"),
        ["10.222.222.1/30", "2001:db8::1/64"],
        "masquerade keeps the pod IPs"
    );
    assert_eq!(ns.exec(&["sysctl", "-n", "net.ipv4.ip_forward"]).trim(), "1");
    assert_eq!(
        ns.exec(&["sysctl", "-n", "net/ipv4/conf/k6t-eth0/route_localnet"])
            .trim(),
        "1"
    );
    let ruleset: Value = serde_json::from_str(&ns.exec(&["nft", "-j", "list", "ruleset"]))?;
    let rules: Vec<&Value> = ruleset["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.get("rule"))
        .filter(|r| r["table"] == "nat")
        .collect();
    let count = |family: &str| rules.iter().filter(|r| r["family"] == family).count();
    assert_eq!((count("ip"), count("ip6")), (6, 6), "{ruleset}");
    let text = serde_json::to_string(&rules)?;
    assert!(text.contains("\"masquerade\"") && text.contains("10.0.2.2") && text.contains("fd10:0:2::2"));

    // bridge
    let nic = link(&ns, "16477688c0e-nic");
    let kbr = link(&ns, "k6t-16477688c0e");
    assert_eq!(nic["master"], "k6t-16477688c0e");
    // The nic took the bridge's MAC of the moment (the bridge then follows its lowest port MAC),
    // so the original pod MAC is left to the guest alone.
    let original_mac = bridge_request.pod_link.mac.to_string();
    assert_ne!(nic["address"].as_str(), Some(original_mac.as_str()));
    assert_ne!(kbr["address"].as_str(), Some(original_mac.as_str()));
    assert_eq!(bridge.guest_mac.to_string(), original_mac);
    assert_eq!(nic["linkinfo"]["info_slave_data"]["learning"], false);
    assert!(addresses(&ns, "16477688c0e-nic").is_empty());
    assert_eq!(
        addresses(&ns, "k6t-16477688c0e"),
        ["169.254.75.11/32"],
        "fake bridge IP of index 1"
    );
    assert_eq!(link(&ns, "tap16477688c0e")["master"], "k6t-16477688c0e");
    assert!(!ns.has_link("pod16477688c0e"), "renamed away");
    assert_eq!(
        ns.exec(&["sysctl", "-n", "net.ipv4.conf.all.arp_ignore"]).trim(),
        "1"
    );
    let lease = bridge.lease.as_ref().unwrap().ipv4.as_ref().unwrap();
    assert_eq!(lease.address.to_string(), "192.168.50.5/24");
    assert_eq!(lease.router.unwrap().to_string(), "192.168.50.1");

    teardown(backend.as_mut(), &bridge)?;
    teardown(backend.as_mut(), &masquerade)?;
    assert_eq!(
        snapshot(&ns),
        before,
        "teardown restores links, addresses, routes and nft"
    );
    teardown(backend.as_mut(), &masquerade).context("teardown twice is a no-op")?;
    Ok(())
}

fn netlink_backend(path: &Path) -> Box<dyn NetnsBackend> {
    Box::new(NetlinkBackend::open(path).unwrap())
}

fn command_backend(path: &Path) -> Box<dyn NetnsBackend> {
    Box::new(CommandBackend::new(path))
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn wiring_round_trip_netlink() -> Result<()> {
    if !root_or_skip("wiring_round_trip_netlink") {
        return Ok(());
    }
    scenario(netlink_backend)
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn wiring_round_trip_commands() -> Result<()> {
    if !root_or_skip("wiring_round_trip_commands") {
        return Ok(());
    }
    scenario(command_backend)
}

/// A step failing midway (the TAP name is taken by a bridge) rolls back everything before it.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn failed_apply_rolls_back() -> Result<()> {
    if !root_or_skip("failed_apply_rolls_back") {
        return Ok(());
    }
    let ns = Netns::new("launch-");
    pod_interfaces(&ns);
    ns.ip(&["link", "add", "tap16477688c0e", "type", "bridge"]);
    let before = snapshot(&ns);
    let mut backend = NetlinkBackend::open(ns.path())?;
    let plan = plan_wiring(&request(&mut backend, Binding::Bridge, "pod16477688c0e", 1)?)?;
    let err = apply(&mut backend, &plan).unwrap_err();
    assert!(err.to_string().contains("tap16477688c0e"), "{err}");
    assert!(err.rollback_failures.is_empty(), "{err}");
    assert_eq!(snapshot(&ns), before);
    Ok(())
}

/// Teardown after the CNI plugin already deleted the pod veth (DEL order reversed): the missing
/// link is not an error and weft's own links still go.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn teardown_after_the_pod_link_is_gone() -> Result<()> {
    if !root_or_skip("teardown_after_the_pod_link_is_gone") {
        return Ok(());
    }
    let ns = Netns::new("launch-");
    pod_interfaces(&ns);
    let mut backend = NetlinkBackend::open(ns.path())?;
    let plan = plan_wiring(&request(&mut backend, Binding::Bridge, "pod16477688c0e", 1)?)?;
    apply(&mut backend, &plan)?;
    // A persisted plan (the agent's cache) tears down after a restart just the same.
    let plan: weft_launcher::WiringPlan = serde_json::from_str(&serde_json::to_string(&plan)?)?;
    ns.ip(&["link", "del", "wt-peer1"]); // takes its peer, the renamed pod veth, with it
    teardown(&mut backend, &plan)?;
    for gone in [
        "k6t-16477688c0e",
        "tap16477688c0e",
        "16477688c0e-nic",
        "pod16477688c0e",
    ] {
        assert!(!ns.has_link(gone), "{gone} left behind");
    }
    Ok(())
}

/// Crash recovery: whatever prefix of a plan was applied before the agent died (no rollback ran),
/// the full teardown of the persisted plan succeeds and restores the netns.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn teardown_after_a_crash_at_any_step() -> Result<()> {
    if !root_or_skip("teardown_after_a_crash_at_any_step") {
        return Ok(());
    }
    for (binding, pod_iface, index) in [
        (Binding::Bridge, "pod16477688c0e", 1),
        (Binding::Masquerade(NatOptions::default()), "eth0", 0),
    ] {
        let ns = Netns::new("launch-");
        pod_interfaces(&ns);
        let before = snapshot(&ns);
        let mut backend = NetlinkBackend::open(ns.path())?;
        let plan = plan_wiring(&request(&mut backend, binding, pod_iface, index)?)?;
        for crashed_after in 0..=plan.steps.len() {
            for step in &plan.steps[..crashed_after] {
                backend.run(&step.op)?;
            }
            teardown(&mut backend, &plan)
                .with_context(|| format!("{pod_iface}: crash after {crashed_after} steps"))?;
            assert_eq!(
                snapshot(&ns),
                before,
                "{pod_iface}: crash after {crashed_after} steps"
            );
        }
    }
    Ok(())
}
