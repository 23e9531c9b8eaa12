use super::*;
use crate::cache::{CacheRecord, DelDecision, decide_del};
use crate::catalog::{MemoryCatalog, PathEntry};
use crate::hotplug::{HotplugError, plan_hotplug_add};
use proptest::prelude::*;
use serde_json::json;

fn config(extra: Value) -> MetaConfig {
    let mut base =
        json!({"cniVersion": "1.0.0", "name": "weft", "type": "weft-cni", "clusterNetwork": "cluster"});
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    MetaConfig::parse(base.to_string().as_bytes()).unwrap()
}

fn catalog() -> MemoryCatalog {
    MemoryCatalog::default()
        .with_conf_file("10-cluster.conflist", r#"{"name":"cluster","cniVersion":"1.0.0","plugins":[{"type":"ptp","capabilities":{"portMappings":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}"#)
        .with_nad("test", "a", r#"{"cniVersion":"1.0.0","type":"bridge","capabilities":{"ips":true,"portMappings":true}}"#)
        .with_nad("test", "b", r#"{"cniVersion":"1.0.0","type":"macvlan"}"#)
        .with_nad("other", "c", r#"{"cniVersion":"1.0.0","type":"macvlan"}"#)
        .with_nad("kube-system", "alt", r#"{"cniVersion":"1.0.0","type":"alt"}"#)
        .with_nad("kube-system", "extra", r#"{"cniVersion":"1.0.0","type":"extra"}"#)
}

fn request(ns: &str) -> AttachmentRequest {
    AttachmentRequest {
        container_id: "c1".into(),
        netns: "/run/netns/x".into(),
        ifname: "eth0".into(),
        cni_args: format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME=p"),
        k8s: K8sArgs {
            pod_namespace: ns.into(),
            pod_name: "p".into(),
            pod_infra_container_id: "c1".into(),
            pod_uid: "u".into(),
        },
    }
}

fn pod(ns: &str, annotations: &[(&str, &str)]) -> Pod {
    Pod {
        namespace: ns.into(),
        name: "p".into(),
        uid: "u".into(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn ifnames(plans: &[DelegatePlan]) -> Vec<&str> {
    plans.iter().map(|p| p.ifname.as_str()).collect()
}

#[test]
fn order_and_naming_follow_multus() {
    let c = config(json!({"defaultNetworks": ["extra"]}));
    let p = pod("test", &[(NETWORKS_ANNOTATION, "a@foo,b")]);
    let plans = plan_add(&c, &request("test"), Some(&p), &catalog()).unwrap();
    assert_eq!(ifnames(&plans), vec!["eth0", "net1", "foo", "net3"]);
    let names: Vec<&str> = plans.iter().map(|p| p.display_name.as_str()).collect();
    assert_eq!(names, vec!["cluster", "kube-system/extra", "test/a", "test/b"]);
    assert!(plans[0].is_master && plans.iter().skip(1).all(|p| !p.is_master));
    // CNI_ARGS are not duplicated although the runtime sent the same keys.
    assert_eq!(
        crate::join_cni_args(&plans[2].cni_args),
        "IgnoreUnknown=true;K8S_POD_NAMESPACE=test;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=c1;K8S_POD_UID=u"
    );
}

#[test]
fn system_namespaces_get_no_default_networks() {
    let c = config(json!({"defaultNetworks": ["extra"]}));
    let plans = plan_add(
        &c,
        &request("kube-system"),
        Some(&pod("kube-system", &[])),
        &catalog(),
    )
    .unwrap();
    assert_eq!(plans.len(), 1);
}

#[test]
fn runtime_config_reaches_only_the_cluster_network_unless_asked() {
    let runtime = json!({"portMappings": [{"hostPort": 80, "containerPort": 8080, "protocol": "tcp"}]});
    let c = config(json!({"runtimeConfig": runtime}));
    let p = pod("test", &[(NETWORKS_ANNOTATION, "a")]);
    let plans = plan_add(&c, &request("test"), Some(&p), &catalog()).unwrap();
    assert_eq!(plans[0].capability_args["portMappings"], runtime["portMappings"]);
    assert!(plans[1].capability_args.is_empty());
    let c = config(json!({"runtimeConfig": runtime, "runtimeConfigToAllDelegates": true}));
    let plans = plan_add(&c, &request("test"), Some(&p), &catalog()).unwrap();
    assert_eq!(plans[1].capability_args["portMappings"], runtime["portMappings"]);
}

#[test]
fn default_network_override_is_isolated_too() {
    let c = config(json!({"namespaceIsolation": true}));
    let p = pod("test", &[(DEFAULT_NETWORK_ANNOTATION, "other/c")]);
    let err = plan_add(&c, &request("test"), Some(&p), &catalog()).unwrap_err();
    assert!(matches!(err, PlanError::Isolation(_)), "{err}");
    // The multus namespace (where the cluster network lives) stays allowed.
    let p = pod("test", &[(DEFAULT_NETWORK_ANNOTATION, "alt")]);
    let plans = plan_add(&c, &request("test"), Some(&p), &catalog()).unwrap();
    assert_eq!(plans[0].display_name, "kube-system/alt");
    let p = pod("test", &[(DEFAULT_NETWORK_ANNOTATION, "a@eth5")]);
    let err = plan_add(&c, &request("test"), Some(&p), &catalog()).unwrap_err();
    assert!(
        matches!(err, PlanError::DefaultNetworkOverride(_)),
        "test/a is not in kube-system: {err}"
    );
}

#[test]
fn bad_names_and_collisions_fail_before_anything_runs() {
    let c = config(json!({}));
    let p = pod("test", &[(NETWORKS_ANNOTATION, "a@net2,b")]);
    let err = plan_add(&c, &request("test"), Some(&p), &catalog()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "interface name net2 is used by both test/a and test/b"
    );
    let p = pod(
        "test",
        &[(NETWORKS_ANNOTATION, r#"[{"name":"a","interface":"a:b"}]"#)],
    );
    assert!(matches!(
        plan_add(&c, &request("test"), Some(&p), &catalog()).unwrap_err(),
        PlanError::InvalidIfname { .. }
    ));
    let p = pod("test", &[(NETWORKS_ANNOTATION, "missing")]);
    assert_eq!(
        plan_add(&c, &request("test"), Some(&p), &catalog())
            .unwrap_err()
            .to_string(),
        "GetNetworkDelegates: failed getting the delegate: getKubernetesDelegate: cannot find a network-attachment-definition (missing) in namespace (test): not found"
    );
}

/// The plan of a pod-less ADD whose `clusterNetwork` is `value`.
fn cluster_network_plan(cat: &MemoryCatalog, value: &str) -> Result<Vec<DelegatePlan>, PlanError> {
    plan_add(
        &config(json!({"clusterNetwork": value})),
        &request("t"),
        None,
        cat,
    )
}

#[test]
fn the_meta_plugin_is_never_a_delegate_and_a_directory_skips_its_file() {
    let weft = br#"{"cniVersion":"1.0.0","name":"multus-cni-network","plugins":[{"type":"weft-cni"}]}"#;
    let cat = catalog()
        .with_path(
            "/etc/cni/net.d",
            PathEntry::Dir(vec![
                ("00-weft.conflist".into(), weft.to_vec()),
                (
                    "10-flannel.conflist".into(),
                    br#"{"name":"cbr0","plugins":[{"type":"flannel"}]}"#.to_vec(),
                ),
            ]),
        )
        .with_path("/etc/cni/net.d/00-weft.conflist", PathEntry::File(weft.to_vec()))
        .with_nad("t", "loop", r#"{"cniVersion":"1.0.0","type":"weft-cni"}"#);
    // The node's conf dir as the cluster network: its first file is weft's own.
    let plans = cluster_network_plan(&cat, "/etc/cni/net.d").unwrap();
    assert_eq!(plans[0].display_name, "cbr0");
    // Named outright, as a file, an inline delegate or a tenant's NAD: refused, saying why.
    let file = cluster_network_plan(&cat, "/etc/cni/net.d/00-weft.conflist")
        .unwrap_err()
        .to_string();
    assert!(file.contains("meta-plugin itself"), "{file}");
    let inline = MetaConfig::parse(
        json!({"cniVersion": "1.0.0", "name": "weft", "type": "weft-cni", "delegates": [{"type": "weft-cni"}]})
            .to_string()
            .as_bytes(),
    )
    .unwrap_err()
    .to_string();
    assert!(inline.contains("meta-plugin itself"), "{inline}");
    let p = pod("t", &[(NETWORKS_ANNOTATION, "loop")]);
    let nad = plan_add(&config(json!({})), &request("t"), Some(&p), &cat)
        .unwrap_err()
        .to_string();
    assert!(
        nad.contains("t/loop") && nad.contains("meta-plugin itself"),
        "{nad}"
    );
}

#[test]
fn cluster_network_by_path() {
    let cat = catalog()
        .with_path(
            "/etc/cni/net.d",
            PathEntry::Dir(vec![
                ("99-x.conf".into(), br#"{"name":"late","type":"x"}"#.to_vec()),
                (
                    "10-flannel.conflist".into(),
                    br#"{"name":"cbr0","plugins":[{"type":"flannel"}]}"#.to_vec(),
                ),
            ]),
        )
        .with_path(
            "/etc/cni/net.d/bad.conf",
            PathEntry::File(br#"{"name":"x"}"#.to_vec()),
        );
    let plans = cluster_network_plan(&cat, "/etc/cni/net.d").unwrap();
    assert_eq!(plans[0].display_name, "cbr0");
    let err = cluster_network_plan(&cat, "/etc/cni/net.d/bad.conf")
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("no 'type'; perhaps this is supposed to be a .conflist?"),
        "{err}"
    );
    let err = cluster_network_plan(&cat, "nope").unwrap_err().to_string();
    assert_eq!(
        err,
        "GetDefaultNetworks: failed to get clusterNetwork nope in namespace kube-system: getNetDelegate: cannot find network: nope"
    );
}

#[test]
fn del_recompute_skips_only_what_cannot_be_resolved() {
    let c = config(json!({"namespaceIsolation": true}));
    let p = pod("test", &[(NETWORKS_ANNOTATION, "a,missing,other/c,b@net1")]);
    let (plans, skipped) = plan_del_recompute(&c, &request("test"), Some(&p), &catalog()).unwrap();
    assert_eq!(plans.len(), 3);
    assert_eq!(skipped.len(), 2);
    let p = pod("test", &[(NETWORKS_ANNOTATION, "[garbage")]);
    let (plans, skipped) = plan_del_recompute(&c, &request("test"), Some(&p), &catalog()).unwrap();
    assert_eq!((plans.len(), skipped.len()), (1, 1));
}

fn held_result() -> weft_cni::CniResult {
    weft_cni::CniResult {
        cni_version: "1.0.0".into(),
        ..Default::default()
    }
}

#[test]
fn cache_round_trip_and_del_decisions() {
    let c = config(json!({}));
    let p = pod(
        "test",
        &[(
            NETWORKS_ANNOTATION,
            r#"[{"name":"a","mac":"02:00:00:00:00:01","portMappings":[{"hostPort":1,"containerPort":2}],"cni-args":{"x":1}}]"#,
        )],
    );
    let plans = plan_add(&c, &request("test"), Some(&p), &catalog()).unwrap();
    let record = CacheRecord::new(&request("test"), plans.clone());
    let bytes = record.to_bytes();
    assert_eq!(
        decide_del(&c, Some(&bytes), "c1", false),
        DelDecision::FromCache(Box::new(record.clone()))
    );
    assert!(matches!(
        decide_del(&c, Some(&bytes), "c2", true),
        DelDecision::Recompute { corrupt: Some(_) }
    ));
    assert!(matches!(
        decide_del(&c, Some(b"{\"version\":1,\"trunc"), "c1", false),
        DelDecision::Recompute { corrupt: Some(_) }
    ));
    let future = String::from_utf8(bytes.clone())
        .unwrap()
        .replacen("\"version\": 1", "\"version\": 9", 1);
    assert!(matches!(
        decide_del(&c, Some(future.as_bytes()), "c1", true),
        DelDecision::Recompute {
            corrupt: Some(crate::CacheError::Version(9))
        }
    ));
    assert_eq!(
        decide_del(&c, None, "c1", true),
        DelDecision::Recompute { corrupt: None }
    );
    assert_eq!(decide_del(&c, None, "c1", false), DelDecision::NothingHeld);
    // A failed ADD keeps only what it holds: here delegate 1 (net1), whose rollback failed;
    // never the failed delegate, nothing after a complete rollback.
    let held = held_result();
    let kept = record.clone().holding(&[(1, held.clone())]);
    assert_eq!(kept.delegates, vec![plans[1].clone()]);
    assert_eq!(kept.results, vec![Some(held.clone())]);
    assert_eq!(
        (kept.container_id.as_str(), kept.netns.as_str()),
        ("c1", "/run/netns/x")
    );
    let none = record.clone().holding(&[]);
    assert!(none.delegates.is_empty() && none.results.is_empty());
    assert!(
        record.clone().holding(&[(7, held)]).delegates.is_empty(),
        "an index out of the plan"
    );
    // A hot-plug pass acts on a finished ADD of the same pod only.
    assert!(record.is_pod("test", "p"));
    assert!(!record.is_pod("test", "q") && !record.is_pod("default", "p"));
    let mut unnamespaced = record.clone();
    unnamespaced.k8s.pod_namespace.clear();
    assert!(unnamespaced.is_pod("default", "p"), "no namespace is default's");
    assert!(
        !record.hotplug_ready(None, None),
        "no results yet: the ADD owns the pod"
    );
    let done = record.clone().with_results(vec![held_result(); plans.len()]);
    assert!(done.hotplug_ready(None, None) && done.hotplug_ready(Some("u"), None));
    assert!(
        !done.hotplug_ready(Some("another-pod"), None),
        "a new pod of the same name"
    );
    let mut uidless = done.clone();
    uidless.k8s.pod_uid.clear();
    assert!(
        uidless.hotplug_ready(Some("another-pod"), None),
        "no uid recorded: nothing to compare"
    );
    let partly = record.clone().with_results(vec![held_result()]);
    assert!(!partly.hotplug_ready(None, None), "a delegate without its result");
    // A network-status the ADD has still to write: the pod's annotation does not show the
    // attachments yet, so no hot-plug pass; once written (that value), the record is ready.
    let pending = done.clone().with_pending_status("[v1]".into());
    assert!(
        !pending.hotplug_ready(None, None),
        "network-status not written yet"
    );
    assert!(
        !pending.hotplug_ready(None, Some("[v0]")),
        "the pod shows another value"
    );
    assert!(
        pending.hotplug_ready(None, Some("[v1]")),
        "on the pod, not yet marked written in the record"
    );
    let again = pending.clone().with_pending_status("[v2]".into());
    assert_eq!(again.status_written("[v1]"), None, "a later ADD's value waits on");
    let written = again.status_written("[v2]").expect("its own value written");
    assert_eq!(written.network_status, None);
    assert!(written.hotplug_ready(None, None));
    assert_eq!(written.delegates, done.delegates, "nothing else changes");
    assert_eq!(done.status_written("[v1]"), None, "nothing was pending");
    // The pending value survives the record's round trip (a restarted agent writes it).
    let bytes = pending.to_bytes();
    let decoded = CacheRecord::decode(&bytes, "c1").unwrap();
    assert_eq!(decoded.network_status.as_deref(), Some("[v1]"));
    assert!(
        !String::from_utf8(done.to_bytes())
            .unwrap()
            .contains("networkStatus"),
        "records without a pending write keep their layout"
    );
    let hot = record.clone().without_attachment("net1");
    assert_eq!(hot.delegates.len(), 1);
    assert_eq!(hot.results.len(), 1);
    let hot = hot.with_attachment(plans[1].clone(), None);
    assert_eq!((hot.delegates.len(), hot.results.len()), (2, 2));
    assert_eq!(hot.attachment("net1").unwrap().0.display_name, "test/a");
    assert!(hot.attachment("net9").is_none());
    // GC reaches every network with the attachments to keep.
    let other = CacheRecord::new(
        &AttachmentRequest {
            container_id: "c2".into(),
            ..request("test")
        },
        plans.clone(),
    );
    let targets = crate::cache::gc_targets(&[record, other]);
    let summary: Vec<(String, usize)> = targets
        .iter()
        .map(|(p, v)| (p.network_name().to_string(), v.len()))
        .collect();
    assert_eq!(summary, vec![("cluster".to_string(), 2), ("a".to_string(), 2)]);
    assert_eq!(targets[1].1[1].container_id, "c2");
}

#[test]
fn hotplug_is_isolated_and_needs_an_interface() {
    let c = config(json!({"namespaceIsolation": true}));
    let p = pod("test", &[]);
    let plans = plan_add(&c, &request("test"), Some(&p), &catalog()).unwrap();
    let element = |ns: &str, name: &str, ifname: &str| NetworkSelectionElement {
        namespace: ns.into(),
        name: name.into(),
        interface: ifname.into(),
        ..Default::default()
    };
    let r = request("test");
    let plan = plan_hotplug_add(&c, &r, &p, &element("test", "a", "hot1"), &plans, &catalog()).unwrap();
    assert_eq!(
        (plan.ifname.as_str(), plan.display_name.as_str()),
        ("hot1", "test/a")
    );
    assert!(matches!(
        plan_hotplug_add(&c, &r, &p, &element("test", "a", ""), &plans, &catalog()),
        Err(HotplugError::NoInterface { .. })
    ));
    assert!(matches!(
        plan_hotplug_add(&c, &r, &p, &element("test", "a", "eth0"), &plans, &catalog()),
        Err(HotplugError::InterfaceInUse { .. })
    ));
    let err = plan_hotplug_add(&c, &r, &p, &element("other", "c", "hot2"), &plans, &catalog()).unwrap_err();
    assert!(err.to_string().contains("namespace isolation enabled"), "{err}");
}

proptest! {
    #[test]
    fn plans_have_unique_names_and_the_master_first(picks in proptest::collection::vec((0usize..2, proptest::option::of("[a-z]{1,6}")), 0..6)) {
        let items: Vec<String> = picks.iter().map(|(n, ifname)| {
            let name = ["a", "b"][*n];
            match ifname { Some(i) => format!("{name}@x{i}"), None => name.to_string() }
        }).collect();
        let p = pod("test", &[(NETWORKS_ANNOTATION, &items.join(","))]);
        match plan_add(&config(json!({})), &request("test"), Some(&p), &catalog()) {
            Ok(plans) => {
                prop_assert_eq!(plans.len(), items.len() + 1);
                prop_assert!(plans[0].is_master);
                let mut names: Vec<&str> = ifnames(&plans);
                names.sort();
                names.dedup();
                prop_assert_eq!(names.len(), plans.len());
            }
            Err(PlanError::DuplicateIfname { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected {}", e),
        }
    }
}
