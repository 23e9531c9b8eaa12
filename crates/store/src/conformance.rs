//! Behaviour tests every [`Store`] backend must pass, written once.
//!
//! Each function takes a fresh, empty store and panics on a deviation. Run them all against a
//! backend with [`store_conformance_tests!`](crate::store_conformance_tests), from a test crate
//! that has `tokio` (with `macros` and `rt-multi-thread`) as a dependency:
//!
//! ```ignore
//! weft_store::store_conformance_tests!(|| (weft_store::MemoryStore::shared(), ()));
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{Api, ListOptions, Object, ObjectMeta, Resource, ResourceType, Store, WatchEvent, WatchStream};

/// Generate one `#[tokio::test]` per conformance check. `$factory` is called once per test and
/// returns `(Arc<dyn Store>, guard)`; the guard (a temporary directory, say) lives as long as
/// the test.
#[macro_export]
macro_rules! store_conformance_tests {
    ($factory:expr) => {
        $crate::store_conformance_tests!(@each $factory;
            create_assigns_metadata_and_rejects_duplicates,
            update_is_compare_and_swap,
            update_keeps_status,
            update_status_keeps_spec_but_changes_annotations,
            delete_honours_precondition,
            finalizers_hold_deletion,
            list_selects_by_namespace_labels_and_fields,
            cluster_scoped_objects,
            create_rejects_invalid_names,
            watch_from_version_sees_every_change_in_order,
            watch_without_version_starts_with_added,
            watch_applies_selectors,
            concurrent_modify_loses_no_increment,
            concurrent_creates_have_one_winner
        );
    };
    (@each $factory:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                let (store, _guard) = ($factory)();
                $crate::conformance::$check(store).await;
            }
        )*
    };
}

/// The namespaced kind the checks use.
pub fn pods() -> ResourceType {
    ResourceType::new("v1", "Pod", "pods", true)
}

/// A cluster-scoped kind the checks use.
pub fn nodes() -> ResourceType {
    ResourceType::new("v1", "Node", "nodes", false)
}

/// A pod `name` in `namespace` on `node`, labelled `app=<app>`.
pub fn pod(namespace: &str, name: &str, app: &str, node: &str) -> Object {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
        // A real API server rejects pods without containers (so does the fake one).
        "spec": pod_spec(node)
    }))
    .expect("pod literal")
}

/// A pod spec on `node` (with a container: a real API server rejects pods without one).
pub fn pod_spec(node: &str) -> Value {
    json!({"nodeName": node, "containers": [{"name": "main", "image": "pause"}]})
}

/// A typed counter used by the concurrency checks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counter {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// The count.
    #[serde(default)]
    pub spec: CounterSpec,
}

/// The counter's value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterSpec {
    /// Number of increments so far.
    pub count: u64,
}

impl Resource for Counter {
    const API_VERSION: &'static str = "test.weft.dev/v1";
    const KIND: &'static str = "Counter";
    const PLURAL: &'static str = "counters";
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The next watch event, failing the test after 5 s.
pub async fn next_event(stream: &mut WatchStream) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("a watch event within 5 s")
        .expect("the watch stream to stay open")
        .expect("a watch event, not an error")
}

/// `+name`, `~name` or `-name` for an event, to compare sequences.
pub fn describe(event: &WatchEvent) -> String {
    let (sign, obj) = match event {
        WatchEvent::Added(o) => ('+', o),
        WatchEvent::Modified(o) => ('~', o),
        WatchEvent::Deleted(o) => ('-', o),
    };
    format!("{sign}{}", obj.metadata.name)
}

fn rv_of(obj: &Object) -> u64 {
    obj.metadata
        .resource_version
        .as_deref()
        .expect("stored objects carry a resourceVersion")
        .parse()
        .expect("resourceVersions of embedded stores are numbers")
}

