//! The `nft -f -` scripts: snapshots, and (as root) the kernel accepting them in a fresh netns.

use std::io::Write as _;
use std::process::Stdio;

use weft_launcher::nft::{
    ForwardedPort, ForwardedPortRange, NatAddresses, NatInput, NatOptions, NatRuleSet, NftFamily,
    masquerade_rules, remove_script,
};
use weft_testing::{Netns, root_or_skip};

fn rule_set(options: NatOptions) -> NatRuleSet {
    masquerade_rules(&NatInput {
        pod_iface: "eth0".to_string(),
        bridge: "k6t-eth0".to_string(),
        ipv4: Some(NatAddresses {
            gateway: "10.0.2.1".parse().unwrap(),
            guest: "10.0.2.2".parse().unwrap(),
            pod: Some("10.244.1.7".parse().unwrap()),
        }),
        ipv6: Some(NatAddresses {
            gateway: "fd10:0:2::1".parse().unwrap(),
            guest: "fd10:0:2::2".parse().unwrap(),
            pod: Some("fd00:10:244::7".parse().unwrap()),
        }),
        options,
    })
}

fn every_feature() -> NatOptions {
    NatOptions {
        ports: vec![
            ForwardedPort {
                protocol: "TCP".to_string(),
                port: 22,
            },
            ForwardedPort {
                protocol: "udp".to_string(),
                port: 53,
            },
        ],
        port_ranges: vec![ForwardedPortRange {
            protocol: String::new(),
            start: 8000,
            end: 8100,
        }],
        port_ranges_enabled: true,
        istio: true,
        legacy_migration_ports: true,
    }
}

#[test]
fn install_script_snapshots() {
    insta::assert_snapshot!("forward_all", rule_set(NatOptions::default()).install_script());
    insta::assert_snapshot!("every_feature", rule_set(every_feature()).install_script());
    insta::assert_snapshot!("remove", remove_script(&[NftFamily::Ip, NftFamily::Ip6]));
}

fn nft(ns: &Netns, args: &[&str], stdin: &str) -> String {
    let mut child = ns
        .command(&["nft"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft {args:?}: {}\n{stdin}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The kernel takes every script; re-applying replaces the rules; removal leaves nothing.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn kernel_accepts_the_scripts() {
    if !root_or_skip("kernel_accepts_the_scripts") {
        return;
    }
    let ns = Netns::new("nft-");
    for options in [NatOptions::default(), every_feature()] {
        let rules = rule_set(options);
        let expected = rules.rule_lines().len();
        for _ in 0..2 {
            nft(&ns, &["-f", "-"], &rules.install_script());
            let listed = nft(&ns, &["-a", "list", "ruleset"], "");
            assert_eq!(listed.matches("# handle").count() - 14, expected, "{listed}");
        }
        nft(&ns, &["-f", "-"], &remove_script(&rules.table_families()));
        assert_eq!(nft(&ns, &["list", "ruleset"], ""), "");
    }
    nft(
        &ns,
        &["-f", "-"],
        &remove_script(&[NftFamily::Ip, NftFamily::Ip6]),
    );
}
