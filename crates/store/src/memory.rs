//! An in-process store with the full [`Store`] semantics, for tests and single-process tools.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::broadcast;

use crate::semantics::{self, DeleteOutcome, UpdateOutcome};
use crate::{ListOptions, Object, ObjectList, ResourceType, Store, StoreError, WatchEvent, WatchStream};

type Key = (String, String, String, String); // apiVersion, kind, namespace, name

#[derive(Default)]
struct State {
    revision: u64,
    objects: BTreeMap<Key, Object>,
    log: Vec<(u64, WatchEvent)>,
}

/// The in-memory store. Cloning shares the same data.
#[derive(Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<(u64, WatchEvent)>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        let (events, _) = broadcast::channel(4096);
        Self {
            state: Arc::new(Mutex::new(State::default())),
            events,
        }
    }

    /// Shared as a trait object.
    pub fn shared() -> Arc<dyn Store> {
        Arc::new(Self::new())
    }

    fn key(ty: &ResourceType, ns: Option<&str>, name: &str) -> Key {
        (
            ty.api_version.clone(),
            ty.kind.clone(),
            ns.unwrap_or("").into(),
            name.into(),
        )
    }

    fn record(&self, state: &mut State, event: WatchEvent) {
        state.log.push((state.revision, event.clone()));
        let _ = self.events.send((state.revision, event));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn selected(ty: &ResourceType, ns: Option<&str>, opts: &ListOptions, obj: &Object) -> bool {
    obj.api_version == ty.api_version
        && obj.kind == ty.kind
        && ns.is_none_or(|ns| obj.metadata.namespace.as_deref() == Some(ns))
        && opts.matches(obj)
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, StoreError> {
        Ok(self.lock().objects.get(&Self::key(ty, ns, name)).cloned())
    }

    async fn list(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError> {
        let state = self.lock();
        let items = state
            .objects
            .values()
            .filter(|o| selected(ty, ns, opts, o))
            .cloned()
            .collect();
        Ok(ObjectList {
            items,
            resource_version: state.revision.to_string(),
        })
    }

    async fn create(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        let mut state = self.lock();
        let key = Self::key(ty, obj.metadata.namespace.as_deref(), &obj.metadata.name);
        if state.objects.contains_key(&key) {
            return Err(StoreError::AlreadyExists {
                kind: ty.kind.clone(),
                key: obj.key(),
            });
        }
        let stored = semantics::created(ty, obj, state.revision + 1)?;
        state.revision += 1;
        state.objects.insert(key, stored.clone());
        self.record(&mut state, WatchEvent::Added(stored.clone()));
        Ok(stored)
    }

    async fn update(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        self.write(ty, obj, false)
    }

    async fn update_status(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        self.write(ty, obj, true)
    }

    async fn delete(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        name: &str,
        precondition: Option<&str>,
    ) -> Result<Option<Object>, StoreError> {
        let mut state = self.lock();
        let key = Self::key(ty, ns, name);
        let Some(stored) = state.objects.get(&key).cloned() else {
            return Ok(None);
        };
        let outcome = semantics::deleted(ty, &stored, precondition, state.revision + 1)?;
        state.revision += 1;
        Ok(Some(match outcome {
            DeleteOutcome::Removed(last) => {
                state.objects.remove(&key);
                self.record(&mut state, WatchEvent::Deleted(last.clone()));
                last
            }
            DeleteOutcome::Terminating(next) => {
                state.objects.insert(key, next.clone());
                self.record(&mut state, WatchEvent::Modified(next.clone()));
                next
            }
        }))
    }

    async fn watch(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
        resource_version: Option<&str>,
    ) -> Result<WatchStream, StoreError> {
        let state = self.lock();
        let receiver = self.events.subscribe();
        let (ty, ns, opts) = (ty.clone(), ns.map(String::from), opts.clone());
        let (backlog, from): (Vec<WatchEvent>, u64) = match resource_version {
            Some(rv) => {
                let rv: u64 = rv
                    .parse()
                    .map_err(|_| StoreError::Invalid(format!("bad resourceVersion {rv}")))?;
                let events = state.log.iter().filter(|(r, _)| *r > rv).map(|(_, e)| e.clone());
                (
                    events
                        .filter(|e| selected(&ty, ns.as_deref(), &opts, e.object()))
                        .collect(),
                    state.revision,
                )
            }
            None => {
                let items = state
                    .objects
                    .values()
                    .filter(|o| selected(&ty, ns.as_deref(), &opts, o));
                (items.cloned().map(WatchEvent::Added).collect(), state.revision)
            }
        };
        drop(state);
        let live = tokio_stream_from(receiver).filter_map(move |item| {
            let item = match item {
                Ok((rv, event)) => {
                    (rv > from && selected(&ty, ns.as_deref(), &opts, event.object())).then_some(Ok(event))
                }
                Err(e) => Some(Err(e)),
            };
            async move { item }
        });
        Ok(futures::stream::iter(backlog.into_iter().map(Ok))
            .chain(live)
            .boxed())
    }
}

impl MemoryStore {
    fn write(&self, ty: &ResourceType, obj: Object, status_only: bool) -> Result<Object, StoreError> {
        let mut state = self.lock();
        let key = Self::key(ty, obj.metadata.namespace.as_deref(), &obj.metadata.name);
        let stored = state
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| StoreError::NotFound {
                kind: ty.kind.clone(),
                key: obj.key(),
            })?;
        let outcome = semantics::updated(ty, &stored, obj, status_only, state.revision + 1)?;
        state.revision += 1;
        Ok(match outcome {
            UpdateOutcome::Stored(next) => {
                state.objects.insert(key, next.clone());
                self.record(&mut state, WatchEvent::Modified(next.clone()));
                next
            }
            UpdateOutcome::Removed(last) => {
                state.objects.remove(&key);
                self.record(&mut state, WatchEvent::Deleted(last.clone()));
                last
            }
        })
    }
}

/// A broadcast receiver as a stream. A receiver that fell too far behind gets
/// [`StoreError::Expired`] and the stream ends (callers re-list).
fn tokio_stream_from<T: Clone + Send + 'static>(
    receiver: broadcast::Receiver<T>,
) -> impl futures::Stream<Item = Result<T, StoreError>> + Send + 'static {
    futures::stream::unfold(Some(receiver), |rx| async move {
        let mut rx = rx?;
        match rx.recv().await {
            Ok(item) => Some((Ok(item), Some(rx))),
            Err(broadcast::error::RecvError::Lagged(missed)) => Some((
                Err(StoreError::Expired(format!(
                    "the watch fell {missed} changes behind; re-list and watch again"
                ))),
                None,
            )),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> ResourceType {
        ResourceType::new("v1", "Pod", "pods", true)
    }

    fn pod(name: &str) -> Object {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "x"}},
            "spec": {"nodeName": "node1"}}))
        .unwrap()
    }

    #[tokio::test]
    async fn create_update_conflict_delete() {
        let store = MemoryStore::new();
        let created = store.create(&pods(), pod("a")).await.unwrap();
        assert_eq!(created.metadata.resource_version.as_deref(), Some("1"));
        assert!(
            store
                .create(&pods(), pod("a"))
                .await
                .unwrap_err()
                .is_already_exists()
        );

        let mut stale = created.clone();
        let mut fresh = created.clone();
        fresh.data.insert("spec".into(), json!({"nodeName": "node2"}));
        store.update(&pods(), fresh).await.unwrap();
        stale.data.insert("spec".into(), json!({"nodeName": "node3"}));
        assert!(store.update(&pods(), stale).await.unwrap_err().is_conflict());

        let list = store
            .list(
                &pods(),
                Some("default"),
                &ListOptions::default().field("spec.nodeName", "node2"),
            )
            .await
            .unwrap();
        assert_eq!(list.items.len(), 1);
        assert!(
            store
                .delete(&pods(), Some("default"), "a", None)
                .await
                .unwrap()
                .is_some()
        );
        assert!(
            store
                .delete(&pods(), Some("default"), "a", None)
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn status_update_keeps_spec_and_update_keeps_status() {
        let store = MemoryStore::new();
        let created = store.create(&pods(), pod("a")).await.unwrap();
        let mut with_status = created.clone();
        with_status
            .data
            .insert("status".into(), json!({"phase": "Running"}));
        with_status
            .data
            .insert("spec".into(), json!({"nodeName": "ignored"}));
        with_status.metadata.annotations.insert("k".into(), "v".into());
        let after = store.update_status(&pods(), with_status).await.unwrap();
        assert_eq!(after.data["spec"]["nodeName"], "node1");
        assert_eq!(after.data["status"]["phase"], "Running");
        assert_eq!(after.metadata.annotation("k"), Some("v"));
        let mut spec_change = after.clone();
        spec_change.data.remove("status");
        let after2 = store.update(&pods(), spec_change).await.unwrap();
        assert_eq!(after2.data["status"]["phase"], "Running");
    }

    #[tokio::test]
    async fn finalizers_hold_deletion() {
        let store = MemoryStore::new();
        let mut p = pod("a");
        p.metadata.finalizers.push("weft.dev/test".into());
        store.create(&pods(), p).await.unwrap();
        let terminating = store
            .delete(&pods(), Some("default"), "a", None)
            .await
            .unwrap()
            .unwrap();
        assert!(terminating.metadata.deletion_timestamp.is_some());
        let mut release = terminating.clone();
        release.metadata.finalizers.clear();
        store.update(&pods(), release).await.unwrap();
        assert!(store.get(&pods(), Some("default"), "a").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn watch_from_version_sees_every_change_in_order() {
        let store = MemoryStore::new();
        let list = store.list(&pods(), None, &ListOptions::default()).await.unwrap();
        let mut stream = store
            .watch(
                &pods(),
                None,
                &ListOptions::default(),
                Some(&list.resource_version),
            )
            .await
            .unwrap();
        store.create(&pods(), pod("a")).await.unwrap();
        store.create(&pods(), pod("b")).await.unwrap();
        store.delete(&pods(), Some("default"), "a", None).await.unwrap();
        let mut seen = vec![];
        for _ in 0..3 {
            let ev = stream.next().await.unwrap().unwrap();
            seen.push(match ev {
                WatchEvent::Added(o) => format!("+{}", o.metadata.name),
                WatchEvent::Modified(o) => format!("~{}", o.metadata.name),
                WatchEvent::Deleted(o) => format!("-{}", o.metadata.name),
            });
        }
        assert_eq!(seen, ["+a", "+b", "-a"]);
    }

    #[tokio::test]
    async fn a_watch_that_falls_behind_ends_with_expired() {
        let store = MemoryStore::new();
        let mut stream = store
            .watch(&pods(), None, &ListOptions::default(), Some("0"))
            .await
            .unwrap();
        for i in 0..5000 {
            store.create(&pods(), pod(&format!("p{i}"))).await.unwrap();
        }
        let mut delivered = 0;
        let err = loop {
            match stream.next().await.expect("an error before the end") {
                Ok(_) => delivered += 1,
                Err(e) => break e,
            }
        };
        assert!(err.is_expired(), "{err}");
        assert!(delivered < 5000);
        assert!(stream.next().await.is_none());
    }
}
