//! The local cluster's layout as data: names, addresses and files, decided before anything is
//! created (so `up` can be validated first and `down` knows exactly what to remove).

use std::net::Ipv4Addr;
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
    /// Underlay namespace (a bridge joining nodes and the remote host).
    pub underlay_netns: String,
    /// Remote host namespace (beyond the cluster; reached through masquerade).
    pub remote_netns: String,
    /// Remote host address.
    pub remote_ip: Ipv4Addr,
    /// Nodes.
    pub nodes: Vec<NodePlan>,
}

impl Topology {
    /// The layout for `nodes` nodes under `state_dir`.
    pub fn new(state_dir: &Path, nodes: usize) -> Self {
        let nodes = (1..=nodes.clamp(1, 200))
            .map(|i| NodePlan {
                name: format!("node{i}"),
                netns: format!("{PREFIX}node{i}"),
                underlay_ip: Ipv4Addr::new(172, 31, 255, i as u8),
                underlay_port: format!("n{i}"),
                pod_cidr: format!("10.244.{i}.0/24"),
                dir: state_dir.join("nodes").join(format!("node{i}")),
            })
            .collect();
        Self {
            state_dir: state_dir.to_path_buf(),
            underlay_netns: format!("{PREFIX}underlay"),
            remote_netns: format!("{PREFIX}remote"),
            remote_ip: Ipv4Addr::new(172, 31, 255, 254),
            nodes,
        }
    }

    /// Directory of the project's binaries as CNI plugins (`weft-cni`, `weft-ipam` links).
    pub fn bin_dir(&self) -> PathBuf {
        self.state_dir.join("bin")
    }

    /// Where the topology is recorded.
    pub fn file(state_dir: &Path) -> PathBuf {
        state_dir.join("cluster.json")
    }

    /// Network namespace of a pod sandbox.
    pub fn pod_netns(namespace: &str, name: &str) -> String {
        format!("{PREFIX}pod-{namespace}-{name}")
    }

    /// The cluster network config of a node (reference `bridge` + `host-local`, like kindnet).
    pub fn cluster_network_conflist(&self, node: &NodePlan) -> serde_json::Value {
        let gateway = node.pod_cidr.replace(".0/24", ".1");
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
                    "ranges": [[{"subnet": node.pod_cidr, "gateway": gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_addresses_distinct() {
        let t = Topology::new(Path::new("/tmp/x"), 3);
        assert!(t.nodes.iter().all(|n| n.netns.starts_with(PREFIX)));
        assert!(t.underlay_netns.starts_with(PREFIX) && t.remote_netns.starts_with(PREFIX));
        let mut ips: Vec<_> = t.nodes.iter().map(|n| n.underlay_ip).collect();
        ips.push(t.remote_ip);
        ips.sort();
        ips.dedup();
        assert_eq!(ips.len(), 4);
        assert!(Topology::pod_netns("default", "virt-launcher-vm1").starts_with(PREFIX));
    }

    #[test]
    fn cluster_network_uses_node_cidr() {
        let t = Topology::new(Path::new("/s"), 2);
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
