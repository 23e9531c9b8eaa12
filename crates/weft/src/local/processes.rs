//! Background processes of the local cluster (node agents, the controller, the remote host's
//! server): started detached with logs and pid files under the state directory, stopped by
//! `weft down` — only processes whose command line names this state directory are signalled.

use std::fs::{self, OpenOptions};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Where pid files live.
pub fn pid_dir(state: &Path) -> PathBuf {
    state.join("run")
}

/// Start `command` detached (own session, stdin closed, stdout/stderr to `log`), optionally inside
/// a network namespace, and record its pid as `run/<name>.pid`.
pub fn spawn_daemon(
    state: &Path,
    name: &str,
    netns: Option<&weft_host::Netns>,
    mut command: Command,
    log: &Path,
) -> anyhow::Result<u32> {
    if let Some(dir) = log.parent() {
        fs::create_dir_all(dir)?;
    }
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("open {}", log.display()))?;
    command.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
    // SAFETY: setsid is async-signal-safe; it only detaches the child from our session.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let child = match netns {
        Some(ns) => ns
            .spawn(&mut command)
            .with_context(|| format!("start {name} in {}", ns.label()))?,
        None => command.spawn().with_context(|| format!("start {name}"))?,
    };
    let pid = child.id();
    fs::create_dir_all(pid_dir(state))?;
    fs::write(pid_dir(state).join(format!("{name}.pid")), pid.to_string())?;
    Ok(pid)
}

fn cmdline_mentions(pid: u32, needle: &str) -> bool {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " ").contains(needle))
        .unwrap_or(false)
}

/// Stop every recorded process of this state directory: SIGTERM, then SIGKILL after `grace`.
/// Returns the names stopped.
pub fn stop_all(state: &Path, grace: Duration) -> Vec<String> {
    let needle = state.display().to_string();
    let mut running = Vec::new();
    if let Ok(entries) = fs::read_dir(pid_dir(state)) {
        for entry in entries.flatten() {
            let path = entry.path();
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("")
                .to_string();
            let pid: Option<u32> = fs::read_to_string(&path).ok().and_then(|s| s.trim().parse().ok());
            if let Some(pid) = pid.filter(|pid| cmdline_mentions(*pid, &needle)) {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
                running.push((name, pid));
            }
            let _ = fs::remove_file(&path);
        }
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && running.iter().any(|(_, pid)| alive(*pid)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for (_, pid) in &running {
        if alive(*pid) {
            let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGKILL);
        }
    }
    running.into_iter().map(|(name, _)| name).collect()
}

/// Whether a process exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}
