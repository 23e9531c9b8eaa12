//! Every stage's failures on hand-built snapshots.

use serde_json::json;

use super::*;
use crate::explain::cni_error::CniFailure;

fn secondary_iface() -> String {
    weft_vm::hashed_pod_interface_name("br1")
}

fn vmi(status_interfaces: serde_json::Value) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1", "namespace": "default"},
        "spec": {
            "domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}},
                {"name": "br1", "bridge": {}}
            ]}},
            "networks": [
                {"name": "default", "pod": {}},
                {"name": "br1", "multus": {"networkName": "br1net"}}
            ]
        },
        "status": {"phase": "Running", "nodeName": "node1", "interfaces": status_interfaces}
    }))
    .unwrap()
}

fn healthy_status() -> serde_json::Value {
    json!([
        {"name": "default", "ipAddress": "10.0.2.2", "mac": "02:00:00:00:00:01",
         "infoSource": "domain, guest-agent", "interfaceName": "eth0", "podInterfaceName": "eth0"},
        {"name": "br1", "ipAddress": "192.168.100.10", "mac": "02:00:00:00:00:02",
         "infoSource": "domain, guest-agent, multus-status", "interfaceName": "eth1",
         "podInterfaceName": secondary_iface()}
    ])
}

fn pod(phase: &str, with_secondary_status: bool, secondary_ips: &[&str]) -> Pod {
    let mut statuses = vec![json!({"name": "weft-pod-network", "interface": "eth0",
        "ips": ["10.244.1.5"], "mac": "0a:58:0a:f4:01:05", "default": true})];
    if with_secondary_status {
        statuses.push(json!({"name": "default/br1net", "interface": secondary_iface(),
            "ips": secondary_ips, "mac": "0a:58:c0:a8:64:0a"}));
    }
    let networks = json!([{"name": "br1net", "namespace": "default", "interface": secondary_iface()}]);
    serde_json::from_value(json!({
        "metadata": {
            "name": "virt-launcher-vm1-abcde", "namespace": "default",
            "labels": {"kubevirt.io": "virt-launcher"},
            "annotations": {
                "kubevirt.io/domain": "vm1",
                weft_netconf::NETWORKS_ANNOTATION: networks.to_string(),
                weft_netconf::NETWORK_STATUS_ANNOTATION: serde_json::Value::Array(statuses).to_string()
            }
        },
        "spec": {"nodeName": "node1"},
        "status": {"phase": phase}
    }))
    .unwrap()
}

fn netns() -> NetnsFacts {
    let secondary = weft_launcher::names::LinkNames::derive(&secondary_iface(), false);
    let primary = weft_launcher::names::LinkNames::derive("eth0", true);
    let links = [
        "lo".to_string(),
        "eth0".into(),
        primary.bridge,
        primary.tap,
        secondary_iface(),
        secondary.bridge,
        secondary.tap,
        secondary.renamed_pod_nic,
    ];
    NetnsFacts {
        links: links.into_iter().collect(),
        nft_tables: ["ip nat".to_string()].into_iter().collect(),
    }
}

fn record(br1: DhcpCounters) -> String {
    serde_json::to_string(&DhcpRecord {
        guest: true,
        interfaces: [
            (
                "default".to_string(),
                DhcpCounters {
                    served: true,
                    received: 2,
                    replied: 2,
                    dropped: 0,
                },
            ),
            ("br1".to_string(), br1),
        ]
        .into_iter()
        .collect(),
        lease_failures: Vec::new(),
    })
    .unwrap()
}

fn served() -> DhcpCounters {
    DhcpCounters {
        served: true,
        received: 2,
        replied: 2,
        dropped: 0,
    }
}

fn healthy() -> Snapshot {
    let mut vmi = vmi(healthy_status());
    vmi.metadata
        .annotations
        .insert(DHCP_RECORD_ANNOTATION.into(), record(served()));
    Snapshot {
        vmi,
        pod: Some(pod("Running", true, &["192.168.100.10/24"])),
        nads: [("default".to_string(), "br1net".to_string())]
            .into_iter()
            .collect(),
        reservations: BTreeMap::new(),
        events: Vec::new(),
        netns: Some(netns()),
        netns_unchecked: String::new(),
        config: weft_vm::ClusterConfig::default(),
    }
}

fn stage<'a>(report: &'a Report, interface: &str, stage: Stage) -> &'a StageResult {
    report
        .interfaces
        .iter()
        .find(|i| i.name == interface)
        .unwrap()
        .stages
        .iter()
        .find(|s| s.stage == stage)
        .unwrap()
}

fn sandbox_event(message: &str) -> Event {
    Event {
        involved_object: crate::kinds::ObjectReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: "default".into(),
            name: "virt-launcher-vm1-abcde".into(),
        },
        reason: stages::FAILED_SANDBOX_REASON.into(),
        message: message.into(),
        type_: "Warning".into(),
        count: 1,
        ..Default::default()
    }
}

