//! The Kubernetes backend of the benchmark: `WEFT_BENCH_KUBECONFIG` names a kubeconfig (the
//! `weft-node` ServiceAccount's, on an API server with deploy/'s CRDs and RBAC); a `weft agent
//! --kubeconfig` process serves the installed `weft-ipam` clients, which allocate in the API
//! server (one IPReservation per address), as on a node of a real cluster.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// The variable naming the kubeconfig; without it the Kubernetes phase is not run.
pub const KUBECONFIG_ENV: &str = "WEFT_BENCH_KUBECONFIG";

/// `weft agent --kubeconfig` on `state`; killed on drop.
pub struct KubeAgent {
    child: Child,
    pub socket: PathBuf,
}

impl KubeAgent {
    /// Start the agent of node `bench` and wait (bounded) until it serves its socket.
    pub fn start(weft: &Path, kubeconfig: &Path, state: &Path) -> Result<Self> {
        std::fs::create_dir_all(state.join("net.d"))?;
        let socket = state.join("agent/weft.sock");
        let child = Command::new(weft)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--state-dir")
            .arg(state)
            .args(["--log", "warn", "agent", "--node", "bench"])
            .arg("--socket")
            .arg(&socket)
            .arg("--cache-dir")
            .arg(state.join("cache"))
            .arg("--conf-dir")
            .arg(state.join("net.d"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()?;
        let mut agent = Self { child, socket };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !agent.socket.exists() {
            if let Some(status) = agent.child.try_wait()? {
                bail!("weft agent --kubeconfig exited: {status}");
            }
            if Instant::now() > deadline {
                bail!("weft agent --kubeconfig did not serve {}", agent.socket.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(agent)
    }

    /// What the agent gives its delegates: the socket the installed `weft-ipam` calls.
    pub fn delegate_env(&self) -> Vec<(String, String)> {
        vec![("WEFT_IPAM_SOCKET".into(), self.socket.display().to_string())]
    }
}

impl Drop for KubeAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
