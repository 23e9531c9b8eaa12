//! weft: one multi-call binary. Invoked as `weft-cni` it is the CNI shim, as `weft-ipam` the
//! full IPAM plugin (which the installed `weft-ipam` client runs, see `install`), as `passthru`
//! the head of an auxiliary CNI chain; otherwise the CLI (node agent, controller, local
//! cluster, inspection).

mod admission;
mod agent;
mod claims;
mod cli;
mod cluster;
mod controller;
mod describe;
mod event_recorder;
mod events;
mod explain;
mod install;
mod ipam_plugin;
mod jsonpath;
mod kinds;
mod local;
mod passthru;
mod protocol;
mod shim;

use std::process::ExitCode;

fn main() -> ExitCode {
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