#[test]
fn a_healthy_vmi_passes_every_stage() {
    let report = explain(&healthy());
    for interface in &report.interfaces {
        for s in &interface.stages {
            assert_eq!(
                s.outcome,
                Outcome::Ok,
                "{} {:?}: {}",
                interface.name,
                s.stage,
                s.reason
            );
            assert_eq!(s.ok, Some(true));
        }
    }
    assert!(!report.failed());
    assert_eq!(report.interfaces[0].binding, "masquerade");
    assert_eq!(report.interfaces[1].network, "multus default/br1net");
    let wiring = stage(&report, "default", Stage::Wiring);
    assert!(
        wiring.reason.contains("k6t-eth0") && wiring.reason.contains("tap0"),
        "{}",
        wiring.reason
    );
    assert!(wiring.reason.contains("nft table nat"));
    insta::assert_snapshot!("healthy_text", render_text(&report));
}

#[test]
fn a_missing_nad_is_named_with_its_fix_and_later_stages_are_not_reached() {
    let mut snapshot = healthy();
    snapshot.nads.clear();
    snapshot.pod = None;
    let report = explain(&snapshot);
    let spec = stage(&report, "br1", Stage::Spec);
    assert_eq!(spec.outcome, Outcome::Failed);
    assert_eq!(spec.ok, Some(false));
    assert!(
        spec.reason.contains("NAD default/br1net does not exist"),
        "{}",
        spec.reason
    );
    assert!(
        spec.fix
            .contains("create NetworkAttachmentDefinition default/br1net"),
        "{}",
        spec.fix
    );
    for later in [
        Stage::PodAnnotation,
        Stage::NetworkStatus,
        Stage::PodLink,
        Stage::StatusIp,
    ] {
        assert_eq!(
            stage(&report, "br1", later).outcome,
            Outcome::NotReached,
            "{later:?}"
        );
    }
    // The pod network's own spec is fine; its pod is what is missing.
    assert_eq!(stage(&report, "default", Stage::Spec).outcome, Outcome::Ok);
    assert_eq!(
        stage(&report, "default", Stage::PodAnnotation).outcome,
        Outcome::Failed
    );
    assert!(report.failed());
}

#[test]
fn an_exhausted_pool_says_how_full_it_is() {
    let mut snapshot = healthy();
    snapshot.pod = Some(pod("Failed", false, &[]));
    snapshot.reservations.insert("br1net".into(), 254);
    snapshot.events.push(sandbox_event(
        "pod default/virt-launcher-vm1-abcde: CNI ADD: plugin weft-cni: error adding container to network \
         \"br1net\": weft-ipam: no free IP address in range 192.168.100.0/24 of network br1net",
    ));
    let report = explain(&snapshot);
    let status = stage(&report, "br1", Stage::NetworkStatus);
    assert_eq!(status.outcome, Outcome::Failed);
    assert_eq!(
        status.reason,
        "IPAM pool 192.168.100.0/24 of network br1net is exhausted (254 of 254 reserved)"
    );
    assert!(status.fix.contains("widen the range or free addresses"));
    assert_eq!(stage(&report, "br1", Stage::PodLink).outcome, Outcome::NotReached);
}

#[test]
fn a_missing_delegate_plugin_is_named_from_the_pod_status() {
    let mut snapshot = healthy();
    let mut failed = pod("Failed", false, &[]);
    failed.status.message = "pod default/virt-launcher-vm1-abcde: CNI ADD: {\"cniVersion\":\"1.0.0\",\"code\":999,\
        \"msg\":\"delegate br1net\",\"details\":\"failed to find plugin \\\"bridgex\\\" in path [/opt/cni/bin]\"}"
        .into();
    snapshot.pod = Some(failed);
    let report = explain(&snapshot);
    let status = stage(&report, "br1", Stage::NetworkStatus);
    assert_eq!(status.outcome, Outcome::Failed);
    assert_eq!(
        status.reason,
        "delegate plugin `bridgex` is not installed in the CNI bin dir"
    );
    assert!(status.fix.contains("install `bridgex`"));
}

#[test]
fn a_guest_that_never_asked_for_a_lease_is_told() {
    let mut snapshot = healthy();
    snapshot.vmi.metadata.annotations.insert(
        DHCP_RECORD_ANNOTATION.into(),
        record(DhcpCounters {
            served: true,
            ..Default::default()
        }),
    );
    snapshot.vmi.status.as_mut().unwrap().interfaces[1].info_source = "domain, multus-status".into();
    let report = explain(&snapshot);
    let dhcp = stage(&report, "br1", Stage::Dhcp);
    assert_eq!(dhcp.outcome, Outcome::Failed);
    assert_eq!(dhcp.reason, "the guest never asked for a lease on br1");
    assert!(dhcp.fix.contains("is its DHCP client running"));
    assert_eq!(
        stage(&report, "br1", Stage::GuestReport).outcome,
        Outcome::NotReached
    );
    assert_eq!(stage(&report, "default", Stage::Dhcp).outcome, Outcome::Ok);
}

