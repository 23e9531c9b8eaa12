//! A fake Kubernetes API server at the HTTP layer, backed by any [`Store`] (usually a
//! [`MemoryStore`](crate::MemoryStore)), for tests of code that runs on [`KubeStore`].
//!
//! It speaks the REST paths, verbs, bodies, status codes and watch stream kube-rs uses for the
//! registered resource types, and logs every request, so tests can count API calls (for
//! example, API writes per IPAM allocation) and run the [conformance suite](crate::conformance)
//! through kube-rs and HTTP.
//!
//! In process, [`FakeApiServer::client`] hands kube-rs a tower service; for another process
//! (the node agent under test), [`FakeApiServer::serve_listener`] serves it over TCP and
//! [`TcpServer::write_kubeconfig`] writes the plain-HTTP kubeconfig to reach it. Two faults can
//! be injected: [`FakeApiServer::set_down`] (the API server is unreachable) and
//! [`FakeApiServer::conflict_next_status_updates`] (a concurrent writer wins the next status
//! updates of an object); [`FakeApiServer::pause_watches`] makes watch caches lag.
//!
//! It is as strict as a real kube-apiserver where weft's bugs came from ([`strict`]): RBAC per
//! bearer token ([`FakeApiServer::grant`], rules from deploy/'s ClusterRoles), types without a
//! status subresource ([`FakeApiServer::without_status_subresource`]), pods without containers,
//! and `blockOwnerDeletion` under OwnerReferencesPermissionEnforcement; every request's
//! User-Agent and fieldManager are recorded ([`FakeApiServer::records`]).

mod path;
pub mod strict;

pub use path::{Target, parse_path, percent_decode};
use path::{query_pairs, selector_pairs};

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::{KubeStore, ListOptions, Object, ResourceType, Store, StoreError, WatchEvent};

type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// The fake API server. Cloning shares the store and the request log.
#[derive(Clone)]
pub struct FakeApiServer {
    store: Arc<dyn Store>,
    types: Arc<Mutex<Vec<ResourceType>>>,
    log: Arc<Mutex<Vec<RequestRecord>>>,
    faults: Arc<Faults>,
    policy: Arc<Mutex<Policy>>,
}

/// What the server enforces beyond the store's semantics (see [`strict`]).
#[derive(Default)]
struct Policy {
    /// `(apiVersion, plural)` of the types whose CRD has no status subresource.
    no_status: HashSet<(String, String)>,
    /// Bearer token → (user, rules). Empty: no RBAC (every client may do anything).
    users: HashMap<String, (String, strict::Rules)>,
    /// `(user, verb, group, resource)` of every request RBAC allowed.
    used: std::collections::BTreeSet<(String, String, String, String)>,
    /// Accept pods without containers (as the local cluster's store does), for measuring the
    /// local roles' requests over HTTP.
    pods_without_containers: bool,
}

/// The user of a request without a known token while RBAC is enforced.
pub const ANONYMOUS: &str = "system:anonymous";

/// One request as the server saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// `GET`, `POST`, ...
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// The `User-Agent` header, if any.
    pub user_agent: Option<String>,
    /// The `fieldManager` query parameter, if any.
    pub field_manager: Option<String>,
}

impl RequestRecord {
    /// Whether the request writes (POST, PUT, PATCH, DELETE).
    pub fn is_write(&self) -> bool {
        !matches!(self.method.as_str(), "GET" | "HEAD" | "OPTIONS")
    }
}

/// Annotation the fake concurrent writer of [`FakeApiServer::conflict_next_status_updates`]
/// sets on the object (value: how many such writes so far).
pub const CONCURRENT_WRITE_ANNOTATION: &str = "fake-api.weft.dev/concurrent-write";

