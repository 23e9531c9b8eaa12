//! Typed access to the store for any [`Resource`].

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;

use crate::{ListOptions, Object, Resource, Store, StoreError, WatchEvent};

/// How many times [`Api::modify`] retries a lost compare-and-swap before giving up.
const MODIFY_ATTEMPTS: usize = 16;

/// Typed handle on one kind, in one namespace (or all namespaces / cluster scope).
pub struct Api<T> {
    store: Arc<dyn Store>,
    namespace: Option<String>,
    _kind: PhantomData<fn() -> T>,
}

impl<T> Clone for Api<T> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            namespace: self.namespace.clone(),
            _kind: PhantomData,
        }
    }
}

impl<T: Resource> Api<T> {
    /// Objects of `T` in `namespace`.
    pub fn namespaced(store: Arc<dyn Store>, namespace: &str) -> Self {
        Self {
            store,
            namespace: Some(namespace.into()),
            _kind: PhantomData,
        }
    }
    /// Objects of `T` in every namespace (lists and watches), or cluster-scoped objects.
    pub fn all(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            namespace: None,
            _kind: PhantomData,
        }
    }
    /// The store behind this handle.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn ns_for(&self, obj_ns: Option<&str>) -> Option<String> {
        obj_ns.map(Into::into).or_else(|| self.namespace.clone())
    }

    /// One object, or `None`.
    pub async fn get(&self, name: &str) -> Result<Option<T>, StoreError> {
        let ty = T::resource_type();
        match self.store.get(&ty, self.namespace.as_deref(), name).await? {
            Some(obj) => Ok(Some(obj.to_typed()?)),
            None => Ok(None),
        }
    }

    /// One object, or [`StoreError::NotFound`].
    pub async fn get_required(&self, name: &str) -> Result<T, StoreError> {
        self.get(name).await?.ok_or_else(|| StoreError::NotFound {
            kind: T::KIND.into(),
            key: T::resource_type().key(self.namespace.as_deref(), name),
        })
    }

    /// Every selected object.
    pub async fn list(&self, opts: &ListOptions) -> Result<Vec<T>, StoreError> {
        let ty = T::resource_type();
        let list = self.store.list(&ty, self.namespace.as_deref(), opts).await?;
        list.items
            .iter()
            .map(|o| o.to_typed().map_err(StoreError::from))
            .collect()
    }

    /// Create `value` (its namespace defaults to this handle's).
    pub async fn create(&self, value: &T) -> Result<T, StoreError> {
        let mut obj = Object::from_typed(value)?;
        obj.metadata.namespace = self
            .ns_for(obj.metadata.namespace.as_deref())
            .filter(|_| T::NAMESPACED);
        Ok(self.store.create(&T::resource_type(), obj).await?.to_typed()?)
    }

    /// Replace `value` (compare-and-swap when it carries a resourceVersion).
    pub async fn replace(&self, value: &T) -> Result<T, StoreError> {
        let obj = Object::from_typed(value)?;
        Ok(self.store.update(&T::resource_type(), obj).await?.to_typed()?)
    }

    /// Replace `value`'s status (compare-and-swap when it carries a resourceVersion).
    pub async fn replace_status(&self, value: &T) -> Result<T, StoreError> {
        let obj = Object::from_typed(value)?;
        Ok(self
            .store
            .update_status(&T::resource_type(), obj)
            .await?
            .to_typed()?)
    }

    /// Delete by name; `Ok(None)` when it did not exist.
    pub async fn delete(&self, name: &str) -> Result<Option<T>, StoreError> {
        let ty = T::resource_type();
        match self
            .store
            .delete(&ty, self.namespace.as_deref(), name, None)
            .await?
        {
            Some(obj) => Ok(Some(obj.to_typed()?)),
            None => Ok(None),
        }
    }

    /// Read-modify-write with compare-and-swap, retried on conflict. `change` returns `false`
    /// to leave the object as it is (no write). The object must exist.
    pub async fn modify(&self, name: &str, change: impl FnMut(&mut T) -> bool) -> Result<T, StoreError> {
        self.modify_inner(name, false, change).await
    }

    /// Like [`Api::modify`] but writes through the status subresource (status, labels, annotations).
    pub async fn modify_status(
        &self,
        name: &str,
        change: impl FnMut(&mut T) -> bool,
    ) -> Result<T, StoreError> {
        self.modify_inner(name, true, change).await
    }

    /// Like [`Api::modify_status`] for an object that may be gone (never created, or deleted
    /// before or during the write): `Ok(None)` then, instead of [`StoreError::NotFound`] — for
    /// status writers whose object's deletion makes the write moot.
    pub async fn modify_status_if_exists(
        &self,
        name: &str,
        change: impl FnMut(&mut T) -> bool,
    ) -> Result<Option<T>, StoreError> {
        match self.modify_status(name, change).await {
            Ok(object) => Ok(Some(object)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn modify_inner(
        &self,
        name: &str,
        status: bool,
        mut change: impl FnMut(&mut T) -> bool,
    ) -> Result<T, StoreError> {
        let mut attempt = 0;
        loop {
            let mut current = self.get_required(name).await?;
            if !change(&mut current) {
                return Ok(current);
            }
            let result = if status {
                self.replace_status(&current).await
            } else {
                self.replace(&current).await
            };
            match result {
                Err(e) if e.is_conflict() && attempt + 1 < MODIFY_ATTEMPTS => {
                    attempt += 1;
                    let jitter = rand::random::<u64>() % 5;
                    tokio::time::sleep(Duration::from_millis(2 * attempt as u64 + jitter)).await;
                }
                other => return other,
            }
        }
    }

    /// Typed watch of changes after `resource_version` (or from the current state).
    pub async fn watch(
        &self,
        opts: &ListOptions,
        resource_version: Option<&str>,
    ) -> Result<BoxStream<'static, Result<TypedEvent<T>, StoreError>>, StoreError> {
        let ty = T::resource_type();
        let stream = self
            .store
            .watch(&ty, self.namespace.as_deref(), opts, resource_version)
            .await?;
        Ok(stream
            .map(|event| {
                let event = event?;
                Ok(match event {
                    WatchEvent::Added(o) => TypedEvent::Added(o.to_typed()?),
                    WatchEvent::Modified(o) => TypedEvent::Modified(o.to_typed()?),
                    WatchEvent::Deleted(o) => TypedEvent::Deleted(o.to_typed()?),
                })
            })
            .boxed())
    }
}

/// A typed watch event.
#[derive(Clone, Debug, PartialEq)]
pub enum TypedEvent<T> {
    /// Created (or present at watch start).
    Added(T),
    /// Updated.
    Modified(T),
    /// Deleted (last state).
    Deleted(T),
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::{MemoryStore, ObjectMeta};

    /// A namespaced kind with a status.
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Lamp {
        metadata: ObjectMeta,
        #[serde(default)]
        status: LampStatus,
    }

    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    struct LampStatus {
        #[serde(default)]
        on: bool,
    }

    impl Resource for Lamp {
        const API_VERSION: &'static str = "test.weft.dev/v1";
        const KIND: &'static str = "Lamp";
        const PLURAL: &'static str = "lamps";
        fn metadata(&self) -> &ObjectMeta {
            &self.metadata
        }
        fn metadata_mut(&mut self) -> &mut ObjectMeta {
            &mut self.metadata
        }
    }

    fn switch_on(lamp: &mut Lamp) -> bool {
        !std::mem::replace(&mut lamp.status.on, true)
    }

    #[tokio::test]
    async fn modify_status_if_exists_writes_an_object_and_skips_a_missing_one() {
        let api = Api::<Lamp>::namespaced(Arc::new(MemoryStore::new()), "default");
        // Missing: no error, nothing created.
        assert_eq!(
            api.modify_status_if_exists("hall", switch_on).await.unwrap(),
            None
        );
        assert!(
            api.modify_status("hall", switch_on)
                .await
                .unwrap_err()
                .is_not_found()
        );
        assert_eq!(api.get("hall").await.unwrap(), None);
        // Present: written, as modify_status does.
        let lamp = Lamp {
            metadata: ObjectMeta::named(Some("default"), "hall"),
            ..Default::default()
        };
        api.create(&lamp).await.unwrap();
        let written = api
            .modify_status_if_exists("hall", switch_on)
            .await
            .unwrap()
            .unwrap();
        assert!(written.status.on);
        assert!(api.get_required("hall").await.unwrap().status.on);
        // Deleted again: skipped again.
        api.delete("hall").await.unwrap();
        assert_eq!(
            api.modify_status_if_exists("hall", switch_on).await.unwrap(),
            None
        );
    }
}
