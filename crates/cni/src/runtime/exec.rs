//! The thin executor: find a plugin binary and run it with an environment and stdin,
//! capturing stdout and stderr, with a timeout.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::limit::{ExecLimit, Permit, SLOT_GRACE};

/// Why a plugin could not be found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FindError {
    /// The plugin type contains a path separator or is empty.
    #[error("invalid plugin name {0:?}")]
    InvalidName(String),
    /// No executable file of that name in any search directory.
    #[error("failed to find plugin {plugin:?} in path {search_path:?}")]
    NotFound {
        /// The plugin type.
        plugin: String,
        /// The directories searched.
        search_path: Vec<PathBuf>,
    },
}

/// Finds the executable `plugin_type` in the first directory of `search_path` that has it.
pub fn find_plugin(plugin_type: &str, search_path: &[PathBuf]) -> Result<PathBuf, FindError> {
    if plugin_type.is_empty() || plugin_type.contains('/') || plugin_type == ".." {
        return Err(FindError::InvalidName(plugin_type.into()));
    }
    search_path
        .iter()
        .map(|dir| dir.join(plugin_type))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| FindError::NotFound {
            plugin: plugin_type.into(),
            search_path: search_path.to_vec(),
        })
}

/// How a plugin run ended, when it did not exit with status 0.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The process could not be started.
    #[error("cannot run {path}: {source}")]
    Spawn {
        /// The binary.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The node's bound on plugin processes at once stayed full for the whole timeout.
    #[error("no free plugin slot within {waited:?} ({max} plugins at once on this node)")]
    NoSlot {
        /// How long it waited.
        waited: Duration,
        /// The bound.
        max: usize,
    },
    /// It ran longer than the timeout and was killed.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// It exited non-zero (or was killed by a signal).
    #[error("exited with {status}")]
    Failed {
        /// The exit status.
        status: ExitStatus,
        /// What it printed on stdout (a CNI error, normally).
        stdout: Vec<u8>,
        /// What it printed on stderr.
        stderr: Vec<u8>,
    },
}

/// Runs plugin binaries. [`ProcessExec`] is the real one; tests substitute fakes.
pub trait PluginExec: Send + Sync {
    /// Finds the binary for `plugin_type` (default: [`find_plugin`]).
    fn find(&self, plugin_type: &str, search_path: &[PathBuf]) -> Result<PathBuf, FindError> {
        find_plugin(plugin_type, search_path)
    }

    /// Runs `binary` with the CNI variables `env` and `stdin`; returns stdout on exit 0.
    fn exec(&self, binary: &Path, env: &[(String, String)], stdin: &[u8]) -> Result<Vec<u8>, ExecError>;
}

/// Runs plugins as child processes (std::process), optionally inside a network namespace.
#[derive(Clone, Debug)]
pub struct ProcessExec {
    /// Kill the plugin after this long.
    pub timeout: Duration,
    /// Run the plugin in this network namespace (a `/run/netns/...` path) instead of ours:
    /// where host-side links (bridges, veth peers) are created. `None`: our own netns.
    pub netns: Option<PathBuf>,
    /// Variables added to every plugin's environment (and so to the IPAM plugins it runs):
    /// how a delegated `weft-ipam` finds the node agent.
    pub extra_env: Vec<(String, String)>,
    /// A bound on ADD plugin processes at once, shared with other executors (the node
    /// agent's): a plugin waits for a slot (in arrival order) at most `timeout`, then fails with
    /// [`ExecError::NoSlot`]; it holds the slot at most [`SLOT_GRACE`]. Other commands are not
    /// bounded.
    pub limit: Option<Arc<ExecLimit>>,
}

impl Default for ProcessExec {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            netns: None,
            extra_env: Vec::new(),
            limit: None,
        }
    }
}

impl ProcessExec {
    /// An executor that runs plugins inside the network namespace at `netns`.
    pub fn in_netns(netns: impl Into<PathBuf>) -> Self {
        Self {
            netns: Some(netns.into()),
            ..Self::default()
        }
    }
}

/// Stdin up to this size fits in a pipe buffer (64 KiB on Linux), so writing it cannot block
/// and needs no thread.
const INLINE_STDIN: usize = 16 * 1024;

