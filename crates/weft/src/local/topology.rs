//! The local cluster's layout as data: names, addresses and files, decided before anything is
//! created (so `up` can be validated first and `down` knows exactly what to remove).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Prefix of everything the local cluster creates on the host.
pub const PREFIX: &str = "weft-";
/// Underlay subnet joining the nodes and the remote host.
pub const UNDERLAY_PREFIX_LEN: u8 = 24;
/// VXLAN id of the secondary L2 network shared by all nodes.
pub const DATA_VNI: u32 = 100;
/// Name of the secondary network bridge inside each node.
pub const DATA_BRIDGE: &str = "br-data";
/// IPv6 underlay prefix length (`weft up --ipv6`).
pub const UNDERLAY_PREFIX_LEN_V6: u8 = 64;
/// Port the remote host's HTTP server listens on.
pub const REMOTE_HTTP_PORT: u16 = 8080;

/// One node of the local cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlan {
    /// Node name (`node1`).
    pub name: String,
    /// Its network namespace.
    pub netns: String,
    /// Its address on the underlay.
    pub underlay_ip: Ipv4Addr,
    /// Name of the underlay veth end inside the underlay namespace.
    pub underlay_port: String,
    /// Pod CIDR of the cluster network on this node (`10.244.N.0/24`).
    pub pod_cidr: String,
    /// IPv6 pod CIDR of the cluster network on this node (`fd10:244:N::/64`), dual-stack only.
    #[serde(default)]
    pub pod_cidr_v6: Option<String>,
    /// Its IPv6 address on the underlay (`fd00:31::N`), dual-stack only.
    #[serde(default)]
    pub underlay_ip6: Option<Ipv6Addr>,
    /// Directory with the node's socket, configs, cache, logs.
    pub dir: PathBuf,
}

impl NodePlan {
    /// The agent's socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join(crate::protocol::SOCKET_FILE)
    }
    /// The CNI config directory (cluster network + generated meta-plugin conflist).
    pub fn conf_dir(&self) -> PathBuf {
        self.dir.join("net.d")
    }
    /// The meta-plugin's cache directory.
    pub fn cache_dir(&self) -> PathBuf {
        self.dir.join("cache")
    }
}

/// The whole local cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// State directory.
    pub state_dir: PathBuf,
    /// This cluster's id: every namespace it creates is named `weft-<id>-…`, so two clusters
    /// (two state directories) never share, or delete, each other's namespaces.
    #[serde(default)]
    pub cluster_id: String,
    /// Whether guests are booted (`--no-guests` turns it off), for the supervised agents.
    #[serde(default)]
    pub no_guests: bool,
    /// Underlay namespace (a bridge joining nodes and the remote host).
    pub underlay_netns: String,
    /// Remote host namespace (beyond the cluster; reached through masquerade).
    pub remote_netns: String,
    /// Remote host address.
    pub remote_ip: Ipv4Addr,
    /// Remote host IPv6 address (`fd00:31::fe`), dual-stack only.
    #[serde(default)]
    pub remote_ip6: Option<Ipv6Addr>,
    /// Nodes.
    pub nodes: Vec<NodePlan>,
}

impl Topology {
    /// The layout for `nodes` nodes under `state_dir`, its namespaces named after `cluster_id`.
    pub fn new(state_dir: &Path, cluster_id: &str, nodes: usize) -> Self {
        let prefix = Self::prefix_of(cluster_id);
        let nodes = (1..=nodes.clamp(1, 200))
            .map(|i| NodePlan {
                name: format!("node{i}"),
                netns: format!("{prefix}node{i}"),
                underlay_ip: Ipv4Addr::new(172, 31, 255, i as u8),
                underlay_port: format!("n{i}"),
                pod_cidr: format!("10.244.{i}.0/24"),
                pod_cidr_v6: None,
                underlay_ip6: None,
                dir: state_dir.join("nodes").join(format!("node{i}")),
            })
            .collect();
        Self {
            state_dir: state_dir.to_path_buf(),
            cluster_id: cluster_id.to_string(),
            no_guests: false,
            underlay_netns: format!("{prefix}underlay"),
            remote_netns: format!("{prefix}remote"),
            remote_ip: Ipv4Addr::new(172, 31, 255, 254),
            remote_ip6: None,
            nodes,
        }
    }

