//! A read-through cache in front of any store (the reflector / informer pattern): selected
//! kinds are listed once and kept current by a watch, so the hot path (the agent's CNI
//! requests reading pods and NADs) never makes an API round trip for a read. Writes go to the
//! backend and are reflected into the cache when the store confirms them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::watch;

use crate::cache_entry::CacheEntry;
use crate::throttle::{Decision, LogThrottle};
use crate::{ListOptions, Object, ObjectList, ResourceType, Store, StoreError, WatchEvent, WatchStream};

type Key = (String, String); // namespace, name

/// Pause between a failed list or watch and the next attempt: short, so the cache watches
/// again within a second of the API server's return (the log is throttled, not the retries).
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Re-checks of a kind the API does not serve (its CRD is not installed): from this, doubled
/// per check, up to [`MISSING_MAX`].
const MISSING_FIRST: Duration = Duration::from_secs(1);
/// Longest pause between re-checks of a kind the API does not serve.
const MISSING_MAX: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Shelf {
    objects: BTreeMap<Key, CacheEntry>,
    /// Objects cached from this store's own writes that no watch event or list has shown the
    /// reflector yet. A relist reports them changed even when it finds the version written:
    /// a write based on a fresh read (after a conflict) can carry other writers' changes, and
    /// while the watch is down (an outage) no event would ever report those.
    unconfirmed: std::collections::BTreeSet<Key>,
    resource_version: String,
    /// The API does not serve the kind (list answered 404): reads answer NotFound from here.
    missing: bool,
}

/// Where a reflector reports the changes it sees (for [`crate::reconcile`]).
type Changes = Option<tokio::sync::mpsc::UnboundedSender<crate::reconcile::Change>>;

/// What a cache keeps of each object of a kind (kube-runtime's reflector `modify`): applied to
/// every object listed, watched or written before it is cached and reported, so a controller
/// that reads a few fields of 10,000 objects does not hold all of them.
#[derive(Clone, Copy, Debug)]
pub struct Projection {
    /// Reduce the object in place.
    pub project: fn(&mut Object),
    /// Whether the projected object is still a faithful base for a write (`true` when only
    /// server-kept fields go, e.g. managedFields). When `false`, updates of the kind through
    /// the cache are refused: a read-modify-write of a projected copy would erase the rest.
    pub writable: bool,
    /// Hold the objects as their compact JSON text (parsed on each read): for kinds cached by
    /// the ten thousand and read a few at a time (see `cache_entry`).
    pub packed: bool,
}

impl Projection {
    /// Drop `metadata.managedFields` (the server keeps them when an update omits them).
    pub const WITHOUT_MANAGED_FIELDS: Projection = Projection {
        project: strip_managed_fields,
        writable: true,
        packed: false,
    };
}

/// Remove `metadata.managedFields`: the API server's bookkeeping, often the larger part of an
/// object, read by no one in weft; an update that omits it leaves the server's copy alone.
pub fn strip_managed_fields(object: &mut Object) {
    object.metadata.extra.remove("managedFields");
}

/// A store that serves reads of the cached kinds from memory.
pub struct CachedStore {
    inner: Arc<dyn Store>,
    shelves: HashMap<ResourceType, Arc<RwLock<Shelf>>>,
    projections: HashMap<ResourceType, Projection>,
    synced: HashMap<ResourceType, watch::Receiver<bool>>,
}

fn key_of(obj: &Object) -> Key {
    (
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone(),
    )
}

impl CachedStore {
    /// Cache `kinds` (each optionally narrowed by a selector, e.g. pods of this node) in front
    /// of `inner`. Starts one list+watch task per kind on the current tokio runtime.
    pub fn new(inner: Arc<dyn Store>, kinds: Vec<(ResourceType, ListOptions)>) -> Self {
        Self::start(inner, kinds, None, HashMap::new())
    }

    /// As [`CachedStore::new`], and every change the watches see (the first list's objects as
    /// `Added`; after a relist, what changed meanwhile) is also sent on the returned channel,
    /// for a [`crate::reconcile::run`] loop. A kind the API does not serve (404: its CRD is not
    /// installed) is logged once, re-checked with backoff (up to a minute) and served from the
    /// moment it appears; meanwhile reads of it answer NotFound without a request.
    pub fn with_changes(
        inner: Arc<dyn Store>,
        kinds: Vec<(ResourceType, ListOptions)>,
    ) -> (
        Self,
        tokio::sync::mpsc::UnboundedReceiver<crate::reconcile::Change>,
    ) {
        Self::with_changes_projected(inner, kinds, HashMap::new())
    }

