//! Multus vectors `vectors/multus/07-annotation-json-full-element.json` to
//! `13-default-route-filter-flags.json` and `20-default-network-annotation-override.json` against
//! the planner.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use weft_meta::gateway::filter_flags;
use weft_meta::{
    AttachmentRequest, K8sArgs, MemoryCatalog, MetaConfig, Pod, add_failure_message, delegate_cni_args,
    merge_cni_args, plan_add, plan_default_routes, rollback_order,
};
use weft_netconf::{DelegateConfig, NetworkSelectionElement};

fn vector(name: &str) -> Value {
    let path = format!("{}/../../vectors/multus/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn config(v: &Value) -> MetaConfig {
    MetaConfig::parse(v.to_string().as_bytes()).unwrap()
}

fn pod(namespace: &str, annotations: &[(&str, &str)]) -> Pod {
    Pod {
        namespace: namespace.into(),
        name: "pod".into(),
        uid: "uid".into(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn request(ifname: &str, namespace: &str) -> AttachmentRequest {
    AttachmentRequest {
        container_id: "123456789".into(),
        netns: "/var/run/netns/x".into(),
        ifname: ifname.into(),
        cni_args: String::new(),
        k8s: K8sArgs {
            pod_namespace: namespace.into(),
            ..Default::default()
        },
    }
}

/// libcni's rule, for checking what a single-plugin delegate receives on stdin.
fn stdin_of(config: &DelegateConfig, capability_args: &Map<String, Value>) -> Value {
    let mut conf = config.to_value();
    let rc: Map<String, Value> = config
        .capabilities()
        .into_iter()
        .filter_map(|c| capability_args.get(&c).map(|v| (c, v.clone())))
        .collect();
    if !rc.is_empty() {
        conf.insert("runtimeConfig".into(), Value::Object(rc));
    }
    Value::Object(conf)
}

#[test]
fn v07_full_element_reaches_the_delegate_exactly() {
    let v = vector("07-annotation-json-full-element");
    let input = &v["input"];
    let catalog =
        MemoryCatalog::default().with_nad("test", "net1", &input["nad test/net1 spec.config"].to_string());
    let p = pod(
        "test",
        &[(
            weft_netconf::NETWORKS_ANNOTATION,
            input["annotation"].as_str().unwrap(),
        )],
    );
    let plans = plan_add(
        &config(&input["multusConfig"]),
        &request("eth0", "test"),
        Some(&p),
        &catalog,
    )
    .unwrap();
    let invocations = v["expected"]["invocations"].as_array().unwrap();
    assert_eq!(plans.len(), invocations.len());
    for (plan, want) in plans.iter().zip(invocations) {
        assert_eq!(plan.config.first_type(), want["type"].as_str().unwrap());
        assert_eq!(plan.ifname, want["CNI_IFNAME"].as_str().unwrap());
        assert_eq!(stdin_of(&plan.config, &plan.capability_args), want["stdin"]);
    }
    assert!(plans[0].is_master && !plans[1].is_master);
    let args = plans[1].add_cni_args();
    assert_eq!(
        &args[5..],
        &[
            ("MAC".to_string(), "c2:11:22:33:44:66".to_string()),
            ("IP".to_string(), "10.0.0.1".to_string())
        ]
    );
    assert_eq!(args[0], ("IgnoreUnknown".to_string(), "true".to_string()));
    assert_eq!(plans[1].del_cni_args().len(), 5);
}

#[test]
fn v08_rollback_dels_the_failed_delegate_and_everything_before_in_reverse() {
    let v = vector("08-add-failure-rollback");
    let input = &v["input"];
    let plans = plan_add(
        &config(&input["multusConfig"]),
        &request(input["CNI_IFNAME"].as_str().unwrap(), ""),
        None,
        &MemoryCatalog::default(),
    )
    .unwrap();
    assert_eq!(plans.len(), v["expected"]["addCalls"].as_u64().unwrap() as usize);
    let order: Vec<String> = rollback_order(1)
        .into_iter()
        .map(|i| format!("{}/{}", plans[i].network_name(), plans[i].ifname))
        .collect();
    assert_eq!(json!(order), v["expected"]["delOrder"]);
    assert_eq!(
        add_failure_message(&K8sArgs::default(), &plans[1], "expected plugin failure"),
        v["expected"]["error"].as_str().unwrap()
    );
}

#[test]
fn v09_namespace_isolation() {
    let v = vector("09-namespace-isolation");
    let input = &v["input"];
    let ns = input["podNamespace"].as_str().unwrap();
    let annotation = input["annotation"].as_str().unwrap();
    let catalog = MemoryCatalog::default()
        .with_nad("kube-system", "net1", r#"{"type":"bridge"}"#)
        .with_conf_file("10-cluster.conf", r#"{"name":"cluster","type":"ptp"}"#);
    let cases = input["cases"].as_array().unwrap();
    let expected = v["expected"]["cases"].as_array().unwrap();
    for (case, want) in cases.iter().zip(expected) {
        if let Some(extra) = case.get("multusConfigExtra") {
            let mut c = extra.clone();
            c["clusterNetwork"] = json!("cluster");
            let result = plan_add(
                &config(&c),
                &request("eth0", ns),
                Some(&pod(ns, &[(weft_netconf::NETWORKS_ANNOTATION, annotation)])),
                &catalog,
            );
            match want.get("error") {
                Some(err) => {
                    let got = result.unwrap_err().to_string();
                    assert!(got.starts_with(err.as_str().unwrap()), "{got}");
                    assert!(got.contains("kube-system/net1"), "names the network: {got}");
                }
                None => assert_eq!(result.unwrap().len(), 2),
            }
        } else {
            let mut c = case["parseOnly"].clone();
            c["clusterNetwork"] = json!("cluster");
            assert_eq!(
                json!(config(&c).non_isolated_namespaces),
                want["nonIsolatedNamespaces"]
            );
        }
    }
}

#[test]
fn v10_loadnetconf_validation_and_defaults() {
    let v = vector("10-loadnetconf-validation");
    let cases = v["input"]["cases"].as_array().unwrap();
    let expected = v["expected"]["cases"].as_array().unwrap();
    for (case, want) in cases.iter().zip(expected) {
        let parsed = MetaConfig::parse(case.to_string().as_bytes());
        if let Some(err) = want.get("error") {
            assert_eq!(parsed.unwrap_err().to_string(), err.as_str().unwrap());
        } else if let Some(err) = want.get("errorContains") {
            let got = parsed.unwrap_err().to_string();
            assert!(got.contains(err.as_str().unwrap()), "{got}");
        } else {
            let plans = plan_add(
                &parsed.unwrap(),
                &request("eth0", ""),
                None,
                &MemoryCatalog::default(),
            )
            .unwrap();
            let want = want["delegates"].as_array().unwrap();
            assert_eq!(plans.len(), want.len());
            for (plan, w) in plans.iter().zip(want) {
                assert_eq!(plan.is_master, w["master"].as_bool().unwrap());
                if let Some(t) = w.get("type") {
                    assert_eq!(plan.config.first_type(), t.as_str().unwrap());
                }
                if let Some(list) = w.get("isConfList") {
                    assert_eq!(plan.config.is_list(), list.as_bool().unwrap());
                    assert_eq!(plan.network_name(), w["name"].as_str().unwrap());
                }
            }
        }
    }
    let d = &v["expected"]["defaults"];
    let c = MetaConfig::parse(br#"{"clusterNetwork":"x"}"#).unwrap();
    assert_eq!(c.bin_dir, d["binDir"].as_str().unwrap());
    assert_eq!(c.conf_dir, d["confDir"].as_str().unwrap());
    assert_eq!(c.cni_dir, d["cniDir"].as_str().unwrap());
    assert_eq!(c.log_to_stderr, d["logToStderr"].as_bool().unwrap());
    assert_eq!(c.multus_namespace, d["multusNamespace"].as_str().unwrap());
    assert_eq!(json!(c.system_namespaces), d["systemNamespaces"]);
    assert_eq!(json!(c.non_isolated_namespaces), d["nonIsolatedNamespaces"]);
    assert_eq!(
        c.readiness_indicator_file,
        d["readinessindicatorfile"].as_str().unwrap()
    );
}

#[test]
fn v11_cni_args_merge() {
    let v = vector("11-cni-args-merge");
    let args = delegate_cni_args(&K8sArgs::default(), v["input"]["CNI_ARGS_env"].as_str().unwrap());
    assert_eq!(json!(args), v["expected"]["args"]);
}

#[test]
fn v12_cni_args_injection() {
    let v = vector("12-cni-args-injection");
    let cases = v["input"]["cases"].as_array().unwrap();
    let expected = v["expected"]["cases"].as_array().unwrap();
    for (case, want) in cases.iter().zip(expected) {
        let config = DelegateConfig::parse(case["config"].to_string()).unwrap();
        let merged = merge_cni_args(&config, case["cni-args"].as_object().unwrap()).unwrap();
        let value = Value::Object(merged.to_value());
        match want.get("args") {
            Some(args) => assert_eq!(&value["args"], args),
            None => assert_eq!(&value["plugins"][0]["args"], &want["plugins[0].args"]),
        }
    }
}

#[test]
fn v13_default_route_filter_flags() {
    let v = vector("13-default-route-filter-flags");
    let cases = v["input"]["cases"].as_array().unwrap();
    let expected = v["expected"]["cases"].as_array().unwrap();
    for (case, want) in cases.iter().zip(expected) {
        if let Some(element) = case.get("element") {
            let e: NetworkSelectionElement = serde_json::from_value(element.clone()).unwrap();
            let (v4, v6) = filter_flags(e.default_route.as_ref());
            assert_eq!(v4, want["isFilterV4Gateway"].as_bool().unwrap());
            assert_eq!(v6, want["isFilterV6Gateway"].as_bool().unwrap());
            // In an ADD, flags and actions exist only when some delegate has the key.
            let plans = plan_default_routes(&[("foobar", e.default_route.as_ref())]).unwrap();
            assert_eq!(plans[0].action.is_some(), e.default_route.is_some());
        } else {
            let elements: Vec<NetworkSelectionElement> =
                serde_json::from_value(case["elements"].clone()).unwrap();
            let requests: Vec<_> = elements
                .iter()
                .map(|e| (e.name.as_str(), e.default_route.as_ref()))
                .collect();
            let err = plan_default_routes(&requests).unwrap_err().to_string();
            assert!(err.starts_with(want["error"].as_str().unwrap()), "{err}");
        }
    }
}

#[test]
fn v20_default_network_annotation_replaces_the_cluster_network() {
    let v = vector("20-default-network-annotation-override");
    let input = &v["input"];
    let mut catalog = MemoryCatalog::default();
    for (key, conf) in input["NADs"].as_object().unwrap() {
        let (ns, name) = key.split_once('/').unwrap();
        catalog = catalog.with_nad(ns, name, &conf.to_string());
    }
    let c = config(&input["multusConfig"]);
    let ns = input["pod"]["namespace"].as_str().unwrap();
    let plain = plan_add(&c, &request("eth0", ns), Some(&pod(ns, &[])), &catalog).unwrap();
    let want = &v["expected"]["afterGetDefaultNetworks"]["delegates[0]"];
    assert_eq!(plain[0].network_name(), want["confName"].as_str().unwrap());
    assert_eq!(plain[0].config.first_type(), want["type"].as_str().unwrap());

    let annotations: Vec<(String, String)> = input["pod"]["annotations"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect();
    let annotations: Vec<(&str, &str)> = annotations
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let plans = plan_add(&c, &request("eth0", ns), Some(&pod(ns, &annotations)), &catalog).unwrap();
    let want = &v["expected"]["afterTryLoadPodDelegates"];
    assert_eq!(
        plans.len(),
        1 + want["numK8sDelegates"].as_u64().unwrap() as usize
    );
    assert_eq!(
        plans[0].network_name(),
        want["delegates[0]"]["confName"].as_str().unwrap()
    );
    assert_eq!(
        plans[0].config.first_type(),
        want["delegates[0]"]["type"].as_str().unwrap()
    );
    assert!(plans[0].is_master);
    assert_eq!(plans[0].display_name, "kube-system/net1");
    assert_eq!(plans[0].ifname, "eth0");
}
