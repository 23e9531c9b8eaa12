//! The Kubernetes backend against a scripted API server at the HTTP layer: exact verbs, paths,
//! bodies and request counts.

use std::pin::pin;

use futures::StreamExt;
use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;
use weft_store::conformance::{describe, pod, pods};
use weft_store::{
    ClientIdentity, KubeStore, ListOptions, Object, ResourceType, Store, StoreError, WatchEvent,
};

/// One expected request and the reply to it.
struct Step {
    method: Method,
    /// Path without the query.
    path: &'static str,
    /// Query parameters that must be present, `key=value` as they appear (URL-encoded).
    query: Vec<&'static str>,
    status: u16,
    reply: String,
}

fn step(method: Method, path: &'static str, status: u16, reply: Value) -> Step {
    Step {
        method,
        path,
        query: Vec::new(),
        status,
        reply: reply.to_string(),
    }
}

/// A request as the server saw it.
#[derive(Debug)]
struct Seen {
    method: Method,
    uri: String,
    body: Value,
}

/// A store on a mock API server that answers `script` in order; the join handle yields every
/// request seen. Requests beyond the script fail the test.
fn scripted(script: Vec<Step>) -> (KubeStore, tokio::task::JoinHandle<Vec<Seen>>) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        let mut handle = pin!(handle);
        let mut seen = Vec::new();
        for expected in script {
            let (request, reply) = handle.next_request().await.expect("the client to call");
            let uri = request.uri().clone();
            let method = request.method().clone();
            assert_eq!(
                (&method, uri.path()),
                (&expected.method, expected.path),
                "request {uri}"
            );
            let query = uri.query().unwrap_or_default();
            for wanted in &expected.query {
                assert!(
                    query.split('&').any(|q| q == *wanted),
                    "{wanted} missing from {uri}"
                );
            }
            let bytes = request.into_body().collect_bytes().await.unwrap();
            let body = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            };
            seen.push(Seen {
                method,
                uri: uri.to_string(),
                body,
            });
            let response = Response::builder()
                .status(StatusCode::from_u16(expected.status).unwrap())
                .body(Body::from(expected.reply.into_bytes()))
                .unwrap();
            reply.send_response(response);
        }
        seen
    });
    (KubeStore::from_client(Client::new(service, "default")), server)
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn stored(namespace: &str, name: &str, rv: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv, "uid": format!("uid-{name}"),
                        "labels": {"app": "x"}},
           "spec": {"nodeName": "n1"}})
}

fn with_rv(mut obj: Object, rv: &str) -> Object {
    obj.metadata.resource_version = Some(rv.into());
    obj
}

#[tokio::test]
async fn get_maps_404_to_none() {
    let nodes = ResourceType::new("v1", "Node", "nodes", false);
    let (store, server) = scripted(vec![
        step(
            Method::GET,
            "/api/v1/namespaces/ns/pods/a",
            200,
            stored("ns", "a", "5"),
        ),
        step(
            Method::GET,
            "/api/v1/namespaces/ns/pods/b",
            404,
            status(404, "NotFound", "pods \"b\" not found"),
        ),
        step(
            Method::GET,
            "/api/v1/nodes/n1",
            200,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
        ),
    ]);
    let a = store.get(&pods(), Some("ns"), "a").await.unwrap().unwrap();
    assert_eq!(a.metadata.resource_version.as_deref(), Some("5"));
    assert_eq!(a.data["spec"]["nodeName"], "n1");
    assert!(store.get(&pods(), Some("ns"), "b").await.unwrap().is_none());
    assert!(store.get(&nodes, None, "n1").await.unwrap().is_some());
    let err = store.get(&pods(), None, "a").await.unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid(_)),
        "a namespaced get needs a namespace: {err}"
    );
    assert_eq!(server.await.unwrap().len(), 3);
}

