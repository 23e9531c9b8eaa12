//! The allocator on the embedded (SQLite) store: concurrency from one and from several handles
//! (as separate plugin processes open the same file), and the claim lifecycle.

use std::sync::Arc;

use serde_json::json;
use weft_ipam::allocator::list_reservations;
use weft_ipam::stress::race;
use weft_ipam::{Holder, IpamClaim, IpamConfig, allocate, parse_network_config, release, release_claim};
use weft_store::{Api, SqliteStore, Store};

fn config(range: &str) -> IpamConfig {
    parse_network_config(&json!({"name": "blue", "ipam": {"type": "weft-ipam", "range": range}})).unwrap()
}

fn holder(id: &str) -> Holder {
    Holder {
        container_id: id.into(),
        ifname: "net1".into(),
        pod_ref: format!("ns/{id}"),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_tasks_on_one_handle_never_share_an_address() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("store.db")).unwrap().shared();
    let c = config("10.0.0.0/22");
    let (owners, exhausted) = race(std::slice::from_ref(&store), &c, 16, 30).await;
    assert_eq!((owners.len(), exhausted), (480, 0));
    assert_eq!(list_reservations(&store, "blue").await.unwrap().len(), 480);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn separate_handles_racing_to_exhaustion_hand_out_each_address_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let stores: Vec<Arc<dyn Store>> = (0..4)
        .map(|_| SqliteStore::open(&path).unwrap().shared())
        .collect();
    let c = config("10.0.0.0/25");
    let (owners, exhausted) = race(&stores, &c, 16, 10).await;
    assert_eq!(owners.len(), 126);
    assert_eq!(exhausted, 160 - 126);
    for (ip, id) in &owners {
        let freed = release(&stores[0], &c, id, "net1").await.unwrap();
        assert_eq!(&freed, &vec![*ip]);
    }
    assert!(list_reservations(&stores[1], "blue").await.unwrap().is_empty());
}

#[tokio::test]
async fn claim_keeps_its_address_across_pods_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("store.db")).unwrap().shared();
    let c = config("10.0.0.0/24");
    let claims: Api<IpamClaim> = Api::namespaced(store.clone(), "ns");
    claims
        .create(&IpamClaim::new("ns", "vm.blue", "blue", ""))
        .await
        .unwrap();
    let a = allocate(&store, &c, &holder("pod-a"), &[], Some("ns/vm.blue"))
        .await
        .unwrap();
    assert!(
        release(&store, &c, "pod-a", "net1").await.unwrap().is_empty(),
        "pod DEL keeps it"
    );
    let b = allocate(&store, &c, &holder("pod-b"), &[], Some("ns/vm.blue"))
        .await
        .unwrap();
    assert_eq!(a, b);
    claims.delete("vm.blue").await.unwrap();
    assert_eq!(release_claim(&store, "ns/vm.blue").await.unwrap(), vec![a[0].ip]);
}
