use std::sync::Arc;

use serde_json::json;
use weft_store::double::{Behaviour, StoreDouble};
use weft_store::{MemoryStore, Store};

use super::*;
use crate::allocator::{Holder, allocate, allocate_reservations, list_reservations};
use crate::config::parse_network_config;

fn v4(range: &str) -> IpamConfig {
    parse_network_config(&json!({"name": "blue", "ipam": {"type": "weft-ipam", "range": range}})).unwrap()
}
fn holder(id: &str) -> Holder {
    Holder {
        container_id: id.into(),
        ifname: "net1".into(),
        ..Default::default()
    }
}
async fn known_of(store: &Arc<dyn Store>, c: &IpamConfig, id: &str) -> Vec<Known> {
    allocate_reservations(store, c, &holder(id), &[], None)
        .await
        .unwrap()
        .iter()
        .filter_map(|(_, r)| Known::from_reservation(r))
        .collect()
}

#[tokio::test]
async fn a_remembered_address_is_released_with_one_delete_and_no_read() {
    let double = Arc::new(StoreDouble::new(Behaviour::Normal));
    let store: Arc<dyn Store> = double.clone();
    let c = v4("10.3.0.0/24");
    let known = known_of(&store, &c, "a").await;
    assert_eq!(double.take_calls().get("create"), Some(&1));
    let freed = release_known(&store, &c, "a", "net1", &known).await.unwrap();
    assert_eq!(freed, vec![known[0].ip]);
    let calls = double.take_calls();
    assert_eq!(calls.get("delete"), Some(&1), "{calls:?}");
    assert_eq!(calls.values().sum::<usize>(), 1, "one call in all: {calls:?}");
    assert!(list_reservations(&store, "blue").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_prev_result_address_is_released_with_one_read_and_one_delete() {
    let double = Arc::new(StoreDouble::new(Behaviour::Normal));
    let store: Arc<dyn Store> = double.clone();
    let c = v4("10.3.0.0/24");
    let ip = allocate(&store, &c, &holder("a"), &[], None).await.unwrap()[0].ip;
    double.take_calls();
    let known = merge_known(Vec::new(), [ip]);
    assert_eq!(
        release_known(&store, &c, "a", "net1", &known).await.unwrap(),
        vec![ip]
    );
    let calls = double.take_calls();
    assert_eq!(
        (calls.get("get"), calls.get("delete")),
        (Some(&1), Some(&1)),
        "{calls:?}"
    );
    assert_eq!(calls.values().sum::<usize>(), 2, "{calls:?}");
}

/// The attack: attachment a's address was freed and is now b's; a's DEL comes late with what
/// its ADD got (the remembered resourceVersion, or prevResult's address). b keeps its address.
#[tokio::test]
async fn a_stale_del_never_frees_the_address_someone_else_took_since() {
    let store = MemoryStore::shared();
    let c = v4("10.3.0.0/24");
    let stale = known_of(&store, &c, "a").await;
    let ip = stale[0].ip;
    assert_eq!(
        crate::allocator::release(&store, &c, "a", "net1").await.unwrap(),
        vec![ip]
    );
    let b = allocate(&store, &c, &holder("b"), &[ip], None).await.unwrap();
    assert_eq!(b[0].ip, ip);

    // Remembered (resourceVersion of a's reservation): the DELETE's precondition fails.
    assert!(
        release_known(&store, &c, "a", "net1", &stale)
            .await
            .unwrap()
            .is_empty()
    );
    // prevResult only (no resourceVersion): read, not a's, not deleted.
    let from_prev = merge_known(Vec::new(), [ip]);
    assert!(
        release_known(&store, &c, "a", "net1", &from_prev)
            .await
            .unwrap()
            .is_empty()
    );

    let left = list_reservations(&store, "blue").await.unwrap();
    assert_eq!(left.len(), 1);
    assert!(left[0].held_by("b", "net1") && left[0].spec.ip == Some(ip));
}

/// A DEL whose knowledge is wrong or missing (the agent restarted, no prevResult, or an address
/// that is not the attachment's) still frees what the attachment holds: by lookup.
#[tokio::test]
async fn without_usable_knowledge_the_del_looks_the_address_up() {
    let double = Arc::new(StoreDouble::new(Behaviour::Normal));
    let store: Arc<dyn Store> = double.clone();
    let c = v4("10.3.0.0/24");
    let ip = allocate(&store, &c, &holder("a"), &[], None).await.unwrap()[0].ip;
    let other = allocate(&store, &c, &holder("b"), &[], None).await.unwrap()[0].ip;
    double.take_calls();
    // Nothing known: the home slots are read.
    assert_eq!(
        release_known(&store, &c, "a", "net1", &[]).await.unwrap(),
        vec![ip]
    );
    assert!(double.take_calls().get("get").copied().unwrap_or(0) >= 1);

    // Known but wrong: b's address named for c (and an address outside the pool): c's own
    // address is still found and freed, b's stays.
    let mine = allocate(&store, &c, &holder("c"), &[], None).await.unwrap()[0].ip;
    let wrong = merge_known(Vec::new(), [other, "192.0.2.1".parse().unwrap()]);
    assert_eq!(
        release_known(&store, &c, "c", "net1", &wrong).await.unwrap(),
        vec![mine]
    );
    let left = list_reservations(&store, "blue").await.unwrap();
    assert_eq!(left.len(), 1);
    assert!(left[0].held_by("b", "net1"));
}

/// The reservation changed since the ADD (same holder, new resourceVersion): the conditional
/// DELETE fails, and the read finds it still the attachment's and frees it.
#[tokio::test]
async fn a_reservation_updated_since_the_add_is_still_released() {
    let store = MemoryStore::shared();
    let c = v4("10.3.0.0/24");
    let known = known_of(&store, &c, "a").await;
    let api: Api<IpReservation> = Api::all(store.clone());
    let name = reservation_name("blue", known[0].ip);
    let mut r = api.get(&name).await.unwrap().unwrap();
    r.spec.pod_uid = "uid-1".into();
    api.replace(&r).await.unwrap();
    assert_eq!(
        release_known(&store, &c, "a", "net1", &known).await.unwrap(),
        vec![known[0].ip]
    );
    assert!(api.get(&name).await.unwrap().is_none());
}

#[test]
fn the_cache_adds_what_retried_adds_got_forgets_on_del_and_stays_bounded() {
    let cache = HeldCache::default();
    let k = |ip: &str, rv: &str| Known {
        ip: ip.parse().unwrap(),
        resource_version: Some(rv.into()),
    };
    cache.remember("blue", "a", "net1", vec![k("10.0.0.1", "1")]);
    cache.remember("blue", "a", "net1", vec![k("10.0.0.2", "2"), k("10.0.0.1", "3")]);
    assert_eq!(
        cache.recall("blue", "a", "net1"),
        vec![k("10.0.0.1", "3"), k("10.0.0.2", "2")]
    );
    assert!(cache.recall("red", "a", "net1").is_empty());
    cache.forget("blue", "a", "net1");
    assert!(cache.is_empty());
    for i in 0..HELD_CACHE_CAPACITY + 10 {
        cache.remember("blue", &format!("c{i}"), "net1", vec![k("10.0.0.1", "1")]);
    }
    assert_eq!(cache.len(), HELD_CACHE_CAPACITY);
    // prevResult adds what the cache does not name; the cache's entry wins.
    let merged = merge_known(
        vec![k("10.0.0.1", "1")],
        ["10.0.0.1".parse().unwrap(), "10.0.0.9".parse().unwrap()],
    );
    assert_eq!(merged.len(), 2);
    assert_eq!(merged[0].resource_version.as_deref(), Some("1"));
    assert_eq!(merged[1].resource_version, None);
}
