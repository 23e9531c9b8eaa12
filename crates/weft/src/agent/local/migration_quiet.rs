//! Applying the quiet tables ([`weft_launcher::quiet`]) of a live-migration target's pod netns:
//! installed by the sandbox before CNI ADD, removed by the target agent once the guest resumes
//! there (before its `announce-self`). Blocking: call from a blocking task.

use std::io::Write as _;
use std::process::{Command, Stdio};

use anyhow::Context;

fn nft(netns_path: &str, script: &str) -> anyhow::Result<()> {
    let netns = weft_host::Netns::open(netns_path)?;
    let mut command = Command::new("nft");
    command
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = netns.spawn(&mut command)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes()).context("nft -f -: stdin")?;
    }
    let output = child.wait_with_output().context("nft -f -")?;
    anyhow::ensure!(
        output.status.success(),
        "nft -f - in {netns_path}: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

/// Silence the pod kernel of the netns at `netns_path` (a migration target, before CNI ADD).
pub fn install(netns_path: &str) -> anyhow::Result<()> {
    nft(netns_path, &weft_launcher::quiet::install_script())
        .context("install the migration target's quiet tables")
}

/// Let the pod kernel of the netns at `netns_path` speak again (its guest runs there now).
pub fn remove(netns_path: &str) -> anyhow::Result<()> {
    nft(netns_path, &weft_launcher::quiet::remove_script())
        .context("remove the migration target's quiet tables")
}