    /// As [`CachedStore::with_changes`], keeping of the kinds in `projections` only what their
    /// [`Projection`] leaves (reads of those kinds answer the projected objects).
    pub fn with_changes_projected(
        inner: Arc<dyn Store>,
        kinds: Vec<(ResourceType, ListOptions)>,
        projections: HashMap<ResourceType, Projection>,
    ) -> (
        Self,
        tokio::sync::mpsc::UnboundedReceiver<crate::reconcile::Change>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Self::start(inner, kinds, Some(tx), projections), rx)
    }

    fn start(
        inner: Arc<dyn Store>,
        kinds: Vec<(ResourceType, ListOptions)>,
        changes: Changes,
        projections: HashMap<ResourceType, Projection>,
    ) -> Self {
        let mut shelves = HashMap::new();
        let mut synced = HashMap::new();
        for (ty, opts) in kinds {
            let shelf = Arc::new(RwLock::new(Shelf::default()));
            let (tx, rx) = watch::channel(false);
            tokio::spawn(reflect(
                inner.clone(),
                ty.clone(),
                opts,
                shelf.clone(),
                tx,
                changes.clone(),
                projections.get(&ty).copied(),
            ));
            shelves.insert(ty.clone(), shelf);
            synced.insert(ty, rx);
        }
        Self {
            inner,
            shelves,
            projections,
            synced,
        }
    }

    /// Wait until every cached kind has been listed once (or `timeout` passes).
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), StoreError> {
        let wait = async {
            for rx in self.synced.values() {
                let mut rx = rx.clone();
                while !*rx.borrow() {
                    if rx.changed().await.is_err() {
                        break;
                    }
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| StoreError::Unavailable(format!("cache not synced within {timeout:?}")))
    }

    /// The cached objects of `ty` (in `namespace`, or all), read without an await: for mapping
    /// changes to keys. Empty when `ty` is not cached, not synced yet or not served.
    pub fn snapshot(&self, ty: &ResourceType, namespace: Option<&str>) -> Vec<Object> {
        let Some(shelf) = self.shelf(ty) else {
            return Vec::new();
        };
        let shelf = shelf.read().unwrap_or_else(|e| e.into_inner());
        shelf
            .objects
            .iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|want| ns == want))
            .filter_map(|(_, entry)| entry.object().ok())
            .collect()
    }

    /// The (namespace, name) of the cached objects of `ty` that `filter` accepts, without
    /// copying them (a resync's keys at 10,000 VMs). Empty when `ty` is not cached or synced.
    pub fn keys_where(&self, ty: &ResourceType, filter: &dyn Fn(&Object) -> bool) -> Vec<(String, String)> {
        let Some(shelf) = self.shelf(ty) else {
            return Vec::new();
        };
        let shelf = shelf.read().unwrap_or_else(|e| e.into_inner());
        shelf
            .objects
            .iter()
            .filter(|(_, entry)| entry.object().is_ok_and(|o| filter(&o)))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Whether the API does not serve `ty` (its CRD is not installed), as last checked.
    pub fn is_missing(&self, ty: &ResourceType) -> bool {
        self.shelves
            .get(ty)
            .is_some_and(|s| s.read().unwrap_or_else(|e| e.into_inner()).missing)
    }

    fn shelf(&self, ty: &ResourceType) -> Option<&Arc<RwLock<Shelf>>> {
        let synced = self.synced.get(ty).is_some_and(|rx| *rx.borrow());
        self.shelves.get(ty).filter(|_| synced)
    }

    fn remember(&self, ty: &ResourceType, obj: &Object) {
        if let Some(shelf) = self.shelves.get(ty) {
            let mut shelf = shelf.write().unwrap_or_else(|e| e.into_inner());
            let key = key_of(obj);
            if shelf
                .objects
                .get(&key)
                .is_none_or(|old| old.is_not_newer_than(obj))
            {
                // A version the reflector has shown already (its watch event came first)
                // needs no report.
                let seen = shelf
                    .objects
                    .get(&key)
                    .is_some_and(|old| old.same_version_as(obj));
                if !seen {
                    shelf.unconfirmed.insert(key.clone());
                }
                let mut obj = obj.clone();
                let projection = self.projections.get(ty);
                if let Some(p) = projection {
                    (p.project)(&mut obj);
                }
                shelf
                    .objects
                    .insert(key, CacheEntry::new(obj, projection.is_some_and(|p| p.packed)));
            }
        }
    }

    /// Refuse an update of a kind cached with a projection that is no base for writes.
    fn check_writable(&self, ty: &ResourceType) -> Result<(), StoreError> {
        match self.projections.get(ty) {
            Some(p) if !p.writable => Err(StoreError::Invalid(format!(
                "{} is cached projected (a partial copy): it is not updated through this cache",
                ty.kind
            ))),
            _ => Ok(()),
        }
    }

    /// An update that removed the last finalizer of an object being deleted removed the object.
    fn reflect_update(&self, ty: &ResourceType, obj: &Object) {
        if obj.metadata.deletion_timestamp.is_some() && obj.metadata.finalizers.is_empty() {
            self.forget(ty, obj);
        } else {
            self.remember(ty, obj);
        }
    }

    /// Reflect a confirmed update of `key`; after a lost compare-and-swap, refresh it instead.
    async fn after_update(
        &self,
        ty: &ResourceType,
        key: &Key,
        outcome: Result<Object, StoreError>,
    ) -> Result<Object, StoreError> {
        match outcome {
            Ok(updated) => {
                self.reflect_update(ty, &updated);
                Ok(updated)
            }
            Err(e) => Err(self.refresh_after_conflict(ty, key, e).await),
        }
    }

    /// A write that lost its compare-and-swap (`error` is a conflict) was based on a cached
    /// copy older than the store's: read the winner's version from the backend into the cache,
    /// so the caller's retry (read, change, write again) starts from it instead of waiting for
    /// the watch, which may lag. Returns `error` unchanged.
    async fn refresh_after_conflict(&self, ty: &ResourceType, key: &Key, error: StoreError) -> StoreError {
        if error.is_conflict() && self.shelves.contains_key(ty) {
            let ns = Some(key.0.as_str()).filter(|ns| !ns.is_empty());
            if let Ok(Some(fresh)) = self.inner.get(ty, ns, &key.1).await {
                self.remember(ty, &fresh);
            }
        }
        error
    }

    fn forget(&self, ty: &ResourceType, obj: &Object) {
        if let Some(shelf) = self.shelves.get(ty) {
            let mut shelf = shelf.write().unwrap_or_else(|e| e.into_inner());
            shelf.objects.remove(&key_of(obj));
            shelf.unconfirmed.remove(&key_of(obj));
        }
    }
}

