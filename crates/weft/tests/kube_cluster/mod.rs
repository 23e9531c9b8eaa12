//! What the tests of a `weft agent --kubeconfig` process share: the fake API server on its own
//! runtime, served over TCP inside the node's namespace, and the agent process.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::common::*;
use serde_json::{Value, json};
use weft_store::fake_api::strict::Rules;
use weft_store::fake_api::{FakeApiServer, TcpServer};
use weft_store::{MemoryStore, Object, Resource, ResourceType, Store};

/// The bearer token the agent presents: it is the `weft-node` ServiceAccount.
pub const NODE_TOKEN: &str = "weft-node-token";
/// The user the API server sees for the `weft-node` ServiceAccount.
pub const NODE_USER: &str = "system:serviceaccount:weft-system:weft-node";

/// The bearer token `weft controller` presents: it is the `weft-controller` ServiceAccount.
pub const CONTROLLER_TOKEN: &str = "weft-controller-token";
/// The user the API server sees for the `weft-controller` ServiceAccount.
pub const CONTROLLER_USER: &str = "system:serviceaccount:weft-system:weft-controller";

/// The rules of deploy/'s ClusterRole `name` (deploy/rbac/*.yaml), as the API server would
/// enforce them.
pub fn deploy_role(name: &str) -> Rules {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/rbac");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let docs =
            serde_saphyr::from_multiple::<Value>(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        found.extend(
            docs.into_iter()
                .filter(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == name),
        );
    }
    assert_eq!(found.len(), 1, "exactly one ClusterRole {name} in deploy/rbac");
    Rules::from_role(&found[0]).unwrap()
}

pub fn pods() -> ResourceType {
    ResourceType::new("v1", "Pod", "pods", true)
}

pub fn events() -> ResourceType {
    ResourceType::new("v1", "Event", "events", true)
}

pub fn nads() -> ResourceType {
    weft_netconf::NetworkAttachmentDefinition::resource_type()
}

/// The fake API server (on its own runtime) and what the agent needs to reach it.
pub struct FakeCluster {
    pub api: FakeApiServer,
    pub objects: Arc<dyn Store>,
    pub tcp: Option<TcpServer>,
    pub runtime: tokio::runtime::Runtime,
}

impl FakeCluster {
    /// Serve the fake API (pods and NADs) on 127.0.0.1 inside `netns` (where the agent runs).
    pub fn start(netns: &Netns) -> Self {
        Self::serving(netns, vec![pods(), nads()])
    }

    /// Serve the fake API for `types` on 127.0.0.1 inside `netns`.
    pub fn serving(netns: &Netns, types: Vec<ResourceType>) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let objects = MemoryStore::shared();
        // Every agent records Events (core/v1): the API serves them whatever else it serves.
        let mut types = types;
        if !types.iter().any(|t| t.kind == "Event") {
            types.push(events());
        }
        let api = FakeApiServer::new(objects.clone(), types);
        // The agent may do what deploy/'s weft-node role grants, nothing more: a request
        // outside it is a 403 and fails the test.
        api.grant(NODE_TOKEN, NODE_USER, deploy_role("weft-node"));
        let listener = netns.enter(|| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
        let tcp = {
            let _entered = runtime.enter();
            api.serve_listener(listener).unwrap()
        };
        Self {
            api,
            objects,
            tcp: Some(tcp),
            runtime,
        }
    }

    pub fn create(&self, ty: &ResourceType, object: Value) -> Object {
        let object: Object = serde_json::from_value(object).unwrap();
        self.runtime.block_on(self.objects.create(ty, object)).unwrap()
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<Object> {
        self.runtime
            .block_on(self.objects.get(&pods(), Some(namespace), name))
            .unwrap()
    }
}

/// The fake API serving pods, NADs, IPReservations and IPAMClaims in `node`.
pub fn ipam_cluster(node: &Netns) -> FakeCluster {
    FakeCluster::serving(
        node,
        vec![
            pods(),
            nads(),
            weft_ipam::IpReservation::resource_type(),
            weft_ipam::IpamClaim::resource_type(),
        ],
    )
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        // What the agent used of its role, for comparing the role with it (--no-capture).
        for (user, verb, group, resource) in self.api.permissions_used() {
            eprintln!("permission used: {user} {verb} {group}/{resource}");
        }
        // Stop serving inside the runtime before the runtime goes.
        let _entered = self.runtime.enter();
        self.tcp.take();
    }
}

/// A `weft agent --kubeconfig` process in a node namespace, killed on drop.
pub struct KubeAgent {
    pub child: Child,
    /// The node the agent serves (`--node`).
    pub node_name: String,
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    pub conf: Value,
}

impl KubeAgent {
    pub fn start(node: &Netns, cluster: &FakeCluster) -> Self {
        Self::start_on(node, cluster, "n1")
    }

