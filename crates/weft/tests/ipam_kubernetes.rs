//! weft-ipam on the Kubernetes backend, against a fake API server at the HTTP layer: API
//! writes per allocation (target 1, 2 with a claim), 409 conflicts between concurrent
//! allocators resolved without duplicates, claim status written through the status subresource.
//! weft-ipam runs in the node DaemonSet: it talks as the `weft-node` ServiceAccount, with
//! deploy/'s `weft-node` role enforced (a request outside it fails the test).

mod common;
mod kube_cluster;

use std::collections::BTreeSet;
use std::sync::Arc;

use kube_cluster::{NODE_TOKEN, NODE_USER, deploy_role};
use weft_ipam::{IpReservation, IpamClaim, IpamRequest};
use weft_store::fake_api::FakeApiServer;
use weft_store::{Api, MemoryStore, Object, Resource, Store};

/// The fake API over `backing`, with the weft-node role enforced, and weft-ipam's store on it.
fn node_api(backing: Arc<dyn Store>) -> (FakeApiServer, Arc<dyn Store>) {
    let fake = FakeApiServer::new(backing, kinds());
    fake.grant(NODE_TOKEN, NODE_USER, deploy_role("weft-node"));
    let store: Arc<dyn Store> = Arc::new(fake.kube_store_as(NODE_TOKEN));
    (fake, store)
}

fn kinds() -> Vec<weft_store::ResourceType> {
    vec![
        IpReservation::resource_type(),
        IpamClaim::resource_type(),
        weft_store::ResourceType::new("v1", "Pod", "pods", true),
    ]
}

fn request(command: &str, container: &str, pod: &str, config: &serde_json::Value) -> IpamRequest {
    let env = move |key: &str| -> Option<String> {
        match key {
            "CNI_COMMAND" => Some(command.to_string()),
            "CNI_CONTAINERID" => Some(container.to_string()),
            "CNI_NETNS" => Some("/run/netns/x".into()),
            "CNI_IFNAME" => Some("net1".into()),
            "CNI_ARGS" => Some(format!(
                "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod}"
            )),
            "CNI_PATH" => Some("/usr/lib/cni".into()),
            "WEFT_NODE_NAME" => Some("node1".into()),
            _ => None,
        }
    };
    IpamRequest::from_lookup(env, config.to_string().as_bytes()).expect("request")
}

fn config(range: &str, persistent: bool) -> serde_json::Value {
    serde_json::json!({
        "cniVersion": "1.0.0", "name": "blue", "type": "bridge", "allowPersistentIPs": persistent,
        "ipam": {"type": "weft-ipam", "range": range}
    })
}

