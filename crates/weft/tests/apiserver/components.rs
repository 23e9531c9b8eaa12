//! weft's components on the real cluster: the node agent in a node namespace (through a
//! [`NetnsProxy`]) and the controller, each with its ServiceAccount's kubeconfig; and the checks
//! of their logs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::super::common::Netns;
use super::{NetnsProxy, RealCluster};

/// A `weft agent --kubeconfig` process as the `weft-node` ServiceAccount in node namespace
/// `netns` (node `name`), reaching the API server through a [`NetnsProxy`]; killed on drop.
pub struct RealAgent {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    pub conf: Value,
    pub node: String,
    _proxy: NetnsProxy,
}

impl RealAgent {
    /// Start the agent of node `node` (cluster network: bridge cni0 + host-local on `subnet`)
    /// and wait until its watch caches synced.
    pub fn start(netns: &Netns, node: &str, cluster: &RealCluster, subnet: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let (bin, conf) = super::super::common::node_cni(state, subnet);
        cluster.kubeconfig_for("weft-node", &state.join("kubeconfig"));
        let proxy = NetnsProxy::start(netns, cluster.port);
        let mut agent = Self {
            child: None,
            dir,
            bin,
            conf,
            node: node.into(),
            _proxy: proxy,
        };
        agent.spawn(netns);
        agent.wait_synced(0);
        agent
    }

    fn spawn(&mut self, netns: &Netns) {
        let state = self.dir.path();
        let child = super::super::common::spawn_kube_agent(netns, state, &self.node);
        self.child = Some(child);
    }

    /// Wait until the agent's log (after byte `from`) says its caches synced and it serves.
    fn wait_synced(&self, from: usize) {
        let socket = self.dir.path().join("weft.sock");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !(socket.exists()
            && self
                .log()
                .get(from..)
                .unwrap_or("")
                .contains("watch caches synced"))
        {
            assert!(Instant::now() < deadline, "agent did not sync:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kill the agent and start it again on the same state; waits for its socket only (the API
    /// server may be down).
    pub fn restart(&mut self, netns: &Netns) {
        self.kill();
        let _ = std::fs::remove_file(self.dir.path().join("weft.sock"));
        self.spawn(netns);
        let socket = self.dir.path().join("weft.sock");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "agent did not start:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    /// Wait until the network-status of every ADD so far is written (see
    /// `common::wait_status_written`).
    pub fn wait_status_written(&self) {
        super::super::common::wait_status_written(&self.dir.path().join("weft.sock"), || self.log());
    }

    /// Exec the shim for `namespace/pod` in `pod_ns` (sandbox `container_id`).
    pub fn shim(
        &self,
        command: &str,
        pod_ns: &Netns,
        namespace: &str,
        pod: &str,
        container_id: &str,
    ) -> std::process::Output {
        super::super::common::run_shim_as(
            &self.bin,
            &self.conf,
            command,
            pod_ns,
            namespace,
            pod,
            container_id,
        )
    }
}

impl Drop for RealAgent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `weft controller` as the `weft-controller` ServiceAccount (host namespace, straight to the
/// API server), log in its temp dir; killed on drop.
pub struct RealController {
    pub child: Child,
    pub dir: tempfile::TempDir,
}

impl RealController {
    pub fn start(cluster: &RealCluster) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        cluster.kubeconfig_for("weft-controller", &kubeconfig);
        let child = Command::new(super::super::common::weft_bin())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--state-dir")
            .arg(dir.path())
            .args(["--log", "info", "controller"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("controller.log")).unwrap())
            .spawn()
            .unwrap();
        Self { child, dir }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("controller.log")).unwrap_or_default()
    }
}

impl Drop for RealController {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Warning/error lines of a component's log that occur more than once (the same message after
/// its timestamp), with their counts: a real cluster must not produce any.
pub fn repeated_warnings(log: &str) -> Vec<(String, usize)> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for line in log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")) {
        // Drop the timestamp (first field) so equal messages compare equal.
        let message = line.split_once(' ').map_or(line, |(_, rest)| rest);
        *counts.entry(message.to_string()).or_default() += 1;
    }
    counts.into_iter().filter(|(_, n)| *n > 1).collect()
}

/// Wait for `probe` to give a value, up to `secs`; panics with `what` and `context()`.
pub fn wait_for<T>(
    what: &str,
    secs: u64,
    mut probe: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
