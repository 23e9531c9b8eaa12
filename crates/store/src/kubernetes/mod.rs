//! The Kubernetes backend: the [`Store`] trait over a kube-rs [`Client`], with
//! [`DynamicObject`]s typed at run time by the [`ResourceType`].
//!
//! The API server does the semantics (resourceVersion compare-and-swap, the status subresource,
//! finalizers); this module translates calls, objects and errors. Differences from the embedded
//! stores: `update_status` goes through `/status`, where custom resources ignore metadata
//! changes; a delete that the API server answers with a `Status` returns the object's identity
//! only (name, namespace, uid), not its last state.

mod convert;

use std::path::Path;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, Preconditions, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::WatchEvent as KubeEvent;
use kube::{Client, Config};

use crate::semantics::check_identity;
use crate::{ListOptions, Object, ObjectList, ResourceType, Store, StoreError, WatchEvent, WatchStream};
use convert::{Call, api_resource, from_dynamic, list_params, store_error, to_dynamic, watch_params};

/// Objects per page of [`Store::list_projected`] (kube-runtime's watcher pages by 500 too).
pub const LIST_PAGE: u32 = 500;

/// A client whose retries of 429/503/504 answers stay short: kube's default policy retries 15
/// times with backoff up to 1000 s, which would hold a CNI call for minutes behind an API server
/// answering 503. Ours gives up after about 1.5 s (5 retries, 50 ms doubling to 800 ms) and lets
/// the caller's own retry (the runtime's, a controller's requeue) take over.
fn bounded_client(
    mut config: Config,
    identity: &ClientIdentity,
) -> Result<Client, Box<dyn std::error::Error + Send + Sync>> {
    config.default_retry = false;
    // kube-rs sends no User-Agent of its own: the API server's audit log and metrics would
    // show none.
    let agent = http::HeaderValue::from_str(&identity.user_agent())?;
    config.headers.push((http::header::USER_AGENT, agent));
    let policy = kube::client::retry::RetryPolicy::new(
        Duration::from_millis(50),
        Duration::from_millis(800),
        5,
        false,
    )
    .expect("valid retry backoff");
    // Retrying needs a service it can clone: the buffer gives one over kube's boxed stack.
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&tower::retry::RetryLayer::new(policy))
        .build())
}

/// Who a client is to the API server: its `User-Agent` (`<component>/<version>`) and the
/// `fieldManager` of its writes (`<component>`; unversioned, so an upgrade does not split the
/// ownership of the fields it manages across two managers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The component, e.g. `weft-node`.
    pub component: String,
    /// Its version, e.g. `0.1.0`.
    pub version: String,
}

impl ClientIdentity {
    /// `component` at `version`.
    pub fn new(component: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            component: component.into(),
            version: version.into(),
        }
    }

    /// The `User-Agent` header: `<component>/<version>`.
    pub fn user_agent(&self) -> String {
        format!("{}/{}", self.component, self.version)
    }

    /// The `fieldManager` of every write: the component's name.
    pub fn field_manager(&self) -> &str {
        &self.component
    }
}

impl Default for ClientIdentity {
    /// `weft-store/<this crate's version>`, for clients that name no component.
    fn default() -> Self {
        Self::new("weft-store", env!("CARGO_PKG_VERSION"))
    }
}

/// The [`Store`] backed by a Kubernetes API server.
#[derive(Clone)]
pub struct KubeStore {
    client: Client,
    field_manager: String,
}

impl KubeStore {
    /// Use an existing client (tests pass one built on a mock service); writes name the
    /// default [`ClientIdentity`]'s field manager unless [`KubeStore::with_field_manager`].
    pub fn from_client(client: Client) -> Self {
        Self {
            client,
            field_manager: ClientIdentity::default().field_manager().into(),
        }
    }

    /// Name `manager` as the `fieldManager` of every write.
    pub fn with_field_manager(mut self, manager: impl Into<String>) -> Self {
        self.field_manager = manager.into();
        self
    }

