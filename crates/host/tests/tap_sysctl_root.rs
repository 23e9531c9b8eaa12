//! Root tests for TAP creation and network sysctls inside namespaces.

mod common;

use common::TestNs;
use weft_host::{TapOptions, create_tap, read_sysctl, write_sysctl};
use weft_testing::root_or_skip;

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn persistent_tap_inside_a_namespace() {
    if !root_or_skip("persistent_tap_inside_a_namespace") {
        return;
    }
    let test = TestNs::new();
    let options = TapOptions {
        multi_queue: true,
        owner: Some(107),
        group: Some(107),
        ..TapOptions::default()
    };
    test.ns.run_in(|| create_tap("tap0", &options)).unwrap().unwrap();
    test.ns
        .run_in(|| create_tap("tap1", &TapOptions::default()))
        .unwrap()
        .unwrap();

    let mut nl = test.netlink();
    let tap = nl.link("tap0").unwrap();
    assert_eq!(tap.kind.as_deref(), Some("tun"));
    assert!(!tap.up);

    let oracle = test.ip_link("tap0");
    let info = &oracle["linkinfo"]["info_data"];
    assert_eq!(info["type"], "tap");
    assert_eq!(info["pi"], false);
    assert_eq!(info["vnet_hdr"], true);
    assert_eq!(info["multi_queue"], true);
    assert_eq!(info["persist"], true);
    // iproute2 prints the owner's name when the uid/gid has one (107 is KubeVirt's qemu user;
    // on a given machine it may belong to another package's user).
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(107))
        .ok()
        .flatten()
        .map_or(serde_json::json!(107), |u| serde_json::json!(u.name));
    let group = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(107))
        .ok()
        .flatten()
        .map_or(serde_json::json!(107), |g| serde_json::json!(g.name));
    assert_eq!(info["user"], user);
    assert_eq!(info["group"], group);
    let single = test.ip_link("tap1");
    assert_eq!(single["linkinfo"]["info_data"]["multi_queue"], false);

    // The same TAP with other flags is refused.
    let err = test
        .ns
        .run_in(|| create_tap("tap0", &TapOptions::default()))
        .unwrap()
        .unwrap_err();
    assert_eq!(err.errno(), Some(libc::EINVAL), "{err}");
    assert!(
        err.to_string().starts_with("create tap tap0 (TUNSETIFF):"),
        "{err}"
    );

    // The MAC, MTU and state of a TAP are set through netlink like any link.
    nl.set_mtu("tap0", 1400).unwrap();
    nl.set_up("tap0").unwrap();
    let tap = nl.link("tap0").unwrap();
    assert_eq!((tap.mtu, tap.up), (1400, true));
    nl.delete_link("tap0").unwrap();
    assert!(nl.find_link("tap0").unwrap().is_none());
    let err = create_tap("name-that-is-too-long", &options).unwrap_err();
    assert!(matches!(err, weft_host::HostError::Invalid { .. }), "{err}");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn sysctls_are_per_namespace() {
    if !root_or_skip("sysctls_are_per_namespace") {
        return;
    }
    let test = TestNs::new();
    let host_forwarding = read_sysctl("net/ipv4/ip_forward").unwrap();
    let mut nl = test.netlink();
    nl.create_veth("eth0", "peer0", None).unwrap();

    let inside = test
        .ns
        .run_in(|| -> weft_host::Result<Vec<String>> {
            // A new namespace starts from the host's IPv4 forwarding (with the kernel's default
            // `net.core.devconf_inherit_init_net`), and a CI machine once had it on: turn it off
            // and on here, so the host's value, checked below, proves isolation either way.
            write_sysctl("net/ipv4/ip_forward", "0")?;
            let off = read_sysctl("net/ipv4/ip_forward")?;
            write_sysctl("net/ipv4/ip_forward", "1")?;
            write_sysctl("net/ipv4/conf/eth0/route_localnet", "1")?;
            write_sysctl("net.ipv4.conf.all.arp_ignore", "1")?;
            write_sysctl("net/ipv6/conf/all/forwarding", "1")?;
            Ok(vec![
                off,
                read_sysctl("net/ipv4/ip_forward")?,
                read_sysctl("net/ipv4/conf/eth0/route_localnet")?,
                read_sysctl("net/ipv4/conf/all/arp_ignore")?,
                read_sysctl("net/ipv6/conf/all/forwarding")?,
            ])
        })
        .unwrap()
        .unwrap();
    assert_eq!(inside, ["0", "1", "1", "1", "1"]);
    // The caller's namespace did not change.
    assert_eq!(read_sysctl("net/ipv4/ip_forward").unwrap(), host_forwarding);
    // The oracle agrees.
    let output = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &test.name,
            "cat",
            "/proc/sys/net/ipv4/conf/eth0/route_localnet",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "1");

    let err = test
        .ns
        .run_in(|| write_sysctl("net/ipv4/conf/missing0/forwarding", "1"))
        .unwrap()
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(
        err.to_string()
            .starts_with("write sysctl net/ipv4/conf/missing0/forwarding=1:"),
        "{err}"
    );
}