#[tokio::test]
async fn list_sends_selectors_and_fills_in_kinds() {
    let mut list = step(
        Method::GET,
        "/api/v1/pods",
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "42"},
               "items": [{"metadata": {"name": "b", "namespace": "ns2"}}, {"metadata": {"name": "a", "namespace": "ns1"}}]}),
    );
    list.query = vec!["labelSelector=app%3Dweb", "fieldSelector=spec.nodeName%3Dn1"];
    let (store, server) = scripted(vec![list]);
    let opts = ListOptions::default()
        .label("app", "web")
        .field("spec.nodeName", "n1");
    let result = store.list(&pods(), None, &opts).await.unwrap();
    assert_eq!(result.resource_version, "42");
    let keys: Vec<_> = result.items.iter().map(Object::key).collect();
    assert_eq!(keys, ["ns1/a", "ns2/b"]);
    assert!(
        result
            .items
            .iter()
            .all(|o| o.kind == "Pod" && o.api_version == "v1")
    );
    assert_eq!(server.await.unwrap().len(), 1);
}

#[tokio::test]
async fn create_posts_once_and_409_is_already_exists() {
    let nads = ResourceType::new(
        "k8s.cni.cncf.io/v1",
        "NetworkAttachmentDefinition",
        "network-attachment-definitions",
        true,
    );
    let path = "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions";
    let created = json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                         "metadata": {"name": "net1", "namespace": "ns", "resourceVersion": "7", "uid": "u1"},
                         "spec": {"config": "{}"}});
    let (store, server) = scripted(vec![
        step(Method::POST, path, 201, created),
        step(
            Method::POST,
            path,
            409,
            status(409, "AlreadyExists", "already exists"),
        ),
        step(
            Method::POST,
            path,
            422,
            status(422, "Invalid", "spec.config: Invalid value"),
        ),
    ]);
    let mut nad = Object::new(&nads, Some("ns"), "net1");
    nad.data.insert("spec".into(), json!({"config": "{}"}));
    let stale = with_rv(nad.clone(), "3");
    let out = store.create(&nads, stale).await.unwrap();
    assert_eq!(out.metadata.uid.as_deref(), Some("u1"));
    assert!(
        store
            .create(&nads, nad.clone())
            .await
            .unwrap_err()
            .is_already_exists()
    );
    let err = store.create(&nads, nad).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Invalid(m) if m.contains("spec.config")),
        "{err}"
    );

    let seen = server.await.unwrap();
    assert_eq!(seen.len(), 3, "one API write per create");
    assert!(seen.iter().all(|s| s.method == Method::POST));
    assert_eq!(seen[0].body["metadata"]["name"], "net1");
    assert_eq!(seen[0].body["kind"], "NetworkAttachmentDefinition");
    assert!(
        seen[0].body["metadata"].get("resourceVersion").is_none(),
        "creates carry no resourceVersion"
    );
    assert_eq!(seen[0].body["spec"]["config"], "{}");
}

#[tokio::test]
async fn replace_and_replace_status_put_with_the_resource_version() {
    let (store, server) = scripted(vec![
        step(
            Method::PUT,
            "/api/v1/namespaces/ns/pods/a",
            200,
            stored("ns", "a", "6"),
        ),
        step(
            Method::PUT,
            "/api/v1/namespaces/ns/pods/a",
            409,
            status(409, "Conflict", "the object has been modified"),
        ),
        step(
            Method::PUT,
            "/api/v1/namespaces/ns/pods/a/status",
            200,
            stored("ns", "a", "7"),
        ),
        step(
            Method::PUT,
            "/api/v1/namespaces/ns/pods/gone",
            404,
            status(404, "NotFound", "not found"),
        ),
    ]);
    let a = with_rv(pod("ns", "a", "x", "n1"), "5");
    assert_eq!(
        store
            .update(&pods(), a.clone())
            .await
            .unwrap()
            .metadata
            .resource_version
            .as_deref(),
        Some("6")
    );
    let conflict = store.update(&pods(), a.clone()).await.unwrap_err();
    assert!(conflict.is_conflict(), "{conflict}");
    let mut with_status = with_rv(a, "6");
    with_status
        .data
        .insert("status".into(), json!({"phase": "Running"}));
    store.update_status(&pods(), with_status).await.unwrap();
    assert!(
        store
            .update(&pods(), pod("ns", "gone", "x", "n1"))
            .await
            .unwrap_err()
            .is_not_found()
    );

    let seen = server.await.unwrap();
    assert_eq!(seen[0].body["metadata"]["resourceVersion"], "5");
    assert_eq!(seen[2].body["metadata"]["resourceVersion"], "6");
    assert_eq!(seen[2].body["status"]["phase"], "Running");
}

