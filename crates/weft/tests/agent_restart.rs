//! An agent restarted on a node with attached pods (issue 9: "agent restart on a node with 200
//! pods"): a real `weft agent --kubeconfig` process against the fake API server, its pods
//! attached through the shim, its conf dir holding the generated `00-weft.conflist` (so the
//! dynamic-networks sweep runs, as with `--auto-config`). After the restart the agent lists and
//! watches pods and NADs and reads no pod on its own: no GET, no PUT per attached pod, also
//! while its LISTs are slow to answer (the dynamic-networks sweep waits for the caches).

mod common;
mod kube_cluster;

use std::time::{Duration, Instant};

use common::*;
use kube_cluster::*;
use serde_json::json;

/// Attached pods on the node (each its own netns; enough that a per-pod read shows).
const PODS: usize = 12;

/// Exec the shim for pod `p{i}` (its own sandbox ID) in `pod_ns`.
fn shim(agent: &KubeAgent, command: &str, pod_ns: &Netns, i: usize) -> std::process::Output {
    let container = format!("ar{i:062}");
    run_shim_as(
        &agent.bin,
        &agent.conf,
        command,
        pod_ns,
        "default",
        &format!("p{i}"),
        &container,
    )
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn agent_restarted_with_attached_pods_lists_and_watches_and_reads_no_pod() {
    if !root_or_skip("agent_restarted_with_attached_pods_lists_and_watches_and_reads_no_pod") {
        return;
    }
    let node = Netns::new("ar-node");
    let cluster = FakeCluster::start(&node);
    let mut agent = KubeAgent::start(&node, &cluster);
    // What `--auto-config` generates: with it the agent's dynamic-networks sweep runs.
    let conflist = json!({"cniVersion": "1.0.0", "name": "weft", "plugins": [agent.conf]});
    std::fs::write(
        agent.dir.path().join("net.d/00-weft.conflist"),
        conflist.to_string(),
    )
    .unwrap();
    let pod_nss: Vec<Netns> = (0..PODS).map(|i| Netns::new(&format!("ar-p{i}"))).collect();
    for i in 0..PODS {
        cluster.create(
            &pods(),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": format!("p{i}"), "namespace": "default"},
                   "spec": {"nodeName": "n1"}}),
        );
    }
    for (i, pod_ns) in pod_nss.iter().enumerate() {
        let add = shim(&agent, "ADD", pod_ns, i);
        assert!(add.status.success(), "ADD p{i}: {}\n{}", text(&add), agent.log());
    }
    agent.wait_status_written();

    // The restarted agent's LISTs take long (a loaded API server, a big node): its caches stay
    // unsynced for a while, and reads meanwhile would go to the API server.
    cluster.api.clear_requests();
    cluster.api.pause_lists(true);
    let seen = agent.log().len();
    agent.restart(&node);
    // The sweep runs every 500 ms: give it several rounds while the caches are not synced.
    std::thread::sleep(Duration::from_millis(1500));
    let before_sync = cluster.api.requests();
    assert!(
        !before_sync.iter().any(|r| r.contains("/pods/p")),
        "no per-pod request while the caches sync: {before_sync:#?}"
    );
    cluster.api.pause_lists(false);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !agent.log()[seen..].contains("watch caches synced") {
        assert!(Instant::now() < deadline, "caches did not sync:\n{}", agent.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Serving: a CHECK of an attached pod passes (from the caches and its record).
    let check = shim(&agent, "CHECK", &pod_nss[0], 0);
    assert!(check.status.success(), "CHECK: {}\n{}", text(&check), agent.log());
    // And none after: several more sweeps, from the synced caches.
    std::thread::sleep(Duration::from_millis(1500));
    let requests: Vec<String> = cluster
        .api
        .requests()
        .into_iter()
        .filter(|r| !r.contains("/events"))
        .collect();
    let collection = |r: &String, plural: &str| {
        let path = r.split('?').next().unwrap_or(r);
        r.starts_with("GET ") && path.ends_with(plural)
    };
    for r in &requests {
        assert!(
            collection(r, "/pods") || collection(r, "/network-attachment-definitions"),
            "only LIST and WATCH of pods and NADs after a restart, not {r:?}: {requests:#?}"
        );
    }
    for plural in ["/pods", "/network-attachment-definitions"] {
        let (watches, lists): (Vec<&String>, Vec<&String>) = requests
            .iter()
            .filter(|r| collection(r, plural))
            .partition(|r| r.contains("watch=true"));
        assert_eq!(lists.len(), 1, "one LIST of {plural}: {requests:#?}");
        assert!(!watches.is_empty(), "a WATCH of {plural}: {requests:#?}");
    }

    // DEL of every pod still works after the restart (from the records) and leaves nothing.
    for (i, pod_ns) in pod_nss.iter().enumerate() {
        let del = shim(&agent, "DEL", pod_ns, i);
        assert!(del.status.success(), "DEL p{i}: {}\n{}", text(&del), agent.log());
        assert_eq!(pod_ns.links(), ["lo"], "p{i} after DEL");
    }
    assert_eq!(agent.leases("hl-cluster"), Vec::<String>::new());
}
