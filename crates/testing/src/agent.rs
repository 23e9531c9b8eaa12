//! A `weft agent` process on its own embedded store, as a node runs it, for tests and benchmarks
//! of the paths through the agent (delegated `weft-ipam` processes).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running agent serving the embedded store of a state directory; killed on drop.
pub struct AgentProcess {
    child: Child,
    /// The agent's socket.
    pub socket: PathBuf,
    /// Its state directory (`store.db` inside).
    pub state: PathBuf,
}

impl AgentProcess {
    /// Start `weft agent --node <node>` (the `weft` binary at `weft`) on `state`, and wait until
    /// its socket and store exist.
    pub fn start(weft: &Path, state: &Path, node: &str) -> std::io::Result<Self> {
        std::fs::create_dir_all(state)?;
        let socket = state.join("agent/weft.sock");
        let child = Command::new(weft)
            .arg("--state-dir")
            .arg(state)
            .args(["--log", "warn", "agent", "--node", node])
            .arg("--socket")
            .arg(&socket)
            .arg("--cache-dir")
            .arg(state.join("cache"))
            .arg("--conf-dir")
            .arg(state.join("net.d"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()?;
        let mut agent = Self {
            child,
            socket,
            state: state.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !agent.socket.exists() || !state.join("store.db").exists() {
            if let Some(status) = agent.child.try_wait()? {
                return Err(std::io::Error::other(format!("weft agent exited: {status}")));
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "weft agent did not start (no {})",
                    agent.socket.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(agent)
    }

    /// The variables the agent gives the delegates it runs: how a delegated `weft-ipam` (the
    /// installed client) finds it, and the agent's store as the default of calls naming none.
    pub fn delegate_env(&self) -> Vec<(String, String)> {
        let store = std::fs::canonicalize(self.state.join("store.db")).unwrap_or_default();
        vec![
            ("WEFT_IPAM_SOCKET".into(), self.socket.display().to_string()),
            (
                "WEFT_IPAM_DEFAULT_STORE".into(),
                format!("sqlite:{}", store.display()),
            ),
        ]
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