#[tokio::test]
async fn delete_sends_preconditions_and_404_is_none() {
    let (store, server) = scripted(vec![
        step(
            Method::DELETE,
            "/api/v1/namespaces/ns/pods/a",
            409,
            status(409, "Conflict", "Precondition failed"),
        ),
        step(
            Method::DELETE,
            "/api/v1/namespaces/ns/pods/a",
            200,
            stored("ns", "a", "9"),
        ),
        step(
            Method::DELETE,
            "/api/v1/namespaces/ns/pods/b",
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": "b", "kind": "pods", "uid": "uid-b"}}),
        ),
        step(
            Method::DELETE,
            "/api/v1/namespaces/ns/pods/c",
            404,
            status(404, "NotFound", "not found"),
        ),
    ]);
    let err = store
        .delete(&pods(), Some("ns"), "a", Some("3"))
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let last = store
        .delete(&pods(), Some("ns"), "a", Some("8"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(last.metadata.resource_version.as_deref(), Some("9"));
    let gone = store
        .delete(&pods(), Some("ns"), "b", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (gone.key(), gone.metadata.uid.as_deref()),
        ("ns/b".to_string(), Some("uid-b"))
    );
    assert!(
        store
            .delete(&pods(), Some("ns"), "c", None)
            .await
            .unwrap()
            .is_none()
    );

    let seen = server.await.unwrap();
    assert_eq!(seen[0].body["preconditions"]["resourceVersion"], "3");
    assert_eq!(seen[1].body["preconditions"]["resourceVersion"], "8");
    assert!(seen[2].body.get("preconditions").is_none());
}

fn watch_lines(events: &[Value]) -> String {
    events.iter().map(|e| format!("{e}\n")).collect()
}

#[tokio::test]
async fn watch_from_version_maps_events_skips_bookmarks_and_ends_on_410() {
    let body = watch_lines(&[
        json!({"type": "ADDED", "object": stored("ns", "a", "11")}),
        json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "12"}}}),
        json!({"type": "MODIFIED", "object": stored("ns", "a", "13")}),
        json!({"type": "DELETED", "object": stored("ns", "a", "14")}),
    ]);
    let resumed = watch_lines(&[
        json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version: 14")}),
    ]);
    let mut first = step(Method::GET, "/api/v1/namespaces/ns/pods", 200, Value::Null);
    first.reply = body;
    first.query = vec![
        "watch=true",
        "resourceVersion=10",
        "allowWatchBookmarks=true",
        "labelSelector=app%3Dx",
    ];
    // The server ended the first watch; the store re-watches from the last version it saw.
    let mut second = step(Method::GET, "/api/v1/namespaces/ns/pods", 200, Value::Null);
    second.reply = resumed;
    second.query = vec!["watch=true", "resourceVersion=14"];
    let (store, server) = scripted(vec![first, second]);

    let opts = ListOptions::default().label("app", "x");
    let mut stream = store.watch(&pods(), Some("ns"), &opts, Some("10")).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(describe(&stream.next().await.unwrap().unwrap()));
    }
    assert_eq!(seen, ["+a", "~a", "-a"]);
    let err = stream.next().await.unwrap().unwrap_err();
    assert!(err.is_expired(), "{err}");
    assert!(stream.next().await.is_none());
    assert_eq!(server.await.unwrap().len(), 2);
}

