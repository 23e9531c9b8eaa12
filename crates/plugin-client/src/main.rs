//! `weft-cni` and `weft-ipam` as installed: one executable, its role chosen by the name it runs
//! under (compiled by crates/weft/build.rs, statically linked).

fn main() -> std::process::ExitCode {
    weft_plugin_client::main(std::env::args_os())
}
