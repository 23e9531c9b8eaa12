//! weft: one multi-call binary. Invoked as `weft-cni` it is the CNI shim, as `weft-ipam` the
//! IPAM plugin; otherwise the CLI (node agent, controller, local cluster, inspection).

fn main() {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let name = std::path::Path::new(&argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("weft")
        .to_string();
    match name.as_str() {
        "weft-cni" | "weft-ipam" => {
            eprintln!("{name}: not implemented yet");
            std::process::exit(1);
        }
        _ => println!("weft {}", env!("CARGO_PKG_VERSION")),
    }
}