/// How often a running plugin is looked at while its pipes stay silent.
const CHECK_EXIT: Duration = Duration::from_millis(20);

/// How long to wait for the output pipes to close after the plugin exited (a daemon it
/// started may keep them open).
const PIPE_GRACE: Duration = Duration::from_millis(100);

impl PluginExec for ProcessExec {
    fn exec(&self, binary: &Path, env: &[(String, String)], stdin: &[u8]) -> Result<Vec<u8>, ExecError> {
        let spawn_error = |source| ExecError::Spawn {
            path: binary.to_path_buf(),
            source,
        };
        let mut command = Command::new(binary);
        // Stale CNI_* variables of our own environment must not leak into the plugin's.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CNI_") {
                command.env_remove(key);
            }
        }
        command
            .envs(self.extra_env.iter().map(|(k, v)| (k, v)))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(netns) = &self.netns {
            let netns_file = File::open(netns).map_err(spawn_error)?;
            // SAFETY: the closure runs in the forked child before exec and only calls setns(2),
            // which is async-signal-safe; the fd was opened before the fork.
            unsafe {
                command.pre_exec(move || {
                    nix::sched::setns(&netns_file, nix::sched::CloneFlags::CLONE_NEWNET)
                        .map_err(std::io::Error::from)
                });
            }
        }
        // Held until the plugin is reaped (or killed), or for SLOT_GRACE: a plugin running longer
        // is waiting, not burning CPU. ADDs only: they are what burns CPU; a DEL mostly waits
        // (on the kernel's RCU grace periods as its links go), and DELs run best all at once
        // (measured: 8 pods' DELs at once took 2.05× as long through a bound of 2 as without).
        let is_add = env.iter().any(|(k, v)| k == "CNI_COMMAND" && v == "ADD");
        let mut slot =
            match self.limit.as_ref().filter(|_| is_add) {
                Some(limit) => Some(limit.acquire(Instant::now() + self.timeout).ok_or(
                    ExecError::NoSlot {
                        waited: self.timeout,
                        max: limit.max(),
                    },
                )?),
                None => None,
            };
        let mut child = command.spawn().map_err(spawn_error)?;
        let started = Instant::now();

        let mut child_stdin = child.stdin.take().expect("stdin piped");
        // A plugin that exits without reading stdin closes the pipe: that write error is moot.
        if stdin.len() <= INLINE_STDIN {
            let _ = child_stdin.write_all(stdin);
            drop(child_stdin);
        } else {
            let input = stdin.to_vec();
            thread::spawn(move || {
                let _ = child_stdin.write_all(&input);
            });
        }
        let stdout_pipe = child.stdout.take().expect("stdout piped");
        let stderr_pipe = child.stderr.take().expect("stderr piped");
        let Some((status, stdout, stderr)) = drain(
            &mut child,
            stdout_pipe,
            stderr_pipe,
            started + self.timeout,
            &mut slot,
            started + SLOT_GRACE,
        ) else {
            // Kill errors mean it already exited; either way we report the timeout.
            let _ = child.kill();
            let _ = child.wait();
            return Err(ExecError::Timeout(self.timeout));
        };
        if status.success() {
            Ok(stdout)
        } else {
            Err(ExecError::Failed {
                status,
                stdout,
                stderr,
            })
        }
    }
}

