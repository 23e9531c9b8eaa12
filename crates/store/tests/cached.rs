//! Read-your-writes of the read cache for the finalizer path.

use std::sync::Arc;
use std::time::Duration;

use weft_store::conformance::{pod, pods};
use weft_store::{CachedStore, ListOptions, MemoryStore, Store};

#[tokio::test]
async fn removing_the_last_finalizer_through_the_cache_removes_the_object_at_once() {
    let backend = MemoryStore::shared();
    let cache = CachedStore::new(backend.clone(), vec![(pods(), ListOptions::default())]);
    cache.wait_synced(Duration::from_secs(5)).await.unwrap();
    let cache: Arc<dyn Store> = Arc::new(cache);
    let mut p = pod("ns", "a", "x", "n1");
    p.metadata.finalizers.push("weft.dev/hold".into());
    cache.create(&pods(), p).await.unwrap();
    let mut terminating = cache
        .delete(&pods(), Some("ns"), "a", None)
        .await
        .unwrap()
        .unwrap();
    assert!(cache.get(&pods(), Some("ns"), "a").await.unwrap().is_some());
    terminating.metadata.finalizers.clear();
    cache.update(&pods(), terminating).await.unwrap();
    assert!(backend.get(&pods(), Some("ns"), "a").await.unwrap().is_none());
    assert!(
        cache.get(&pods(), Some("ns"), "a").await.unwrap().is_none(),
        "the cache must not serve an object its own write removed"
    );
}