/// Injected faults, shared by every clone of the server.
struct Faults {
    /// `true` while the API server is down.
    down: watch::Sender<bool>,
    /// `true` while watches hold their events back.
    watches_paused: watch::Sender<bool>,
    /// `true` while LISTs wait before answering.
    lists_paused: watch::Sender<bool>,
    /// Status updates still to lose, per `plural/key` of the object.
    status_conflicts: Mutex<HashMap<String, usize>>,
    /// Concurrent writes made so far.
    concurrent_writes: Mutex<usize>,
}

impl FakeApiServer {
    /// A server for the given resource types over `store`.
    pub fn new(store: Arc<dyn Store>, types: impl IntoIterator<Item = ResourceType>) -> Self {
        Self {
            store,
            types: Arc::new(Mutex::new(types.into_iter().collect())),
            log: Arc::default(),
            faults: Arc::new(Faults {
                down: watch::Sender::new(false),
                watches_paused: watch::Sender::new(false),
                lists_paused: watch::Sender::new(false),
                status_conflicts: Mutex::default(),
                concurrent_writes: Mutex::default(),
            }),
            policy: Arc::default(),
        }
    }

    /// Accept pods without containers, as the local cluster's embedded store does (a real API
    /// server answers 422): for counting the requests of the local-cluster roles over HTTP.
    pub fn accept_pods_without_containers(&self) {
        lock(&self.policy).pods_without_containers = true;
    }

    /// Start serving `ty` (a CRD being installed): until then its paths answer 404.
    pub fn serve_type(&self, ty: ResourceType) {
        let mut types = lock(&self.types);
        if !types.contains(&ty) {
            types.push(ty);
        }
    }

    /// Serve `ty` as a CRD without the status subresource (KubeVirt's VirtualMachineInstance):
    /// `PUT .../status` answers the API server's 404, and a `PUT` of the object writes its
    /// status too.
    pub fn without_status_subresource(&self, ty: &ResourceType) {
        lock(&self.policy)
            .no_status
            .insert((ty.api_version.clone(), ty.plural.clone()));
    }

    /// Enforce RBAC: a client presenting bearer `token` is `user` and may do what `rules`
    /// allow, nothing else; a client without a granted token is [`ANONYMOUS`] with no rules.
    /// Also enforces OwnerReferencesPermissionEnforcement (`blockOwnerDeletion: true` needs
    /// `update` on the owner's `finalizers`).
    pub fn grant(&self, token: &str, user: &str, rules: strict::Rules) {
        lock(&self.policy)
            .users
            .insert(token.into(), (user.into(), rules));
    }

    /// What each user was allowed to do so far, as `(user, verb, group, resource)`: with
    /// [`FakeApiServer::grant`], the permissions a component really uses (a role granting
    /// more is broader than it needs).
    pub fn permissions_used(&self) -> Vec<(String, String, String, String)> {
        lock(&self.policy).used.iter().cloned().collect()
    }

    /// The permissions `user` was allowed and used so far (see
    /// [`FakeApiServer::permissions_used`]), to compare with its role ([`strict::Rules::unused`]).
    pub fn permissions_of(&self, user: &str) -> std::collections::BTreeSet<strict::Permission> {
        lock(&self.policy)
            .used
            .iter()
            .filter(|(u, ..)| u == user)
            .map(|(_, verb, group, resource)| (verb.clone(), group.clone(), resource.clone()))
            .collect()
    }

    fn has_status_subresource(&self, ty: &ResourceType) -> bool {
        !lock(&self.policy)
            .no_status
            .contains(&(ty.api_version.clone(), ty.plural.clone()))
    }

    /// The user and rules of a request, `None` when RBAC is not enforced.
    fn identity(&self, headers: &http::HeaderMap) -> Option<(String, strict::Rules)> {
        let policy = lock(&self.policy);
        if policy.users.is_empty() {
            return None;
        }
        let token = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        Some(
            token
                .and_then(|t| policy.users.get(t).cloned())
                .unwrap_or_else(|| (ANONYMOUS.into(), strict::Rules::default())),
        )
    }