    /// The same layout, dual-stack (`weft up --ipv6`): the underlay, the remote host and every
    /// node's pod network get IPv6 too (`fd00:31::/64`, `fd10:244:N::/64`).
    pub fn with_ipv6(mut self) -> Self {
        self.remote_ip6 = Some(Ipv6Addr::new(0xfd00, 0x31, 0, 0, 0, 0, 0, 0xfe));
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let n = i as u16 + 1;
            node.pod_cidr_v6 = Some(format!("fd10:244:{n:x}::/64"));
            node.underlay_ip6 = Some(Ipv6Addr::new(0xfd00, 0x31, 0, 0, 0, 0, 0, n));
        }
        self
    }

    /// Directory of the project's binaries as CNI plugins (`weft-cni`, `weft-ipam` links).
    pub fn bin_dir(&self) -> PathBuf {
        self.state_dir.join("bin")
    }

    /// Where the topology is recorded.
    pub fn file(state_dir: &Path) -> PathBuf {
        state_dir.join("cluster.json")
    }

    /// The topology recorded in `state_dir`, or why there is none.
    pub fn load(state_dir: &Path) -> Result<Self, TopologyError> {
        let file = Self::file(state_dir);
        let bytes = std::fs::read(&file).map_err(|source| TopologyError::NotRecorded {
            state_dir: state_dir.to_path_buf(),
            source,
        })?;
        serde_json::from_slice(&bytes).map_err(|source| TopologyError::Corrupt { file, source })
    }

    /// Prefix of every namespace of the cluster `cluster_id` (`weft-` for clusters recorded
    /// before ids existed).
    pub fn prefix_of(cluster_id: &str) -> String {
        if cluster_id.is_empty() {
            PREFIX.to_string()
        } else {
            format!("{PREFIX}{cluster_id}-")
        }
    }

    /// Prefix of every namespace this cluster creates.
    pub fn prefix(&self) -> String {
        Self::prefix_of(&self.cluster_id)
    }

    /// Network namespace of a pod sandbox of this cluster.
    pub fn pod_netns(&self, namespace: &str, name: &str) -> String {
        format!("{}pod-{namespace}-{name}", self.prefix())
    }

    /// Of the namespaces on the host (`existing`), those this cluster created: its fixed ones
    /// and its pods' (named with its prefix). Another cluster's are never among them, and a
    /// cluster without an id (recorded before ids) claims only its fixed names and `weft-pod-*`.
    pub fn owned_netns(&self, existing: &[String]) -> Vec<String> {
        let fixed: Vec<&str> = [self.underlay_netns.as_str(), self.remote_netns.as_str()]
            .into_iter()
            .chain(self.nodes.iter().map(|n| n.netns.as_str()))
            .collect();
        let prefix = self.prefix();
        let pods = format!("{prefix}pod-");
        existing
            .iter()
            // A record naming a namespace outside its own prefix (forged or corrupt) is not
            // followed: down never deletes a namespace weft would not have named so.
            .filter(|name| name.starts_with(&prefix))
            .filter(|name| fixed.contains(&name.as_str()) || name.starts_with(&pods))
            .cloned()
            .collect()
    }

    /// The cluster network config of a node (reference `bridge` + `host-local`, like kindnet).
    pub fn cluster_network_conflist(&self, node: &NodePlan) -> serde_json::Value {
        let gateway = node.pod_cidr.replace(".0/24", ".1");
        let mut ranges = vec![serde_json::json!([{"subnet": node.pod_cidr, "gateway": gateway}])];
        let mut routes = vec![serde_json::json!({"dst": "0.0.0.0/0"})];
        if let Some(v6) = &node.pod_cidr_v6 {
            ranges.push(serde_json::json!([{"subnet": v6, "gateway": v6.replace("::/64", "::1")}]));
            routes.push(serde_json::json!({"dst": "::/0"}));
        }
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "cluster",
            "plugins": [{
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "ipMasq": true,
                "hairpinMode": true,
                "mtu": 1500,
                "ipam": {
                    "type": "host-local",
                    "ranges": ranges,
                    "routes": routes,
                    "dataDir": node.dir.join("host-local"),
                },
                "dns": {"nameservers": [gateway], "search": ["default.svc.cluster.local", "svc.cluster.local", "cluster.local"]},
            }, {
                "type": "portmap",
                "capabilities": {"portMappings": true},
            }]
        })
    }

    /// The meta-plugin's conflist the runtime calls (`00-weft.conflist`).
    pub fn meta_conflist(&self, node: &NodePlan) -> serde_json::Value {
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "weft",
            "plugins": [{
                "type": "weft-cni",
                "clusterNetwork": node.conf_dir().join("10-cluster.conflist"),
                "daemonSocketDir": node.dir,
                "cniDir": node.cache_dir(),
                "multusNamespace": "kube-system",
                "capabilities": {"portMappings": true},
            }]
        })
    }
}

/// Why a state directory has no usable topology.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// No `cluster.json`: not a local cluster's state directory.
    #[error("no local cluster recorded in {} (no cluster.json)", state_dir.display())]
    NotRecorded {
        /// The directory looked at.
        state_dir: PathBuf,
        /// Reading cluster.json.
        #[source]
        source: std::io::Error,
    },
    /// `cluster.json` does not parse.
    #[error("{}: not a local cluster record", file.display())]
    Corrupt {
        /// The file.
        file: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
}

