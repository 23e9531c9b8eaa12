//! The executor driving the real reference plugins (/usr/lib/cni) for a planned pod: eth0 plus
//! secondaries, concurrent ADD, full rollback when a delegate fails, DEL leaving nothing. Root
//! only; creates its own `wt-<role><pid>-<n>` namespaces and removes them on drop.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;
use weft_cni::CniRuntime;
use weft_cni::runtime::exec::ProcessExec;
use weft_meta::{AttachmentRequest, Executor, MemoryCatalog, MetaConfig, NoRouteEditor, Pod, plan_add};
use weft_testing::{Netns, REFERENCE_PLUGIN_DIR, reference_plugins_or_skip, root_or_skip, unique};

/// True when test `name` may create namespaces and run the reference plugins.
fn can_run(name: &str) -> bool {
    root_or_skip(name) && reference_plugins_or_skip(name)
}

/// Addresses host-local still holds under `dir` (files named after IPs).
fn reservations(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for network in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for file in std::fs::read_dir(network.path()).into_iter().flatten().flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            if name.parse::<std::net::IpAddr>().is_ok() {
                out.push(name);
            }
        }
    }
    out
}

struct Setup {
    host: Netns,
    pod_ns: Netns,
    state: tempfile::TempDir,
    config: MetaConfig,
    catalog: MemoryCatalog,
    request: AttachmentRequest,
}

fn setup() -> Setup {
    let host = Netns::new("host");
    let pod_ns = Netns::new("pod");
    let state = tempfile::tempdir().unwrap();
    let id = unique().replace('-', "");
    let bridge = |n: u32, subnet: &str| {
        json!({"cniVersion": "1.0.0", "type": "bridge", "bridge": format!("wtm{n}{id}"),
               "ipam": {"type": "host-local", "dataDir": state.path(), "ranges": [[{"subnet": subnet}]]}})
    };
    let mut cluster = bridge(0, "10.215.0.0/24");
    cluster["name"] = json!("cluster");
    cluster["isGateway"] = json!(true);
    cluster["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0"}]);
    let catalog = MemoryCatalog::default()
        .with_conf_file("10-cluster.conf", &cluster.to_string())
        .with_nad("ns", "one", &bridge(1, "10.215.1.0/24").to_string())
        .with_nad("ns", "two", &bridge(2, "10.215.2.0/24").to_string())
        .with_nad(
            "ns",
            "broken",
            &json!({"cniVersion": "1.0.0", "type": "macvlan", "master": "wt-no-such-link",
                    "ipam": {"type": "host-local", "dataDir": state.path(), "ranges": [[{"subnet": "10.215.3.0/24"}]]}})
            .to_string(),
        );
    let config = MetaConfig::parse(br#"{"cniVersion":"1.0.0","clusterNetwork":"cluster"}"#).unwrap();
    let request = AttachmentRequest::for_pod(
        &format!("ctr{id}"),
        &pod_ns.path().to_string_lossy(),
        "eth0",
        "ns",
        "p",
    );
    Setup {
        host,
        pod_ns,
        state,
        config,
        catalog,
        request,
    }
}

fn pod(annotation: &str) -> Pod {
    Pod {
        namespace: "ns".into(),
        name: "p".into(),
        uid: String::new(),
        annotations: BTreeMap::from([(
            weft_netconf::NETWORKS_ANNOTATION.to_string(),
            annotation.to_string(),
        )]),
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn add_then_del_with_real_plugins_leaves_nothing() {
    if !can_run("add_then_del_with_real_plugins_leaves_nothing") {
        return;
    }
    let s = setup();
    let plans = plan_add(&s.config, &s.request, Some(&pod("one,two@data0")), &s.catalog).unwrap();
    let cni = CniRuntime::with_executor([REFERENCE_PLUGIN_DIR], ProcessExec::in_netns(s.host.path()));
    let outcome = Executor::new(&cni, &NoRouteEditor)
        .with_parallelism(2)
        .add(&s.request, &plans)
        .unwrap();
    for ifname in ["eth0", "net1", "data0"] {
        assert!(s.pod_ns.has_link(ifname), "{ifname} attached");
    }
    let names: Vec<(&str, &str, bool)> = outcome
        .statuses
        .iter()
        .map(|st| (st.name.as_str(), st.interface.as_str(), st.default))
        .collect();
    assert_eq!(
        names,
        vec![
            ("cluster", "eth0", true),
            ("ns/one", "net1", false),
            ("ns/two", "data0", false)
        ]
    );
    assert!(outcome.statuses[2].ips[0].starts_with("10.215.2."));
    assert_eq!(reservations(s.state.path()).len(), 3);

    let cached: Vec<_> = outcome.results.iter().cloned().map(Some).collect();
    Executor::new(&cni, &NoRouteEditor)
        .del(&s.request, &plans, &cached)
        .unwrap();
    for ifname in ["eth0", "net1", "data0"] {
        assert!(!s.pod_ns.has_link(ifname), "{ifname} removed");
    }
    assert!(reservations(s.state.path()).is_empty(), "every IP released");
    // DEL again: idempotent.
    Executor::new(&cni, &NoRouteEditor)
        .del(&s.request, &plans, &[])
        .unwrap();
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn failing_delegate_rolls_back_everything_with_real_plugins() {
    if !can_run("failing_delegate_rolls_back_everything_with_real_plugins") {
        return;
    }
    let s = setup();
    let plans = plan_add(&s.config, &s.request, Some(&pod("one,broken,two")), &s.catalog).unwrap();
    let cni = CniRuntime::with_executor([REFERENCE_PLUGIN_DIR], ProcessExec::in_netns(s.host.path()));
    let err = Executor::new(&cni, &NoRouteEditor)
        .add(&s.request, &plans)
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("[ns/p/:broken]: error adding container to network \"broken\""),
        "{err}"
    );
    for ifname in ["eth0", "net1", "net2", "net3"] {
        assert!(!s.pod_ns.has_link(ifname), "{ifname} not left behind");
    }
    assert!(
        reservations(s.state.path()).is_empty(),
        "no IP leaked: {:?}",
        reservations(s.state.path())
    );
}