/// Reads both pipes to the end and reaps the child, until `deadline` (then `None`). Reading
/// happens here, with poll(2): data a plugin wrote before exiting is always readable, so none
/// of it is lost however loaded the machine is. When the child has exited but a process it
/// left behind (a daemon) keeps a pipe open, the pipe counts as done once it stays silent for
/// [`PIPE_GRACE`]. `slot` (the plugin's [`Permit`], if it has one) is given back at
/// `release_at` if the plugin still runs then (within [`CHECK_EXIT`]).
fn drain(
    child: &mut Child,
    stdout: ChildStdout,
    stderr: ChildStderr,
    deadline: Instant,
    slot: &mut Option<Permit<'_>>,
    release_at: Instant,
) -> Option<(ExitStatus, Vec<u8>, Vec<u8>)> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let mut pipes: [File; 2] = [
        File::from(std::os::fd::OwnedFd::from(stdout)),
        File::from(std::os::fd::OwnedFd::from(stderr)),
    ];
    let mut buffers = [Vec::new(), Vec::new()];
    let mut open = [true, true];
    let mut status: Option<ExitStatus> = None;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut reap_wait = Duration::from_micros(25);
    loop {
        if slot.is_some() && Instant::now() >= release_at {
            *slot = None;
        }
        if status.is_none() {
            status = child.try_wait().ok().flatten();
        }
        if !open[0]
            && !open[1]
            && let Some(status) = status
        {
            let [out, err] = buffers;
            return Some((status, out, err));
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        let wait = if status.is_some() { PIPE_GRACE } else { CHECK_EXIT }.min(deadline - now);
        let open_indexes: Vec<usize> = (0..2).filter(|i| open[*i]).collect();
        if open_indexes.is_empty() {
            // Both pipes closed: the plugin is exiting, and is reapable some tens of
            // microseconds later (between closing its files and notifying its parent the
            // kernel still tears down the rest of the task). Look again soon, then less often
            // (a plugin that closed its pipes and runs on is looked at every 20 ms until its
            // timeout): a fixed 1 ms sleep here cost every plugin call about a millisecond.
            thread::sleep(reap_wait.min(wait));
            reap_wait = (reap_wait * 2).min(CHECK_EXIT);
            continue;
        }
        let mut fds: Vec<PollFd<'_>> = open_indexes
            .iter()
            .map(|i| PollFd::new(pipes[*i].as_fd(), PollFlags::POLLIN))
            .collect();
        let timeout = PollTimeout::from(wait.as_millis().min(u128::from(u16::MAX)) as u16);
        let ready = match poll(&mut fds, timeout) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
        };
        let readable: Vec<bool> = fds
            .iter()
            .map(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        if ready == 0 {
            if status.is_some() {
                // Exited, and nothing more arrives: whoever holds the pipes is not the plugin.
                let [out, err] = buffers;
                return status.map(|s| (s, out, err));
            }
            continue;
        }
        for (slot, &index) in open_indexes.iter().enumerate() {
            if !readable[slot] {
                continue;
            }
            match pipes[index].read(&mut chunk) {
                Ok(0) | Err(_) => open[index] = false,
                Ok(n) => buffers[index].extend_from_slice(&chunk[..n]),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn finds_the_first_executable_in_path_order() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::write(a.path().join("p"), "not executable").unwrap();
        let expected = script(b.path(), "p", "true");
        let path = [a.path().to_path_buf(), b.path().to_path_buf()];
        assert_eq!(find_plugin("p", &path).unwrap(), expected);
        assert!(matches!(find_plugin("q", &path), Err(FindError::NotFound { .. })));
        assert!(matches!(
            find_plugin("../p", &path),
            Err(FindError::InvalidName(_))
        ));
        assert!(matches!(find_plugin("", &path), Err(FindError::InvalidName(_))));
    }

    #[test]
    fn passes_env_and_stdin_and_captures_output() {
        let dir = tempfile::tempdir().unwrap();
        let echo = script(
            dir.path(),
            "echo",
            r#"echo "log line" >&2; printf '%s|' "$CNI_COMMAND" "$CNI_IFNAME"; cat"#,
        );
        let env = [
            ("CNI_COMMAND".to_string(), "ADD".to_string()),
            ("CNI_IFNAME".into(), "eth0".into()),
        ];
        let out = ProcessExec::default().exec(&echo, &env, b"{\"x\":1}").unwrap();
        assert_eq!(out, b"ADD|eth0|{\"x\":1}");
    }

    #[test]
    fn extra_env_reaches_the_plugin_and_cni_variables_win() {
        let dir = tempfile::tempdir().unwrap();
        let echo = script(dir.path(), "echo", r#"printf '%s|%s' "$WEFT_X" "$CNI_IFNAME""#);
        let exec = ProcessExec {
            extra_env: vec![
                ("WEFT_X".into(), "agent".into()),
                ("CNI_IFNAME".into(), "no".into()),
            ],
            ..ProcessExec::default()
        };
        let env = [("CNI_IFNAME".to_string(), "eth0".to_string())];
        assert_eq!(exec.exec(&echo, &env, b"").unwrap(), b"agent|eth0");
    }

    #[test]
    fn large_stdin_is_written_without_deadlock() {
        let dir = tempfile::tempdir().unwrap();
        let wc = script(dir.path(), "wc", "wc -c");
        let input = vec![b'x'; 1 << 20];
        let out = ProcessExec::default().exec(&wc, &[], &input).unwrap();
        assert_eq!(String::from_utf8(out).unwrap().trim(), (1 << 20).to_string());
    }

    #[test]
    fn non_zero_exit_keeps_stdout_and_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let fail = script(
            dir.path(),
            "fail",
            r#"echo '{"code":7,"msg":"bad"}'; echo oops >&2; exit 1"#,
        );
        match ProcessExec::default().exec(&fail, &[], b"") {
            Err(ExecError::Failed {
                status,
                stdout,
                stderr,
            }) => {
                assert_eq!(status.code(), Some(1));
                assert_eq!(stdout, b"{\"code\":7,\"msg\":\"bad\"}\n");
                assert_eq!(stderr, b"oops\n");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_add_waits_for_a_slot_which_a_long_running_plugin_gives_back_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let waiting = script(dir.path(), "waiting", "exec sleep 3");
        let quick = script(dir.path(), "quick", "echo done");
        let limit = Arc::new(ExecLimit::new(1));
        let exec = ProcessExec {
            limit: Some(limit.clone()),
            ..ProcessExec::default()
        };
        let add = [("CNI_COMMAND".to_string(), "ADD".to_string())];
        let del = [("CNI_COMMAND".to_string(), "DEL".to_string())];
        std::thread::scope(|scope| {
            let started = Instant::now();
            scope.spawn(|| exec.exec(&waiting, &add, b"").unwrap());
            while limit.running() == 0 {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "the first ADD took its slot"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            // A DEL does not wait for a slot.
            let del_started = Instant::now();
            assert_eq!(exec.exec(&quick, &del, b"").unwrap(), b"done\n");
            assert!(del_started.elapsed() < SLOT_GRACE, "{:?}", del_started.elapsed());
            // An ADD does, until the running plugin has had its grace (not until it ends).
            assert_eq!(exec.exec(&quick, &add, b"").unwrap(), b"done\n");
            let waited = started.elapsed();
            assert!(waited >= SLOT_GRACE, "{waited:?}");
            assert!(waited < Duration::from_millis(2900), "{waited:?}");
        });
        assert_eq!(limit.running(), 0);
        // A full bound gives up at the plugin's timeout.
        let held = limit.acquire(Instant::now()).unwrap();
        let impatient = ProcessExec {
            timeout: Duration::from_millis(50),
            ..exec.clone()
        };
        assert!(matches!(
            impatient.exec(&quick, &add, b""),
            Err(ExecError::NoSlot { max: 1, .. })
        ));
        drop(held);
    }

    #[test]
    fn timeout_kills_the_plugin() {
        let dir = tempfile::tempdir().unwrap();
        let slow = script(dir.path(), "slow", "exec sleep 30");
        let exec = ProcessExec {
            timeout: Duration::from_millis(200),
            ..ProcessExec::default()
        };
        let started = Instant::now();
        assert!(matches!(exec.exec(&slow, &[], b""), Err(ExecError::Timeout(_))));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_daemon_holding_the_pipes_does_not_hang_us() {
        let dir = tempfile::tempdir().unwrap();
        let forks = script(dir.path(), "forks", "(sleep 5 &) ; echo done");
        let started = Instant::now();
        let out = ProcessExec::default().exec(&forks, &[], b"").unwrap();
        assert_eq!(out, b"done\n");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn missing_binary_is_a_spawn_error() {
        let err = ProcessExec::default()
            .exec(Path::new("/nonexistent/x"), &[], b"")
            .unwrap_err();
        assert!(matches!(err, ExecError::Spawn { .. }));
    }
}
