//! weft: one multi-call binary (`weft`, `weft-cni`, `weft-ipam`, `passthru`); see the library
//! crate for what each name does.

fn main() -> std::process::ExitCode {
    weft::run()
}