#[tokio::test]
async fn one_api_write_per_allocation_and_two_with_a_claim() {
    // The cluster's objects (the pod, the claim) are made by others: straight in the backing
    // store.
    let backing = MemoryStore::shared();
    let (fake, store) = node_api(backing.clone());
    let conf = config("10.9.0.0/24", false);
    let mut writes = Vec::new();
    for i in 0..20 {
        fake.clear_requests();
        let result = weft_ipam::handle(
            request("ADD", &format!("c{i}"), &format!("p{i}"), &conf),
            store.clone(),
        )
        .await
        .expect("ADD")
        .expect("result");
        assert_eq!(result.ips.len(), 1);
        writes.push(fake.writes());
    }
    assert!(
        writes.iter().all(|w| *w == 1),
        "API writes per allocation: {writes:?}\n{:?}",
        fake.requests()
    );

    // With a claim: the reservation plus the claim's status.
    let pod: Object = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "virt-launcher-vm1-abcde", "namespace": "default", "annotations": {
            "k8s.v1.cni.cncf.io/networks": "[{\"name\":\"blue\",\"namespace\":\"default\",\"interface\":\"net1\",\"ipam-claim-reference\":\"vm1.blue\"}]"
        }},
        "spec": {"containers": [{"name": "compute", "image": "virt-launcher"}]}
    }))
    .unwrap();
    backing.create(&kinds()[2], pod).await.unwrap();
    let mut claim = IpamClaim {
        metadata: weft_store::ObjectMeta::named(Some("default"), "vm1.blue"),
        ..Default::default()
    };
    claim.spec.network = "blue".into();
    claim.spec.interface = "net1".into();
    Api::<IpamClaim>::namespaced(backing.clone(), "default")
        .create(&claim)
        .await
        .unwrap();
    let persistent = config("10.9.0.0/24", true);
    fake.clear_requests();
    let first = weft_ipam::handle(
        request("ADD", "launcher-1", "virt-launcher-vm1-abcde", &persistent),
        store.clone(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        fake.writes(),
        2,
        "reservation + claim status: {:?}",
        fake.requests()
    );
    assert!(
        fake.requests().iter().any(|r| r.contains("/status")),
        "claim status via the subresource: {:?}",
        fake.requests()
    );
    let claim = Api::<IpamClaim>::namespaced(store.clone(), "default")
        .get_required("vm1.blue")
        .await
        .unwrap();
    let claimed = serde_json::to_value(&claim).unwrap();
    assert_eq!(
        claimed["status"]["ips"][0],
        first.ips[0].address.to_string(),
        "{claimed}"
    );

    // A second launcher pod (migration target, or a restart) gets the same address.
    fake.clear_requests();
    let second = weft_ipam::handle(
        request("ADD", "launcher-2", "virt-launcher-vm1-abcde", &persistent),
        store.clone(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        second.ips[0].address, first.ips[0].address,
        "the claim's address, two owners"
    );
    assert!(
        fake.writes() <= 1,
        "reusing a claim costs at most its status write: {:?}",
        fake.requests()
    );
    for (user, verb, group, resource) in fake.permissions_used() {
        eprintln!("permission used: {user} {verb} {group}/{resource}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_allocators_conflict_and_never_duplicate() {
    let (fake, store) = node_api(MemoryStore::shared());
    let conf = config("10.10.0.0/28", false);
    let tasks: Vec<_> = (0..14)
        .map(|i| {
            let store = store.clone();
            let conf = conf.clone();
            tokio::spawn(async move {
                let c = format!("c{i}");
                weft_ipam::handle(request("ADD", &c, &c, &conf), store).await
            })
        })
        .collect();
    let mut addresses = BTreeSet::new();
    let mut ok = 0;
    for task in tasks {
        if let Ok(Some(result)) = task.await.unwrap() {
            ok += 1;
            assert!(
                addresses.insert(result.ips[0].address),
                "duplicate {}",
                result.ips[0].address
            );
        }
    }
    assert_eq!(ok, 14, "a /28 has 14 usable addresses: every allocator gets one");
    // Every create beyond the 14 that won was answered 409 (taken) and retried elsewhere.
    let creates = fake.requests().iter().filter(|r| r.starts_with("POST ")).count();
    assert!(creates >= 14, "{creates}");
    eprintln!(
        "creates: {creates} for 14 allocations ({} lost a race with 409 and retried)",
        creates - 14
    );
}

/// API requests per pod ADD and DEL of one weft-ipam network, as the node agent serves them
/// (`handle_held`: it remembers what its ADDs reserved): ADD = the create alone, DEL = one
/// conditional DELETE. Without the agent's memory, a DEL with `prevResult` costs a GET + the
/// DELETE; with neither it looks the address up (and still frees it). A stale DEL (the address
/// was freed and is someone else's now) frees nothing.
#[tokio::test]
async fn one_request_per_add_and_one_per_del_through_the_agents_memory() {
    let (fake, store) = node_api(MemoryStore::shared());
    let conf = config("10.11.0.0/24", false);
    let held = weft_ipam::HeldCache::default();
    let reservations = || async {
        Api::<IpReservation>::all(store.clone())
            .list(&Default::default())
            .await
            .unwrap()
    };
    let methods = |fake: &FakeApiServer| -> Vec<String> {
        fake.requests()
            .iter()
            .map(|r| r.split(' ').next().unwrap_or_default().to_string())
            .collect()
    };
    for i in 0..10 {
        let c = format!("c{i}");
        fake.clear_requests();
        let added = weft_ipam::handle_held(request("ADD", &c, &c, &conf), store.clone(), Some(&held))
            .await
            .expect("ADD")
            .expect("result");
        assert_eq!(methods(&fake), ["POST"], "ADD: {:?}", fake.requests());
        fake.clear_requests();
        weft_ipam::handle_held(request("DEL", &c, &c, &conf), store.clone(), Some(&held))
            .await
            .expect("DEL");
        assert_eq!(methods(&fake), ["DELETE"], "DEL: {:?}", fake.requests());
        assert!(
            !reservations()
                .await
                .iter()
                .any(|r| r.spec.ip == Some(added.ips[0].address.addr())),
            "released"
        );
    }
    assert!(held.is_empty(), "every DEL forgot its attachment");

    // The agent restarted (nothing remembered): prevResult names the address.
    let added = weft_ipam::handle(request("ADD", "p1", "p1", &conf), store.clone())
        .await
        .unwrap()
        .unwrap();
    let mut with_prev = conf.clone();
    with_prev["prevResult"] = serde_json::to_value(&added).unwrap();
    fake.clear_requests();
    weft_ipam::handle_held(request("DEL", "p1", "p1", &with_prev), store.clone(), Some(&held))
        .await
        .expect("DEL");
    assert_eq!(
        methods(&fake),
        ["GET", "DELETE"],
        "DEL with prevResult: {:?}",
        fake.requests()
    );
    assert!(reservations().await.is_empty());

    // Neither: looked up, freed all the same.
    weft_ipam::handle(request("ADD", "p2", "p2", &conf), store.clone())
        .await
        .unwrap()
        .unwrap();
    weft_ipam::handle_held(request("DEL", "p2", "p2", &conf), store.clone(), Some(&held))
        .await
        .expect("DEL");
    assert!(reservations().await.is_empty(), "the lookup freed it");

    // The attack: s's ADD is remembered; its address is freed behind the agent's back and
    // taken by t (requested explicitly); s's late DEL, with its stale memory and prevResult,
    // leaves t's reservation alone.
    let s_added = weft_ipam::handle_held(request("ADD", "s", "s", &conf), store.clone(), Some(&held))
        .await
        .unwrap()
        .unwrap();
    let ip = s_added.ips[0].address.addr();
    weft_ipam::release(
        &store,
        &weft_ipam::parse_network_config(&conf).unwrap(),
        "s",
        "net1",
    )
    .await
    .unwrap();
    let mut wants_ip = conf.clone();
    wants_ip["runtimeConfig"] = serde_json::json!({"ips": [format!("{ip}/24")]});
    let t_added = weft_ipam::handle(request("ADD", "t", "t", &wants_ip), store.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t_added.ips[0].address.addr(), ip);
    let mut stale = conf.clone();
    stale["prevResult"] = serde_json::to_value(&s_added).unwrap();
    weft_ipam::handle_held(request("DEL", "s", "s", &stale), store.clone(), Some(&held))
        .await
        .expect("a stale DEL succeeds");
    let left = reservations().await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(
        left[0].held_by("t", "net1") && left[0].spec.ip == Some(ip),
        "{left:?}"
    );
}