#[tokio::test]
async fn watch_without_version_lists_then_watches_from_the_list() {
    let list = step(
        Method::GET,
        "/api/v1/namespaces/ns/pods",
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "20"},
               "items": [stored("ns", "a", "18")]}),
    );
    let mut watch = step(Method::GET, "/api/v1/namespaces/ns/pods", 200, Value::Null);
    watch.reply = watch_lines(&[json!({"type": "ADDED", "object": stored("ns", "b", "21")})]);
    watch.query = vec!["watch=true", "resourceVersion=20"];
    let (store, server) = scripted(vec![list, watch]);
    let mut stream = store
        .watch(&pods(), Some("ns"), &ListOptions::default(), None)
        .await
        .unwrap();
    assert_eq!(describe(&stream.next().await.unwrap().unwrap()), "+a");
    assert_eq!(describe(&stream.next().await.unwrap().unwrap()), "+b");
    drop(stream);
    let seen = server.await.unwrap();
    assert!(!seen[0].uri.contains("watch=true"));
}

#[tokio::test]
async fn connection_failures_are_unavailable() {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        let mut handle = pin!(handle);
        let (_, reply) = handle.next_request().await.unwrap();
        reply.send_error(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        ));
    });
    let store = KubeStore::from_client(Client::new(service, "default"));
    let err = store.get(&pods(), Some("ns"), "a").await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    server.await.unwrap();
}

