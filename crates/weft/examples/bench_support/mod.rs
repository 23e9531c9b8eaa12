//! What the weft benchmarks (ipam_bench, meta_bench) share: the weft binary they measure and
//! their numeric arguments.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};

/// The weft binary: `$WEFT_BIN`, else `weft` next to this example's directory, built first
/// when cargo started us (so a stale binary is never measured).
pub fn weft_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("WEFT_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("example is not under target/<profile>/examples")?;
    if let Some(cargo) = std::env::var_os("CARGO") {
        let mut build = Command::new(cargo);
        build.args(["build", "-q", "-p", "weft", "--bin", "weft"]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        ensure!(
            build
                .status()
                .context("cargo build of the weft binary")?
                .success(),
            "building the weft binary failed"
        );
    }
    let weft = profile_dir.join("weft");
    ensure!(
        weft.exists(),
        "{} is missing: cargo build --release -p weft --bin weft",
        weft.display()
    );
    Ok(weft)
}

/// Command-line argument `n` as a number, `default` when absent.
pub fn arg(n: usize, default: usize) -> Result<usize> {
    std::env::args().nth(n).map_or(Ok(default), |a| {
        a.parse()
            .with_context(|| format!("argument {n}: {a:?} is not a number"))
    })
}
