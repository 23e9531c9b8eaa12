//! The backend conformance suite, run against every embedded backend.

mod memory {
    weft_store::store_conformance_tests!(|| (weft_store::MemoryStore::shared(), ()));
}

mod sqlite {
    weft_store::store_conformance_tests!(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = weft_store::SqliteStore::open(dir.path().join("store.db")).expect("open the store");
        (store.shared(), dir)
    });
}

/// One connection on the calling thread, as the `weft-ipam` plugin process opens the store.
mod sqlite_single_connection {
    weft_store::store_conformance_tests!(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let options = weft_store::SqliteOptions {
            single_connection: true,
            ..weft_store::SqliteOptions::default()
        };
        let store =
            weft_store::SqliteStore::open_with(dir.path().join("store.db"), options).expect("open the store");
        (store.shared(), dir)
    });
}

/// The Kubernetes backend through kube-rs and HTTP, against the fake API server.
mod kube_over_http {
    use std::sync::Arc;

    use weft_store::conformance::{Counter, nodes, pods};
    use weft_store::fake_api::FakeApiServer;
    use weft_store::{MemoryStore, Resource, Store};

    weft_store::store_conformance_tests!(|| {
        let types = [pods(), nodes(), Counter::resource_type()];
        let server = FakeApiServer::new(MemoryStore::shared(), types);
        (Arc::new(server.kube_store()) as Arc<dyn Store>, server)
    });
}
