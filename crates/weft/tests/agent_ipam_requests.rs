//! API requests per pod ADD and DEL for weft-ipam networks, through a real `weft agent
//! --kubeconfig` process and the installed `weft-ipam` client against the fake API server:
//! ADD = the pod's status write + one IPReservation create per weft-ipam network; DEL = one
//! conditional IPReservation DELETE per network (the agent remembers what its ADD reserved),
//! no GET, no search. Events are written on their own task and not counted here.

mod common;
mod kube_cluster;

use common::*;
use kube_cluster::*;
use serde_json::json;
use weft_store::Resource;

/// The requests made since the last clear, without query strings and Events.
fn calls(cluster: &FakeCluster) -> Vec<String> {
    cluster
        .api
        .requests()
        .iter()
        .map(|r| r.split('?').next().unwrap_or(r).to_string())
        .filter(|r| !r.contains("/events"))
        .collect()
}

fn count(calls: &[String], prefix: &str) -> usize {
    calls.iter().filter(|c| c.starts_with(prefix)).count()
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn agent_weft_ipam_add_is_one_create_per_network_and_del_one_delete() {
    if !root_or_skip("agent_weft_ipam_add_is_one_create_per_network_and_del_one_delete") {
        return;
    }
    let node = Netns::new("air-node");
    let cluster = ipam_cluster(&node);
    for (name, bridge, range) in [
        ("red", "br-air1", "192.168.91.0/24"),
        ("green", "br-air2", "192.168.92.0/24"),
    ] {
        let nad_config = json!({
            "cniVersion": "1.0.0", "type": "bridge", "bridge": bridge,
            "ipam": {"type": "weft-ipam", "range": range}
        });
        cluster.create(
            &nads(),
            json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                   "metadata": {"name": name, "namespace": "default"},
                   "spec": {"config": nad_config.to_string()}}),
        );
    }
    for (pod, networks) in [("one", "red@net1"), ("two", "red@net1,green@net2")] {
        cluster.create(
            &pods(),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": pod, "namespace": "default", "uid": format!("uid-{pod}"),
                                "annotations": {"k8s.v1.cni.cncf.io/networks": networks}},
                   "spec": {"nodeName": "n1"}}),
        );
    }
    // Made before the agent started: its initial lists bring them into the caches.
    let agent = KubeAgent::start(&node, &cluster);
    wait_for_watches(&cluster, &agent);
    let reservations = "/apis/ipam.weft.dev/v1alpha1/ipreservations";
    for (pod, networks) in [("one", 1), ("two", 2), ("one", 1)] {
        let pod_ns = Netns::new(&format!("air-{pod}"));
        cluster.api.clear_requests();
        let add = agent.shim("ADD", &pod_ns, "default", pod);
        assert!(add.status.success(), "ADD {pod}: {}\n{}", text(&add), agent.log());
        agent.wait_status_written();
        let added = calls(&cluster);
        assert_eq!(
            count(&added, &format!("POST {reservations}")),
            networks,
            "ADD {pod}: {added:#?}"
        );
        assert_eq!(
            added.len(),
            1 + networks,
            "ADD {pod}: the status write + one create per weft-ipam network: {added:#?}"
        );
        assert_eq!(
            count(
                &added,
                &format!("PUT /api/v1/namespaces/default/pods/{pod}/status")
            ),
            1
        );

        cluster.api.clear_requests();
        let del = agent.shim("DEL", &pod_ns, "default", pod);
        assert!(del.status.success(), "DEL {pod}: {}\n{}", text(&del), agent.log());
        let deleted = calls(&cluster);
        assert_eq!(
            count(&deleted, &format!("DELETE {reservations}/")),
            networks,
            "DEL {pod}: {deleted:#?}"
        );
        assert_eq!(
            deleted.len(),
            networks,
            "DEL {pod}: one DELETE per network, nothing else: {deleted:#?}"
        );
        let ty = weft_ipam::IpReservation::resource_type();
        let left = cluster
            .runtime
            .block_on(cluster.objects.list(&ty, None, &Default::default()))
            .unwrap()
            .items;
        assert!(left.is_empty(), "DEL {pod} freed every address: {left:?}");
    }
}