#[tokio::test]
async fn kubeconfig_constructor_and_refused_connections() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n\
         clusters: [{name: test, cluster: {server: \"http://127.0.0.1:1\"}}]\n\
         users: [{name: test, user: {}}]\n\
         contexts: [{name: test, context: {cluster: test, user: test, namespace: ns}}]\n",
    )
    .unwrap();
    let store = KubeStore::from_kubeconfig(&path, &ClientIdentity::default())
        .await
        .unwrap();
    let err = store.get(&pods(), Some("ns"), "a").await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");

    let missing = dir.path().join("missing");
    let err = KubeStore::from_kubeconfig(&missing, &ClientIdentity::default())
        .await
        .err()
        .expect("no such file");
    assert!(err.to_string().contains("missing"), "{err}");
}

/// An API server answering 503 to everything: kube's default policy would retry 15 times with
/// backoff up to 1000 s (minutes per call); ours retries 5 times within about 1.5 s, then the
/// call fails as `Unavailable`.
#[tokio::test]
async fn a_server_answering_503_is_retried_briefly_then_reported() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = answered.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\n\
             clusters: [{{name: test, cluster: {{server: \"http://{addr}\"}}}}]\n\
             users: [{{name: test, user: {{}}}}]\n\
             contexts: [{{name: test, context: {{cluster: test, user: test, namespace: ns}}}}]\n"
        ),
    )
    .unwrap();
    let store = KubeStore::from_kubeconfig(&path, &ClientIdentity::default())
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = store.get(&pods(), Some("ns"), "a").await.unwrap_err();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert_eq!(
        answered.load(std::sync::atomic::Ordering::SeqCst),
        6,
        "the call and 5 retries"
    );
}

#[tokio::test(start_paused = true)]
async fn a_watch_closed_at_once_is_reissued_after_a_pause() {
    let mut empty = step(Method::GET, "/api/v1/namespaces/ns/pods", 200, Value::Null);
    empty.reply = String::new();
    empty.query = vec!["watch=true", "resourceVersion=5"];
    let mut second = step(Method::GET, "/api/v1/namespaces/ns/pods", 200, Value::Null);
    second.reply = watch_lines(&[json!({"type": "ADDED", "object": stored("ns", "a", "6")})]);
    second.query = vec!["watch=true", "resourceVersion=5"];
    let (store, server) = scripted(vec![empty, second]);
    let started = tokio::time::Instant::now();
    let mut stream = store
        .watch(&pods(), Some("ns"), &ListOptions::default(), Some("5"))
        .await
        .unwrap();
    assert_eq!(describe(&stream.next().await.unwrap().unwrap()), "+a");
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));
    drop(stream);
    assert_eq!(server.await.unwrap().len(), 2);
}

#[tokio::test]
async fn the_fake_api_server_logs_and_counts_requests() {
    use weft_store::MemoryStore;
    use weft_store::fake_api::FakeApiServer;

    let server = FakeApiServer::new(MemoryStore::shared(), [pods()]);
    let store = server.kube_store();
    store.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    assert!(
        store
            .create(&pods(), pod("ns", "a", "x", "n1"))
            .await
            .unwrap_err()
            .is_already_exists()
    );
    assert!(store.get(&pods(), Some("ns"), "a").await.unwrap().is_some());
    assert!(
        store
            .delete(&pods(), Some("ns"), "a", Some("0"))
            .await
            .unwrap_err()
            .is_conflict()
    );
    let requests = server.requests();
    let verbs_and_paths: Vec<String> = requests
        .iter()
        .map(|r| r.split('?').next().unwrap().to_string())
        .collect();
    assert_eq!(
        verbs_and_paths,
        [
            "POST /api/v1/namespaces/ns/pods",
            "POST /api/v1/namespaces/ns/pods",
            "GET /api/v1/namespaces/ns/pods/a",
            "DELETE /api/v1/namespaces/ns/pods/a",
        ]
    );
    assert_eq!(server.writes(), 3);
    server.clear_requests();
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn the_fake_api_server_serves_tcp_with_injected_conflicts_and_outages() {
    use weft_store::MemoryStore;
    use weft_store::fake_api::{CONCURRENT_WRITE_ANNOTATION, FakeApiServer};

    let server = FakeApiServer::new(MemoryStore::shared(), [pods()]);
    let tcp = server.serve_tcp().unwrap();
    assert!(tcp.addr().ip().is_loopback());
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    tcp.write_kubeconfig(&kubeconfig).unwrap();
    let store = KubeStore::from_kubeconfig(&kubeconfig, &ClientIdentity::default())
        .await
        .unwrap();
    let created = store.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    let mut watch = store
        .watch(
            &pods(),
            Some("ns"),
            &ListOptions::default(),
            created.metadata.resource_version.as_deref(),
        )
        .await
        .unwrap();

    // A status update that loses to the injected concurrent writer, then one on a fresh read.
    server.conflict_next_status_updates(&pods(), Some("ns"), "a", 1);
    let mut stale = created.clone();
    stale.metadata.annotations.insert("mine".into(), "1".into());
    let lost = store.update_status(&pods(), stale.clone()).await.unwrap_err();
    assert!(lost.is_conflict(), "{lost}");
    let fresh = store.get(&pods(), Some("ns"), "a").await.unwrap().unwrap();
    assert_eq!(fresh.metadata.annotation(CONCURRENT_WRITE_ANNOTATION), Some("1"));
    assert_ne!(fresh.metadata.resource_version, created.metadata.resource_version);
    let mut mine = fresh.clone();
    mine.metadata.annotations.insert("mine".into(), "1".into());
    let won = store.update_status(&pods(), mine).await.unwrap();
    assert_eq!(won.metadata.annotation("mine"), Some("1"));
    assert_eq!(won.metadata.annotation(CONCURRENT_WRITE_ANNOTATION), Some("1"));
    // The watch streams over TCP: the concurrent write, then ours.
    for mine in [None, Some("1")] {
        let watched = tokio::time::timeout(std::time::Duration::from_secs(5), watch.next())
            .await
            .unwrap();
        let Some(Ok(WatchEvent::Modified(o))) = watched else {
            panic!("{watched:?}")
        };
        assert_eq!(o.metadata.annotation(CONCURRENT_WRITE_ANNOTATION), Some("1"));
        assert_eq!(o.metadata.annotation("mine"), mine);
    }

    // Paused watches hold events back until released.
    server.pause_watches(true);
    store.create(&pods(), pod("ns", "b", "x", "n1")).await.unwrap();
    let held = tokio::time::timeout(std::time::Duration::from_millis(300), watch.next()).await;
    assert!(held.is_err(), "no event while paused");
    server.pause_watches(false);
    let released = tokio::time::timeout(std::time::Duration::from_secs(5), watch.next())
        .await
        .unwrap();
    assert!(
        matches!(released, Some(Ok(WatchEvent::Added(ref o))) if o.metadata.name == "b"),
        "{released:?}"
    );

    // Down: calls fail as unavailable and open watches end; back up: calls work again.
    server.set_down(true);
    let down = store.get(&pods(), Some("ns"), "a").await.unwrap_err();
    assert!(matches!(down, StoreError::Unavailable(_)), "{down}");
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(Ok(_)) = watch.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the watch ends when the server goes down");
    let in_process = server
        .kube_store()
        .get(&pods(), Some("ns"), "a")
        .await
        .unwrap_err();
    assert!(matches!(in_process, StoreError::Unavailable(_)), "{in_process}");
    server.set_down(false);
    assert!(store.get(&pods(), Some("ns"), "a").await.unwrap().is_some());

    // Stopped: the port is closed.
    tcp.stop();
    let stopped = store.get(&pods(), Some("ns"), "a").await.unwrap_err();
    assert!(matches!(stopped, StoreError::Unavailable(_)), "{stopped}");
}

/// Every request names the client (User-Agent `<component>/<version>`) and every write its
/// field manager, as the fake API server records them (issue 9: managedFields said "unknown").
#[tokio::test]
async fn every_request_names_the_client_and_every_write_its_field_manager() {
    use weft_store::MemoryStore;
    use weft_store::fake_api::FakeApiServer;

    let server = FakeApiServer::new(MemoryStore::shared(), [pods()]);
    let tcp = server.serve_tcp().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    tcp.write_kubeconfig(&kubeconfig).unwrap();
    let identity = ClientIdentity::new("weft-node", "1.2.3");
    let store = KubeStore::from_kubeconfig(&kubeconfig, &identity).await.unwrap();
    let created = store.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    let updated = store.update(&pods(), created).await.unwrap();
    store.update_status(&pods(), updated).await.unwrap();
    store.get(&pods(), Some("ns"), "a").await.unwrap().unwrap();
    store.list(&pods(), None, &ListOptions::default()).await.unwrap();
    store
        .delete(&pods(), Some("ns"), "a", None)
        .await
        .unwrap()
        .unwrap();

    let records = server.records();
    assert_eq!(records.len(), 6, "{records:#?}");
    for record in &records {
        assert_eq!(
            record.user_agent.as_deref(),
            Some("weft-node/1.2.3"),
            "{record:?}"
        );
        // Deletes take no fieldManager in the API; every other write names ours.
        let expected = (record.is_write() && record.method != "DELETE").then_some("weft-node");
        assert_eq!(record.field_manager.as_deref(), expected, "{record:?}");
    }
}

/// The fake API server refuses what a real one refuses (issue 9): RBAC per bearer token with
/// the API server's 403, `PUT .../status` of a CRD without the subresource (404, reported as
/// such, not as "not found"), pods without containers (422), and `blockOwnerDeletion` on a
/// reference to an owner whose finalizers the client may not update (403).
#[tokio::test]
async fn the_fake_api_server_is_as_strict_as_a_real_one() {
    use weft_store::MemoryStore;
    use weft_store::fake_api::FakeApiServer;
    use weft_store::fake_api::strict::Rules;

    let vmis = ResourceType::new(
        "kubevirt.io/v1",
        "VirtualMachineInstance",
        "virtualmachineinstances",
        true,
    );
    let vms = ResourceType::new("kubevirt.io/v1", "VirtualMachine", "virtualmachines", true);
    let claims = ResourceType::new("k8s.cni.cncf.io/v1alpha1", "IPAMClaim", "ipamclaims", true);
    let backing = MemoryStore::shared();
    let server = FakeApiServer::new(
        backing.clone(),
        [pods(), vmis.clone(), vms.clone(), claims.clone()],
    );
    server.without_status_subresource(&vmis);
    let role = |rules: Value| Rules::from_role(&json!({"kind": "ClusterRole", "rules": rules})).unwrap();
    let node_user = "system:serviceaccount:weft-system:weft-node";
    server.grant(
        "node-token",
        node_user,
        role(json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update"]},
            {"apiGroups": ["k8s.cni.cncf.io"], "resources": ["ipamclaims"], "verbs": ["create"]},
        ])),
    );
    server.grant(
        "admin-token",
        "admin",
        role(json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])),
    );
    let tcp = server.serve_tcp().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store_as = |token: Option<&str>| {
        let path = dir.path().join(format!("kubeconfig-{}", token.unwrap_or("none")));
        match token {
            Some(token) => tcp.write_kubeconfig_with_token(&path, token).unwrap(),
            None => tcp.write_kubeconfig(&path).unwrap(),
        }
        async move {
            KubeStore::from_kubeconfig(&path, &ClientIdentity::default())
                .await
                .unwrap()
        }
    };
    let (node, admin, anonymous) = (
        store_as(Some("node-token")).await,
        store_as(Some("admin-token")).await,
        store_as(None).await,
    );

    // RBAC: what the role grants works, the rest is 403 with the API server's message.
    let created = admin.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    node.list(&pods(), None, &ListOptions::default()).await.unwrap();
    node.update_status(&pods(), created.clone()).await.unwrap();
    let e = node
        .create(&pods(), pod("ns", "b", "x", "n1"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "pods is forbidden: User \"{node_user}\" cannot create resource \"pods\" in API group \"\" in the namespace \"ns\""
        )),
        "{e}"
    );
    let e = node.update(&pods(), created).await.unwrap_err().to_string();
    assert!(e.contains("cannot update resource \"pods\""), "{e}");
    let e = anonymous
        .list(&pods(), None, &ListOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
        ),
        "{e}"
    );

    // No status subresource on VMIs: 404 for .../status, reported as such; status is written
    // with the object.
    let mut vmi = Object::new(&vmis, Some("default"), "vm1");
    vmi.data.insert("status".into(), json!({"phase": "Running"}));
    let vmi = admin.create(&vmis, vmi).await.unwrap();
    let e = admin.update_status(&vmis, vmi.clone()).await.unwrap_err();
    assert!(!matches!(e, StoreError::NotFound { .. }), "{e}");
    assert!(e.to_string().contains("no status subresource"), "{e}");
    let mut next = vmi.clone();
    next.data.insert("status".into(), json!({"phase": "Succeeded"}));
    let written = admin.update(&vmis, next).await.unwrap();
    assert_eq!(written.data["status"]["phase"], "Succeeded");
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("PUT ") && r.contains("/virtualmachineinstances/vm1/status"))
    );

    // Pods need containers.
    let mut bare = pod("ns", "bare", "x", "n1");
    bare.data.insert("spec".into(), json!({"nodeName": "n1"}));
    let e = admin.create(&pods(), bare).await.unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    assert!(
        e.to_string()
            .contains("Pod \"bare\" is invalid: spec.containers: Required value"),
        "{e}"
    );

    // blockOwnerDeletion needs update on the owner's finalizers.
    let vm = admin
        .create(&vms, Object::new(&vms, Some("default"), "vm1"))
        .await
        .unwrap();
    let claim = |block: Option<bool>| {
        let mut claim = Object::new(&claims, Some("default"), "vm1.blue");
        claim.metadata.owner_references.push(weft_store::OwnerReference {
            api_version: "kubevirt.io/v1".into(),
            kind: "VirtualMachine".into(),
            name: "vm1".into(),
            uid: vm.metadata.uid.clone().unwrap(),
            controller: Some(true),
            block_owner_deletion: block,
        });
        claim
    };
    let e = node
        .create(&claims, claim(Some(true)))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ipamclaims.k8s.cni.cncf.io \"vm1.blue\" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on"),
        "{e}"
    );
    node.create(&claims, claim(None)).await.unwrap();
    admin
        .delete(&claims, Some("default"), "vm1.blue", None)
        .await
        .unwrap();
    admin.create(&claims, claim(Some(true))).await.unwrap();
}