/// create assigns uid, creationTimestamp and resourceVersion; a second create fails.
pub async fn create_assigns_metadata_and_rejects_duplicates(store: Arc<dyn Store>) {
    let created = store.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let first = rv_of(&created);
    let fetched = store.get(&pods(), Some("ns"), "a").await.unwrap().unwrap();
    assert_eq!(fetched, created);
    let err = store
        .create(&pods(), pod("ns", "a", "y", "n2"))
        .await
        .unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    let other = store.create(&pods(), pod("other", "a", "x", "n1")).await.unwrap();
    assert!(rv_of(&other) > first, "revisions increase");
    assert!(store.get(&pods(), Some("ns"), "missing").await.unwrap().is_none());
    let mut nameless = pod("ns", "", "x", "n1");
    nameless.metadata.name.clear();
    assert!(matches!(
        store.create(&pods(), nameless).await,
        Err(crate::StoreError::Invalid(_))
    ));
}

/// A stale resourceVersion conflicts; none overwrites; a missing object is NotFound.
pub async fn update_is_compare_and_swap(store: Arc<dyn Store>) {
    let created = store.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    let mut fresh = created.clone();
    fresh.data.insert("spec".into(), pod_spec("n2"));
    let updated = store.update(&pods(), fresh).await.unwrap();
    assert!(rv_of(&updated) > rv_of(&created));
    assert_eq!(updated.metadata.uid, created.metadata.uid);

    let mut stale = created.clone();
    stale.data.insert("spec".into(), pod_spec("n3"));
    let err = store.update(&pods(), stale.clone()).await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let now = store.get(&pods(), Some("ns"), "a").await.unwrap().unwrap();
    assert_eq!(now.data["spec"]["nodeName"], "n2");

    stale.metadata.resource_version = None;
    let forced = store.update(&pods(), stale).await.unwrap();
    assert_eq!(forced.data["spec"]["nodeName"], "n3");

    let err = store
        .update(&pods(), pod("ns", "ghost", "x", "n1"))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

/// update does not touch status.
pub async fn update_keeps_status(store: Arc<dyn Store>) {
    let created = store.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    let mut with_status = created.clone();
    with_status
        .data
        .insert("status".into(), json!({"phase": "Running"}));
    let after_status = store.update_status(&pods(), with_status).await.unwrap();
    let mut spec_change = after_status.clone();
    spec_change
        .data
        .insert("status".into(), json!({"phase": "Overwritten"}));
    spec_change.data.insert("spec".into(), pod_spec("n9"));
    let after = store.update(&pods(), spec_change).await.unwrap();
    assert_eq!(after.data["status"]["phase"], "Running");
    assert_eq!(after.data["spec"]["nodeName"], "n9");
    let mut no_status = after.clone();
    no_status.data.remove("status");
    let after = store.update(&pods(), no_status).await.unwrap();
    assert_eq!(after.data["status"]["phase"], "Running");
}

/// update_status changes status, labels and annotations, and nothing else.
pub async fn update_status_keeps_spec_but_changes_annotations(store: Arc<dyn Store>) {
    let created = store.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    let mut change = created.clone();
    change.data.insert("status".into(), json!({"phase": "Running"}));
    change.data.insert("spec".into(), pod_spec("ignored"));
    change.metadata.annotations.insert("k".into(), "v".into());
    change.metadata.labels.insert("app".into(), "y".into());
    change.metadata.finalizers.push("ignored".into());
    let after = store.update_status(&pods(), change).await.unwrap();
    assert_eq!(after.data["spec"]["nodeName"], "n1");
    assert_eq!(after.data["status"]["phase"], "Running");
    assert_eq!(after.metadata.annotation("k"), Some("v"));
    assert_eq!(after.metadata.label("app"), Some("y"));
    assert!(after.metadata.finalizers.is_empty());
    assert_eq!(store.get(&pods(), Some("ns"), "a").await.unwrap().unwrap(), after);
    let err = store.update_status(&pods(), created).await.unwrap_err();
    assert!(
        err.is_conflict(),
        "status updates are compare-and-swap too: {err}"
    );
}

/// delete with a stale precondition conflicts; with the right one it removes; absent is `None`.
pub async fn delete_honours_precondition(store: Arc<dyn Store>) {
    let created = store.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    let updated = store.update(&pods(), created.clone()).await.unwrap();
    let err = store
        .delete(
            &pods(),
            Some("ns"),
            "a",
            created.metadata.resource_version.as_deref(),
        )
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(store.get(&pods(), Some("ns"), "a").await.unwrap().is_some());
    let last = store
        .delete(
            &pods(),
            Some("ns"),
            "a",
            updated.metadata.resource_version.as_deref(),
        )
        .await
        .unwrap()
        .expect("the deleted object");
    assert_eq!(last.metadata.name, "a");
    assert!(store.get(&pods(), Some("ns"), "a").await.unwrap().is_none());
    assert!(
        store
            .delete(&pods(), Some("ns"), "a", None)
            .await
            .unwrap()
            .is_none()
    );
}

/// Finalizers turn delete into a deletionTimestamp; removing the last one removes the object.
pub async fn finalizers_hold_deletion(store: Arc<dyn Store>) {
    let mut p = pod("ns", "a", "x", "n1");
    p.metadata.finalizers = vec!["weft.dev/a".into(), "weft.dev/b".into()];
    store.create(&pods(), p).await.unwrap();
    let terminating = store
        .delete(&pods(), Some("ns"), "a", None)
        .await
        .unwrap()
        .unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let again = store
        .delete(&pods(), Some("ns"), "a", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        again.metadata.deletion_timestamp,
        terminating.metadata.deletion_timestamp
    );

    let mut one_left = again.clone();
    one_left.metadata.finalizers.retain(|f| f != "weft.dev/a");
    let still = store.update(&pods(), one_left).await.unwrap();
    assert_eq!(still.metadata.finalizers, ["weft.dev/b"]);
    assert!(store.get(&pods(), Some("ns"), "a").await.unwrap().is_some());

    let mut none_left = still.clone();
    none_left.metadata.finalizers.clear();
    store.update(&pods(), none_left).await.unwrap();
    assert!(store.get(&pods(), Some("ns"), "a").await.unwrap().is_none());
}

/// list filters by namespace, labels and fields, orders by namespace then name, and returns a
/// resourceVersion at least as new as every item.
pub async fn list_selects_by_namespace_labels_and_fields(store: Arc<dyn Store>) {
    for (ns, name, app, node) in [
        ("b", "p2", "web", "n1"),
        ("a", "p1", "web", "n2"),
        ("a", "p0", "db", "n1"),
    ] {
        store.create(&pods(), pod(ns, name, app, node)).await.unwrap();
    }
    store
        .create(&nodes(), Object::new(&nodes(), None, "n1"))
        .await
        .unwrap();
    let names = |list: crate::ObjectList| -> Vec<String> { list.items.iter().map(Object::key).collect() };

    let all = store.list(&pods(), None, &ListOptions::default()).await.unwrap();
    let top = all.items.iter().map(rv_of).max().unwrap();
    assert!(all.resource_version.parse::<u64>().unwrap() >= top);
    assert_eq!(names(all), ["a/p0", "a/p1", "b/p2"]);
    let in_a = store
        .list(&pods(), Some("a"), &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(names(in_a), ["a/p0", "a/p1"]);
    let web = store
        .list(&pods(), None, &ListOptions::default().label("app", "web"))
        .await
        .unwrap();
    assert_eq!(names(web), ["a/p1", "b/p2"]);
    let on_n1 = ListOptions::default().field("spec.nodeName", "n1");
    assert_eq!(
        names(store.list(&pods(), None, &on_n1).await.unwrap()),
        ["a/p0", "b/p2"]
    );
    let both = on_n1.label("app", "web");
    assert_eq!(names(store.list(&pods(), None, &both).await.unwrap()), ["b/p2"]);
    let by_name = ListOptions::default().field("metadata.name", "p1");
    assert_eq!(
        names(store.list(&pods(), None, &by_name).await.unwrap()),
        ["a/p1"]
    );
}

/// Cluster-scoped kinds have no namespace; a namespace on them is invalid.
pub async fn cluster_scoped_objects(store: Arc<dyn Store>) {
    let node = store
        .create(&nodes(), Object::new(&nodes(), None, "n1"))
        .await
        .unwrap();
    assert_eq!(node.metadata.namespace, None);
    assert_eq!(store.get(&nodes(), None, "n1").await.unwrap(), Some(node));
    let err = store
        .create(&nodes(), Object::new(&nodes(), Some("ns"), "n2"))
        .await
        .unwrap_err();
    assert!(matches!(err, crate::StoreError::Invalid(_)), "{err}");
    let err = store
        .create(&pods(), Object::new(&pods(), None, "p"))
        .await
        .unwrap_err();
    assert!(matches!(err, crate::StoreError::Invalid(_)), "{err}");
    assert!(store.delete(&nodes(), None, "n1", None).await.unwrap().is_some());
}

/// Names the API server refuses (`/`, `..`, upper case, 300 characters, a bad namespace) are
/// refused on create with an invalid-object error naming the field, and nothing is stored.
pub async fn create_rejects_invalid_names(store: Arc<dyn Store>) {
    let long = "a".repeat(300);
    for (namespace, name, field) in [
        ("ns", "a/b", "metadata.name"),
        ("ns", "..", "metadata.name"),
        ("ns", "Upper", "metadata.name"),
        ("ns", long.as_str(), "metadata.name"),
        ("Bad_NS", "ok", "metadata.namespace"),
    ] {
        let err = store
            .create(&pods(), pod(namespace, name, "x", "n1"))
            .await
            .unwrap_err();
        assert!(err.is_invalid(), "{name}: {err}");
        let text = err.to_string();
        assert!(text.contains(&format!("{field}: Invalid value")), "{text}");
        assert!(text.contains("is invalid"), "{text}");
    }
    let err = store
        .create(&nodes(), Object::new(&nodes(), None, "Node/1"))
        .await
        .unwrap_err();
    assert!(err.is_invalid(), "{err}");
    assert!(
        store
            .list(&pods(), None, &ListOptions::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        store
            .list(&nodes(), None, &ListOptions::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

/// A watch from a resourceVersion delivers every later change of its kind, in order.
pub async fn watch_from_version_sees_every_change_in_order(store: Arc<dyn Store>) {
    store
        .create(&pods(), pod("ns", "before", "x", "n1"))
        .await
        .unwrap();
    let start = store.list(&pods(), None, &ListOptions::default()).await.unwrap();
    let mut stream = store
        .watch(
            &pods(),
            None,
            &ListOptions::default(),
            Some(&start.resource_version),
        )
        .await
        .unwrap();
    let a = store.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    store
        .create(&nodes(), Object::new(&nodes(), None, "n1"))
        .await
        .unwrap();
    let b = store.create(&pods(), pod("other", "b", "x", "n1")).await.unwrap();
    let a2 = store.update(&pods(), a).await.unwrap();
    let mut status = a2.clone();
    status.data.insert("status".into(), json!({"phase": "Running"}));
    store.update_status(&pods(), status).await.unwrap();
    store.delete(&pods(), Some("other"), "b", None).await.unwrap();
    let mut seen = Vec::new();
    let mut last_rv = 0;
    for _ in 0..5 {
        let event = next_event(&mut stream).await;
        let rv = rv_of(event.object());
        assert!(rv > last_rv, "events come in revision order");
        last_rv = rv;
        seen.push(describe(&event));
    }
    assert_eq!(seen, ["+a", "+b", "~a", "~a", "-b"]);
    assert!(last_rv > rv_of(&b));

    // Resuming from the middle replays exactly the rest.
    let mut resumed = store
        .watch(
            &pods(),
            Some("ns"),
            &ListOptions::default(),
            Some(&a2.metadata.resource_version.unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(describe(&next_event(&mut resumed).await), "~a");
    store.delete(&pods(), Some("ns"), "a", None).await.unwrap();
    assert_eq!(describe(&next_event(&mut resumed).await), "-a");
}

/// A watch without a resourceVersion starts with the current objects as `Added`.
pub async fn watch_without_version_starts_with_added(store: Arc<dyn Store>) {
    store.create(&pods(), pod("ns", "a", "x", "n1")).await.unwrap();
    store.create(&pods(), pod("ns", "b", "x", "n1")).await.unwrap();
    store
        .create(&pods(), pod("elsewhere", "c", "x", "n1"))
        .await
        .unwrap();
    let mut stream = store
        .watch(&pods(), Some("ns"), &ListOptions::default(), None)
        .await
        .unwrap();
    let mut initial = vec![
        describe(&next_event(&mut stream).await),
        describe(&next_event(&mut stream).await),
    ];
    initial.sort();
    assert_eq!(initial, ["+a", "+b"]);
    store.delete(&pods(), Some("ns"), "a", None).await.unwrap();
    store
        .create(&pods(), pod("elsewhere", "d", "x", "n1"))
        .await
        .unwrap();
    store.create(&pods(), pod("ns", "e", "x", "n1")).await.unwrap();
    assert_eq!(describe(&next_event(&mut stream).await), "-a");
    assert_eq!(describe(&next_event(&mut stream).await), "+e");
}

/// Label and field selectors apply to watches.
pub async fn watch_applies_selectors(store: Arc<dyn Store>) {
    let opts = ListOptions::default()
        .label("app", "web")
        .field("spec.nodeName", "n1");
    let mut stream = store.watch(&pods(), None, &opts, Some("0")).await.unwrap();
    store.create(&pods(), pod("ns", "db", "db", "n1")).await.unwrap();
    store
        .create(&pods(), pod("ns", "far", "web", "n2"))
        .await
        .unwrap();
    store
        .create(&pods(), pod("ns", "hit", "web", "n1"))
        .await
        .unwrap();
    assert_eq!(describe(&next_event(&mut stream).await), "+hit");
}

/// Many concurrent read-modify-write increments through [`Api::modify`] lose none.
pub async fn concurrent_modify_loses_no_increment(store: Arc<dyn Store>) {
    const TASKS: u64 = 8;
    const EACH: u64 = 25;
    let api: Api<Counter> = Api::namespaced(store, "ns");
    let mut counter = Counter::default();
    counter.metadata.name = "c".into();
    api.create(&counter).await.unwrap();
    let workers: Vec<_> = (0..TASKS)
        .map(|_| {
            let api = api.clone();
            tokio::spawn(async move {
                for _ in 0..EACH {
                    api.modify("c", |c| {
                        c.spec.count += 1;
                        true
                    })
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    assert_eq!(api.get_required("c").await.unwrap().spec.count, TASKS * EACH);
}

/// Concurrent creates of the same names: exactly one winner per name.
pub async fn concurrent_creates_have_one_winner(store: Arc<dyn Store>) {
    const TASKS: usize = 8;
    const NAMES: usize = 20;
    let workers: Vec<_> = (0..TASKS)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut won = 0;
                for i in 0..NAMES {
                    match store
                        .create(&pods(), pod("ns", &format!("p{i}"), "x", "n1"))
                        .await
                    {
                        Ok(_) => won += 1,
                        Err(e) => assert!(e.is_already_exists(), "{e}"),
                    }
                }
                won
            })
        })
        .collect();
    let mut total = 0;
    for worker in workers {
        total += worker.await.unwrap();
    }
    assert_eq!(total, NAMES);
    let list = store
        .list(&pods(), Some("ns"), &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), NAMES);
}