    /// Connect as the kubeconfig at `path` says (its current context), as `identity`.
    pub async fn from_kubeconfig(
        path: impl AsRef<Path>,
        identity: &ClientIdentity,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref();
        let unavailable = |e: &dyn std::fmt::Display| {
            StoreError::Unavailable(format!("kubeconfig {}: {e}", path.display()))
        };
        let kubeconfig = Kubeconfig::read_from(path).map_err(|e| unavailable(&e))?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| unavailable(&e))?;
        let client = bounded_client(config, identity).map_err(|e| unavailable(&e))?;
        Ok(Self::from_client(client).with_field_manager(identity.field_manager()))
    }

    /// Connect from the environment: the in-cluster service account when running in a pod,
    /// else `$KUBECONFIG` or `~/.kube/config`; as `identity`.
    pub async fn try_default(identity: &ClientIdentity) -> Result<Self, StoreError> {
        let unavailable = |e: &dyn std::fmt::Display| {
            StoreError::Unavailable(format!("Kubernetes client configuration: {e}"))
        };
        let config = Config::infer().await.map_err(|e| unavailable(&e))?;
        bounded_client(config, identity)
            .map(|client| Self::from_client(client).with_field_manager(identity.field_manager()))
            .map_err(|e| unavailable(&e))
    }

    /// The underlying client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The parameters of a create or replace: our field manager.
    fn post_params(&self) -> PostParams {
        PostParams {
            field_manager: Some(self.field_manager.clone()),
            ..PostParams::default()
        }
    }

    /// The API handle for `ty` in `namespace` (all namespaces or cluster scope for `None`).
    fn api(&self, ty: &ResourceType, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = api_resource(ty);
        match namespace {
            Some(ns) if ty.namespaced => Api::namespaced_with(self.client.clone(), ns, &resource),
            _ => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// The API handle for one named object; namespaced kinds need a namespace.
    fn object_api(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Api<DynamicObject>, StoreError> {
        if ty.namespaced && namespace.is_none() {
            return Err(StoreError::Invalid(format!(
                "{} {name}: a namespace is required",
                ty.kind
            )));
        }
        Ok(self.api(ty, namespace))
    }

    async fn replace(&self, ty: &ResourceType, obj: Object, status: bool) -> Result<Object, StoreError> {
        check_identity(ty, &obj)?;
        let key = obj.key();
        let expected = obj.metadata.resource_version.clone();
        let api = self.api(ty, obj.metadata.namespace.as_deref());
        let body = to_dynamic(&obj)?;
        let name = &obj.metadata.name;
        let result = if status {
            api.replace_status(name, &self.post_params(), &body).await
        } else {
            api.replace(name, &self.post_params(), &body).await
        };
        let call = if status { Call::StatusWrite } else { Call::Write };
        let stored = result.map_err(|e| store_error(ty, &key, call, expected.as_deref(), e))?;
        from_dynamic(ty, stored)
    }
}

#[async_trait]
impl Store for KubeStore {
    async fn get(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, StoreError> {
        let api = self.object_api(ty, namespace, name)?;
        let found = api
            .get_opt(name)
            .await
            .map_err(|e| store_error(ty, &ty.key(namespace, name), Call::Read, None, e))?;
        found.map(|o| from_dynamic(ty, o)).transpose()
    }

    async fn list(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError> {
        let list = self
            .api(ty, namespace)
            .list(&list_params(opts))
            .await
            .map_err(|e| store_error(ty, namespace.unwrap_or("(all)"), Call::Read, None, e))?;
        let mut items = list
            .items
            .into_iter()
            .map(|o| from_dynamic(ty, o))
            .collect::<Result<Vec<_>, _>>()?;
        items.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        Ok(ObjectList {
            items,
            resource_version: list.metadata.resource_version.unwrap_or_default(),
        })
    }

    /// Pages of [`LIST_PAGE`] objects (`limit` / `continue`, one consistent snapshot on the
    /// API server), each converted and projected before the next is fetched.
    async fn list_projected(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
        each: &(dyn for<'o> Fn(&'o mut Object) + Sync),
    ) -> Result<ObjectList, StoreError> {
        let mut params = list_params(opts);
        params.limit = Some(LIST_PAGE);
        let mut items = Vec::new();
        let mut resource_version: Option<String> = None;
        loop {
            let page = self
                .api(ty, namespace)
                .list(&params)
                .await
                .map_err(|e| store_error(ty, namespace.unwrap_or("(all)"), Call::Read, None, e))?;
            // The snapshot is the first page's; later pages are served from it.
            resource_version.get_or_insert(page.metadata.resource_version.clone().unwrap_or_default());
            for object in page.items {
                let mut object = from_dynamic(ty, object)?;
                each(&mut object);
                items.push(object);
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params.continue_token = Some(token),
                _ => break,
            }
        }
        items.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        Ok(ObjectList {
            items,
            resource_version: resource_version.unwrap_or_default(),
        })
    }

    async fn create(&self, ty: &ResourceType, mut obj: Object) -> Result<Object, StoreError> {
        check_identity(ty, &obj)?;
        // The API server rejects creates that carry a resourceVersion.
        obj.metadata.resource_version = None;
        let key = obj.key();
        let created = self
            .api(ty, obj.metadata.namespace.as_deref())
            .create(&self.post_params(), &to_dynamic(&obj)?)
            .await
            .map_err(|e| store_error(ty, &key, Call::Create, None, e))?;
        from_dynamic(ty, created)
    }

    async fn update(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        self.replace(ty, obj, false).await
    }

    async fn update_status(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        self.replace(ty, obj, true).await
    }

    async fn delete(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        precondition: Option<&str>,
    ) -> Result<Option<Object>, StoreError> {
        let api = self.object_api(ty, namespace, name)?;
        let params = DeleteParams {
            preconditions: precondition.map(|rv| Preconditions {
                resource_version: Some(rv.into()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        let key = ty.key(namespace, name);
        match api.delete(name, &params).await {
            Ok(outcome) => outcome
                .either(
                    |last| from_dynamic(ty, last),
                    |status| {
                        let mut gone = Object::new(ty, namespace.filter(|_| ty.namespaced), name);
                        gone.metadata.uid = status.details.map(|d| d.uid).filter(|u| !u.is_empty());
                        Ok(gone)
                    },
                )
                .map(Some),
            Err(e) => match store_error(ty, &key, Call::Write, precondition, e) {
                StoreError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    async fn watch(
        &self,
        ty: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
        resource_version: Option<&str>,
    ) -> Result<WatchStream, StoreError> {
        let (backlog, from) = match resource_version {
            Some(rv) => (Vec::new(), rv.to_string()),
            None => {
                let list = self.list(ty, namespace, opts).await?;
                let added = list.items.into_iter().map(WatchEvent::Added).collect();
                (added, list.resource_version)
            }
        };
        let state = Resume {
            api: self.api(ty, namespace),
            ty: ty.clone(),
            params: watch_params(opts),
            last: from,
            events: None,
            opened: Instant::now(),
            active: false,
            done: false,
        };
        let live = futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        });
        Ok(futures::stream::iter(backlog.into_iter().map(Ok))
            .chain(live)
            .boxed())
    }
}

type KubeEvents = BoxStream<'static, Result<KubeEvent<DynamicObject>, kube::Error>>;

/// A watch that re-issues itself from the last seen resourceVersion when the API server ends it
/// (as it does every few minutes), and ends for good on an error.
struct Resume {
    api: Api<DynamicObject>,
    ty: ResourceType,
    params: WatchParams,
    last: String,
    events: Option<KubeEvents>,
    /// When the current watch request was opened, and whether it has delivered anything.
    opened: Instant,
    active: bool,
    done: bool,
}

/// A watch that ends this soon without an event is re-issued only after this pause, so a server
/// that keeps closing watches at once is not hammered.
const QUIET_REWATCH_PAUSE: Duration = Duration::from_secs(1);

impl Resume {
    async fn next(&mut self) -> Option<Result<WatchEvent, StoreError>> {
        loop {
            if self.done {
                return None;
            }
            let events = match &mut self.events {
                Some(events) => events,
                None => match self.api.watch(&self.params, &self.last).await {
                    Ok(events) => {
                        (self.opened, self.active) = (Instant::now(), false);
                        self.events.insert(events.boxed())
                    }
                    Err(e) => return self.fail(store_error(&self.ty, "watch", Call::Read, None, e)),
                },
            };
            let event = match events.next().await {
                None => {
                    self.events = None;
                    if !self.active && self.opened.elapsed() < QUIET_REWATCH_PAUSE {
                        tokio::time::sleep(QUIET_REWATCH_PAUSE).await;
                    }
                    continue;
                }
                Some(Err(e)) => return self.fail(store_error(&self.ty, "watch", Call::Read, None, e)),
                Some(Ok(event)) => event,
            };
            let (wrap, object): (fn(Object) -> WatchEvent, DynamicObject) = match event {
                KubeEvent::Added(o) => (WatchEvent::Added, o),
                KubeEvent::Modified(o) => (WatchEvent::Modified, o),
                KubeEvent::Deleted(o) => (WatchEvent::Deleted, o),
                KubeEvent::Bookmark(bookmark) => {
                    self.active = true;
                    self.last = bookmark.metadata.resource_version;
                    continue;
                }
                KubeEvent::Error(status) => {
                    let e = kube::Error::Api(status);
                    return self.fail(store_error(&self.ty, "watch", Call::Read, None, e));
                }
            };
            self.active = true;
            if let Some(rv) = &object.metadata.resource_version {
                self.last.clone_from(rv);
            }
            return Some(match from_dynamic(&self.ty, object) {
                Ok(object) => Ok(wrap(object)),
                Err(e) => {
                    self.done = true;
                    Err(e)
                }
            });
        }
    }

    fn fail(&mut self, e: StoreError) -> Option<Result<WatchEvent, StoreError>> {
        self.done = true;
        Some(Err(e))
    }
}
