//! The agent as `weft agent` builds it, for the agent's unit tests.

use std::sync::Arc;

use weft_store::Store;

use super::Agent;

/// The agent as `weft agent` builds it, on `store`, with its cache dir under `dir`.
pub fn on(store: Arc<dyn Store>, backend: Arc<dyn Store>, dir: &std::path::Path) -> Arc<Agent> {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        agent: super::AgentArgs,
    }
    let path = |p: &str| dir.join(p).display().to_string();
    let args = Cli::parse_from([
        "weft".to_string(),
        "--node".into(),
        "n1".into(),
        "--socket".into(),
        path("weft.sock"),
        "--conf-dir".into(),
        path("net.d"),
        "--cache-dir".into(),
        path("cache"),
    ])
    .agent;
    let status_writes = Arc::new(super::status_writes::StatusWrites::new(
        store.clone(),
        backend.clone(),
        args.cache_dir.clone(),
        Default::default(),
        Default::default(),
    ));
    Arc::new(Agent {
        args,
        state_dir: dir.to_path_buf(),
        store,
        ipam_store: backend.clone(),
        store_identity: None,
        daemon_config: Default::default(),
        metrics: Default::default(),
        journal: super::journal::ReleaseJournal::open(dir),
        ipam_held: weft_ipam::HeldCache::default(),
        status_write: super::status_writes::StatusWrite::BeforeReply,
        status_writes,
        adds: Default::default(),
        sandboxes: Default::default(),
        gc_gate: Default::default(),
        plugins: Arc::new(weft_cni::runtime::limit::ExecLimit::new(8)),
        events: crate::event_recorder::Recorder::new(
            backend,
            "weft-node",
            crate::event_recorder::Limits::default(),
        ),
    })
}
