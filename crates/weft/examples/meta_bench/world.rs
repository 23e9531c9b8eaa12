//! The bench world: files, store objects, the node netns, agents, and how a runtime execs the
//! shim.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use weft_cni::RequestEnv;
use weft_meta::{AttachmentRequest, DelegatePlan, MemoryCatalog, MetaConfig, PathEntry, plan_add};

use crate::{
    Agent, BURST_WORKERS, NAMESPACE, Netns, PLUGIN_DIR, RSS_SECONDARIES, SECONDARIES, http_get, weft_binary,
};

/// The Kubernetes agents with copies of the bench pods. The embedded store's agents share one
/// set on node `n1`; each Kubernetes agent is the agent of a node of its own (`n-<tag>`) with
/// its own pods there (`<tag>-…`), as on a cluster: pods shared by several agents would make
/// their Event and network-status writes conflict (409 and a read more), and agents sharing a
/// node would each decode every other agent's pod updates from their watches.
pub const KUBE_POD_SETS: [&str; 7] = [
    "k1",
    "k4",
    "k1b",
    "k4b",
    "k4n",
    "k4y",
    crate::kube::WRITER_POD_SET,
];
/// The Kubernetes agents of the part-3 pods (`<tag>-rss-<i>`): `k4` runs the restart with
/// all of them, `k4e` (Multus' Events, for the API server's CPU) half of them.
pub const KUBE_RSS: [(&str, usize); 2] = [("k4", 1), ("k4e", 2)];

/// The variable naming how many NADs no bench pod selects are created beside the bench's own
/// (0 when unset): what planning an ADD costs on a cluster with many tenants' NADs.
pub const EXTRA_NADS_ENV: &str = "WEFT_BENCH_EXTRA_NADS";

fn extra_nads() -> Result<u32> {
    match std::env::var(EXTRA_NADS_ENV) {
        Ok(n) => n.parse().with_context(|| format!("{EXTRA_NADS_ENV}={n}")),
        Err(_) => Ok(0),
    }
}

/// The node of the agent `tag` (`None`: the embedded store's agents).
pub fn node_of(tag: Option<&str>) -> String {
    tag.map_or_else(|| "n1".to_string(), |tag| format!("n-{tag}"))
}

/// Files, store objects and namespaces shared by every measurement.
pub struct World {
    pub state: PathBuf,
    pub bin: PathBuf,
    /// `weft-cni` here is the weft binary itself (part 2's comparison).
    pub full_bin: PathBuf,
    pub weft: PathBuf,
    pub conf_dir: PathBuf,
    pub cluster_file: PathBuf,
    pub host_local: PathBuf,
    pub node: Netns,
    /// The files of NADs and pods, as applied to the embedded store.
    pub objects: Vec<PathBuf>,
}

fn bridge_conf(name: &str, bridge: &str, subnet: &str, data_dir: &Path, gateway: bool) -> Value {
    let mut plugin = json!({
        "type": "bridge", "bridge": bridge, "isGateway": gateway,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": data_dir}
    });
    if gateway {
        plugin["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0"}]);
        return json!({"cniVersion": "1.0.0", "name": name, "plugins": [plugin]});
    }
    plugin["cniVersion"] = json!("1.0.0");
    plugin["name"] = json!(name);
    plugin
}

fn nad_name(n: u32) -> String {
    format!("mb{n}")
}

fn secondary_conf(world_host_local: &Path, n: u32) -> Value {
    bridge_conf(
        &nad_name(n),
        &format!("br-mb{n}"),
        &format!("10.252.{n}.0/24"),
        world_host_local,
        false,
    )
}

/// The pod `name` of this run: pods in an API server outlive a run (without a kubelet a pod
/// bound to a node is never finally deleted), so each run has its own.
pub fn run_pod(name: &str) -> String {
    format!("r{}-{name}", std::process::id())
}

