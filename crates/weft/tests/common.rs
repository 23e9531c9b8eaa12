//! Helpers for the weft binary's end-to-end tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// True when running as root; otherwise prints why the test is skipped.
pub fn root_or_skip(test: &str) -> bool {
    if nix::unistd::Uid::effective().is_root() {
        true
    } else {
        eprintln!("skipping {test}: needs root (network namespaces)");
        false
    }
}

/// The weft binary under test.
pub fn weft_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weft"))
}

/// Run `weft` with a state dir; returns the output (stdout+stderr kept separately).
pub fn weft(state: &Path, args: &[&str]) -> Output {
    Command::new(weft_bin())
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env("WEFT_LOG", "info")
        .output()
        .expect("run weft")
}

/// Text of an output, for assertion messages.
pub fn text(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Host state that `weft down` must restore: links, netns, nft ruleset.
pub fn host_snapshot() -> String {
    let run = |args: &[&str]| {
        let out = Command::new(args[0])
            .args(&args[1..])
            .output()
            .expect("snapshot command");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let links: serde_json::Value = serde_json::from_str(&run(&["ip", "-j", "link"])).unwrap_or_default();
    // Counters and timestamps change; names, kinds, addresses and state must not.
    let links: Vec<String> = links
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|l| format!("{} {} {}", l["ifname"], l["address"], l["operstate"]))
        .collect();
    let netns: Vec<String> = run(&["ip", "netns", "list"])
        .lines()
        .filter(|l| l.starts_with("weft-"))
        .map(String::from)
        .collect();
    format!(
        "links: {links:?}\nnetns: {netns:?}\nnft: {}",
        run(&["nft", "list", "ruleset"])
    )
}
