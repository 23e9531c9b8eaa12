//! Background processes of the local cluster (the supervisor, node agents, the controller, the
//! remote host's server, QEMU guests): started with logs under the state directory and recorded
//! as `run/<name>.pid` with their start identity (pid and start time from /proc/<pid>/stat), so
//! `weft down` signals exactly the processes it recorded and never a process that reused a pid.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Name of the supervisor's record: stopped first by `weft down`, so nothing restarts.
pub const SUPERVISOR: &str = "supervisor";

/// Where pid files live.
pub fn pid_dir(state: &Path) -> PathBuf {
    state.join("run")
}

/// A process as recorded: its pid and its start time (clock ticks since boot, field 22 of
/// /proc/<pid>/stat), which together name one process for the life of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessRecord {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks since boot.
    pub start_time: u64,
}

impl ProcessRecord {
    /// The record of the running process `pid`, if it exists.
    pub fn of(pid: u32) -> Option<Self> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(Self {
            pid,
            start_time: parse_start_time(&stat)?,
        })
    }

    /// The pid file's text: `<pid> <start time>`.
    pub fn to_line(self) -> String {
        format!("{} {}\n", self.pid, self.start_time)
    }

    /// Parse a pid file. A bare pid (an old record without start time) is not enough to tell
    /// the process from one that reused its pid, so it does not parse.
    pub fn parse(text: &str) -> Option<Self> {
        let mut words = text.split_whitespace();
        let pid = words.next()?.parse().ok()?;
        let start_time = words.next()?.parse().ok()?;
        words.next().is_none().then_some(Self { pid, start_time })
    }

    /// Whether this very process still runs (same pid, same start time, not a zombie).
    pub fn is_running(&self) -> bool {
        fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .is_some_and(|stat| parse_start_time(&stat) == Some(self.start_time) && !is_zombie(&stat))
    }

    /// Send `signal` if this very process still runs.
    pub fn signal(&self, signal: Signal) -> bool {
        self.is_running() && kill(Pid::from_raw(self.pid as i32), signal).is_ok()
    }
}

/// Field 22 (starttime) of a /proc/<pid>/stat line; the command name (field 2) may hold spaces
/// and parentheses, so fields are counted after the last `)`.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    // After ")": field 3 (state) is index 0, so field 22 is index 19.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

fn is_zombie(stat: &str) -> bool {
    stat.rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
}

/// Record `pid` as `run/<name>.pid` with its start identity.
pub fn record(state: &Path, name: &str, pid: u32) -> anyhow::Result<ProcessRecord> {
    let record = ProcessRecord::of(pid).with_context(|| format!("{name} (pid {pid}) exited at once"))?;
    fs::create_dir_all(pid_dir(state))?;
    let file = pid_dir(state).join(format!("{name}.pid"));
    let tmp = file.with_extension("pid.tmp");
    fs::write(&tmp, record.to_line()).with_context(|| format!("write {}", tmp.display()))?;
    fs::rename(&tmp, &file).with_context(|| format!("write {}", file.display()))?;
    Ok(record)
}

/// The record `run/<name>.pid`, if there is a valid one.
pub fn recorded(state: &Path, name: &str) -> Option<ProcessRecord> {
    ProcessRecord::parse(&fs::read_to_string(pid_dir(state).join(format!("{name}.pid"))).ok()?)
}

/// Remove every record of process `pid` (a process weft stopped itself), so `run/` lists
/// only what may still run.
pub fn forget(state: &Path, pid: u32) {
    let Ok(entries) = fs::read_dir(pid_dir(state)) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_record = path.extension().is_some_and(|e| e == "pid");
        let of_pid = fs::read_to_string(&path)
            .ok()
            .and_then(|text| ProcessRecord::parse(&text))
            .is_some_and(|r| r.pid == pid);
        if is_record && of_pid {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Start `command` (stdin closed, stdout/stderr appended to `log`), optionally inside a network
/// namespace, in its own session if `detach`; the caller owns the child.
pub fn spawn_child(
    name: &str,
    netns: Option<&weft_host::Netns>,
    mut command: Command,
    log: &Path,
    detach: bool,
) -> anyhow::Result<Child> {
    if let Some(dir) = log.parent() {
        fs::create_dir_all(dir)?;
    }
    // Root-only, as every file weft creates (logs name pods, addresses and errors).
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)
        .with_context(|| format!("open {}", log.display()))?;
    command.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
    if detach {
        // SAFETY: setsid is async-signal-safe; it only detaches the child from our session.
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                Ok(())
            });
        }
    }
    match netns {
        Some(ns) => ns
            .spawn(&mut command)
            .with_context(|| format!("start {name} in {}", ns.label())),
        None => command.spawn().with_context(|| format!("start {name}")),
    }
}