/// A fresh cluster id (8 hex digits) not used by any namespace in `existing`.
pub fn new_cluster_id(existing: &[String]) -> String {
    loop {
        let bytes: [u8; 4] = rand::random();
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let prefix = Topology::prefix_of(&id);
        if !existing.iter().any(|n| n.starts_with(&prefix)) {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_addresses_distinct() {
        let t = Topology::new(Path::new("/tmp/x"), "ab12cd34", 3);
        assert!(t.nodes.iter().all(|n| n.netns.starts_with("weft-ab12cd34-")));
        assert!(t.underlay_netns.starts_with(PREFIX) && t.remote_netns.starts_with(PREFIX));
        let mut ips: Vec<_> = t.nodes.iter().map(|n| n.underlay_ip).collect();
        ips.push(t.remote_ip);
        ips.sort();
        ips.dedup();
        assert_eq!(ips.len(), 4);
        assert_eq!(
            t.pod_netns("default", "virt-launcher-vm1"),
            "weft-ab12cd34-pod-default-virt-launcher-vm1"
        );
    }

    #[test]
    fn owned_netns_are_exactly_this_clusters() {
        let a = Topology::new(Path::new("/a"), "aaaa0001", 2);
        let host: Vec<String> = [
            "weft-aaaa0001-node1",
            "weft-aaaa0001-node2",
            "weft-aaaa0001-underlay",
            "weft-aaaa0001-remote",
            "weft-aaaa0001-pod-default-p1",
            "weft-bbbb0002-node1",
            "weft-bbbb0002-pod-default-p1",
            "weft-aaaa0001-other",
            "weft-node1",
            "unrelated",
        ]
        .map(String::from)
        .to_vec();
        let mut owned = a.owned_netns(&host);
        owned.sort();
        assert_eq!(
            owned,
            [
                "weft-aaaa0001-node1",
                "weft-aaaa0001-node2",
                "weft-aaaa0001-pod-default-p1",
                "weft-aaaa0001-remote",
                "weft-aaaa0001-underlay",
            ]
        );
        // A cluster recorded before ids claims only its fixed names and pods, not another's.
        let old = Topology::new(Path::new("/o"), "", 1);
        assert_eq!(old.owned_netns(&host), ["weft-node1"]);
        // A forged record naming namespaces that are not its own claims none of them.
        let mut forged = a.clone();
        forged.underlay_netns = "unrelated".into();
        forged.remote_netns = "weft-bbbb0002-node1".into();
        let owned = forged.owned_netns(&host);
        assert!(
            !owned.iter().any(|n| n == "unrelated" || n.contains("bbbb0002")),
            "{owned:?}"
        );
    }

    #[test]
    fn new_ids_avoid_namespaces_in_use() {
        let id = new_cluster_id(&[]);
        assert_eq!(id.len(), 8);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        let in_use = vec![format!("weft-{id}-node1")];
        assert_ne!(new_cluster_id(&in_use), id);
    }

    #[test]
    fn load_says_when_nothing_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let err = Topology::load(dir.path()).unwrap_err();
        assert!(matches!(err, TopologyError::NotRecorded { .. }));
        assert!(err.to_string().contains("no local cluster recorded in"), "{err}");
        std::fs::write(Topology::file(dir.path()), "not json").unwrap();
        assert!(matches!(
            Topology::load(dir.path()).unwrap_err(),
            TopologyError::Corrupt { .. }
        ));
    }

    #[test]
    fn dual_stack_adds_ipv6_everywhere_and_single_stack_none() {
        let t = Topology::new(Path::new("/s"), "ab12cd34", 2);
        let conf = t.cluster_network_conflist(&t.nodes[0]);
        assert_eq!(conf["plugins"][0]["ipam"]["ranges"].as_array().unwrap().len(), 1);
        assert!(t.remote_ip6.is_none() && t.nodes.iter().all(|n| n.underlay_ip6.is_none()));
        let t = t.with_ipv6();
        let conf = t.cluster_network_conflist(&t.nodes[1]);
        let ipam = &conf["plugins"][0]["ipam"];
        assert_eq!(ipam["ranges"][1][0]["subnet"], "fd10:244:2::/64");
        assert_eq!(ipam["ranges"][1][0]["gateway"], "fd10:244:2::1");
        assert_eq!(ipam["routes"][1]["dst"], "::/0");
        let mut ips: Vec<Ipv6Addr> = t.nodes.iter().filter_map(|n| n.underlay_ip6).collect();
        ips.extend(t.remote_ip6);
        ips.sort();
        ips.dedup();
        assert_eq!(ips.len(), 3);
        // Recorded clusters from before dual-stack still load.
        let mut old = serde_json::to_value(Topology::new(Path::new("/s"), "x", 1)).unwrap();
        old.as_object_mut().unwrap().remove("remote_ip6");
        old["nodes"][0].as_object_mut().unwrap().remove("pod_cidr_v6");
        let old: Topology = serde_json::from_value(old).unwrap();
        assert!(old.nodes[0].pod_cidr_v6.is_none());
    }

    #[test]
    fn cluster_network_uses_node_cidr() {
        let t = Topology::new(Path::new("/s"), "ab12cd34", 2);
        let conf = t.cluster_network_conflist(&t.nodes[1]);
        assert_eq!(
            conf["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            "10.244.2.0/24"
        );
        assert_eq!(
            conf["plugins"][0]["ipam"]["ranges"][0][0]["gateway"],
            "10.244.2.1"
        );
    }
}
