//! `hotplug_diff`: selections in every annotation form match the attachments ADD made.

use proptest::prelude::*;
use weft_netconf::{NetworkSelectionElement, NetworkStatus, parse_networks_annotation};

use super::{HotplugScope, hotplug_diff};

fn status(name: &str, interface: &str) -> NetworkStatus {
    NetworkStatus {
        name: name.into(),
        interface: interface.into(),
        ..Default::default()
    }
}

fn scope(first_index: usize) -> HotplugScope {
    HotplugScope {
        first_index,
        static_networks: Vec::new(),
    }
}

fn cluster() -> NetworkStatus {
    NetworkStatus {
        default: true,
        ..status("cluster", "eth0")
    }
}

fn desired(annotation: &str) -> Vec<NetworkSelectionElement> {
    parse_networks_annotation(annotation, "kl").unwrap()
}

fn keys(elements: &[NetworkSelectionElement]) -> Vec<String> {
    elements
        .iter()
        .map(|e| format!("{}/{}/{}", e.namespace, e.name, e.interface))
        .collect()
}

fn diff(annotation: &str, status: &[NetworkStatus]) -> (Vec<String>, Vec<String>) {
    let (add, remove) = hotplug_diff(&desired(annotation), status, &scope(1));
    (keys(&add), keys(&remove))
}

const NONE: (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());

#[test]
fn the_short_form_matches_the_attachments_add_named() {
    let attached = [cluster(), status("kl/br-hl", "net1"), status("kl/br-wi", "net2")];
    assert_eq!(diff("br-hl,br-wi", &attached), NONE);
    assert_eq!(diff("kl/br-hl, kl/br-wi", &attached), NONE);
}

#[test]
fn json_without_interface_matches_the_attachments_add_named() {
    let attached = [cluster(), status("kl/br-hl", "net1"), status("kl/br-wi", "net2")];
    assert_eq!(
        diff(
            r#"[{"name":"br-hl"},{"name":"br-wi","namespace":"kl"}]"#,
            &attached
        ),
        NONE
    );
}

