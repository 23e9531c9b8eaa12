//! What one plugin invocation asks for: the parsed CNI environment and stdin config, plus the
//! pure readings of it (pod identity, requested addresses).

use std::net::IpAddr;

use serde_json::Value;
use weft_cni::plugin::PluginRequest;
use weft_cni::{CniArgs, CniCommand, CniVersion, NetworkConfig, RequestEnv};

use crate::allocator::Holder;
use crate::error::IpamError;

/// Environment variables naming the node the runtime runs on, in order of preference.
pub const NODE_NAME_VARS: [&str; 3] = ["WEFT_NODE_NAME", "NODENAME", "KUBERNETES_NODE_NAME"];

/// One IPAM plugin invocation.
#[derive(Clone, Debug)]
pub struct IpamRequest {
    /// The environment parameters (verb, container id, ifname, CNI_ARGS).
    pub env: RequestEnv,
    /// The network configuration from stdin.
    pub config: NetworkConfig,
    /// The configuration's spec version.
    pub version: CniVersion,
    /// Node of the runtime (scopes GC); empty when unknown.
    pub node: String,
}

impl IpamRequest {
    /// A request from what `weft_cni::plugin::dispatch` validated, plus the node name.
    pub fn from_plugin_request(request: &PluginRequest, node: impl Into<String>) -> Self {
        Self {
            env: request.env.clone(),
            config: request.config.clone(),
            version: request.version,
            node: node.into(),
        }
    }

    /// Parse from an environment lookup and stdin bytes (for tests and in-process callers);
    /// the node comes from the first of [`NODE_NAME_VARS`] that is set.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, stdin: &[u8]) -> Result<Self, IpamError> {
        let node = NODE_NAME_VARS
            .iter()
            .find_map(|v| lookup(v).filter(|s| !s.is_empty()))
            .unwrap_or_default();
        let env = RequestEnv::from_lookup(lookup).map_err(|e| IpamError::Request(e.msg))?;
        let config = NetworkConfig::from_bytes(stdin).map_err(|e| IpamError::Request(e.to_string()))?;
        let version = config.cni_version();
        Ok(Self {
            env,
            config,
            version,
            node,
        })
    }

    /// The verb.
    pub fn command(&self) -> CniCommand {
        self.env.command
    }

    /// The whole network configuration as JSON.
    pub fn config_json(&self) -> Value {
        Value::Object(self.config.as_object().clone())
    }

    /// `namespace`, `name` of the pod (CNI_ARGS `K8S_POD_NAMESPACE` / `K8S_POD_NAME`), when both are set.
    pub fn pod(&self) -> Option<(&str, &str)> {
        let args: &CniArgs = &self.env.args;
        match (args.pod_namespace(), args.pod_name()) {
            (Some(ns), Some(name)) if !ns.is_empty() && !name.is_empty() => Some((ns, name)),
            _ => None,
        }
    }

    /// Who this ADD/DEL/CHECK is for.
    pub fn holder(&self) -> Holder {
        Holder {
            container_id: self.env.container_id.clone(),
            ifname: self.env.ifname.clone(),
            pod_ref: self.pod().map(|(ns, n)| format!("{ns}/{n}")).unwrap_or_default(),
            pod_uid: self.env.args.pod_uid().unwrap_or_default().to_string(),
            node: self.node.clone(),
        }
    }

    /// Requested addresses: `runtimeConfig.ips` > `args.cni.ips` > CNI_ARGS `IP` (the first
    /// source that is present wins, as the CNI conventions say).
    pub fn requested_ips(&self) -> Result<Vec<IpAddr>, IpamError> {
        if let Some(list) = self.config.runtime_config().and_then(|rc| rc.get("ips")) {
            return parse_ip_list(list, "runtimeConfig.ips");
        }
        if let Some(list) = self
            .config
            .args()
            .and_then(|a| a.get("cni"))
            .and_then(|c| c.get("ips"))
        {
            return parse_ip_list(list, "args.cni.ips");
        }
        self.env
            .args
            .ips()
            .map(|ips| ips.iter().map(|ip| ip.addr()).collect())
            .map_err(|e| IpamError::Request(format!("CNI_ARGS: {e}")))
    }
}

/// `["10.0.0.5/24", "fd00::5"]` → addresses (prefix lengths are ignored: the range decides them).
fn parse_ip_list(list: &Value, key: &str) -> Result<Vec<IpAddr>, IpamError> {
    let items = list
        .as_array()
        .ok_or_else(|| IpamError::Request(format!("{key}: {list} is not a list")))?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let text = item
                .as_str()
                .ok_or_else(|| IpamError::Request(format!("{key}[{i}]: {item} is not a string")))?;
            parse_ip_or_cidr(text)
                .ok_or_else(|| IpamError::Request(format!("{key}[{i}]: {text} is not an IP address")))
        })
        .collect()
}

/// `10.0.0.5` or `10.0.0.5/24` → the address.
pub fn parse_ip_or_cidr(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<ipnet::IpNet>().ok().map(|n| n.addr()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(args: &str, config: Value) -> IpamRequest {
        let env = [
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "net1"),
            ("CNI_PATH", "/opt/cni/bin"),
            ("CNI_ARGS", args),
            ("NODENAME", "node-a"),
        ];
        IpamRequest::from_lookup(
            |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()),
            config.to_string().as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn requested_ips_precedence() {
        let base = json!({"cniVersion": "1.0.0", "name": "n", "type": "bridge"});
        let mut all = base.clone();
        all["runtimeConfig"] = json!({"ips": ["10.0.0.1/24"]});
        all["args"] = json!({"cni": {"ips": ["10.0.0.2"]}});
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            request("IP=10.0.0.3", all.clone()).requested_ips().unwrap(),
            vec![ip("10.0.0.1")]
        );
        all.as_object_mut().unwrap().remove("runtimeConfig");
        assert_eq!(
            request("IP=10.0.0.3", all).requested_ips().unwrap(),
            vec![ip("10.0.0.2")]
        );
        assert_eq!(
            request("IP=10.0.0.3", base.clone()).requested_ips().unwrap(),
            vec![ip("10.0.0.3")]
        );
        assert!(request("", base.clone()).requested_ips().unwrap().is_empty());
        let mut bad = base;
        bad["runtimeConfig"] = json!({"ips": ["nope"]});
        assert_eq!(
            request("", bad).requested_ips().unwrap_err().to_string(),
            "runtimeConfig.ips[0]: nope is not an IP address"
        );
    }

    #[test]
    fn holder_carries_pod_identity_and_node() {
        let r = request(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u1",
            json!({"cniVersion": "1.0.0", "name": "n", "type": "x"}),
        );
        let h = r.holder();
        assert_eq!(
            (h.pod_ref.as_str(), h.pod_uid.as_str(), h.node.as_str()),
            ("ns/p", "u1", "node-a")
        );
        assert_eq!(r.pod(), Some(("ns", "p")));
    }
}