/// Start `command` detached (own session) and record it as `run/<name>.pid`.
pub fn spawn_daemon(
    state: &Path,
    name: &str,
    netns: Option<&weft_host::Netns>,
    command: Command,
    log: &Path,
) -> anyhow::Result<u32> {
    let child = spawn_child(name, netns, command, log, true)?;
    let pid = child.id();
    record(state, name, pid)?;
    Ok(pid)
}

/// Stop every recorded process of this state directory — the supervisor first, so nothing is
/// restarted meanwhile: SIGTERM, then SIGKILL after `grace`. Only a process matching its record
/// (pid and start time) is signalled. Returns the names stopped.
pub fn stop_all(state: &Path, grace: Duration) -> Vec<String> {
    // Every process weft starts for a cluster names its state directory on its command line
    // (`--state-dir`, the QEMU serial log, the httpd root): a record pointing elsewhere, even
    // with the right start time, is forged or stale and is not followed.
    let needle = fs::canonicalize(state)
        .unwrap_or_else(|_| state.to_path_buf())
        .display()
        .to_string();
    let ours = |record: &ProcessRecord| record.is_running() && cmdline_mentions(record.pid, &needle);
    let mut stopped = Vec::new();
    if let Some(supervisor) = recorded(state, SUPERVISOR).filter(ours) {
        stop(&[(SUPERVISOR.to_string(), supervisor)], grace);
        stopped.push(SUPERVISOR.to_string());
    }
    let _ = fs::remove_file(pid_dir(state).join(format!("{SUPERVISOR}.pid")));
    let mut running = Vec::new();
    if let Ok(entries) = fs::read_dir(pid_dir(state)) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "pid") {
                continue;
            }
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("")
                .to_string();
            if let Some(record) = fs::read_to_string(&path)
                .ok()
                .and_then(|text| ProcessRecord::parse(&text))
                .filter(ours)
            {
                running.push((name, record));
            }
        }
    }
    stop(&running, grace);
    for (name, _) in &running {
        let _ = fs::remove_file(pid_dir(state).join(format!("{name}.pid")));
    }
    stopped.extend(running.into_iter().map(|(name, _)| name));
    stopped
}

/// Stop (SIGTERM, then SIGKILL after `grace`) every process that is still part of this cluster
/// although no record names it: one whose network namespace is one of `netns` (the namespaces
/// the cluster created, e.g. a CNI plugin a stopped agent had started, or a guest whose record
/// its launcher had already dropped while stopping it), or one holding a file under `state`
/// open. Without this, such a process can create a file while `weft down` removes the state
/// directory (`Directory not empty`). Returns the pids stopped.
pub fn stop_stragglers(state: &Path, netns: &[PathBuf], grace: Duration) -> Vec<u32> {
    let state = fs::canonicalize(state).unwrap_or_else(|_| state.to_path_buf());
    let owned: Vec<(u64, u64)> = netns.iter().filter_map(|p| inode_of(p)).collect();
    // Never this process or one it runs under (a test or script calling `weft down` may hold
    // a file of the cluster open itself).
    let spared = ancestors_of_self();
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if spared.contains(&pid) {
            continue;
        }
        let proc_dir = entry.path();
        let fds: Vec<PathBuf> = fs::read_dir(proc_dir.join("fd"))
            .map(|fds| {
                fds.flatten()
                    .filter_map(|fd| fs::read_link(fd.path()).ok())
                    .collect()
            })
            .unwrap_or_default();
        if is_straggler(inode_of(&proc_dir.join("ns/net")), &fds, &owned, &state)
            && let Some(record) = ProcessRecord::of(pid)
        {
            found.push((format!("pid {pid}"), record));
        }
    }
    stop(&found, grace);
    found.into_iter().map(|(_, r)| r.pid).collect()
}

/// Whether a process (its network namespace's identity, the targets of its open fds) belongs to
/// the cluster whose namespaces are `owned` and whose state directory is `state`.
fn is_straggler(netns: Option<(u64, u64)>, fds: &[PathBuf], owned: &[(u64, u64)], state: &Path) -> bool {
    netns.is_some_and(|ns| owned.contains(&ns)) || fds.iter().any(|fd| fd.starts_with(state))
}

