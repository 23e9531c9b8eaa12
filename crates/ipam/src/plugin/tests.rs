use serde_json::{Value, json};
use weft_store::{Api, MemoryStore, Object};

use super::*;
use crate::allocator::list_reservations;
use crate::claim::{IPS_ALLOCATED, IpamClaim, reasons};
use crate::persistent::pod_type;

fn netconf(extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": "1.1.0", "name": "blue", "type": "bridge",
        "ipam": {"type": "weft-ipam", "range": "10.10.0.0/24", "gateway": "10.10.0.1",
                 "routes": [{"dst": "0.0.0.0/0"}]}
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

fn req(command: &str, container: &str, pod: &str, conf: &Value) -> IpamRequest {
    let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME={pod};K8S_POD_UID=uid-{pod}");
    let env = [
        ("CNI_COMMAND", command.to_string()),
        ("CNI_CONTAINERID", container.to_string()),
        ("CNI_NETNS", "/run/netns/x".to_string()),
        ("CNI_IFNAME", "pod16477688c0e".to_string()),
        ("CNI_PATH", "/opt/cni/bin".to_string()),
        ("CNI_ARGS", args),
        ("NODENAME", "node1".to_string()),
    ];
    IpamRequest::from_lookup(
        |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()),
        conf.to_string().as_bytes(),
    )
    .unwrap()
}

async fn add(
    store: &Arc<dyn Store>,
    container: &str,
    pod: &str,
    conf: &Value,
) -> Result<CniResult, CniError> {
    handle(req("ADD", container, pod, conf), store.clone())
        .await
        .map(|r| r.unwrap())
}

async fn put_pod(store: &Arc<dyn Store>, name: &str, claim: &str) {
    let networks =
        json!([{"name": "blue-nad", "interface": "pod16477688c0e", "ipam-claim-reference": claim}]);
    let mut pod = Object::new(&pod_type(), Some("ns"), name);
    pod.metadata
        .annotations
        .insert(weft_netconf::NETWORKS_ANNOTATION.into(), networks.to_string());
    store.create(&pod_type(), pod).await.unwrap();
}

/// The IPAMClaims of namespace `ns`.
fn claims(store: &Arc<dyn Store>) -> Api<IpamClaim> {
    Api::namespaced(store.clone(), "ns")
}

/// Creates IPAMClaim `ns/name` for network `network` (no interface named yet).
async fn create_claim(store: &Arc<dyn Store>, name: &str, network: &str) -> IpamClaim {
    claims(store)
        .create(&IpamClaim::new("ns", name, network, ""))
        .await
        .unwrap()
}

/// The first status condition of claim `name`.
async fn first_condition(claims: &Api<IpamClaim>, name: &str) -> crate::claim::Condition {
    claims
        .get_required(name)
        .await
        .unwrap()
        .status
        .conditions
        .remove(0)
}

#[tokio::test]
async fn add_check_del_round_trip() {
    let store = MemoryStore::shared();
    let conf = netconf(json!({}));
    let result = add(&store, "c1", "p1", &conf).await.unwrap();
    assert_eq!(result.cni_version, "1.1.0");
    assert_eq!(result.ips.len(), 1);
    let address = result.ips[0].address;
    assert_eq!(address.prefix_len(), 24);
    assert_ne!(
        address.addr().to_string(),
        "10.10.0.1",
        "gateway is never handed out"
    );
    assert_eq!(result.ips[0].gateway.unwrap().to_string(), "10.10.0.1");
    assert_eq!(result.routes.len(), 1);
    assert_eq!(
        add(&store, "c1", "p1", &conf).await.unwrap(),
        result,
        "ADD is idempotent"
    );
    assert!(
        handle(req("CHECK", "c1", "p1", &conf), store.clone())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        handle(req("DEL", "c1", "p1", &conf), store.clone())
            .await
            .unwrap()
            .is_none()
    );
    let err = handle(req("CHECK", "c1", "p1", &conf), store.clone())
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.cni_version.as_str()),
        (codes::OBJECT_INVALID, "1.1.0")
    );
    assert!(
        handle(req("DEL", "c1", "p1", &conf), store.clone())
            .await
            .unwrap()
            .is_none(),
        "DEL twice"
    );
}

#[tokio::test]
async fn requested_ip_from_runtime_config_is_taken_from_the_pool() {
    let store = MemoryStore::shared();
    let conf = netconf(json!({"runtimeConfig": {"ips": ["10.10.0.50/24"]}}));
    let r = add(&store, "c1", "p1", &conf).await.unwrap();
    assert_eq!(r.ips.len(), 1, "not added as an extra address");
    assert_eq!(r.ips[0].address.to_string(), "10.10.0.50/24");
    let err = add(&store, "c2", "p2", &conf).await.unwrap_err();
    assert_eq!(err.code, codes::ADDRESS_TAKEN);
}