#[test]
fn unanswered_requests_are_counted() {
    let mut snapshot = healthy();
    snapshot.vmi.metadata.annotations.insert(
        DHCP_RECORD_ANNOTATION.into(),
        record(DhcpCounters {
            served: true,
            received: 5,
            replied: 0,
            dropped: 5,
        }),
    );
    let dhcp = stage(&explain(&snapshot), "br1", Stage::Dhcp).clone();
    assert_eq!(dhcp.outcome, Outcome::Failed);
    assert!(dhcp.reason.contains("5 DHCP requests") && dhcp.reason.contains("5 dropped"));
}

#[test]
fn a_hot_plugged_nic_without_an_address() {
    let mut snapshot = healthy();
    snapshot.pod = Some(pod("Running", true, &[]));
    snapshot
        .vmi
        .metadata
        .annotations
        .insert(DHCP_RECORD_ANNOTATION.into(), record(DhcpCounters::default()));
    let status = snapshot.vmi.status.as_mut().unwrap();
    status.interfaces[1].ip_address.clear();
    status.interfaces[1].info_source = "domain, multus-status".into();
    let report = explain(&snapshot);
    assert_eq!(stage(&report, "br1", Stage::NetworkStatus).outcome, Outcome::Ok);
    let dhcp = stage(&report, "br1", Stage::Dhcp);
    assert_eq!(dhcp.outcome, Outcome::NotChecked);
    assert!(
        dhcp.reason.contains("no IPv4 address to lease"),
        "{}",
        dhcp.reason
    );
    let ip = stage(&report, "br1", Stage::StatusIp);
    assert_eq!(ip.outcome, Outcome::Failed);
    assert!(
        ip.reason.contains("has no IP") && ip.reason.contains("the NAD gives none"),
        "{}",
        ip.reason
    );
    assert!(ip.fix.contains("ipam"));
    assert!(report.failed());
}

#[test]
fn a_hot_plugged_nic_not_yet_attached() {
    let mut snapshot = healthy();
    snapshot.pod = Some(pod("Running", false, &[]));
    let report = explain(&snapshot);
    let status = stage(&report, "br1", Stage::NetworkStatus);
    assert_eq!(status.outcome, Outcome::Failed);
    assert!(status.reason.contains("hot-plugged"), "{}", status.reason);
}

#[test]
fn without_the_netns_the_link_stages_are_not_checked_not_failed() {
    let mut snapshot = healthy();
    snapshot.netns = None;
    snapshot.netns_unchecked = "needs root (the pod netns)".into();
    let report = explain(&snapshot);
    for s in [Stage::PodLink, Stage::Wiring] {
        let result = stage(&report, "br1", s);
        assert_eq!(result.outcome, Outcome::NotChecked);
        assert_eq!(result.ok, None);
        assert!(result.reason.contains("needs root"));
    }
    // Not checked is not a failure: later stages are evaluated.
    assert_eq!(stage(&report, "br1", Stage::Dhcp).outcome, Outcome::Ok);
    assert!(!report.failed());
}

#[test]
fn missing_wiring_names_the_links() {
    let mut snapshot = healthy();
    let mut facts = netns();
    facts.links.remove("tap0");
    facts.nft_tables.clear();
    snapshot.netns = Some(facts);
    let wiring = stage(&explain(&snapshot), "default", Stage::Wiring).clone();
    assert_eq!(wiring.outcome, Outcome::Failed);
    assert_eq!(wiring.reason, "missing in the pod netns: tap0, nft table nat");
}

#[test]
fn an_interface_without_network_fails_admission() {
    let mut snapshot = healthy();
    snapshot.vmi.spec.networks.pop();
    let spec = stage(&explain(&snapshot), "br1", Stage::Spec).clone();
    assert_eq!(spec.outcome, Outcome::Failed);
    assert!(!spec.reason.is_empty() && !spec.fix.is_empty());
}

#[test]
fn the_json_schema_is_stable() {
    let mut snapshot = healthy();
    snapshot.nads.clear();
    let value = serde_json::to_value(explain(&snapshot)).unwrap();
    assert_eq!(value["vmi"], "default/vm1");
    let br1 = &value["interfaces"][1];
    assert_eq!(br1["name"], "br1");
    assert_eq!(br1["network"], "multus default/br1net");
    assert_eq!(br1["binding"], "bridge");
    let first = &br1["stages"][0];
    assert_eq!(first["stage"], "spec");
    assert_eq!(first["ok"], false);
    assert!(first["reason"].as_str().unwrap().contains("br1net"));
    assert!(first["fix"].as_str().unwrap().contains("create"));
    assert_eq!(br1["stages"][1]["ok"], serde_json::Value::Null);
    assert_eq!(br1["stages"][1]["outcome"], "not-reached");
}

