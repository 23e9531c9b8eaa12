//! The store trait: Kubernetes API semantics (get, list, create, compare-and-swap update, delete, watch).

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::{ListOptions, Object, ResourceType, StoreError};

/// A change seen by a watch.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    /// The object was created (or existed when the watch started without a resourceVersion).
    Added(Object),
    /// The object was updated.
    Modified(Object),
    /// The object was deleted (last state).
    Deleted(Object),
}

impl WatchEvent {
    /// The object the event is about.
    pub fn object(&self) -> &Object {
        match self {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => o,
        }
    }
}

/// A stream of watch events; ends when the backend closes it (callers re-list and re-watch).
pub type WatchStream = BoxStream<'static, Result<WatchEvent, StoreError>>;

/// The result of a list: the objects and the store's resourceVersion at that moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObjectList {
    /// The objects, ordered by namespace then name.
    pub items: Vec<Object>,
    /// Resource version to start a watch from, so that no change is missed.
    pub resource_version: String,
}

/// Everything weft needs from "the cluster". Implemented by the in-memory store, the embedded
/// SQLite store and the Kubernetes API (kube-rs), with the same semantics:
///
/// * `create` fails with [`StoreError::AlreadyExists`]; it assigns uid, creationTimestamp and
///   resourceVersion.
/// * `update` is a compare-and-swap: when the object carries a resourceVersion that is not the
///   stored one it fails with [`StoreError::Conflict`]; without one it overwrites. It does not
///   change `status` (the status subresource); `update_status` changes only `status` and
///   metadata labels/annotations (as Kubernetes' pods/status does).
/// * `delete` with a precondition resourceVersion is a compare-and-swap too; deleting an absent
///   object returns `Ok(None)`. Objects with finalizers get a deletionTimestamp instead, and go
///   away when an update removes the last finalizer.
/// * `watch` from a resourceVersion delivers every change after it, in order.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// One object, or `None`.
    async fn get(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, StoreError>;

    /// Objects of a type, in one namespace or all (`None`).
    async fn list(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError>;

    /// As [`Store::list`], with every object passed through `each` as it arrives: the
    /// Kubernetes backend lists in pages ([`crate::KubeStore`]), so a cache that keeps a
    /// projection of each object never holds a whole large list at once (10,000 VMs). The
    /// default lists in one go.
    async fn list_projected(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
        each: &(dyn for<'o> Fn(&'o mut Object) + Sync),
    ) -> Result<ObjectList, StoreError> {
        let mut list = self.list(ty, namespace, opts).await?;
        list.items.iter_mut().for_each(each);
        Ok(list)
    }

    /// Create a new object.
    async fn create(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError>;

    /// Replace an object's metadata and body (not its status); compare-and-swap on resourceVersion.
    async fn update(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError>;

    /// Replace an object's status (and labels/annotations); compare-and-swap on resourceVersion.
    async fn update_status(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError>;

    /// Delete an object; `precondition` is a resourceVersion that must match.
    async fn delete(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        precondition: Option<&str>,
    ) -> Result<Option<Object>, StoreError>;

    /// Changes after `resource_version` (or, without one, the current objects as `Added` then changes).
    async fn watch(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
        resource_version: Option<&str>,
    ) -> Result<WatchStream, StoreError>;
}
