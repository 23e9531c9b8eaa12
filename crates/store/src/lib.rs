//! The cluster store: every weft component talks to "the cluster" only through [`Store`].
//!
//! Objects are Kubernetes-shaped ([`Object`]: apiVersion, kind, metadata with a resourceVersion,
//! and the rest of the JSON document), so the same callers run against the embedded store
//! (SQLite), the in-memory store used by tests, and a real Kubernetes API server (kube-rs).
//! Typed access goes through [`Api`] for any type implementing [`Resource`].
//!
//! Backends, all with the semantics documented on [`Store`]:
//! * [`MemoryStore`]: in-process, for tests and single-process tools.
//! * `SqliteStore` (feature `sqlite`, default): one SQLite file shared by many processes, with a
//!   global revision, a change log for watches and group commit.
//! * `KubeStore` (feature `kube`): a Kubernetes API server through kube-rs.
//! * [`CachedStore`]: list+watch read cache in front of any of them.
//!
//! [`reconcile`] runs watch-driven reconcilers (kube-runtime's `Controller` shape) over a
//! [`CachedStore`]: a per-key work queue with backoff, fed by the cache's watches.
//!
//! Feature `testing` adds `conformance` (the behaviour suite every backend passes, and
//! `store_conformance_tests!` to run it), `double` (a store double counting its calls, which
//! can be down or have silent watches) and, with `kube`, `fake_api` (an HTTP-level fake API
//! server over any store, which counts requests).

mod api;
mod cache_entry;
mod cached;
#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(feature = "testing")]
pub mod double;
mod error;
#[cfg(all(feature = "testing", feature = "kube"))]
pub mod fake_api;
#[cfg(feature = "kube")]
mod kubernetes;
pub mod label_selector;
mod memory;
pub mod names;
pub mod reconcile;
mod select;
pub mod semantics;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;
pub mod throttle;

pub use api::{Api, TypedEvent};
pub use cached::{CachedStore, Projection, strip_managed_fields};
pub use error::StoreError;
#[cfg(feature = "kube")]
pub use kubernetes::{ClientIdentity, KubeStore};
pub use memory::MemoryStore;
pub use select::ListOptions;
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOptions, SqliteStore, prepare_state_dir_under};
pub use store::{ObjectList, Store, WatchEvent, WatchStream};
pub use weft_object::{
    Object, ObjectError, ObjectMeta, OwnerReference, Resource, ResourceType, new_uid, now_rfc3339,
};
