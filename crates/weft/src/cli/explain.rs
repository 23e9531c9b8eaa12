//! `weft explain vmi NAME`: gather the snapshot (store objects; on the local cluster, as root,
//! the launcher pod netns's links and nft tables) and print the pure evaluation.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Context;
use clap::Args;
use weft_netconf::NetworkAttachmentDefinition;
use weft_store::{Api, ListOptions};
use weft_vm::VirtualMachineInstance;

use crate::cluster;
use crate::controller::launcher_pod;
use crate::explain::{self, NetnsFacts, Snapshot};
use crate::kinds::{Event, Pod};

/// `weft explain KIND NAME`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Kind (only `vmi`), or `vmi/NAME`.
    #[arg(value_name = "KIND[/NAME]")]
    pub kind: String,
    /// Name (unless given as `vmi/NAME`).
    pub name: Option<String>,
    /// Output: text (default) or json.
    #[arg(short, long, default_value = "text")]
    pub output: String,
}

/// The VMI's launcher pod: not being deleted, the newest.
pub(super) fn launcher_of<'a>(pods: impl IntoIterator<Item = &'a Pod>, vmi: &str) -> Option<&'a Pod> {
    pods.into_iter()
        .filter(|p| {
            p.metadata.label(launcher_pod::LAUNCHER_LABEL.0) == Some(launcher_pod::LAUNCHER_LABEL.1)
                && p.metadata.annotation(launcher_pod::DOMAIN_ANNOTATION) == Some(vmi)
        })
        .max_by_key(|p| {
            (
                p.metadata.deletion_timestamp.is_none(),
                p.metadata.creation_timestamp.clone().unwrap_or_default(),
            )
        })
}

/// Run `program args` and return its stdout (blocking: call from a blocking thread).
fn output_of(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("run {program}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Links and nft tables of the netns `name` (`ip -n`, `ip netns exec ... nft`).
fn netns_facts(name: &str) -> anyhow::Result<NetnsFacts> {
    let links: serde_json::Value =
        serde_json::from_str(&output_of("ip", &["-j", "-n", name, "link", "show"])?)
            .context("parse `ip -j link show`")?;
    let links: BTreeSet<String> = links
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.get("ifname").and_then(|n| n.as_str()).map(String::from))
        .collect();
    let tables = output_of("ip", &["netns", "exec", name, "nft", "list", "tables"])?;
    let nft_tables = tables
        .lines()
        .filter_map(|l| l.trim().strip_prefix("table "))
        .map(String::from)
        .collect();
    Ok(NetnsFacts { links, nft_tables })
}

/// The pod netns facts when they can be had, else why not.
async fn gather_netns(state: &Path, pod: Option<&Pod>) -> Result<NetnsFacts, String> {
    if !matches!(cluster::target(), cluster::StoreTarget::Embedded) {
        return Err("not the local cluster".into());
    }
    if !nix::unistd::geteuid().is_root() {
        return Err("needs root (the pod netns)".into());
    }
    let Some(pod) = pod else {
        return Err("no launcher pod".into());
    };
    let topology = crate::local::topology::Topology::load(state).map_err(|e| format!("{e}"))?;
    let netns = topology.pod_netns(
        pod.metadata.namespace.as_deref().unwrap_or(""),
        &pod.metadata.name,
    );
    if !Path::new("/run/netns").join(&netns).exists() {
        return if pod.status.phase == "Running" {
            Ok(NetnsFacts::default())
        } else {
            Err(format!("the pod has no netns (phase {})", pod.status.phase))
        };
    }
    tokio::task::spawn_blocking(move || netns_facts(&netns))
        .await
        .map_err(|e| format!("{e}"))?
        .map_err(|e| format!("{e:#}"))
}

pub async fn run(state: &Path, args: ExplainArgs, ns: &str) -> anyhow::Result<i32> {
    let (kind_arg, name) = super::targets::one_object(&args.kind, args.name.as_deref())?;
    let kind = cluster::resolve_kind(&kind_arg)?;
    anyhow::ensure!(
        kind.kind == "VirtualMachineInstance",
        "weft explain knows only vmi (got {kind_arg})"
    );
    let store = cluster::open_running_store(state).await?;
    let vmi = Api::<VirtualMachineInstance>::namespaced(store.clone(), ns)
        .get(&name)
        .await?
        .with_context(|| format!("VirtualMachineInstance {ns}/{name} not found"))?;
    let pods = Api::<Pod>::namespaced(store.clone(), ns)
        .list(&ListOptions::default())
        .await?;
    let pod = launcher_of(&pods, &name).cloned();
    let nads = Api::<NetworkAttachmentDefinition>::all(store.clone())
        .list(&ListOptions::default())
        .await?
        .into_iter()
        .map(|n| (n.metadata.namespace.unwrap_or_default(), n.metadata.name))
        .collect();
    let mut reservations: BTreeMap<String, usize> = BTreeMap::new();
    for r in Api::<weft_ipam::IpReservation>::all(store.clone())
        .list(&ListOptions::default())
        .await?
    {
        *reservations.entry(r.spec.network).or_default() += 1;
    }
    let pod_name = pod.as_ref().map(|p| p.metadata.name.clone());
    let events = Api::<Event>::namespaced(store.clone(), ns)
        .list(&ListOptions::default())
        .await?
        .into_iter()
        .filter(|e| {
            (e.involved_object.kind == "VirtualMachineInstance" && e.involved_object.name == name)
                || (e.involved_object.kind == "Pod" && Some(&e.involved_object.name) == pod_name.as_ref())
        })
        .collect();
    let (netns, netns_unchecked) = match gather_netns(state, pod.as_ref()).await {
        Ok(facts) => (Some(facts), String::new()),
        Err(why) => (None, why),
    };
    let snapshot = Snapshot {
        vmi,
        pod,
        nads,
        reservations,
        events,
        netns,
        netns_unchecked,
        config: weft_vm::ClusterConfig::default(),
    };
    let report = explain::explain(&snapshot);
    match args.output.as_str() {
        "json" => println!("{}", serde_json::to_string_pretty(&report)?),
        "text" => print!("{}", explain::render_text(&report)),
        other => anyhow::bail!("unknown output format {other:?} (text, json)"),
    }
    Ok(if report.failed() { 1 } else { 0 })
}