#[tokio::test]
async fn bad_config_names_the_key() {
    let store = MemoryStore::shared();
    let conf =
        netconf(json!({"ipam": {"type": "weft-ipam", "range": "10.0.0.0/24", "range_start": "10.0.0.300"}}));
    let err = add(&store, "c1", "p1", &conf).await.unwrap_err();
    assert_eq!(err.code, codes::INVALID_NETWORK_CONFIG);
    assert_eq!(err.msg, "ipam.range_start: 10.0.0.300 is not an IP address");
}

#[tokio::test]
async fn status_reports_exhaustion_with_code_50() {
    let store = MemoryStore::shared();
    let conf = netconf(json!({"ipam": {"type": "weft-ipam", "range": "10.0.0.0/30"}}));
    let status = |s: &Arc<dyn Store>| handle(req("STATUS", "", "", &conf), s.clone());
    assert!(status(&store).await.is_ok());
    add(&store, "a", "pa", &conf).await.unwrap();
    add(&store, "b", "pb", &conf).await.unwrap();
    assert_eq!(
        add(&store, "c", "pc", &conf).await.unwrap_err().code,
        codes::POOL_EXHAUSTED
    );
    let err = status(&store).await.unwrap_err();
    assert_eq!(err.code, codes::PLUGIN_NOT_AVAILABLE);
    assert!(err.msg.contains("exhausted"), "{}", err.msg);
}

#[tokio::test]
async fn gc_keeps_valid_and_claimed_attachments() {
    let store = MemoryStore::shared();
    let conf = netconf(json!({}));
    add(&store, "a", "pa", &conf).await.unwrap();
    add(&store, "b", "pb", &conf).await.unwrap();
    let gc_conf = netconf(json!({"cni.dev/attachments": [{"containerID": "a", "ifname": "pod16477688c0e"}]}));
    handle(req("GC", "", "", &gc_conf), store.clone()).await.unwrap();
    let left = list_reservations(&store, "blue").await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].spec.container_id, "a");
    let err = handle(req("GC", "", "", &conf), store.clone()).await.unwrap_err();
    assert_eq!(
        err.code,
        codes::INVALID_ENVIRONMENT,
        "GC without a list frees nothing"
    );
    assert_eq!(list_reservations(&store, "blue").await.unwrap().len(), 1);
}

#[tokio::test]
async fn claim_lifecycle_add_del_keeps_second_pod_and_migration_share_release_frees() {
    let store = MemoryStore::shared();
    let conf = netconf(json!({"allowPersistentIPs": true}));
    let claims = claims(&store);
    create_claim(&store, "vm1.blue", "blue").await;
    put_pod(&store, "launcher-a", "vm1.blue").await;
    put_pod(&store, "launcher-b", "vm1.blue").await;
    put_pod(&store, "other", "").await;

    let first = add(&store, "ca", "launcher-a", &conf).await.unwrap();
    let ip = first.ips[0].address;
    let claim = claims.get_required("vm1.blue").await.unwrap();
    assert_eq!(claim.status.ips, vec![ip.to_string()]);
    assert_eq!(claim.status.owner_pod.as_ref().unwrap().name, "launcher-a");
    let cond = &claim.status.conditions[0];
    assert_eq!(
        (cond.type_.as_str(), cond.status.as_str(), cond.reason.as_str()),
        (IPS_ALLOCATED, "True", reasons::SUCCESSFUL_ALLOCATION)
    );

    // Migration: a second launcher pod holds the same address while the first still runs.
    let second = add(&store, "cb", "launcher-b", &conf).await.unwrap();
    assert_eq!(second.ips[0].address, ip);
    assert_eq!(
        claims
            .get_required("vm1.blue")
            .await
            .unwrap()
            .status
            .owner_pod
            .unwrap()
            .name,
        "launcher-b"
    );

    // Pod DEL keeps it; a pod without a claim cannot take it.
    handle(req("DEL", "ca", "launcher-a", &conf), store.clone())
        .await
        .unwrap();
    handle(req("DEL", "cb", "launcher-b", &conf), store.clone())
        .await
        .unwrap();
    assert_eq!(list_reservations(&store, "blue").await.unwrap().len(), 1);
    let mut wants_it = conf.clone();
    wants_it["runtimeConfig"] = json!({"ips": [ip.addr().to_string()]});
    assert_eq!(
        add(&store, "cx", "other", &wants_it).await.unwrap_err().code,
        codes::ADDRESS_TAKEN
    );

    // Stop/start: a new pod (another node) gets the same address.
    put_pod(&store, "launcher-c", "vm1.blue").await;
    assert_eq!(
        add(&store, "cc", "launcher-c", &conf).await.unwrap().ips[0].address,
        ip
    );

    // Claim deletion frees it.
    claims.delete("vm1.blue").await.unwrap();
    assert_eq!(
        crate::release_claim(&store, "ns/vm1.blue").await.unwrap(),
        vec![ip.addr()]
    );
    assert!(list_reservations(&store, "blue").await.unwrap().is_empty());
}

