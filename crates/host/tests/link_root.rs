//! Root tests for links, checked through our API and with `ip -j` as oracle.

mod common;

use common::TestNs;
use weft_host::{FLOOD_MAC, FdbEntry, MacAddr, MacvlanMode, OperState, Vxlan};
use weft_testing::root_or_skip;

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn bridge_create_up_mtu_mac_delete() {
    if !root_or_skip("bridge_create_up_mtu_mac_delete") {
        return;
    }
    let test = TestNs::new();
    let mut nl = test.netlink();
    nl.create_bridge("k6t-eth0").unwrap();
    let err = nl.create_bridge("k6t-eth0").unwrap_err();
    assert_eq!(
        err.to_string(),
        "create bridge k6t-eth0: File exists (os error 17)"
    );

    let mac: MacAddr = "02:00:00:aa:bb:cc".parse().unwrap();
    nl.set_mac("k6t-eth0", mac).unwrap();
    nl.set_mtu("k6t-eth0", 1400).unwrap();
    nl.set_up("k6t-eth0").unwrap();
    let bridge = nl.link("k6t-eth0").unwrap();
    assert_eq!(bridge.kind.as_deref(), Some("bridge"));
    assert_eq!(bridge.mac, Some(mac));
    assert_eq!(bridge.mtu, 1400);
    assert!(bridge.up);
    assert_eq!(nl.link(bridge.index).unwrap(), bridge);
    assert!(nl.links().unwrap().contains(&bridge));

    let oracle = test.ip_link("k6t-eth0");
    assert_eq!(oracle["ifindex"], bridge.index);
    assert_eq!(oracle["address"], "02:00:00:aa:bb:cc");
    assert_eq!(oracle["mtu"], 1400);
    assert_eq!(oracle["linkinfo"]["info_kind"], "bridge");
    assert!(oracle["flags"].as_array().unwrap().iter().any(|f| f == "UP"));

    nl.set_down(bridge.index).unwrap();
    assert!(!nl.link("k6t-eth0").unwrap().up);
    nl.delete_link("k6t-eth0").unwrap();
    assert!(nl.find_link("k6t-eth0").unwrap().is_none());
    let err = nl.delete_link("k6t-eth0").unwrap_err();
    assert!(err.is_not_found(), "{err}");
    nl.delete_link_if_exists("k6t-eth0").unwrap();
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn veth_pair_in_one_namespace_with_master_and_learning() {
    if !root_or_skip("veth_pair_in_one_namespace_with_master_and_learning") {
        return;
    }
    let test = TestNs::new();
    let mut nl = test.netlink();
    nl.create_bridge("br0").unwrap();
    nl.create_veth("ve-a", "ve-b", None).unwrap();
    let a = nl.link("ve-a").unwrap();
    let b = nl.link("ve-b").unwrap();
    assert_eq!(a.kind.as_deref(), Some("veth"));
    assert_eq!(a.parent, Some(b.index));
    assert_eq!(b.parent, Some(a.index));
    assert_eq!(a.bridge_port_learning, None);

    nl.set_master("ve-a", "br0").unwrap();
    let bridge = nl.link("br0").unwrap();
    let a = nl.link("ve-a").unwrap();
    assert_eq!(a.master, Some(bridge.index));
    assert_eq!(a.bridge_port_learning, Some(true));
    assert_eq!(test.ip_link("ve-a")["master"], "br0");

    nl.set_bridge_port_learning("ve-a", false).unwrap();
    assert_eq!(nl.link("ve-a").unwrap().bridge_port_learning, Some(false));
    assert_eq!(
        test.ip_link("ve-a")["linkinfo"]["info_slave_data"]["learning"],
        false
    );
    nl.set_bridge_port_learning("ve-a", true).unwrap();
    assert_eq!(nl.link("ve-a").unwrap().bridge_port_learning, Some(true));

    nl.set_nomaster("ve-a").unwrap();
    assert_eq!(nl.link("ve-a").unwrap().master, None);

    nl.set_up("ve-a").unwrap();
    nl.set_up("ve-b").unwrap();
    let a = nl.link("ve-a").unwrap();
    assert!(a.up);
    // Operational state follows asynchronously; it is never reported DOWN
    // with both ends up for long, but may still be settling.
    assert!(matches!(
        a.oper_state,
        OperState::Up | OperState::LowerLayerDown | OperState::Down
    ));

    // Deleting one end removes the pair.
    nl.delete_link("ve-b").unwrap();
    assert!(nl.find_link("ve-a").unwrap().is_none());
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn veth_peer_created_in_and_moved_to_other_namespaces() {
    if !root_or_skip("veth_peer_created_in_and_moved_to_other_namespaces") {
        return;
    }
    let host = TestNs::new();
    let pod = TestNs::new();
    let mut host_nl = host.netlink();
    let mut pod_nl = pod.netlink();

    // Peer created directly in the pod namespace, both ends may share a name.
    host_nl.create_veth("eth0", "eth0", Some(&pod.ns)).unwrap();
    let host_end = host_nl.link("eth0").unwrap();
    let pod_end = pod_nl.link("eth0").unwrap();
    assert_eq!(host_end.parent, Some(pod_end.index));
    assert!(host_end.link_netnsid.is_some(), "{host_end:?}");
    assert!(pod_end.link_netnsid.is_some(), "{pod_end:?}");

    // A veth created locally, one end moved (and renamed on the way).
    host_nl.create_veth("vm-host", "vm-tmp", None).unwrap();
    host_nl.move_to_netns("vm-tmp", &pod.ns, Some("net1")).unwrap();
    assert!(host_nl.find_link("vm-tmp").unwrap().is_none());
    let moved = pod_nl.link("net1").unwrap();
    assert_eq!(moved.kind.as_deref(), Some("veth"));
    assert_eq!(pod.ip_link("net1")["ifname"], "net1");

    // And back without renaming, by index.
    pod_nl.move_to_netns(moved.index, &host.ns, None).unwrap();
    assert!(host_nl.find_link("net1").unwrap().is_some());

    let err = host_nl.create_veth("vm-host", "x1", None).unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    assert_eq!(
        err.to_string(),
        "create veth vm-host (peer x1): File exists (os error 17)"
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn rename_checks_names() {
    if !root_or_skip("rename_checks_names") {
        return;
    }
    let test = TestNs::new();
    let mut nl = test.netlink();
    nl.create_bridge("old").unwrap();
    nl.rename_link("old", "new").unwrap();
    assert!(nl.find_link("old").unwrap().is_none());
    assert_eq!(nl.link("new").unwrap().kind.as_deref(), Some("bridge"));
    let err = nl.rename_link("new", "a-much-too-long-name").unwrap_err();
    assert!(matches!(err, weft_host::HostError::Invalid { .. }), "{err}");
    let err = nl.rename_link("missing", "x").unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(err.to_string().starts_with("rename link missing"), "{err}");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn vxlan_over_a_veth_underlay() {
    if !root_or_skip("vxlan_over_a_veth_underlay") {
        return;
    }
    let test = TestNs::new();
    let mut nl = test.netlink();
    nl.create_veth("underlay", "underlay-peer", None).unwrap();
    let vxlan = Vxlan {
        local: Some("10.255.0.1".parse().unwrap()),
        underlay: Some("underlay".into()),
        learning: false,
        ..Vxlan::new(100)
    };
    nl.create_vxlan("vxlan0", &vxlan).unwrap();
    let link = nl.link("vxlan0").unwrap();
    assert_eq!(link.kind.as_deref(), Some("vxlan"));
    let oracle = test.ip_link("vxlan0");
    let data = &oracle["linkinfo"]["info_data"];
    assert_eq!(data["id"], 100);
    assert_eq!(data["local"], "10.255.0.1");
    assert_eq!(data["port"], 4789);
    assert_eq!(data["link"], "underlay");
    assert_eq!(data["learning"], false);

    let err = nl.create_vxlan("vxlan1", &Vxlan::new(1 << 24)).unwrap_err();
    assert!(err.to_string().contains("does not fit in 24 bits"), "{err}");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn macvlan_on_a_veth_parent() {
    if !root_or_skip("macvlan_on_a_veth_parent") {
        return;
    }
    let test = TestNs::new();
    let mut nl = test.netlink();
    nl.create_veth("uplink", "uplink-peer", None).unwrap();
    nl.create_macvlan("mv0", "uplink", MacvlanMode::Bridge).unwrap();
    nl.create_macvlan("mv1", "uplink", MacvlanMode::Private).unwrap();
    let parent = nl.link("uplink").unwrap();
    let mv0 = nl.link("mv0").unwrap();
    assert_eq!(mv0.kind.as_deref(), Some("macvlan"));
    assert_eq!(mv0.parent, Some(parent.index));
    assert_eq!(test.ip_link("mv0")["linkinfo"]["info_data"]["mode"], "bridge");
    assert_eq!(test.ip_link("mv1")["linkinfo"]["info_data"]["mode"], "private");

    let err = nl
        .create_macvlan("mv2", "no-such-parent", MacvlanMode::Bridge)
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(err.to_string().starts_with("create macvlan mv2"), "{err}");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn two_nodes_joined_by_vxlan_with_head_end_replication() {
    if !root_or_skip("two_nodes_joined_by_vxlan_with_head_end_replication") {
        return;
    }
    let node1 = TestNs::new();
    let node2 = TestNs::new();
    let mut nl1 = node1.netlink();
    let mut nl2 = node2.netlink();
    nl1.create_veth("underlay", "underlay", Some(&node2.ns)).unwrap();
    let nodes = [
        (&mut nl1, "10.255.0.1", "10.255.0.2", "10.100.0.1/24"),
        (&mut nl2, "10.255.0.2", "10.255.0.1", "10.100.0.2/24"),
    ];
    for (nl, local, remote, overlay) in nodes {
        nl.add_address("underlay", format!("{local}/24").parse().unwrap())
            .unwrap();
        nl.set_up("underlay").unwrap();
        let vxlan = Vxlan {
            local: Some(local.parse().unwrap()),
            underlay: Some("underlay".into()),
            ..Vxlan::new(100)
        };
        nl.create_vxlan("vxlan0", &vxlan).unwrap();
        let flood = FdbEntry {
            mac: FLOOD_MAC,
            remote: remote.parse().unwrap(),
        };
        nl.append_fdb("vxlan0", flood).unwrap();
        let entries = nl.fdb("vxlan0").unwrap();
        assert!(entries.contains(&flood), "{entries:?}");
        nl.add_address("vxlan0", overlay.parse().unwrap()).unwrap();
        nl.set_up("vxlan0").unwrap();
    }
    let oracle = node1.ip_json(&["link", "show"]);
    assert!(oracle.as_array().unwrap().iter().any(|l| l["ifname"] == "vxlan0"));
    let fdb = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &node1.name,
            "bridge",
            "-j",
            "fdb",
            "show",
            "dev",
            "vxlan0",
        ])
        .output()
        .unwrap();
    let fdb: serde_json::Value = serde_json::from_slice(&fdb.stdout).unwrap();
    assert!(
        fdb.as_array()
            .unwrap()
            .iter()
            .any(|e| e["mac"] == "00:00:00:00:00:00" && e["dst"] == "10.255.0.2"),
        "{fdb}"
    );

    let ping = node1
        .ns
        .spawn(
            std::process::Command::new("busybox")
                .args(["ping", "-c", "1", "-W", "5", "10.100.0.2"])
                .stdout(std::process::Stdio::null()),
        )
        .unwrap()
        .wait()
        .unwrap();
    assert!(ping.success(), "no ping across the VXLAN overlay");

    let flood = FdbEntry {
        mac: FLOOD_MAC,
        remote: "10.255.0.2".parse().unwrap(),
    };
    nl1.delete_fdb("vxlan0", flood).unwrap();
    assert!(!nl1.fdb("vxlan0").unwrap().contains(&flood));
    let err = nl1.delete_fdb("vxlan0", flood).unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn links_of_a_group_are_deleted_together() {
    if !root_or_skip("links_of_a_group_are_deleted_together") {
        return;
    }
    let test = TestNs::new();
    let mut nl = test.netlink();
    nl.create_bridge("g-br").unwrap();
    nl.create_veth("g-a", "g-b", None).unwrap();
    nl.create_bridge("other").unwrap();
    for link in ["g-br", "g-a"] {
        nl.set_group(link, 42).unwrap();
    }
    assert_eq!(nl.link("g-a").unwrap().group, 42);
    assert_eq!(test.ip_link("g-br")["group"], "42");
    nl.delete_links_in_group(42).unwrap();
    let names: Vec<String> = nl.links().unwrap().into_iter().map(|l| l.name).collect();
    assert_eq!(names, ["lo", "other"]);
    let err = nl.delete_links_in_group(0).unwrap_err();
    assert!(matches!(err, weft_host::HostError::Invalid { .. }), "{err}");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn kernel_explanations_are_part_of_the_error() {
    if !root_or_skip("kernel_explanations_are_part_of_the_error") {
        return;
    }
    let test = TestNs::new();
    let mut nl = test.netlink();
    nl.create_veth("eth0", "peer0", None).unwrap();
    let err = nl.set_mtu("eth0", 100_000).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EINVAL));
    assert!(
        err.to_string()
            .starts_with("set mtu eth0 to 100000: Invalid argument (os error 22) ("),
        "{err}"
    );
}
