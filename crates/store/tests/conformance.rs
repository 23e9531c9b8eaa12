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
