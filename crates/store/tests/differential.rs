//! Differential property: any sequence of operations gives the same results, objects and
//! resourceVersions on the in-memory store, the SQLite store and the Kubernetes backend
//! (through kube-rs and HTTP, against the fake API server).

use proptest::prelude::*;
use serde_json::json;
use weft_store::conformance::{pod, pods};
use weft_store::fake_api::FakeApiServer;
use weft_store::{ListOptions, MemoryStore, Object, SqliteStore, Store, StoreError};

const NAMES: [&str; 3] = ["a", "b", "c"];

#[derive(Clone, Debug)]
enum Version {
    /// No resourceVersion: unconditional.
    Unset,
    /// The stored one: the compare-and-swap succeeds.
    Current,
    /// An old one: the compare-and-swap fails.
    Stale,
}

#[derive(Clone, Debug)]
enum Op {
    Create {
        name: usize,
        finalizer: bool,
    },
    Update {
        name: usize,
        node: u8,
        version: Version,
        drop_finalizers: bool,
    },
    UpdateStatus {
        name: usize,
        phase: u8,
        version: Version,
    },
    Delete {
        name: usize,
        version: Version,
    },
}

fn version() -> impl Strategy<Value = Version> {
    prop_oneof![Just(Version::Unset), Just(Version::Current), Just(Version::Stale)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..NAMES.len(), any::<bool>()).prop_map(|(name, finalizer)| Op::Create { name, finalizer }),
        (0..NAMES.len(), 0..3u8, version(), any::<bool>()).prop_map(
            |(name, node, version, drop_finalizers)| {
                Op::Update {
                    name,
                    node,
                    version,
                    drop_finalizers,
                }
            }
        ),
        (0..NAMES.len(), 0..3u8, version()).prop_map(|(name, phase, version)| Op::UpdateStatus {
            name,
            phase,
            version
        }),
        (0..NAMES.len(), version()).prop_map(|(name, version)| Op::Delete { name, version }),
    ]
}

/// What a result looks like without the parts each store makes up (uid, timestamps).
fn comparable(result: Result<Option<Object>, StoreError>) -> String {
    match result {
        Ok(Some(mut obj)) => {
            obj.metadata.uid = None;
            obj.metadata.creation_timestamp = None;
            let terminating = obj.metadata.deletion_timestamp.take().is_some();
            format!(
                "ok {} terminating={terminating}",
                serde_json::to_string(&obj).unwrap()
            )
        }
        Ok(None) => "ok none".into(),
        Err(e) => format!("err {e}"),
    }
}

/// Like [`comparable`], but errors by kind only (the Kubernetes backend words them differently).
fn comparable_kind(result: Result<Option<Object>, StoreError>) -> String {
    match result {
        Err(e) => format!("err {}", kind_of(&e)),
        ok => comparable(ok),
    }
}

fn kind_of(e: &StoreError) -> &'static str {
    match e {
        StoreError::NotFound { .. } => "not found",
        StoreError::AlreadyExists { .. } => "already exists",
        StoreError::Conflict { .. } => "conflict",
        StoreError::Invalid(_) | StoreError::InvalidObject(_) => "invalid",
        StoreError::Expired(_) => "expired",
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Backend(_) => "backend",
        StoreError::Refused(_) => "refused",
    }
}

fn with_version(mut obj: Object, version: &Version, current: Option<&Object>) -> Object {
    obj.metadata.resource_version = match version {
        Version::Unset => None,
        Version::Current => current.and_then(|c| c.metadata.resource_version.clone()),
        Version::Stale => Some("0".into()),
    };
    obj
}

async fn apply(store: &dyn Store, op: &Op) -> Result<Option<Object>, StoreError> {
    let ty = pods();
    let name = |i: &usize| NAMES[*i];
    match op {
        Op::Create { name: i, finalizer } => {
            let mut p = pod("ns", name(i), "x", "n0");
            if *finalizer {
                p.metadata.finalizers.push("weft.dev/hold".into());
            }
            store.create(&ty, p).await.map(Some)
        }
        Op::Update {
            name: i,
            node,
            version,
            drop_finalizers,
        } => {
            let current = store.get(&ty, Some("ns"), name(i)).await?;
            let mut next = current.clone().unwrap_or_else(|| pod("ns", name(i), "x", "n0"));
            next.data.insert(
                "spec".into(),
                weft_store::conformance::pod_spec(&format!("n{node}")),
            );
            if *drop_finalizers {
                next.metadata.finalizers.clear();
            }
            store
                .update(&ty, with_version(next, version, current.as_ref()))
                .await
                .map(Some)
        }
        Op::UpdateStatus {
            name: i,
            phase,
            version,
        } => {
            let current = store.get(&ty, Some("ns"), name(i)).await?;
            let mut next = current.clone().unwrap_or_else(|| pod("ns", name(i), "x", "n0"));
            next.data
                .insert("status".into(), json!({"phase": format!("p{phase}")}));
            next.metadata
                .annotations
                .insert("phase".into(), format!("p{phase}"));
            store
                .update_status(&ty, with_version(next, version, current.as_ref()))
                .await
                .map(Some)
        }
        Op::Delete { name: i, version } => {
            let current = store.get(&ty, Some("ns"), name(i)).await?;
            let precondition = match version {
                Version::Unset => None,
                Version::Current => current.and_then(|c| c.metadata.resource_version),
                Version::Stale => Some("0".into()),
            };
            store
                .delete(&ty, Some("ns"), name(i), precondition.as_deref())
                .await
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn memory_and_sqlite_agree(ops in proptest::collection::vec(op(), 1..24)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let memory = MemoryStore::new();
            let sqlite = SqliteStore::open(dir.path().join("store.db")).unwrap();
            let kube = FakeApiServer::new(MemoryStore::shared(), [pods()]).kube_store();
            for (step, op) in ops.iter().enumerate() {
                let expected = apply(&memory, op).await;
                let expected_kind = match &expected {
                    Ok(o) => comparable(Ok(o.clone())),
                    Err(e) => format!("err {}", kind_of(e)),
                };
                let expected = comparable(expected);
                let actual = comparable(apply(&sqlite, op).await);
                prop_assert_eq!(&actual, &expected, "sqlite, step {} {:?}", step, op);
                let actual = comparable_kind(apply(&kube, op).await);
                prop_assert_eq!(&actual, &expected_kind, "kube, step {} {:?}", step, op);
            }
            let all = ListOptions::default();
            let expected = memory.list(&pods(), None, &all).await.unwrap();
            let actual = sqlite.list(&pods(), None, &all).await.unwrap();
            prop_assert_eq!(actual.resource_version, expected.resource_version);
            let strip = |items: Vec<Object>| items.into_iter().map(|o| comparable(Ok(Some(o)))).collect::<Vec<_>>();
            prop_assert_eq!(strip(actual.items), strip(expected.items));
            Ok(())
        })?;
    }
}
