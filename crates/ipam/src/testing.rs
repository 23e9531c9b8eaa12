//! Test doubles shared by the unit tests.

use std::collections::HashMap;

use weft_store::{ListOptions, MemoryStore, Object, Store, StoreError};

/// A store that counts calls, to hold the allocator to its O(1) promise.
#[derive(Default)]
pub(crate) struct Counting {
    inner: MemoryStore,
    calls: std::sync::Mutex<HashMap<&'static str, usize>>,
}

impl Counting {
    fn bump(&self, what: &'static str) {
        *self.calls.lock().unwrap().entry(what).or_default() += 1;
    }
    pub(crate) fn take(&self) -> HashMap<&'static str, usize> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

#[async_trait::async_trait]
impl Store for Counting {
    async fn get(
        &self,
        ty: &weft_store::ResourceType,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Option<weft_store::Object>, StoreError> {
        self.bump("get");
        self.inner.get(ty, ns, name).await
    }
    async fn list(
        &self,
        ty: &weft_store::ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<weft_store::ObjectList, StoreError> {
        self.bump("list");
        self.inner.list(ty, ns, opts).await
    }
    async fn create(
        &self,
        ty: &weft_store::ResourceType,
        obj: weft_store::Object,
    ) -> Result<weft_store::Object, StoreError> {
        self.bump("create");
        self.inner.create(ty, obj).await
    }
    async fn update(
        &self,
        ty: &weft_store::ResourceType,
        obj: weft_store::Object,
    ) -> Result<weft_store::Object, StoreError> {
        self.bump("update");
        self.inner.update(ty, obj).await
    }
    async fn update_status(
        &self,
        ty: &weft_store::ResourceType,
        obj: weft_store::Object,
    ) -> Result<weft_store::Object, StoreError> {
        self.bump("update_status");
        self.inner.update_status(ty, obj).await
    }
    async fn delete(
        &self,
        ty: &weft_store::ResourceType,
        ns: Option<&str>,
        name: &str,
        pre: Option<&str>,
    ) -> Result<Option<weft_store::Object>, StoreError> {
        self.bump("delete");
        self.inner.delete(ty, ns, name, pre).await
    }
    async fn watch(
        &self,
        ty: &weft_store::ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
        rv: Option<&str>,
    ) -> Result<weft_store::WatchStream, StoreError> {
        self.inner.watch(ty, ns, opts, rv).await
    }
}

/// A store that is never reachable.
pub(crate) struct Down;
fn down<T>() -> Result<T, weft_store::StoreError> {
    Err(weft_store::StoreError::Unavailable("no such file".into()))
}
#[async_trait::async_trait]
impl Store for Down {
    async fn get(
        &self,
        _: &weft_store::ResourceType,
        _: Option<&str>,
        _: &str,
    ) -> Result<Option<Object>, weft_store::StoreError> {
        down()
    }
    async fn list(
        &self,
        _: &weft_store::ResourceType,
        _: Option<&str>,
        _: &weft_store::ListOptions,
    ) -> Result<weft_store::ObjectList, weft_store::StoreError> {
        down()
    }
    async fn create(
        &self,
        _: &weft_store::ResourceType,
        _: Object,
    ) -> Result<Object, weft_store::StoreError> {
        down()
    }
    async fn update(
        &self,
        _: &weft_store::ResourceType,
        _: Object,
    ) -> Result<Object, weft_store::StoreError> {
        down()
    }
    async fn update_status(
        &self,
        _: &weft_store::ResourceType,
        _: Object,
    ) -> Result<Object, weft_store::StoreError> {
        down()
    }
    async fn delete(
        &self,
        _: &weft_store::ResourceType,
        _: Option<&str>,
        _: &str,
        _: Option<&str>,
    ) -> Result<Option<Object>, weft_store::StoreError> {
        down()
    }
    async fn watch(
        &self,
        _: &weft_store::ResourceType,
        _: Option<&str>,
        _: &weft_store::ListOptions,
        _: Option<&str>,
    ) -> Result<weft_store::WatchStream, weft_store::StoreError> {
        down()
    }
}