/// Report `event` on `changes` (if any).
fn report(changes: &Changes, ty: &ResourceType, event: WatchEvent) {
    if let Some(tx) = changes {
        let _ = tx.send(crate::reconcile::Change {
            ty: ty.clone(),
            event,
        });
    }
}

/// Replace the shelf's objects with a fresh list (taken, not copied), reporting what changed
/// since the last one.
fn restock(shelf: &RwLock<Shelf>, ty: &ResourceType, list: ObjectList, changes: &Changes, packed: bool) {
    let mut shelf = shelf.write().unwrap_or_else(|e| e.into_inner());
    // Each listed object is cached, then moved (not copied) into its change: at 10,000 objects
    // a copy per object for the changes doubled the peak of the first list.
    let mut fresh: BTreeMap<Key, Object> = list.items.into_iter().map(|o| (key_of(&o), o)).collect();
    if changes.is_some() {
        for (key, old) in &shelf.objects {
            if !fresh.contains_key(key)
                && let Ok(old) = old.object()
            {
                report(changes, ty, WatchEvent::Deleted(old));
            }
        }
    }
    let mut objects = BTreeMap::new();
    let unconfirmed = std::mem::take(&mut shelf.unconfirmed);
    while let Some((key, new)) = fresh.pop_first() {
        let event = match shelf.objects.get(&key) {
            _ if changes.is_none() => None,
            None => Some(WatchEvent::Added as fn(Object) -> WatchEvent),
            Some(old) if !old.same_version_as(&new) || unconfirmed.contains(&key) => {
                Some(WatchEvent::Modified as fn(Object) -> WatchEvent)
            }
            Some(_) => None,
        };
        match event {
            // Packed, the text is made first and the object itself goes to the change.
            Some(event) if packed => {
                objects.insert(key, CacheEntry::packed(&new));
                report(changes, ty, event(new));
            }
            Some(event) => {
                report(changes, ty, event(new.clone()));
                objects.insert(key, CacheEntry::new(new, false));
            }
            None => {
                objects.insert(key, CacheEntry::new(new, packed));
            }
        }
    }
    shelf.objects = objects;
    shelf.resource_version = list.resource_version;
    shelf.missing = false;
}