    /// What a real API server refuses before the store sees the request: RBAC, a missing
    /// status subresource, a pod without containers, a `blockOwnerDeletion` the client may
    /// not set. `None`: go on.
    async fn refuse(
        &self,
        parts: &http::request::Parts,
        target: &Target,
        ty: &ResourceType,
        body: &[u8],
        watch: bool,
    ) -> Option<Response<ResponseBody>> {
        let identity = self.identity(&parts.headers);
        let verb = strict::verb(&parts.method, target.name.is_some(), watch);
        if let Some((user, rules)) = &identity {
            let resource = match target.status {
                true => format!("{}/status", ty.plural),
                false => ty.plural.clone(),
            };
            if rules.allows(verb, ty.group(), &resource, target.name.as_deref()) {
                lock(&self.policy).used.insert((
                    user.clone(),
                    verb.to_string(),
                    ty.group().to_string(),
                    resource.clone(),
                ));
            } else {
                let denied = strict::Denied {
                    user,
                    verb,
                    group: ty.group(),
                    plural: &ty.plural,
                    subresource: target.status.then_some("status"),
                    name: target.name.as_deref(),
                    namespace: target.namespace.as_deref(),
                };
                return Some(json_response(StatusCode::FORBIDDEN, &denied.status()));
            }
        }
        if target.status && !self.has_status_subresource(ty) {
            return Some(json_response(StatusCode::NOT_FOUND, &strict::no_such_path()));
        }
        if target.status || !matches!(verb, "create" | "update") {
            return None;
        }
        // Malformed bodies are the handler's to report.
        let obj: Object = serde_json::from_slice(body).ok()?;
        let old = match verb {
            "update" => {
                let old = self
                    .store
                    .get(ty, target.namespace.as_deref(), &obj.metadata.name)
                    .await;
                // An update of a missing object is the store's NotFound, before any validation.
                Some(old.ok().flatten()?)
            }
            _ => None,
        };
        let lenient = lock(&self.policy).pods_without_containers;
        if let Some(invalid) = strict::pod_without_containers(&obj).filter(|_| !lenient) {
            return Some(json_response(StatusCode::UNPROCESSABLE_ENTITY, &invalid));
        }
        let (_, rules) = identity?;
        for owner in strict::blocking_owners(&obj, old.as_ref()) {
            let owner_type = lock(&self.types)
                .iter()
                .find(|t| t.api_version == owner.api_version && t.kind == owner.kind)
                .cloned();
            let (group, plural) = match owner_type {
                Some(t) => (t.group().to_string(), t.plural.clone()),
                None => (
                    owner
                        .api_version
                        .rsplit_once('/')
                        .map(|(g, _)| g)
                        .unwrap_or("")
                        .to_string(),
                    format!("{}s", owner.kind.to_lowercase()),
                ),
            };
            if !rules.allows(
                "update",
                &group,
                &format!("{plural}/finalizers"),
                Some(&owner.name),
            ) {
                let body = strict::block_owner_deletion_forbidden(&ty.plural, ty.group(), &obj.metadata.name);
                return Some(json_response(StatusCode::FORBIDDEN, &body));
            }
        }
        None
    }

    /// Take the API server down (`true`) or bring it back (`false`). While down, clients see
    /// what they see when a real API server is gone: open watches and connections break and
    /// every call fails at the transport (connection closed; in process, a service error), not
    /// with a status (kube-rs retries a 503 for minutes).
    pub fn set_down(&self, down: bool) {
        self.faults.down.send_replace(down);
    }

    /// Hold back (`true`) or release (`false`) the events of every open watch. Held events
    /// are delivered in order on release: a watch cache in front of this server lags meanwhile
    /// (an API server under load), so only a fresh read sees the latest state.
    pub fn pause_watches(&self, paused: bool) {
        self.faults.watches_paused.send_replace(paused);
    }

    /// Hold back (`true`) or release (`false`) the answers to LISTs (collection GETs, not
    /// watches): a watch cache in front of this server stays unsynced meanwhile (a large
    /// LIST on a loaded API server), other requests are answered.
    pub fn pause_lists(&self, paused: bool) {
        self.faults.lists_paused.send_replace(paused);
    }

