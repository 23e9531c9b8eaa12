//! `weft-cni` as installed (compiled by crates/weft/build.rs, statically linked).

fn main() -> std::process::ExitCode {
    weft_plugin_client::shim::run()
}
