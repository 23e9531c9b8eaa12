//! A store double for tests of code built on [`Store`]: an in-memory store that counts the
//! calls reaching it, and that can be unreachable (every call fails) or have watches that
//! never deliver (a cache that lags behind every change).

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use futures::StreamExt;

use crate::{ListOptions, MemoryStore, Object, ObjectList, ResourceType, Store, StoreError, WatchStream};

/// How the double behaves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Behaviour {
    /// Like the in-memory store.
    #[default]
    Normal,
    /// Every call fails with [`StoreError::Unavailable`].
    Down,
    /// Watches are accepted and never deliver anything.
    SilentWatches,
}

/// An in-memory store counting its calls by verb (`get`, `list`, `create`, `update`,
/// `update_status`, `delete`; watches are not counted).
#[derive(Default)]
pub struct StoreDouble {
    inner: MemoryStore,
    behaviour: Behaviour,
    calls: Mutex<HashMap<&'static str, usize>>,
}

impl StoreDouble {
    /// A double that behaves as `behaviour` says.
    pub fn new(behaviour: Behaviour) -> Self {
        Self {
            behaviour,
            ..Self::default()
        }
    }

    /// The calls counted since the last `take_calls`, by verb; resets the counts.
    pub fn take_calls(&self) -> HashMap<&'static str, usize> {
        std::mem::take(&mut *self.calls.lock().expect("calls lock"))
    }

    /// How many `verb` calls were counted since the last `take_calls`.
    pub fn calls(&self, verb: &str) -> usize {
        self.calls
            .lock()
            .expect("calls lock")
            .get(verb)
            .copied()
            .unwrap_or(0)
    }

    fn enter(&self, verb: &'static str) -> Result<(), StoreError> {
        *self.calls.lock().expect("calls lock").entry(verb).or_default() += 1;
        match self.behaviour {
            Behaviour::Down => Err(StoreError::Unavailable("the store double is down".into())),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Store for StoreDouble {
    async fn get(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, StoreError> {
        self.enter("get")?;
        self.inner.get(ty, ns, name).await
    }
    async fn list(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError> {
        self.enter("list")?;
        self.inner.list(ty, ns, opts).await
    }
    async fn create(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        self.enter("create")?;
        self.inner.create(ty, obj).await
    }
    async fn update(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        self.enter("update")?;
        self.inner.update(ty, obj).await
    }
    async fn update_status(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        self.enter("update_status")?;
        self.inner.update_status(ty, obj).await
    }
    async fn delete(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        name: &str,
        precondition: Option<&str>,
    ) -> Result<Option<Object>, StoreError> {
        self.enter("delete")?;
        self.inner.delete(ty, ns, name, precondition).await
    }
    async fn watch(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
        resource_version: Option<&str>,
    ) -> Result<WatchStream, StoreError> {
        match self.behaviour {
            Behaviour::Normal => self.inner.watch(ty, ns, opts, resource_version).await,
            Behaviour::SilentWatches => Ok(futures::stream::pending().boxed()),
            Behaviour::Down => Err(StoreError::Unavailable("the store double is down".into())),
        }
    }
}
