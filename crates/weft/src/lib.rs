//! weft: one multi-call binary. Invoked as `weft-cni` it is the full CNI shim and as
//! `weft-ipam` the full IPAM plugin (which the installed static `weft-cni` / `weft-ipam` client
//! hands calls to, see `install`), as `passthru` the head of an auxiliary CNI chain; otherwise
//! the CLI (node agent, controller, local cluster, inspection). The binary's `main` is [`run`];
//! everything else lives here.

pub mod admission;
pub mod agent;
pub mod allocator;
pub mod claims;
pub mod cli;
pub mod cluster;
pub mod controller;
pub mod describe;
pub mod event_recorder;
pub mod events;
pub mod explain;
pub mod install;
pub mod ipam_plugin;
pub mod jsonpath;
pub mod kinds;
pub mod local;
pub mod manifests;
pub mod passthru;
pub mod protocol;
pub mod shim;
pub mod sys;

use std::process::ExitCode;

/// The multi-call entry point: dispatch on the name the binary was invoked as (argv[0]).
pub fn run() -> ExitCode {
    // The static clients' hand-over marker is for the clients only (weft_plugin_client::full):
    // it must not reach this process's own children (the agent's delegates run the clients).
    // SAFETY: first thing in main, before any thread exists.
    unsafe { std::env::remove_var(weft_plugin_client::full::HANDOFF_ENV) };
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let name = std::path::Path::new(&argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("weft")
        .to_string();
    match name.as_str() {
        "weft-cni" => shim::run(),
        "weft-ipam" => ipam_plugin::run(),
        weft_meta::PASSTHRU_TYPE => passthru::run(),
        _ => ExitCode::from(cli::run().clamp(0, 255) as u8),
    }
}