#[test]
fn an_unplugged_interface_is_not_checked() {
    let mut snapshot = healthy();
    snapshot.pod = Some(pod("Running", false, &[]));
    snapshot.vmi.spec.interfaces_mut()[1].state = "absent".into();
    let report = explain(&snapshot);
    assert!(
        report.interfaces[1]
            .stages
            .iter()
            .all(|s| s.outcome == Outcome::NotChecked)
    );
    assert!(!report.failed());
}

#[test]
fn cni_errors_are_recognised() {
    assert_eq!(
        classify(
            "getKubernetesDelegate: cannot find a network-attachment-definition (nope) in namespace (default): not found"
        ),
        CniFailure::NadMissing {
            namespace: "default".into(),
            name: "nope".into()
        }
    );
    assert_eq!(
        classify("no free IP address in range 10.1.0.0/30 of network n1: bye"),
        CniFailure::PoolExhausted {
            range: "10.1.0.0/30".into(),
            network: "n1".into()
        }
    );
    assert_eq!(
        classify("failed to find plugin \"macvlanx\" in path [\"/opt/cni/bin\"]"),
        CniFailure::PluginMissing {
            plugin: "macvlanx".into()
        }
    );
    assert_eq!(classify(" boom "), CniFailure::Other("boom".into()));
    let (reason, _) = classify("no free IP address in range 10.1.0.0/30 of network n1")
        .reason_and_fix(&[("n1".to_string(), 2)].into_iter().collect());
    assert_eq!(
        reason,
        "IPAM pool 10.1.0.0/30 of network n1 is exhausted (2 of 2 reserved)"
    );
}

#[test]
fn a_guest_whose_agent_does_not_answer_is_told_to_check_qemu_guest_agent() {
    // DHCP answered, but no guest-agent source: without the AgentConnected condition the
    // reason is the agent itself.
    let mut snapshot = healthy();
    snapshot.vmi.status.as_mut().unwrap().interfaces[1].info_source = "domain, multus-status".into();
    let guest = stage(&explain(&snapshot), "br1", Stage::GuestReport).clone();
    assert_eq!(guest.outcome, Outcome::Failed);
    assert!(
        guest
            .reason
            .contains("qemu-guest-agent does not answer (no AgentConnected condition)"),
        "{}",
        guest.reason
    );
    assert!(guest.fix.contains("org.qemu.guest_agent.0"), "{}", guest.fix);
    // Connected, but the NIC has no address in the agent's report.
    snapshot
        .vmi
        .status
        .as_mut()
        .unwrap()
        .conditions
        .push(weft_vm::api::Condition {
            type_: "AgentConnected".into(),
            status: "True".into(),
            ..Default::default()
        });
    let guest = stage(&explain(&snapshot), "br1", Stage::GuestReport).clone();
    assert_eq!(guest.outcome, Outcome::Failed);
    assert_eq!(guest.reason, "qemu-guest-agent reports no address for br1");
    assert!(guest.fix.contains("DHCP client"), "{}", guest.fix);
    // The agent answered before the guest's lease: the kernel's link-local address is no lease
    // while the pod interface has an address to give.
    let nic = &mut snapshot.vmi.status.as_mut().unwrap().interfaces[1];
    let leased = nic.ip_address.clone();
    nic.info_source = "domain, guest-agent, multus-status".into();
    nic.ip_address = "fe80::ff:fe0a:1".into();
    let guest = stage(&explain(&snapshot), "br1", Stage::GuestReport).clone();
    assert_eq!(guest.outcome, Outcome::Failed, "{}", guest.reason);
    assert_eq!(
        guest.reason,
        "qemu-guest-agent reports only the link-local fe80::ff:fe0a:1 for br1"
    );
    snapshot.vmi.status.as_mut().unwrap().interfaces[1].ip_address = leased;
    assert_eq!(
        stage(&explain(&snapshot), "br1", Stage::GuestReport).outcome,
        Outcome::Ok
    );
    snapshot.vmi.status.as_mut().unwrap().interfaces[1].info_source = "domain, multus-status".into();
    // An image built without the agent: nothing to wait for, and said so.
    weft_vm::status::mark_absent(&mut snapshot.vmi.metadata.annotations, true);
    let guest = stage(&explain(&snapshot), "br1", Stage::GuestReport).clone();
    assert_eq!(guest.outcome, Outcome::NotChecked);
    assert!(
        guest.reason.contains("without qemu-guest-agent"),
        "{}",
        guest.reason
    );
}