fn pod_manifest(name: &str, secondaries: u32, node: &str) -> String {
    let name = run_pod(name);
    let networks: Vec<String> = (1..=secondaries).map(nad_name).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {NAMESPACE}\n  annotations:\n    k8s.v1.cni.cncf.io/networks: {}\nspec: {{nodeName: {node}, containers: [{{name: c, image: pause}}]}}\n---\n",
        networks.join(",")
    )
}

impl World {
    pub fn new(state: &Path, pods: usize) -> Result<Self> {
        let weft = weft_binary()?;
        let bin = state.join("bin");
        std::fs::create_dir_all(&bin)?;
        // As a node has them: weft-cni the static shim, passthru the weft binary.
        let installed = std::process::Command::new(&weft)
            .args(["install-cni", "--link", "--bin-dir"])
            .arg(&bin)
            .output()?;
        anyhow::ensure!(installed.status.success(), "weft install-cni: {installed:?}");
        let full_bin = state.join("full-bin");
        std::fs::create_dir_all(&full_bin)?;
        std::os::unix::fs::symlink(&weft, full_bin.join("weft-cni"))?;
        let conf_dir = state.join("net.d");
        std::fs::create_dir_all(&conf_dir)?;
        let host_local = state.join("host-local");
        let cluster_file = conf_dir.join("10-cluster.conflist");
        let cluster = bridge_conf("cluster", "cni0", "10.251.0.0/16", &host_local, true);
        std::fs::write(&cluster_file, cluster.to_string())?;

        let mut manifests = String::new();
        for n in 1..=SECONDARIES {
            let config = secondary_conf(&host_local, n).to_string();
            manifests += &format!(
                "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: {}, namespace: {NAMESPACE}}}\nspec:\n  config: '{config}'\n---\n",
                nad_name(n)
            );
        }
        // NADs no bench pod selects, as a cluster with many tenants has (`EXTRA_NADS_ENV`): a
        // JSON List of their own (`apply` takes at most 1,024 YAML documents per file).
        let extra: Vec<Value> = (0..extra_nads()?)
            .map(|n| {
                let config = secondary_conf(&host_local, SECONDARIES + 1)
                    .to_string()
                    .replace(&nad_name(SECONDARIES + 1), &format!("other-{n}"));
                json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                    "metadata": {"name": format!("other-{n}"), "namespace": NAMESPACE},
                    "spec": {"config": config}})
            })
            .collect();
        let sets = std::iter::once(None).chain(KUBE_POD_SETS.map(Some));
        for tag in sets {
            let (prefix, node) = (tag.map_or_else(String::new, |t| format!("{t}-")), node_of(tag));
            manifests += &pod_manifest(&format!("{prefix}bench"), SECONDARIES, &node);
            for p in 0..BURST_WORKERS {
                manifests += &pod_manifest(&format!("{prefix}burst-{p}"), SECONDARIES, &node);
            }
        }
        for p in 0..pods {
            manifests += &pod_manifest(&format!("rss-{p}"), RSS_SECONDARIES, &node_of(None));
        }
        for (tag, share) in KUBE_RSS {
            for p in 0..pods / share {
                let name = format!("{tag}-rss-{p}");
                manifests += &pod_manifest(&name, RSS_SECONDARIES, &node_of(Some(tag)));
            }
        }
        let mut objects = vec![state.join("objects.yaml")];
        std::fs::write(&objects[0], manifests)?;
        if !extra.is_empty() {
            objects.push(state.join("extra-nads.json"));
            std::fs::write(
                &objects[1],
                json!({"apiVersion": "v1", "kind": "List", "items": extra}).to_string(),
            )?;
        }
        // `apply` opens a running store only: create it first.
        let init = Command::new(&weft)
            .arg("--state-dir")
            .arg(state)
            .arg("init")
            .output()?;
        ensure!(
            init.status.success(),
            "weft init: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        for file in &objects {
            let applied = Command::new(&weft)
                .arg("--state-dir")
                .arg(state)
                .args(["apply", "-f"])
                .arg(file)
                .output()?;
            ensure!(
                applied.status.success(),
                "weft apply: {}",
                String::from_utf8_lossy(&applied.stderr)
            );
        }
        Ok(Self {
            state: state.to_path_buf(),
            bin,
            full_bin,
            weft,
            conf_dir,
            cluster_file,
            host_local,
            node: Netns::new(0)?,
            objects,
        })
    }

    /// Start an agent in the node netns with its own socket and cache (under the state dir,
    /// or `cache_dir`); waits for `/healthz`.
    pub fn agent(&self, tag: &str, parallel: usize, cache_dir: Option<&Path>) -> Result<Agent> {
        let agent = self.spawn_agent(tag, parallel, cache_dir, None, "warn", &[])?;
        self.wait_healthy(tag, &agent)?;
        Ok(agent)
    }

    /// [`World::agent`] with `extra` agent options.
    pub fn agent_with(&self, tag: &str, parallel: usize, extra: &[&str]) -> Result<Agent> {
        let agent = self.spawn_agent(tag, parallel, None, None, "warn", extra)?;
        self.wait_healthy(tag, &agent)?;
        Ok(agent)
    }

    /// [`World::agent`] on the Kubernetes API (`kubeconfig`: the weft-node ServiceAccount's).
    pub fn kube_agent(&self, tag: &str, parallel: usize, kubeconfig: &Path, extra: &[&str]) -> Result<Agent> {
        let agent = self.spawn_agent(tag, parallel, None, Some(kubeconfig), "warn", extra)?;
        self.wait_healthy(tag, &agent)?;
        Ok(agent)
    }

    /// Start an agent (embedded store, or the API server of `kubeconfig`; `extra` agent
    /// options) without waiting.
    pub fn spawn_agent(
        &self,
        tag: &str,
        parallel: usize,
        cache_dir: Option<&Path>,
        kubeconfig: Option<&Path>,
        log: &str,
        extra: &[&str],
    ) -> Result<Agent> {
        let dir = self.state.join(tag);
        std::fs::create_dir_all(&dir)?;
        let cache = cache_dir.map_or_else(|| dir.join("cache"), |d| d.join(tag));
        let socket = dir.join("weft.sock");
        let _ = std::fs::remove_file(&socket);
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.node.0]).arg(&self.weft);
        if let Some(kubeconfig) = kubeconfig {
            command.arg("--kubeconfig").arg(kubeconfig);
        }
        let child = command
            .arg("--state-dir")
            .arg(&self.state)
            .args(["agent", "--node"])
            .arg(node_of(kubeconfig.map(|_| tag)))
            .arg("--parallel-delegates")
            .arg(parallel.to_string())
            .arg("--socket")
            .arg(&socket)
            .arg("--conf-dir")
            .arg(&self.conf_dir)
            .arg("--cache-dir")
            .arg(&cache)
            .arg("--cni-bin-dir")
            .arg(&self.bin)
            .arg("--cni-bin-dir")
            .arg(PLUGIN_DIR)
            .args(extra)
            .env("WEFT_LOG", log)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("agent.log"))?)
            .spawn()?;
        let conf = json!({
            "cniVersion": "1.0.0", "name": "weft", "type": "weft-cni",
            "clusterNetwork": self.cluster_file, "confDir": self.conf_dir,
            "daemonSocketDir": dir,
        });
        // A Kubernetes agent's own pods are named after its tag (KUBE_POD_SETS, KUBE_RSS).
        let pods = match kubeconfig {
            Some(_) => format!("{tag}-"),
            None => String::new(),
        };
        Ok(Agent {
            child,
            socket,
            cache,
            conf: conf.to_string().into_bytes(),
            pods,
        })
    }

    /// The log of the agent started as `tag`.
    pub fn agent_log(&self, tag: &str) -> String {
        std::fs::read_to_string(self.state.join(tag).join("agent.log")).unwrap_or_default()
    }

    /// Wait (bounded) until `agent` answers `/healthz` and is the weft process.
    pub fn wait_healthy(&self, tag: &str, agent: &Agent) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while http_get(&agent.socket, "/healthz").is_err() {
            ensure!(
                Instant::now() < deadline,
                "agent {tag} did not come up: {}",
                self.agent_log(tag)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", agent.pid()))?;
        ensure!(
            comm.trim() == "weft",
            "pid {} is {comm:?}, not the agent",
            agent.pid()
        );
        Ok(())
    }

    /// The CNI environment of a request (what a runtime sets for the shim).
    pub fn env(&self, verb: &str, container: &str, netns: &str, pod: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("CNI_COMMAND".into(), verb.into()),
            ("CNI_CONTAINERID".into(), container.into()),
            ("CNI_NETNS".into(), netns.into()),
            ("CNI_IFNAME".into(), "eth0".into()),
            (
                "CNI_ARGS".into(),
                format!(
                    "IgnoreUnknown=1;K8S_POD_NAMESPACE={NAMESPACE};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={container}",
                    run_pod(pod)
                ),
            ),
            ("CNI_PATH".into(), format!("{}:{PLUGIN_DIR}", self.bin.display())),
        ])
    }

    /// Exec `weft-cni` as a runtime does; returns the wall time and the output.
    pub fn shim(&self, agent: &Agent, env: &BTreeMap<String, String>) -> Result<(Duration, Output)> {
        exec_wall(&self.bin.join("weft-cni"), &[], env, &agent.conf)
    }

    /// Exec the weft binary as `weft-cni` (the full shim, which the static one hands calls to).
    pub fn full_shim(&self, agent: &Agent, env: &BTreeMap<String, String>) -> Result<(Duration, Output)> {
        exec_wall(&self.full_bin.join("weft-cni"), &[], env, &agent.conf)
    }

    pub fn shim_ok(&self, agent: &Agent, env: &BTreeMap<String, String>) -> Result<Duration> {
        let (took, out) = self.shim(agent, env)?;
        ensure!(
            out.status.success(),
            "{} {}: {} {}",
            env["CNI_COMMAND"],
            env["CNI_CONTAINERID"],
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(took)
    }

    /// The delegates the agent runs for `env` (planned outside any timing, as the agent plans
    /// them: same files, same NADs, same pod annotation).
    pub fn plans(
        &self,
        conf: &[u8],
        env: &BTreeMap<String, String>,
        secondaries: u32,
    ) -> Result<(AttachmentRequest, Vec<DelegatePlan>)> {
        let request_env = RequestEnv::from_lookup(|k| env.get(k).cloned())?;
        let request = AttachmentRequest::from_request_env(&request_env);
        let config = MetaConfig::parse(conf)?;
        let mut catalog = MemoryCatalog::default().with_path(
            &self.cluster_file.to_string_lossy(),
            PathEntry::File(std::fs::read(&self.cluster_file)?),
        );
        for n in 1..=SECONDARIES {
            catalog = catalog.with_nad(
                NAMESPACE,
                &nad_name(n),
                &secondary_conf(&self.host_local, n).to_string(),
            );
        }
        let networks: Vec<String> = (1..=secondaries).map(nad_name).collect();
        let pod = weft_meta::Pod {
            namespace: NAMESPACE.into(),
            name: request.k8s.pod_name.clone(),
            uid: String::new(),
            annotations: BTreeMap::from([(weft_netconf::NETWORKS_ANNOTATION.into(), networks.join(","))]),
        };
        let plans = plan_add(&config, &request, Some(&pod), &catalog)?;
        Ok((request, plans))
    }
}

/// Exec `program` with `args`, only `env` in its environment and `stdin` written to it;
/// returns the wall time and the output.
pub fn exec_wall(
    program: &Path,
    args: &[&str],
    env: &BTreeMap<String, String>,
    stdin: &[u8],
) -> Result<(Duration, Output)> {
    let started = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // busybox true does not read stdin; a broken pipe there is expected.
    let _ = child.stdin.take().context("stdin")?.write_all(stdin);
    let out = child.wait_with_output()?;
    Ok((started.elapsed(), out))
}
