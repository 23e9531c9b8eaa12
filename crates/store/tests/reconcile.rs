//! The reconciler framework against the fake API server: a kind whose CRD is not installed is
//! said once, re-checked with backoff and served as soon as the CRD appears (no restart); with
//! nothing changing, the reconciler makes no request besides its open watches.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::json;
use tokio::sync::mpsc;
use weft_store::fake_api::FakeApiServer;
use weft_store::reconcile::{self, Action, Backoff, Change, Config};
use weft_store::{CachedStore, ListOptions, MemoryStore, Object, ResourceType, Store};

fn vms() -> ResourceType {
    ResourceType::new("kubevirt.io/v1", "VirtualMachine", "virtualmachines", true)
}

fn pods() -> ResourceType {
    ResourceType::new("v1", "Pod", "pods", true)
}

fn object(kind: &str, api_version: &str, name: &str) -> Object {
    serde_json::from_value(json!({"apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "namespace": "default"}, "spec": {}}))
    .unwrap()
}

/// Wait (bounded) until `rx` yields `want`.
async fn wait_for(rx: &mut mpsc::UnboundedReceiver<String>, want: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{want} was never reconciled"))
            .expect("reconciler running");
        if got == want {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_crd_is_served_as_soon_as_it_is_installed_and_idle_costs_no_requests() {
    let objects = MemoryStore::shared();
    // The API serves pods; the VirtualMachine CRD is not installed yet.
    let api = FakeApiServer::new(objects.clone(), vec![pods()]);
    let backend: Arc<dyn Store> = Arc::new(api.kube_store());
    let (cache, changes) = CachedStore::with_changes(
        backend,
        vec![(pods(), ListOptions::default()), (vms(), ListOptions::default())],
    );
    cache.wait_synced(Duration::from_secs(10)).await.unwrap();
    let cache = Arc::new(cache);
    assert!(cache.is_missing(&vms()));
    assert!(!cache.is_missing(&pods()));
    // Requests for the missing kind only: the pods watch opens after the cache says synced,
    // so it may land in this window (a count of every request flaked on it). The kind's own
    // re-check comes 1 s after its first list, far outside the window.
    let vm_requests = || {
        api.requests()
            .iter()
            .filter(|r| r.contains("/virtualmachines"))
            .count()
    };
    let before = vm_requests();
    let err = cache
        .list(&vms(), None, &ListOptions::default())
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert_eq!(vm_requests(), before, "a read of a missing kind makes no request");

    let (seen_tx, mut seen) = mpsc::unbounded_channel::<String>();
    let (stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
    let reader = cache.clone();
    let task = tokio::spawn(reconcile::run(
        changes,
        |change: &Change| {
            vec![format!(
                "{}/{}",
                change.ty.kind,
                change.event.object().metadata.name
            )]
        },
        move |key: String| {
            let seen = seen_tx.clone();
            let reader = reader.clone();
            async move {
                // Reads come from the cache.
                let (kind, name) = key.split_once('/').unwrap();
                let ty = if kind == "Pod" { pods() } else { vms() };
                let found = reader.get(&ty, Some("default"), name).await?;
                let _ = seen.send(format!("{key}:{}", found.is_some()));
                Ok::<_, weft_store::StoreError>(Action::Done)
            }
            .boxed()
        },
        Config {
            name: "test",
            backoff: Backoff::default(),
            resyncs: Vec::new(),
            on_idle: None,
        },
        async {
            let _ = stop.await;
        },
    ));

    // A change of a served kind reaches the reconciler.
    objects.create(&pods(), object("Pod", "v1", "p1")).await.unwrap();
    wait_for(&mut seen, "Pod/p1:true").await;

    // The CRD appears, with an object in it: reconciled without a restart.
    api.serve_type(vms());
    objects
        .create(&vms(), object("VirtualMachine", "kubevirt.io/v1", "vm1"))
        .await
        .unwrap();
    wait_for(&mut seen, "VirtualMachine/vm1:true").await;
    assert!(!cache.is_missing(&vms()));
    let vm_lists = api
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET /apis/kubevirt.io/v1/virtualmachines") && !r.contains("watch=true"))
        .count();
    // Re-checked with backoff (1 s, 2 s, 4 s ...), not every pass: a handful of lists at most
    // for the seconds the CRD was missing.
    assert!(vm_lists <= 6, "{vm_lists} lists of the missing kind");

    // Idle: nothing changes, nothing is requested (the watches are open, not re-requested).
    // The VM watch opens right after the list that found the CRD: wait for it first.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !api
        .requests()
        .iter()
        .any(|r| r.starts_with("GET /apis/kubevirt.io/v1/virtualmachines") && r.contains("watch=true"))
    {
        assert!(std::time::Instant::now() < deadline, "the VM watch never opened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    api.clear_requests();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = api.requests();
    assert!(idle.is_empty(), "idle requests: {idle:?}");

    stop_tx.send(()).unwrap();
    task.await.unwrap();
}
