//! Link the `weft` binary as a position-dependent executable.
//!
//! `weft` is exec'd once per CNI call under the names `weft-cni` and `weft-ipam`. As a PIE, every
//! start has the dynamic loader apply ~30,000 relative relocations and copy-on-write ~120 pages of
//! `.data.rel.ro` before `main`; linked without PIE the linker resolves them once, at build time.
//! (Measured in docs/benchmarks.md; the cost is the binary's own address-space randomisation.)

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