#[tokio::test]
async fn claim_errors_are_clear() {
    let store = MemoryStore::shared();
    let conf =
        netconf(json!({"allowPersistentIPs": true, "ipam": {"type": "weft-ipam", "range": "10.0.0.0/30"}}));
    let err = add(&store, "c", "missing-pod", &conf).await.unwrap_err();
    assert_eq!(err.code, codes::OBJECT_INVALID);
    put_pod(&store, "p", "nope").await;
    let err = add(&store, "c", "p", &conf).await.unwrap_err();
    assert!(err.msg.contains("IPAMClaim ns/nope"), "{}", err.msg);

    let claims = claims(&store);
    create_claim(&store, "full", "blue").await;
    put_pod(&store, "q", "full").await;
    put_pod(&store, "pa", "").await;
    put_pod(&store, "pb", "").await;
    add(&store, "a", "pa", &conf).await.unwrap();
    add(&store, "b", "pb", &conf).await.unwrap();
    assert_eq!(
        add(&store, "c", "q", &conf).await.unwrap_err().code,
        codes::POOL_EXHAUSTED
    );
    let claim = claims.get_required("full").await.unwrap();
    assert_eq!(claim.status.conditions[0].reason, reasons::SUBNET_EXHAUSTED);
    assert!(claim.status.ips.is_empty());

    create_claim(&store, "red", "red").await;
    put_pod(&store, "r", "red").await;
    let err = add(&store, "c", "r", &conf).await.unwrap_err();
    assert!(err.msg.contains("is for network \"red\""), "{}", err.msg);
}

#[tokio::test]
async fn status_is_code_50_when_the_store_is_unreachable() {
    let store: Arc<dyn Store> = Arc::new(weft_store::double::StoreDouble::new(
        weft_store::double::Behaviour::Down,
    ));
    let conf = netconf(json!({}));
    let err = handle(req("STATUS", "", "", &conf), store.clone())
        .await
        .unwrap_err();
    assert_eq!(err.code, codes::PLUGIN_NOT_AVAILABLE);
    assert!(err.msg.contains("cannot read the IPAM store"), "{}", err.msg);
    let err = handle(req("DEL", "c1", "p1", &conf), store).await.unwrap_err();
    assert_eq!(err.code, codes::TRY_AGAIN_LATER, "DEL reports store failures");
}

#[tokio::test]
async fn claimed_address_held_by_someone_else_is_an_ip_address_conflict() {
    let store = MemoryStore::shared();
    let conf = netconf(json!({"allowPersistentIPs": true}));
    put_pod(&store, "squatter", "").await;
    let mut wants = conf.clone();
    wants["runtimeConfig"] = json!({"ips": ["10.10.0.77"]});
    add(&store, "cs", "squatter", &wants).await.unwrap();

    // A claim restored with status.ips (e.g. after the store was rebuilt) whose address is taken.
    let claims = claims(&store);
    let mut claim = create_claim(&store, "vm2.blue", "blue").await;
    claim.status.ips = vec!["10.10.0.77/24".into()];
    claims.replace_status(&claim).await.unwrap();
    put_pod(&store, "launcher", "vm2.blue").await;
    let err = add(&store, "cl", "launcher", &conf).await.unwrap_err();
    assert_eq!(err.code, codes::ADDRESS_TAKEN);
    let cond = first_condition(&claims, "vm2.blue").await;
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", reasons::IP_ADDRESS_CONFLICT)
    );

    // A claim whose reservation vanished gets it back.
    handle(req("DEL", "cs", "squatter", &wants), store.clone())
        .await
        .unwrap();
    let r = add(&store, "cl", "launcher", &conf).await.unwrap();
    assert_eq!(r.ips[0].address.to_string(), "10.10.0.77/24");
    let cond = first_condition(&claims, "vm2.blue").await;
    assert_eq!(cond.reason, reasons::SUCCESSFUL_ALLOCATION);
}

#[tokio::test]
async fn store_writes_per_add_are_one_per_range_plus_one_claim_status() {
    let counting = Arc::new(weft_store::double::StoreDouble::default());
    let store: Arc<dyn Store> = counting.clone();
    let writes = |calls: &std::collections::HashMap<&'static str, usize>| {
        ["create", "update", "update_status", "delete"]
            .iter()
            .map(|w| calls.get(w).copied().unwrap_or(0))
            .sum::<usize>()
    };
    let conf = netconf(json!({"allowPersistentIPs": true}));
    put_pod(&store, "plain", "").await;
    create_claim(&store, "vm.blue", "blue").await;
    put_pod(&store, "launcher", "vm.blue").await;
    counting.take_calls();

    add(&store, "c1", "plain", &conf).await.unwrap();
    let calls = counting.take_calls();
    assert_eq!((writes(&calls), calls.get("list")), (1, None), "{calls:?}");

    add(&store, "c2", "launcher", &conf).await.unwrap();
    let calls = counting.take_calls();
    assert_eq!(
        (writes(&calls), calls.get("list")),
        (2, None),
        "reservation + claim status: {calls:?}"
    );

    put_pod(&store, "launcher-2", "vm.blue").await;
    counting.take_calls();
    add(&store, "c3", "launcher-2", &conf).await.unwrap();
    let calls = counting.take_calls();
    assert_eq!(writes(&calls), 1, "reuse: only ownerPod changes: {calls:?}");
}