#[test]
fn mixed_forms_match() {
    let attached = [
        cluster(),
        status("kl/a", "data"),
        status("kl/b", "net2"),
        status("kl/a", "net3"),
    ];
    assert_eq!(
        diff(
            r#"[{"name":"a","interface":"data"},{"name":"b"},{"name":"a"}]"#,
            &attached
        ),
        NONE
    );
    // The explicitly named attachment is never taken by the unnamed element of that network.
    let attached = [cluster(), status("kl/a", "net1"), status("kl/a", "data")];
    assert_eq!(
        diff(r#"[{"name":"a"},{"name":"a","interface":"data"}]"#, &attached),
        NONE
    );
}

#[test]
fn the_same_network_twice_unnamed_matches_both_attachments() {
    let attached = [cluster(), status("kl/a", "net1"), status("kl/a", "net2")];
    assert_eq!(diff("a,a", &attached), NONE);
    assert_eq!(
        diff("a", &attached),
        (vec![], vec!["kl/a/net2".to_string()]),
        "the attachment ADD named for position 1 stays"
    );
}

#[test]
fn an_unnamed_hotplug_gets_the_name_add_would_give() {
    let attached = [cluster(), status("kl/a", "net1")];
    assert_eq!(diff("a,b", &attached), (vec!["kl/b/net2".to_string()], vec![]));
    // The ADD name is taken (here by an earlier unplug/replug): the lowest free netN.
    let attached = [cluster(), status("kl/a", "net1"), status("kl/c", "net2")];
    assert_eq!(
        diff("a,b,c", &attached),
        (vec!["kl/b/net3".to_string()], vec![]),
        "c keeps net2; b gets net3"
    );
}

#[test]
fn removed_selections_are_unplugged_in_every_form() {
    let attached = [cluster(), status("kl/a", "net1"), status("kl/b", "net2")];
    assert_eq!(diff("a", &attached), (vec![], vec!["kl/b/net2".to_string()]));
    assert_eq!(
        diff(r#"[{"name":"b"}]"#, &attached),
        (vec![], vec!["kl/a/net1".to_string()])
    );
    assert_eq!(diff("", &attached).1.len(), 2);
}

#[test]
fn default_networks_shift_the_add_names_and_are_never_unplugged() {
    let config = crate::MetaConfig::parse(
        br#"{"cniVersion":"1.0.0","name":"weft","type":"weft","clusterNetwork":"cluster","defaultNetworks":["d"],"multusNamespace":"kube-system"}"#,
    )
    .unwrap();
    let scope = HotplugScope::new(&config, "kl");
    assert_eq!(
        scope,
        HotplugScope {
            first_index: 2,
            static_networks: vec!["kube-system/d".into()]
        }
    );
    let attached = [cluster(), status("kube-system/d", "net1"), status("kl/a", "net2")];
    let (add, remove) = hotplug_diff(&desired("a,b"), &attached, &scope);
    assert_eq!(keys(&add), vec!["kl/b/net3"]);
    assert!(remove.is_empty(), "{remove:?}");
    // The pod may select the default network's NAD itself: that selection is its own attachment.
    let attached = [
        cluster(),
        status("kube-system/d", "net1"),
        status("kube-system/d", "net2"),
    ];
    let (add, remove) = hotplug_diff(&desired("kube-system/d"), &attached, &scope);
    assert!(add.is_empty() && remove.is_empty(), "{add:?} {remove:?}");
    // A system-namespace pod has no defaultNetworks.
    assert_eq!(HotplugScope::new(&config, "kube-system").first_index, 1);
}

fn apply(
    current: &[NetworkStatus],
    add: &[NetworkSelectionElement],
    remove: &[NetworkSelectionElement],
) -> Vec<NetworkStatus> {
    let mut out: Vec<NetworkStatus> = current
        .iter()
        .filter(|s| {
            !remove
                .iter()
                .any(|r| format!("{}/{}", r.namespace, r.name) == s.name && r.interface == s.interface)
        })
        .cloned()
        .collect();
    out.extend(
        add.iter()
            .map(|e| status(&format!("{}/{}", e.namespace, e.name), &e.interface)),
    );
    out
}

proptest! {
    /// Whatever the annotation (short, JSON with or without interfaces) and whatever is
    /// attached, applying the diff reaches a fixed point: a second diff finds nothing to do,
    /// and every interface on the pod is unique.
    #[test]
    fn a_diff_applied_is_a_fixed_point(
        wanted in proptest::collection::vec((0usize..3, proptest::option::of(0usize..4)), 0..5),
        attached in proptest::collection::vec((0usize..3, 1usize..6), 0..5),
    ) {
        let name = |n: usize| ["a", "b", "c"][n].to_string();
        let desired: Vec<NetworkSelectionElement> = wanted
            .iter()
            .map(|(n, i)| NetworkSelectionElement {
                name: name(*n),
                namespace: "kl".into(),
                interface: i.map(|i| format!("if{i}")).unwrap_or_default(),
                ..Default::default()
            })
            .collect();
        // Desired explicit interfaces are unique (ADD rejects duplicates).
        let mut explicit: Vec<&str> = desired.iter().map(|e| e.interface.as_str()).filter(|i| !i.is_empty()).collect();
        explicit.sort();
        let before = explicit.len();
        explicit.dedup();
        prop_assume!(explicit.len() == before);
        let mut current = vec![cluster()];
        for (n, i) in &attached {
            let interface = format!("net{i}");
            if !current.iter().any(|s| s.interface == interface) {
                current.push(status(&format!("kl/{}", name(*n)), &interface));
            }
        }
        let (add, remove) = hotplug_diff(&desired, &current, &scope(1));
        let next = apply(&current, &add, &remove);
        let (add2, remove2) = hotplug_diff(&desired, &next, &scope(1));
        prop_assert!(add2.is_empty() && remove2.is_empty(), "{add2:?} {remove2:?}");
        let mut interfaces: Vec<&str> = next.iter().map(|s| s.interface.as_str()).collect();
        interfaces.sort();
        let count = interfaces.len();
        interfaces.dedup();
        prop_assert_eq!(interfaces.len(), count);
        prop_assert_eq!(next.len(), desired.len() + 1);
    }
}