async fn reflect(
    inner: Arc<dyn Store>,
    ty: ResourceType,
    opts: ListOptions,
    shelf: Arc<RwLock<Shelf>>,
    synced: watch::Sender<bool>,
    changes: Changes,
    projection: Option<Projection>,
) {
    let project = projection.map(|p| p.project);
    let packed = projection.is_some_and(|p| p.packed);
    // One throttle for the list and watch failures of this kind: an outage fails both.
    let mut failures = LogThrottle::default();
    let mut missing_pause: Option<Duration> = None;
    loop {
        let keep = |o: &mut Object| {
            if let Some(project) = project {
                project(o)
            }
        };
        let list = match inner.list_projected(&ty, None, &opts, &keep).await {
            Ok(list) => list,
            // The API does not serve the kind (a CRD not installed): said once, re-checked with
            // backoff, and reads answer NotFound meanwhile (the kind is "synced", empty).
            Err(e) if e.is_not_served() => {
                let pause = match missing_pause {
                    None => {
                        tracing::warn!(
                            kind = %ty.kind,
                            "CRD {}.{} not installed; waiting (re-checked with backoff up to {:?})",
                            ty.plural,
                            ty.group(),
                            MISSING_MAX
                        );
                        MISSING_FIRST
                    }
                    Some(pause) => (pause * 2).min(MISSING_MAX),
                };
                missing_pause = Some(pause);
                {
                    let mut shelf = shelf.write().unwrap_or_else(|e| e.into_inner());
                    for old in std::mem::take(&mut shelf.objects).into_values() {
                        if let Ok(old) = old.object() {
                            report(&changes, &ty, WatchEvent::Deleted(old));
                        }
                    }
                    shelf.unconfirmed.clear();
                    shelf.missing = true;
                }
                let _ = synced.send(true);
                if synced.is_closed() {
                    return;
                }
                tokio::time::sleep(pause).await;
                continue;
            }
            Err(e) => {
                if let Decision::Log { suppressed } = failures.decide(Instant::now()) {
                    tracing::warn!(kind = %ty.kind, suppressed, "cache list failed: {e}");
                }
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        if missing_pause.take().is_some() {
            tracing::info!(kind = %ty.kind, "{}.{} is served now", ty.plural, ty.group());
        }
        let resource_version = list.resource_version.clone();
        restock(&shelf, &ty, list, &changes, packed);
        let _ = synced.send(true);
        let mut stream = match inner.watch(&ty, None, &opts, Some(&resource_version)).await {
            Ok(stream) => stream,
            Err(e) => {
                if let Decision::Log { suppressed } = failures.decide(Instant::now()) {
                    tracing::warn!(kind = %ty.kind, suppressed, "cache watch failed: {e}");
                }
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        if let Some(suppressed) = failures.recover() {
            tracing::info!(kind = %ty.kind, suppressed, "cache watching again");
        }
        while let Some(event) = stream.next().await {
            let Ok(mut event) = event else { break };
            if let Some(project) = project {
                match &mut event {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => project(o),
                }
            }
            let mut shelf = shelf.write().unwrap_or_else(|e| e.into_inner());
            match &event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    shelf.resource_version = o.metadata.resource_version.clone().unwrap_or_default();
                    // A fresher copy (our own write, a read after a conflict) may be cached.
                    let key = key_of(o);
                    if shelf
                        .objects
                        .get(&key)
                        .is_none_or(|cached| cached.is_not_newer_than(o))
                    {
                        // The watch has caught up with our own write: reported below.
                        shelf.unconfirmed.remove(&key);
                    }
                    if shelf
                        .objects
                        .get(&key)
                        .is_none_or(|cached| cached.is_not_newer_than(o))
                    {
                        shelf.objects.insert(key, CacheEntry::of(o, packed));
                    }
                }
                WatchEvent::Deleted(o) => {
                    shelf.objects.remove(&key_of(o));
                    shelf.unconfirmed.remove(&key_of(o));
                }
            }
            drop(shelf);
            report(&changes, &ty, event);
        }
        if synced.is_closed() {
            return;
        }
    }
}

/// The error for a read of a kind the API does not serve (as the API server's 404).
fn not_served(ty: &ResourceType) -> StoreError {
    StoreError::NotFound {
        kind: "resource".into(),
        key: format!("{}/{}", ty.api_version, ty.plural),
    }
}

#[async_trait]
impl Store for CachedStore {
    async fn get(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, StoreError> {
        match self.shelf(ty) {
            Some(shelf) => {
                let key = (ns.unwrap_or("").to_string(), name.to_string());
                let shelf = shelf.read().unwrap_or_else(|e| e.into_inner());
                if shelf.missing {
                    return Err(not_served(ty));
                }
                shelf.objects.get(&key).map(CacheEntry::object).transpose()
            }
            None => self.inner.get(ty, ns, name).await,
        }
    }

    async fn list(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError> {
        match self.shelf(ty) {
            Some(shelf) => {
                let shelf = shelf.read().unwrap_or_else(|e| e.into_inner());
                if shelf.missing {
                    return Err(not_served(ty));
                }
                let mut items = Vec::new();
                for ((namespace, _), entry) in &shelf.objects {
                    if ns.is_none_or(|ns| namespace == ns) {
                        let object = entry.object()?;
                        if opts.matches(&object) {
                            items.push(object);
                        }
                    }
                }
                Ok(ObjectList {
                    items,
                    resource_version: shelf.resource_version.clone(),
                })
            }
            None => self.inner.list(ty, ns, opts).await,
        }
    }

    async fn create(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        let created = self.inner.create(ty, obj).await?;
        self.remember(ty, &created);
        Ok(created)
    }

    async fn update(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        self.check_writable(ty)?;
        let key = key_of(&obj);
        let outcome = self.inner.update(ty, obj).await;
        self.after_update(ty, &key, outcome).await
    }

    async fn update_status(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        self.check_writable(ty)?;
        let key = key_of(&obj);
        let outcome = self.inner.update_status(ty, obj).await;
        self.after_update(ty, &key, outcome).await
    }

    async fn delete(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        name: &str,
        precondition: Option<&str>,
    ) -> Result<Option<Object>, StoreError> {
        let deleted = self.inner.delete(ty, ns, name, precondition).await?;
        if let Some(obj) = &deleted {
            if obj.metadata.deletion_timestamp.is_some() && !obj.metadata.finalizers.is_empty() {
                self.remember(ty, obj);
            } else {
                self.forget(ty, obj);
            }
        }
        Ok(deleted)
    }

    async fn watch(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
        resource_version: Option<&str>,
    ) -> Result<WatchStream, StoreError> {
        self.inner.watch(ty, ns, opts, resource_version).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::double::{Behaviour, StoreDouble};
    use serde_json::json;

    fn pods() -> ResourceType {
        ResourceType::new("v1", "Pod", "pods", true)
    }

    fn pod(name: &str, node: &str) -> Object {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"nodeName": node}}))
        .unwrap()
    }

    /// A relist reports an object this store wrote while its watch was down, even at the
    /// version it wrote (the write may carry others' changes no event showed); a version the
    /// watch has shown, or a relist that reported it once, is not reported again.
    #[test]
    fn a_relist_reports_our_own_unseen_write_once() {
        let ty = pods();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let changes: Changes = Some(tx);
        let shelf = RwLock::new(Shelf::default());
        let at = |rv: &str| {
            let mut p = pod("a", "node1");
            p.metadata.resource_version = Some(rv.into());
            p
        };
        let list = |rv: &str| ObjectList {
            items: vec![at(rv)],
            resource_version: rv.into(),
        };
        restock(&shelf, &ty, list("5"), &changes, false);
        assert!(rx.try_recv().is_ok(), "first list: Added");
        // Our write at 7 (it carries changes made at 6 that no event showed: the watch is down).
        {
            let mut s = shelf.write().unwrap();
            let key = key_of(&at("7"));
            s.objects.insert(key.clone(), CacheEntry::new(at("7"), false));
            s.unconfirmed.insert(key);
        }
        restock(&shelf, &ty, list("7"), &changes, false);
        match rx.try_recv() {
            Ok(change) => assert!(matches!(change.event, WatchEvent::Modified(_))),
            Err(e) => panic!("our own unseen write was not reported: {e}"),
        }
        restock(&shelf, &ty, list("7"), &changes, false);
        assert!(rx.try_recv().is_err(), "reported once");
    }

    #[tokio::test]
    async fn reads_are_served_from_the_cache_and_follow_changes() {
        let backend = Arc::new(StoreDouble::default());
        backend.create(&pods(), pod("a", "node1")).await.unwrap();
        backend.create(&pods(), pod("other", "node2")).await.unwrap();
        let cached = CachedStore::new(
            backend.clone(),
            vec![(pods(), ListOptions::default().field("spec.nodeName", "node1"))],
        );
        cached.wait_synced(Duration::from_secs(5)).await.unwrap();
        assert!(cached.get(&pods(), Some("default"), "a").await.unwrap().is_some());
        assert!(
            cached
                .get(&pods(), Some("default"), "other")
                .await
                .unwrap()
                .is_none(),
            "outside the selector"
        );
        assert_eq!(backend.calls("get"), 0, "no backend GET on the hot path");

        // A change made by someone else arrives through the watch.
        backend.create(&pods(), pod("b", "node1")).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while cached.get(&pods(), Some("default"), "b").await.unwrap().is_none() {
            assert!(tokio::time::Instant::now() < deadline, "watch did not deliver");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Our own writes are visible at once.
        let mut a = cached.get(&pods(), Some("default"), "a").await.unwrap().unwrap();
        a.metadata.annotations.insert("k".into(), "v".into());
        cached.update_status(&pods(), a).await.unwrap();
        let a = cached.get(&pods(), Some("default"), "a").await.unwrap().unwrap();
        assert_eq!(a.metadata.annotation("k"), Some("v"));
        cached.delete(&pods(), Some("default"), "a", None).await.unwrap();
        assert!(cached.get(&pods(), Some("default"), "a").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_lost_write_refreshes_the_cached_object_so_the_retry_does_not_wait_for_the_watch() {
        // Watches that never deliver: the cache lags behind every change.
        let backend = Arc::new(StoreDouble::new(Behaviour::SilentWatches));
        backend.create(&pods(), pod("a", "node1")).await.unwrap();
        let cached = CachedStore::new(backend.clone(), vec![(pods(), ListOptions::default())]);
        cached.wait_synced(Duration::from_secs(5)).await.unwrap();
        let stale = cached.get(&pods(), Some("default"), "a").await.unwrap().unwrap();

        // Someone else writes; the watch does not tell the cache.
        let mut theirs = stale.clone();
        theirs.metadata.annotations.insert("theirs".into(), "1".into());
        let theirs = backend.update(&pods(), theirs).await.unwrap();

        let mut mine = stale.clone();
        mine.metadata.annotations.insert("mine".into(), "1".into());
        let lost = cached.update_status(&pods(), mine).await.unwrap_err();
        assert!(lost.is_conflict(), "{lost}");
        let fresh = cached.get(&pods(), Some("default"), "a").await.unwrap().unwrap();
        assert_eq!(fresh.metadata.resource_version, theirs.metadata.resource_version);

        // The retry on the refreshed copy wins and keeps their change (same for `update`).
        let mut mine = fresh;
        mine.metadata.annotations.insert("mine".into(), "1".into());
        let won = cached.update_status(&pods(), mine).await.unwrap();
        assert_eq!(won.metadata.annotation("theirs"), Some("1"));
        let mut stale_again = stale;
        stale_again.metadata.labels.insert("l".into(), "v".into());
        assert!(
            cached
                .update(&pods(), stale_again)
                .await
                .unwrap_err()
                .is_conflict()
        );
        let fresh = cached.get(&pods(), Some("default"), "a").await.unwrap().unwrap();
        assert_eq!(fresh.metadata.resource_version, won.metadata.resource_version);
    }
}
