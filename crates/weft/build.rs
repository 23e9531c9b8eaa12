//! Build steps of the `weft` binary.
//!
//! 1. Link `weft` as a position-dependent executable. `weft` is exec'd once per CNI call under
//!    the name `weft-cni`. As a PIE, every start has the dynamic loader apply ~30,000 relative
//!    relocations and copy-on-write ~120 pages of `.data.rel.ro` before `main`; linked without
//!    PIE the linker resolves them once, at build time.
//! 2. Compile the installed `weft-cni` and `weft-ipam` (crates/plugin-client: one executable,
//!    its role chosen by its name) statically linked; the weft binary carries it and installs
//!    it under both names (`weft install-cni`). Cargo cannot link one target of a
//!    workspace statically (`crt-static` in RUSTFLAGS would apply to proc-macros too), so this
//!    calls `rustc` itself, with the same compiler and target. Without a static C library on
//!    the machine it falls back to a dynamic link, with a warning.
//!
//! (Both measured in docs/benchmarks.md.)

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let client = manifest.join("../plugin-client/src");
    println!("cargo:rerun-if-changed={}", client.display());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    if build_client(&client, &out, true).is_err() {
        println!(
            "cargo:warning=weft-cni, weft-ipam: no static link possible here (is libc6-dev installed?); linking them dynamically"
        );
        if let Err(error) = build_client(&client, &out, false) {
            panic!("cannot compile weft-cni and weft-ipam: {error}");
        }
    }
}

fn build_client(src: &Path, out: &Path, statically: bool) -> Result<(), String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = std::env::var("TARGET").expect("set by cargo");
    let mut common: Vec<String> = [
        "--edition=2024",
        "--target",
        &target,
        "-Copt-level=3",
        "-Cpanic=abort",
        "-Ccodegen-units=1",
        "-Cdebuginfo=0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if statically {
        common.push("-Ctarget-feature=+crt-static".into());
        common.push("-Crelocation-model=static".into());
    }
    let lib = out.join("libweft_plugin_client.rlib");
    run(Command::new(&rustc)
        .args(&common)
        .args(["--crate-type=rlib", "--crate-name=weft_plugin_client", "-o"])
        .arg(&lib)
        .arg(src.join("lib.rs")))?;
    run(Command::new(&rustc)
        .args(&common)
        .args([
            "--crate-type=bin",
            "--crate-name=weft_plugins",
            "-Cstrip=symbols",
            "--extern",
        ])
        .arg(format!("weft_plugin_client={}", lib.display()))
        .arg("-o")
        .arg(out.join("weft-plugins"))
        .arg(src.join("main.rs")))
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command.output().map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}