    /// An agent for Kubernetes node `node_name`, running in `node` (several agents, several
    /// nodes, may share one namespace: each has its own state, socket and caches).
    pub fn start_on(node: &Netns, cluster: &FakeCluster, node_name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let (bin, conf) = node_cni(state, "10.251.0.0/24");
        let kubeconfig = state.join("kubeconfig");
        cluster
            .tcp
            .as_ref()
            .unwrap()
            .write_kubeconfig_with_token(&kubeconfig, NODE_TOKEN)
            .unwrap();
        let child = Self::spawn_on(node, state, node_name);
        let agent = Self {
            child,
            node_name: node_name.to_string(),
            dir,
            bin,
            conf,
        };
        agent.wait_for_socket();
        // The agent serves before its caches are synced; the test starts from synced caches
        // (their list and watch requests done).
        let deadline = Instant::now() + Duration::from_secs(30);
        while !agent.log().contains("watch caches synced") {
            assert!(Instant::now() < deadline, "caches did not sync:\n{}", agent.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        agent
    }

    /// `weft agent` on `state`'s kubeconfig, conf dir, cache dir and plugins, in `node`.
    pub fn spawn(node: &Netns, state: &Path) -> Child {
        Self::spawn_on(node, state, "n1")
    }

    /// [`KubeAgent::spawn`] for Kubernetes node `node_name`.
    pub fn spawn_on(node: &Netns, state: &Path, node_name: &str) -> Child {
        spawn_kube_agent(node, state, node_name)
    }

    pub fn wait_for_socket(&self) {
        let socket = self.dir.path().join("weft.sock");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "agent did not start:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop the agent and start it again on the same state (attachment records included).
    pub fn restart(&mut self, node: &Netns) {
        self.restart_with(node, &[]);
    }

    /// [`KubeAgent::restart`] with more `weft agent` options.
    pub fn restart_with(&mut self, node: &Netns, extra: &[&str]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.dir.path().join("weft.sock"));
        self.child = spawn_kube_agent_with(node, self.dir.path(), &self.node_name, extra);
        self.wait_for_socket();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    pub fn shim(&self, command: &str, pod_ns: &Netns, namespace: &str, pod: &str) -> std::process::Output {
        run_shim(&self.bin, &self.conf, command, pod_ns, namespace, pod)
    }

    /// [`wait_status_written`] of this agent.
    pub fn wait_status_written(&self) {
        wait_status_written(&self.dir.path().join("weft.sock"), || self.log());
    }

    /// Addresses host-local holds under `dir` (`<dir>/<network>/<address>`).
    pub fn leases(&self, dir: &str) -> Vec<String> {
        let names = |path: &std::path::Path| -> Vec<std::fs::DirEntry> {
            std::fs::read_dir(path)
                .map(|d| d.filter_map(Result::ok).collect())
                .unwrap_or_default()
        };
        names(&self.dir.path().join(dir))
            .iter()
            .flat_map(|network| names(&network.path()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| name.parse::<std::net::IpAddr>().is_ok())
            .collect()
    }
}

impl Drop for KubeAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent's Prometheus metrics, from its Unix socket.
pub fn agent_metrics(agent: &KubeAgent) -> String {
    agent_metrics_at(&agent.dir.path().join("weft.sock"))
}

/// The veth host ends left in a namespace.
pub fn veths(netns: &Netns) -> Vec<String> {
    netns
        .link_details()
        .iter()
        .filter(|l| l["linkinfo"]["info_kind"] == "veth")
        .filter_map(|l| l["ifname"].as_str().map(String::from))
        .collect()
}

/// Wait until the agent's caches watch pods and NADs (since the last `clear_requests`).
pub fn wait_for_watches(cluster: &FakeCluster, agent: &KubeAgent) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let watching = |plural: &str| {
        cluster
            .api
            .requests()
            .iter()
            .any(|r| r.starts_with("GET ") && r.contains(plural) && r.contains("watch=true"))
    };
    while !(watching("/pods") && watching("/network-attachment-definitions")) {
        assert!(
            Instant::now() < deadline,
            "the caches do not watch: {:#?}\n{}",
            cluster.api.requests(),
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Take the API server down and wait until the agent's watch caches fail to relist (the API
/// server is down for the agent too).
pub fn take_down(cluster: &FakeCluster, agent: &KubeAgent) {
    let seen = agent.log().len();
    cluster.api.set_down(true);
    let relist_failed = |kind: &str| {
        agent.log()[seen..]
            .lines()
            .any(|l| l.contains("cache list failed") && l.contains(kind))
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while !(relist_failed("Pod") && relist_failed("NetworkAttachmentDefinition")) {
        assert!(
            Instant::now() < deadline,
            "the agent did not notice the API server going down:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The Events of a pod, from the fake API server's objects.
pub fn pod_events(cluster: &FakeCluster, pod: &str) -> Vec<Object> {
    let list = cluster
        .runtime
        .block_on(
            cluster
                .objects
                .list(&events(), Some("default"), &weft_store::ListOptions::default()),
        )
        .unwrap();
    list.items
        .into_iter()
        .filter(|e| e.data["involvedObject"]["name"] == pod)
        .collect()
}

/// NAD `name` in `default`: bridge `br-<name>` with host-local on `subnet`, its leases under
/// the agent's `hl-<name>`.
pub fn bridge_nad(cluster: &FakeCluster, agent: &KubeAgent, name: &str, subnet: &str) {
    let state = agent.dir.path().display().to_string();
    let config = json!({
        "cniVersion": "1.0.0", "type": "bridge", "bridge": format!("br-{name}"),
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                 "dataDir": format!("{state}/hl-{name}")}
    });
    cluster.create(
        &nads(),
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"config": config.to_string()}}),
    );
}