/// This process, its parent, its parent's parent, … up to pid 1.
fn ancestors_of_self() -> Vec<u32> {
    let mut chain = vec![std::process::id()];
    while let Some(&pid) = chain.last() {
        let parent = fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| parent_pid(&stat));
        match parent {
            Some(ppid) if ppid > 0 && !chain.contains(&ppid) => chain.push(ppid),
            _ => break,
        }
    }
    chain.push(1);
    chain
}

/// Field 4 of /proc/<pid>/stat (after the parenthesised command name, which may hold spaces).
fn parent_pid(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn inode_of(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn cmdline_mentions(pid: u32, needle: &str) -> bool {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " ").contains(needle))
        .unwrap_or(false)
}

fn stop(processes: &[(String, ProcessRecord)], grace: Duration) {
    for (_, record) in processes {
        record.signal(Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && processes.iter().any(|(_, r)| r.is_running()) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for (_, record) in processes {
        record.signal(Signal::SIGKILL);
    }
    // SIGKILL is not instant: wait (bounded) until they are gone, so namespaces are free.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && processes.iter().any(|(_, r)| r.is_running()) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stragglers_are_processes_in_our_namespaces_or_with_files_under_our_state() {
        let state = Path::new("/tmp/weft-x");
        let owned = [(4, 100), (4, 101)];
        assert!(is_straggler(Some((4, 101)), &[], &owned, state));
        assert!(is_straggler(
            Some((4, 7)),
            &[PathBuf::from("/tmp/weft-x/logs/agent.log")],
            &owned,
            state
        ));
        // Another namespace, files elsewhere (also a sibling whose name only starts alike).
        assert!(!is_straggler(
            Some((4, 7)),
            &[PathBuf::from("/tmp/weft-xy/a"), PathBuf::from("socket:[99]")],
            &owned,
            state
        ));
        assert!(!is_straggler(None, &[], &owned, state));
    }

    #[test]
    fn a_child_holding_a_file_under_the_state_directory_is_stopped() {
        let state = tempfile::tempdir().unwrap();
        let file = state.path().join("held");
        std::fs::write(&file, "").unwrap();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("exec 3<\"$0\"; exec sleep 60")
            .arg(&file)
            .spawn()
            .unwrap();
        // Wait (bounded) until the child holds the file.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let fds = fs::read_dir(format!("/proc/{}/fd", child.id()))
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| fs::read_link(e.path()).ok())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            if fds.iter().any(|f| f == &file) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // The test process holds a file there too: it is spared, as any ancestor of the caller.
        let _held = std::fs::File::open(&file).unwrap();
        let stopped = stop_stragglers(state.path(), &[], Duration::from_secs(2));
        assert_eq!(stopped, vec![child.id()]);
        assert_eq!(parent_pid("7 (a) b) S 42 7 7"), Some(42));
        assert!(ancestors_of_self().contains(&std::process::id()));
        assert!(child.wait().unwrap().code().is_none(), "killed by a signal");
    }

    #[test]
    fn forget_removes_only_the_records_of_that_pid() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        record(dir.path(), "qemu-default-vm1", me).unwrap();
        fs::write(pid_dir(dir.path()).join("other.pid"), "1 1\n").unwrap();
        forget(dir.path(), me);
        assert!(recorded(dir.path(), "qemu-default-vm1").is_none());
        assert!(recorded(dir.path(), "other").is_some());
    }

    #[test]
    fn a_daemon_log_is_root_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/agent.log");
        let mut command = Command::new(std::env::current_exe().unwrap());
        command.arg("--list");
        let status = spawn_child("t", None, command, &log, false)
            .unwrap()
            .wait()
            .unwrap();
        assert!(status.success());
        let mode = fs::metadata(&log).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn start_time_is_field_22_even_with_odd_command_names() {
        let stat = "1234 (we ird) cmd) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_time(stat), Some(987654));
        assert_eq!(parse_start_time("garbage"), None);
    }

    #[test]
    fn records_round_trip_and_bare_pids_are_refused() {
        let r = ProcessRecord {
            pid: 42,
            start_time: 777,
        };
        assert_eq!(ProcessRecord::parse(&r.to_line()), Some(r));
        assert_eq!(ProcessRecord::parse("42\n"), None);
        assert_eq!(ProcessRecord::parse("42 x"), None);
        assert_eq!(ProcessRecord::parse("42 7 9"), None);
    }

    #[test]
    fn a_reused_pid_does_not_match_the_record() {
        let me = ProcessRecord::of(std::process::id()).unwrap();
        assert!(me.is_running());
        let other = ProcessRecord {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!other.is_running(), "same pid, other start time: another process");
        assert!(!other.signal(Signal::SIGTERM));
    }
}