    /// Make the next `count` status updates (`PUT .../status`) of one object lose to a
    /// concurrent writer: the server first updates the object itself (annotation
    /// [`CONCURRENT_WRITE_ANNOTATION`], a new resourceVersion), then answers `409 Conflict`, as
    /// a real API server answers the now stale request. A client that retries on a fresh read
    /// succeeds and keeps the concurrent writer's change.
    pub fn conflict_next_status_updates(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        name: &str,
        count: usize,
    ) {
        lock(&self.faults.status_conflicts).insert(conflict_key(ty, ns, name), count);
    }

    /// Whether this status update is one to lose (counts it down).
    fn take_status_conflict(&self, ty: &ResourceType, ns: Option<&str>, name: &str) -> bool {
        let mut conflicts = lock(&self.faults.status_conflicts);
        match conflicts.get_mut(&conflict_key(ty, ns, name)) {
            Some(left) if *left > 0 => {
                *left -= 1;
                true
            }
            _ => false,
        }
    }

    /// The concurrent writer of an injected conflict: change the object, then lose.
    async fn lose_to_concurrent_writer(&self, ty: &ResourceType, ns: Option<&str>, name: &str) -> StoreError {
        let writes = {
            let mut writes = lock(&self.faults.concurrent_writes);
            *writes += 1;
            *writes
        };
        let mut actual = String::new();
        if let Ok(Some(mut current)) = self.store.get(ty, ns, name).await {
            current
                .metadata
                .annotations
                .insert(CONCURRENT_WRITE_ANNOTATION.into(), writes.to_string());
            if let Ok(updated) = self.store.update(ty, current).await {
                actual = updated.metadata.resource_version.unwrap_or_default();
            }
        }
        StoreError::Conflict {
            kind: ty.kind.clone(),
            key: ty.key(ns, name),
            expected: "the request's".into(),
            actual,
        }
    }

    /// `PUT` of an object whose type has no status subresource: the status is written too (the
    /// store's update keeps the stored status, as the subresource would have it).
    async fn update_with_status(&self, ty: &ResourceType, obj: Object) -> Result<Object, StoreError> {
        let status = obj.data.get("status").cloned();
        let mut updated = self.store.update(ty, obj).await?;
        if updated.data.get("status") == status.as_ref() {
            return Ok(updated);
        }
        match status {
            Some(status) => updated.data.insert("status".into(), status),
            None => updated.data.remove("status"),
        };
        self.store.update_status(ty, updated).await
    }

