//! The writes an ADD leaves behind yield to the node's other ADDs (`weft agent
//! --writes-yield-ms`): a real `weft agent --kubeconfig` against the fake API server, a pod
//! whose ADD runs a slow script delegate, and a pod beside it on a bridge NAD. The fast pod's
//! network-status and `AddedInterface` Event go out once the slow ADD is done, not while it
//! runs; and once the bound has passed even while it still runs.

mod common;
mod kube_cluster;

use std::time::{Duration, Instant};

use common::*;
use kube_cluster::*;
use serde_json::json;

/// A delegate whose ADD takes 6 s (long beside a fast pod's ADD, even on a loaded machine),
/// touching `DIR/started` when it begins and `DIR/ended` when it is done.
const SLOW_PLUGIN: &str = r#"#!/bin/sh
cat > /dev/null
case "$CNI_COMMAND" in
VERSION)
  echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}' ;;
ADD)
  touch DIR/started
  sleep 6
  touch DIR/ended
  printf '{"cniVersion":"1.0.0","interfaces":[{"name":"%s","sandbox":"%s"}]}\n' "$CNI_IFNAME" "$CNI_NETNS" ;;
esac
exit 0
"#;

/// The slow pod's sandbox (the fast one is [`CONTAINER_ID`]).
const SLOW_SANDBOX: &str = "c0ffee0000000000000000000000000000000000000000000000000000000002";

fn wait_until(what: &str, agent: &KubeAgent, done: impl FnMut() -> bool) {
    assert!(
        common::runtime::wait_for(Duration::from_secs(20), done),
        "{what}:\n{}",
        agent.log()
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn writes_an_add_leaves_wait_for_the_nodes_other_adds_and_no_longer_than_the_bound() {
    if !root_or_skip("writes_an_add_leaves_wait_for_the_nodes_other_adds_and_no_longer_than_the_bound") {
        return;
    }
    let node = Netns::new("awy-node");
    let cluster = FakeCluster::start(&node);
    let mut agent = KubeAgent::start(&node, &cluster);
    let (fast_ns, slow_ns) = (Netns::new("awy-fast"), Netns::new("awy-slow"));
    let marks = tempfile::tempdir().unwrap();
    install_script_plugin(
        &agent.bin,
        "slowy",
        &SLOW_PLUGIN.replace("DIR", &marks.path().display().to_string()),
    );
    bridge_nad(&cluster, &agent, "yf", "192.168.86.0/24");
    cluster.create(
        &nads(),
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"name": "slow", "namespace": "default"},
               "spec": {"config": json!({"cniVersion": "1.0.0", "type": "slowy"}).to_string()}}),
    );
    for (pod, networks) in [("fast", "yf@yf0"), ("slow", "slow@sl0")] {
        cluster.create(
            &pods(),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": pod, "namespace": "default",
                                "annotations": {"k8s.v1.cni.cncf.io/networks": networks}},
                   "spec": {"nodeName": "n1"}}),
        );
    }
    let status = |pod: &str| {
        cluster.pod("default", pod).and_then(|p| {
            p.metadata
                .annotation("k8s.v1.cni.cncf.io/network-status")
                .map(str::to_string)
        })
    };
    let added_events = |pod: &str| {
        pod_events(&cluster, pod)
            .iter()
            .filter(|e| e.data["reason"] == "AddedInterface")
            .count()
    };
    let mark = |name: &str| marks.path().join(name).exists();
    let clear_marks = || {
        for name in ["started", "ended"] {
            let _ = std::fs::remove_file(marks.path().join(name));
        }
    };
    // One pass: the slow pod's ADD runs, the fast pod's ADD answers beside it; returns the
    // running slow ADD.
    let fast_beside_slow = |agent: &KubeAgent| {
        clear_marks();
        let slow = spawn_shim_as(
            &agent.bin,
            &agent.conf,
            "ADD",
            &slow_ns,
            "default",
            "slow",
            SLOW_SANDBOX,
        );
        wait_until("the slow ADD did not start", agent, || mark("started"));
        let fast = agent.shim("ADD", &fast_ns, "default", "fast");
        assert!(
            fast.status.success(),
            "fast ADD: {}\n{}",
            text(&fast),
            agent.log()
        );
        slow
    };
    let slow_done = |agent: &KubeAgent, slow: std::process::Child| {
        let slow = slow.wait_with_output().unwrap();
        assert!(
            slow.status.success(),
            "slow ADD: {}\n{}",
            text(&slow),
            agent.log()
        );
    };
    let fast_written = |agent: &KubeAgent| {
        wait_until("the fast pod's network-status was not written", agent, || {
            status("fast").is_some_and(|s| s.contains("\"yf0\""))
        });
    };
    let dels = |agent: &KubeAgent| {
        for (ns, pod, sandbox) in [(&fast_ns, "fast", CONTAINER_ID), (&slow_ns, "slow", SLOW_SANDBOX)] {
            let del = run_shim_as(&agent.bin, &agent.conf, "DEL", ns, "default", pod, sandbox);
            assert!(del.status.success(), "DEL {pod}: {}\n{}", text(&del), agent.log());
            assert_eq!(ns.links(), ["lo"], "{pod}: everything detached");
        }
    };

    // (a) A bound longer than the slow ADD: the fast pod's writes wait for it.
    agent.restart_with(&node, &["--writes-yield-ms", "20000"]);
    let slow = fast_beside_slow(&agent);
    std::thread::sleep(Duration::from_millis(700));
    let (early_status, early_events) = (status("fast"), added_events("fast"));
    assert!(
        !mark("ended"),
        "the slow ADD must still run while the fast pod is looked at (a loaded machine?)"
    );
    assert_eq!(early_status, None, "network-status written while another ADD ran");
    assert_eq!(
        early_events, 0,
        "an AddedInterface Event written while another ADD ran"
    );
    slow_done(&agent, slow);
    // Both go out once no ADD runs, well within the bound.
    let done = Instant::now();
    fast_written(&agent);
    wait_until("the fast pod has no AddedInterface Event", &agent, || {
        added_events("fast") == 1
    });
    wait_until("the slow pod's network-status was not written", &agent, || {
        status("slow").is_some_and(|s| s.contains("\"sl0\""))
    });
    assert!(done.elapsed() < Duration::from_secs(10), "not within the bound");
    dels(&agent);

    // (b) A short bound: the fast pod's writes go out while the slow ADD still runs.
    cluster.runtime.block_on(async {
        let pod = cluster
            .objects
            .get(&pods(), Some("default"), "fast")
            .await
            .unwrap();
        let mut pod = pod.expect("the fast pod");
        pod.metadata
            .annotations
            .remove("k8s.v1.cni.cncf.io/network-status");
        cluster.objects.update(&pods(), pod).await.unwrap();
    });
    assert_eq!(status("fast"), None);
    agent.restart_with(&node, &["--writes-yield-ms", "300"]);
    let slow = fast_beside_slow(&agent);
    fast_written(&agent);
    assert!(
        !mark("ended"),
        "written only after the slow ADD ended (a loaded machine?)"
    );
    slow_done(&agent, slow);
    dels(&agent);
}
