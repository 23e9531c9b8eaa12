//! Pod sandboxes in the local cluster: a network namespace per pod and the CNI calls a container
//! runtime makes for it (ADD on creation, DEL on removal), through the node's conflist.

use anyhow::Context;
use weft_cni::CniResult;

use crate::agent::local::context::AgentContext;
use crate::kinds::Pod;

/// A pod's sandbox.
pub struct Sandbox {
    /// Sandbox (infra container) id.
    pub id: String,
    /// Name of its network namespace (under /run/netns).
    pub netns: String,
    /// Pod namespace and name, uid.
    pub pod: (String, String, String),
    /// The cluster network's address.
    pub pod_ip: String,
}

impl Sandbox {
    /// Path of the network namespace.
    pub fn netns_path(&self) -> String {
        format!("/run/netns/{}", self.netns)
    }
}

fn runtime_conf(sandbox: &Sandbox) -> weft_cni::runtime::RuntimeConf {
    let (ns, name, uid) = &sandbox.pod;
    weft_cni::runtime::RuntimeConf {
        container_id: sandbox.id.clone(),
        netns: sandbox.netns_path(),
        ifname: "eth0".into(),
        args: weft_cni::CniArgs::from_pairs([
            ("IgnoreUnknown", "1"),
            ("K8S_POD_NAMESPACE", ns.as_str()),
            ("K8S_POD_NAME", name.as_str()),
            ("K8S_POD_INFRA_CONTAINER_ID", sandbox.id.as_str()),
            ("K8S_POD_UID", uid.as_str()),
        ]),
        capability_args: Default::default(),
    }
}

/// Run the node's meta-plugin conflist for `command` the way a container runtime does.
fn run_conflist(agent: &AgentContext, command: &str, sandbox: &Sandbox) -> anyhow::Result<Option<CniResult>> {
    let conflist = agent.conf_dir.join("00-weft.conflist");
    let bytes = std::fs::read(&conflist).with_context(|| format!("read {}", conflist.display()))?;
    let list = weft_cni::NetworkConfigList::from_bytes(&bytes)
        .with_context(|| format!("parse {}", conflist.display()))?;
    let runtime = weft_cni::runtime::CniRuntime::new(agent.cni_bin_dirs.clone());
    let conf = runtime_conf(sandbox);
    match command {
        "ADD" => Ok(Some(runtime.add(&list, &conf)?)),
        "DEL" => {
            runtime.del(&list, &conf, None)?;
            Ok(None)
        }
        other => anyhow::bail!("unsupported CNI command {other}"),
    }
}

/// Create the sandbox of `pod` and attach its networks.
pub async fn create(agent: &std::sync::Arc<AgentContext>, pod: &Pod, netns: &str) -> anyhow::Result<Sandbox> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let id: String = {
        let bytes: [u8; 32] = rand::random();
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    };
    let name = netns.to_string();
    // A live-migration target stays quiet until its guest resumes: its kernel must not speak
    // for, or reset the connections of, the guest still running on the source.
    let quiet = pod.metadata.label(weft_vm::vmim::MIGRATION_JOB_LABEL).is_some();
    crate::sys::blocking(move || -> anyhow::Result<()> {
        let _ = weft_host::Netns::delete_named(&name);
        let handle = weft_host::Netns::create_named(&name).with_context(|| format!("create netns {name}"))?;
        weft_host::Netlink::open_in(&handle)?.set_up("lo")?;
        if quiet && let Err(e) = crate::agent::local::migration_quiet::install(&format!("/run/netns/{name}"))
        {
            let _ = weft_host::Netns::delete_named(&name);
            return Err(e);
        }
        Ok(())
    })
    .await??;
    let mut sandbox = Sandbox {
        id,
        netns: netns.to_string(),
        pod: (ns, pod.metadata.name.clone(), uid),
        pod_ip: String::new(),
    };
    let agent2 = agent.clone();
    let result = {
        let sb = Sandbox {
            id: sandbox.id.clone(),
            netns: sandbox.netns.clone(),
            pod: sandbox.pod.clone(),
            pod_ip: String::new(),
        };
        crate::sys::blocking(move || run_conflist(&agent2, "ADD", &sb)).await?
    };
    match result {
        Ok(Some(result)) => {
            sandbox.pod_ip = result
                .ips
                .first()
                .map(|ip| ip.address.addr().to_string())
                .unwrap_or_default();
            Ok(sandbox)
        }
        Ok(None) => Ok(sandbox),
        Err(e) => {
            let name = netns.to_string();
            let _ = crate::sys::blocking(move || weft_host::Netns::delete_named(&name)).await;
            Err(e.context("CNI ADD"))
        }
    }
}

/// Detach the sandbox's networks (CNI DEL) and delete its namespace.
pub async fn remove(agent: &std::sync::Arc<AgentContext>, sandbox: Sandbox) -> anyhow::Result<()> {
    let agent2 = agent.clone();
    let netns = sandbox.netns.clone();
    let (outcome, deleted) = crate::sys::blocking(move || {
        let outcome = run_conflist(&agent2, "DEL", &sandbox);
        (outcome, weft_host::Netns::delete_named(&sandbox.netns))
    })
    .await?;
    outcome.context("CNI DEL")?;
    deleted.with_context(|| format!("delete netns {netns}"))?;
    Ok(())
}