    /// Serve this server over HTTP on `listener` (bound by the caller, e.g. on 127.0.0.1 inside
    /// a test's network namespace) until the returned handle is stopped or dropped. Needs a
    /// Tokio runtime.
    pub fn serve_listener(&self, listener: std::net::TcpListener) -> std::io::Result<TcpServer> {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let addr = listener.local_addr()?;
        let server = self.clone();
        let task = tokio::spawn(async move {
            // Dropping the set (when the accept loop is aborted) closes every connection.
            let mut connections = tokio::task::JoinSet::new();
            let mut down = server.faults.down.subscribe();
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    Ok(()) = down.changed() => {
                        // Going down resets every connection, as a real API server's exit does.
                        if *down.borrow_and_update() {
                            connections.abort_all();
                        }
                        continue;
                    }
                };
                let Ok((stream, _)) = accepted else {
                    continue;
                };
                if *down.borrow() {
                    // Closed before any reply: the client's call fails at once (no retry).
                    drop(stream);
                    continue;
                }
                let server = server.clone();
                connections.spawn(async move {
                    let service =
                        hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                            let server = server.clone();
                            async move {
                                let (parts, body) = request.into_parts();
                                let body = body.collect().await.map(|b| b.to_bytes());
                                Ok::<_, Infallible>(
                                    server.respond(parts, body.map_err(|e| e.to_string())).await,
                                )
                            }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(TcpServer { addr, task })
    }

    /// Serve over HTTP on an ephemeral port of 127.0.0.1 (see [`FakeApiServer::serve_listener`]).
    pub fn serve_tcp(&self) -> std::io::Result<TcpServer> {
        self.serve_listener(std::net::TcpListener::bind("127.0.0.1:0")?)
    }

    /// A kube-rs client talking to this server (needs a Tokio runtime).
    pub fn client(&self) -> Client {
        self.client_with(None)
    }

    /// A kube-rs client presenting bearer `token` (see [`FakeApiServer::grant`]).
    pub fn client_as(&self, token: &str) -> Client {
        let bearer =
            http::HeaderValue::from_str(&format!("Bearer {token}")).expect("a token fit for a header");
        self.client_with(Some(bearer))
    }

    /// A kube-rs client sending `authorization` (if any) with every request; it cannot connect
    /// while the server is down.
    fn client_with(&self, authorization: Option<http::HeaderValue>) -> Client {
        let server = self.clone();
        let service = tower::service_fn(move |mut request: Request<Body>| {
            let server = server.clone();
            if let Some(value) = &authorization {
                request
                    .headers_mut()
                    .insert(http::header::AUTHORIZATION, value.clone());
            }
            async move {
                if *server.faults.down.borrow() {
                    return Err(tower::BoxError::from(
                        "connection refused: the API server is down",
                    ));
                }
                Ok(server.handle(request).await)
            }
        });
        Client::new(service, "default")
    }

    /// A [`KubeStore`] on this server, presenting bearer `token`.
    pub fn kube_store_as(&self, token: &str) -> KubeStore {
        KubeStore::from_client(self.client_as(token))
    }

    /// A [`KubeStore`] on this server.
    pub fn kube_store(&self) -> KubeStore {
        KubeStore::from_client(self.client())
    }

    /// Every request so far, as `METHOD path?query`.
    pub fn requests(&self) -> Vec<String> {
        self.records()
            .into_iter()
            .map(|r| format!("{} {}", r.method, r.uri))
            .collect()
    }

    /// Every request so far, with the client's User-Agent and fieldManager.
    pub fn records(&self) -> Vec<RequestRecord> {
        lock(&self.log).clone()
    }

    /// How many requests so far were writes (POST, PUT, PATCH, DELETE).
    pub fn writes(&self) -> usize {
        self.requests().iter().filter(|r| !r.starts_with("GET ")).count()
    }

    /// Forget the requests logged so far.
    pub fn clear_requests(&self) {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    async fn handle(&self, request: Request<Body>) -> Response<ResponseBody> {
        let (parts, body) = request.into_parts();
        let body = body.collect_bytes().await.map_err(|e| e.to_string());
        self.respond(parts, body).await
    }

    async fn respond(
        &self,
        parts: http::request::Parts,
        body: Result<Bytes, String>,
    ) -> Response<ResponseBody> {
        let uri = parts.uri.to_string();
        let query = query_pairs(parts.uri.query().unwrap_or_default());
        let param = |key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        lock(&self.log).push(RequestRecord {
            method: parts.method.to_string(),
            uri: uri.clone(),
            user_agent: parts
                .headers
                .get(http::header::USER_AGENT)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
            field_manager: param("fieldManager").map(String::from),
        });
        let body = match body {
            Ok(bytes) => bytes,
            Err(e) => return failure(&StoreError::Invalid(format!("reading the request body: {e}"))),
        };
        let Some(target) = parse_path(parts.uri.path()) else {
            return failure(&StoreError::NotFound {
                kind: "path".into(),
                key: parts.uri.path().into(),
            });
        };
        let found = lock(&self.types)
            .iter()
            .find(|t| t.api_version == target.api_version && t.plural == target.plural)
            .cloned();
        let Some(ty) = found else {
            // As kube-apiserver answers for a resource it does not serve (a CRD not installed).
            return json_response(StatusCode::NOT_FOUND, &strict::no_such_path());
        };
        let opts = ListOptions {
            labels: param("labelSelector").map(selector_pairs).unwrap_or_default(),
            fields: param("fieldSelector").map(selector_pairs).unwrap_or_default(),
        };
        let watch = matches!(param("watch"), Some("true" | "1"));
        if let Some(refused) = self.refuse(&parts, &target, &ty, &body, watch).await {
            return refused;
        }
        let ns = target.namespace.as_deref();
        let with_status = !self.has_status_subresource(&ty);
        let result = match (parts.method, &target.name) {
            (Method::GET, Some(name)) => match self.store.get(&ty, ns, name).await {
                Ok(Some(obj)) => Ok(json_response(StatusCode::OK, &obj)),
                Ok(None) => Err(StoreError::NotFound {
                    kind: ty.kind.clone(),
                    key: ty.key(ns, name),
                }),
                Err(e) => Err(e),
            },
            (Method::GET, None) if watch => {
                let rv = param("resourceVersion").filter(|rv| !rv.is_empty());
                let down = self.faults.down.subscribe();
                let paused = self.faults.watches_paused.subscribe();
                self.store
                    .watch(&ty, ns, &opts, rv)
                    .await
                    .map(|events| watch_response(events, down, paused))
            }
            (Method::GET, None) => {
                let _ = self
                    .faults
                    .lists_paused
                    .subscribe()
                    .wait_for(|paused| !*paused)
                    .await;
                self.store.list(&ty, ns, &opts).await.map(|list| {
                    let limit = param("limit")
                        .and_then(|l| l.parse::<usize>().ok())
                        .filter(|l| *l > 0);
                    let page = path::page(list, limit, param("continue"));
                    let mut metadata = json!({"resourceVersion": page.resource_version});
                    if let Some(token) = page.next {
                        metadata["continue"] = json!(token);
                        metadata["remainingItemCount"] = json!(page.remaining);
                    }
                    let list = json!({
                        "apiVersion": ty.api_version, "kind": format!("{}List", ty.kind),
                        "metadata": metadata,
                        "items": page.items,
                    });
                    json_response(StatusCode::OK, &list)
                })
            }
            (Method::POST, None) => match object_from(&body, &target, None) {
                Ok(obj) => self
                    .store
                    .create(&ty, obj)
                    .await
                    .map(|o| json_response(StatusCode::CREATED, &o)),
                Err(e) => Err(e),
            },
            (Method::PUT, Some(name)) if target.status && self.take_status_conflict(&ty, ns, name) => {
                Err(self.lose_to_concurrent_writer(&ty, ns, name).await)
            }
            (Method::PUT, Some(name)) => match object_from(&body, &target, Some(name)) {
                Ok(obj) if target.status => self.store.update_status(&ty, obj).await,
                // Without a status subresource, status is an ordinary field of the object.
                Ok(obj) if with_status => self.update_with_status(&ty, obj).await,
                Ok(obj) => self.store.update(&ty, obj).await,
                Err(e) => Err(e),
            }
            .map(|o| json_response(StatusCode::OK, &o)),
            (Method::DELETE, Some(name)) => {
                let options: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let precondition = options["preconditions"]["resourceVersion"].as_str();
                match self.store.delete(&ty, ns, name, precondition).await {
                    Ok(Some(obj)) => Ok(json_response(StatusCode::OK, &obj)),
                    Ok(None) => Err(StoreError::NotFound {
                        kind: ty.kind.clone(),
                        key: ty.key(ns, name),
                    }),
                    Err(e) => Err(e),
                }
            }
            (method, _) => Err(StoreError::Invalid(format!("{method} is not supported on {uri}"))),
        };
        result.unwrap_or_else(|e| failure(&e))
    }
}

/// The request body as an object, with the namespace (and name) of the path.
fn object_from(body: &[u8], target: &Target, name: Option<&str>) -> Result<Object, StoreError> {
    let mut obj: Object =
        serde_json::from_slice(body).map_err(|e| StoreError::Invalid(format!("request body: {e}")))?;
    if obj.metadata.namespace.is_none() {
        obj.metadata.namespace = target.namespace.clone();
    }
    if obj.metadata.namespace != target.namespace {
        return Err(StoreError::Invalid(
            "the namespace of the provided object does not match the namespace sent on the request".into(),
        ));
    }
    if let Some(name) = name
        && obj.metadata.name != name
    {
        return Err(StoreError::Invalid(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            obj.metadata.name
        )));
    }
    Ok(obj)
}

fn full(bytes: Vec<u8>) -> ResponseBody {
    Full::new(Bytes::from(bytes)).boxed_unsync()
}

fn json_response(status: StatusCode, value: &impl serde::Serialize) -> Response<ResponseBody> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
}

/// The HTTP status, reason and `Status` body the API server sends for a store error.
pub fn status_of(e: &StoreError) -> (StatusCode, Value) {
    let (code, reason) = match e {
        StoreError::NotFound { .. } => (404, "NotFound"),
        StoreError::AlreadyExists { .. } => (409, "AlreadyExists"),
        StoreError::Conflict { .. } => (409, "Conflict"),
        StoreError::Invalid(_) | StoreError::InvalidObject(_) => (422, "Invalid"),
        StoreError::Expired(_) => (410, "Expired"),
        StoreError::Unavailable(_) => (503, "ServiceUnavailable"),
        StoreError::Backend(_) | StoreError::Refused(_) => (500, "InternalError"),
    };
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": e.to_string(), "reason": reason, "code": code});
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        status,
    )
}

fn failure(e: &StoreError) -> Response<ResponseBody> {
    let (code, status) = status_of(e);
    json_response(code, &status)
}

fn watch_line(event: Result<WatchEvent, StoreError>) -> Bytes {
    let line = match event {
        Ok(WatchEvent::Added(o)) => json!({"type": "ADDED", "object": o}),
        Ok(WatchEvent::Modified(o)) => json!({"type": "MODIFIED", "object": o}),
        Ok(WatchEvent::Deleted(o)) => json!({"type": "DELETED", "object": o}),
        Err(e) => json!({"type": "ERROR", "object": status_of(&e).1}),
    };
    let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// A watch response streaming `events` (each one once watches are not paused) until the
/// server goes down.
fn watch_response(
    events: crate::WatchStream,
    mut down: watch::Receiver<bool>,
    paused: watch::Receiver<bool>,
) -> Response<ResponseBody> {
    let frames = events
        .then(move |event| {
            let mut paused = paused.clone();
            async move {
                let _ = paused.wait_for(|paused| !*paused).await;
                event
            }
        })
        .take_until(async move {
            let _ = down.wait_for(|down| *down).await;
        })
        .map(|event| Ok::<_, Infallible>(Frame::data(watch_line(event))));
    Response::new(StreamBody::new(frames).boxed_unsync())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn conflict_key(ty: &ResourceType, ns: Option<&str>, name: &str) -> String {
    format!("{}/{}", ty.plural, ty.key(ns, name))
}

/// A [`FakeApiServer`] listening on TCP. Stopping or dropping it closes the listener and every
/// open connection (another way to take the API server down, for good).
pub struct TcpServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl TcpServer {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig for this server (JSON, which is YAML): plain HTTP, no credentials,
    /// namespace `default`.
    pub fn kubeconfig(&self) -> String {
        json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": format!("http://{}", self.addr)}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": "default"}}],
        })
        .to_string()
    }

    /// Write [`TcpServer::kubeconfig`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig())
    }

    /// Write a kubeconfig presenting bearer `token` (see [`FakeApiServer::grant`]) to `path`.
    pub fn write_kubeconfig_with_token(&self, path: &Path, token: &str) -> std::io::Result<()> {
        let mut config: Value = serde_json::from_str(&self.kubeconfig()).unwrap_or_default();
        config["users"][0]["user"] = json!({"token": token});
        std::fs::write(path, config.to_string())
    }

    /// Close the listener and every connection.
    pub fn stop(self) {}
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
