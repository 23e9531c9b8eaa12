//! A `weft agent` process on its own embedded store or on an API server, as a node runs it, for
//! tests and benchmarks of the paths through the agent (delegated `weft-ipam` processes).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running agent serving the embedded store of a state directory (or an API server's);
/// killed on drop.
pub struct AgentProcess {
    child: Child,
    /// The agent's socket.
    pub socket: PathBuf,
    /// Its state directory (`store.db` inside, unless on an API server).
    pub state: PathBuf,
    /// Whether it keeps its objects in the embedded store (not an API server).
    embedded: bool,
}

impl AgentProcess {
    /// Start `weft agent --node <node>` (the `weft` binary at `weft`) on `state`, and wait until
    /// its socket and store exist.
    pub fn start(weft: &Path, state: &Path, node: &str) -> std::io::Result<Self> {
        Self::spawn(weft, state, node, None)
    }

    /// Start `weft agent --kubeconfig <kubeconfig> --node <node>` on `state` (its objects on
    /// that API server), and wait until it serves its socket.
    pub fn start_on_api_server(
        weft: &Path,
        kubeconfig: &Path,
        state: &Path,
        node: &str,
    ) -> std::io::Result<Self> {
        Self::spawn(weft, state, node, Some(kubeconfig))
    }

    fn spawn(weft: &Path, state: &Path, node: &str, kubeconfig: Option<&Path>) -> std::io::Result<Self> {
        std::fs::create_dir_all(state.join("net.d"))?;
        let socket = state.join("agent/weft.sock");
        let mut command = Command::new(weft);
        if let Some(kubeconfig) = kubeconfig {
            command.arg("--kubeconfig").arg(kubeconfig);
        }
        let child = command
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
            embedded: kubeconfig.is_none(),
        };
        let ready =
            |agent: &Self| agent.socket.exists() && (!agent.embedded || state.join("store.db").exists());
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready(&agent) {
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
    /// installed client) finds it, and (embedded store) the agent's store as the default of
    /// calls naming none.
    pub fn delegate_env(&self) -> Vec<(String, String)> {
        let mut env = vec![("WEFT_IPAM_SOCKET".into(), self.socket.display().to_string())];
        if self.embedded {
            let store = std::fs::canonicalize(self.state.join("store.db")).unwrap_or_default();
            env.push((
                "WEFT_IPAM_DEFAULT_STORE".into(),
                format!("sqlite:{}", store.display()),
            ));
        }
        env
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
