//! The local cluster (the embedded default): nodes and pods as network namespaces on this
//! machine, an agent per node, the controller, the embedded store, guests as QEMU VMs.
//!
//! This module is `weft up`/`down` (run by the CLI: topology, node namespaces, supervisor,
//! process records). The roles that run inside `weft agent --local` (kubelet, sandbox,
//! launcher, guests, migration) are [`crate::agent::local`].

mod network;
pub mod processes;
pub mod supervisor;
pub mod topology;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use weft_store::Api;

pub use topology::Topology;

use crate::sys::{blocking, which};

use crate::cluster;

/// `weft up` options.
#[derive(Clone, Debug, Args)]
pub struct UpArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 1)]
    pub nodes: usize,
    /// Manifests to apply once the cluster is up (files or directories; default: the examples).
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<PathBuf>,
    /// Do not boot guests (wire everything, but no QEMU).
    #[arg(long)]
    pub no_guests: bool,
    /// How long to wait for the VMs to report leases on every NIC.
    #[arg(long, default_value_t = 180)]
    pub timeout: u64,
    /// Return as soon as the cluster is up (don't wait for VMs).
    #[arg(long)]
    pub no_wait: bool,
    /// Dual-stack: IPv6 on the underlay, the remote host and the cluster network, and (by
    /// default) the dual-stack examples of examples/ipv6.
    #[arg(long)]
    pub ipv6: bool,
}

fn examples_dir() -> PathBuf {
    let here = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let candidates = [
        PathBuf::from("examples"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples"),
        here.map(|h| h.join("../../examples")).unwrap_or_default(),
    ];
    candidates
        .into_iter()
        .find(|p| p.join("vm.yaml").exists())
        .unwrap_or_else(|| PathBuf::from("examples"))
}

fn read_manifests(paths: &[PathBuf]) -> anyhow::Result<Vec<weft_store::Object>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(path)
                .with_context(|| format!("read {}", path.display()))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.extension()
                        .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
                })
                .collect();
            entries.sort();
            files.extend(entries);
        } else {
            files.push(path.clone());
        }
    }
    let mut objects = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).with_context(|| format!("read {}", file.display()))?;
        objects.extend(crate::manifests::parse_manifests(
            &text,
            &file.display().to_string(),
        )?);
    }
    // NADs first so that VMs referencing them resolve.
    objects.sort_by_key(|o| match o.kind.as_str() {
        "NetworkAttachmentDefinition" => 0,
        "VirtualMachine" | "VirtualMachineInstance" => 2,
        _ => 1,
    });
    Ok(objects)
}

/// `weft up`: the cluster, up and with the manifests applied (the CLI then waits for the VMs).
pub async fn up(state: &Path, args: UpArgs) -> anyhow::Result<Topology> {
    let files = if args.files.is_empty() && args.ipv6 {
        vec![examples_dir().join("ipv6")]
    } else if args.files.is_empty() {
        vec![examples_dir()]
    } else {
        args.files.clone()
    };
    let objects = read_manifests(&files)?;
    crate::controller::validate_manifests(&objects)?;
    preflight(&args)?;
    if Topology::file(state).exists() {
        anyhow::bail!(
            "a local cluster already runs from {} (run `weft down` first)",
            state.display()
        );
    }
    let state = &std::fs::canonicalize({
        std::fs::create_dir_all(state)?;
        state
    })?;
    let existing = weft_host::Netns::list_named().context("list network namespaces")?;
    let mut topology = Topology::new(state, &topology::new_cluster_id(&existing), args.nodes);
    topology.no_guests = args.no_guests;
    if args.ipv6 {
        topology = topology.with_ipv6();
    }
    std::fs::write(Topology::file(state), serde_json::to_vec_pretty(&topology)?)?;
    match bring_up(&topology, objects).await {
        Ok(()) => {}
        Err(e) => {
            eprintln!("weft up failed, removing what was created: {e:#}");
            let _ = down(state).await;
            return Err(e);
        }
    }
    Ok(topology)
}

fn preflight(args: &UpArgs) -> anyhow::Result<()> {
    if !nix::unistd::Uid::effective().is_root() {
        anyhow::bail!("weft up needs root (it creates network namespaces)");
    }
    for plugin in ["bridge", "host-local", "portmap"] {
        if !Path::new("/usr/lib/cni").join(plugin).exists() {
            anyhow::bail!(
                "reference CNI plugin /usr/lib/cni/{plugin} is missing (install containernetworking-plugins)"
            );
        }
    }
    for tool in ["nft", "busybox"] {
        if which(tool).is_none() {
            anyhow::bail!("{tool} is missing (run scripts/install-deps.sh)");
        }
    }
    if !args.no_guests {
        if which("qemu-system-x86_64").is_none() {
            anyhow::bail!(
                "qemu-system-x86_64 is missing: VirtualMachine guests need QEMU (install qemu-system-x86, or pass --no-guests)"
            );
        }
        weft_guest::locate_kernel(&weft_guest::kernel::kernel_dir())
            .context("guest kernel (run scripts/install-deps.sh)")?;
    }
    Ok(())
}

async fn bring_up(topology: &Topology, objects: Vec<weft_store::Object>) -> anyhow::Result<()> {
    let state = &topology.state_dir;
    let exe = std::env::current_exe().context("locate the weft binary")?;
    let bin = topology.bin_dir();
    crate::install::install_cni(
        &bin,
        &exe,
        crate::install::FullBinary::Link,
        crate::install::IpamPlugin::Client,
    )
    .context("install weft's CNI plugins")?;
    let store = cluster::open_store(state, cluster::Component::Cli).await?;
    network::create(topology).await?;
    for node in &topology.nodes {
        std::fs::create_dir_all(node.conf_dir())?;
        std::fs::write(
            node.conf_dir().join("10-cluster.conflist"),
            serde_json::to_vec_pretty(&topology.cluster_network_conflist(node))?,
        )?;
        std::fs::write(
            node.conf_dir().join("00-weft.conflist"),
            serde_json::to_vec_pretty(&topology.meta_conflist(node))?,
        )?;
        let nodes = Api::<crate::kinds::Node>::all(store.clone());
        let mut object = crate::kinds::Node::default();
        object.metadata.name = node.name.clone();
        object
            .metadata
            .annotations
            .insert("weft.dev/netns".into(), node.netns.clone());
        object.status = serde_json::json!({"addresses": [{"type": "InternalIP", "address": node.underlay_ip.to_string()}]});
        nodes.create(&object).await?;
    }
    // The supervisor starts the agents and the controller and keeps them running.
    let mut supervisor = Command::new(&exe);
    supervisor.arg("supervise").arg("--state-dir").arg(state);
    processes::spawn_daemon(
        state,
        processes::SUPERVISOR,
        None,
        supervisor,
        &state.join("supervisor.log"),
    )?;
    for node in &topology.nodes {
        wait_for_socket(&node.socket(), Duration::from_secs(30)).await?;
    }
    // The examples go through the same admission as `weft apply` (VMIs stored defaulted).
    let mut objects = objects;
    let denied = crate::manifests::admit_objects(store.as_ref(), &mut objects, "examples").await?;
    if !denied.is_empty() {
        anyhow::bail!("{}", denied.join("\n"));
    }
    for line in crate::manifests::apply_objects(store.as_ref(), objects).await? {
        println!("{line}");
    }
    Ok(())
}

async fn wait_for_socket(socket: &Path, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if tokio::net::UnixStream::connect(socket).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("agent did not open {} within {timeout:?}", socket.display())
}

/// `weft down`: stop the supervisor, then every process the state directory recorded (each
/// checked against its start identity), delete the namespaces this cluster created (its
/// topology's and its pods', named with its id) and remove the state directory. A directory
/// with no cluster recorded is refused, and nothing is touched.
pub async fn down(state: &Path) -> anyhow::Result<i32> {
    let topology = Topology::load(state)?;
    // Signalling and waiting for the processes to go blocks: not on an async worker.
    let stopped = {
        let state = state.to_path_buf();
        blocking(move || processes::stop_all(&state, Duration::from_secs(5))).await?
    };
    // Unmounting the namespaces blocks too.
    let dir = state.to_path_buf();
    let errors = blocking(move || {
        let existing = weft_host::Netns::list_named().unwrap_or_default();
        let owned = topology.owned_netns(&existing);
        let paths: Vec<PathBuf> = owned
            .iter()
            .map(|name| Path::new(weft_host::netns::NETNS_RUN_DIR).join(name))
            .collect();
        // What no record names but still runs for this cluster (a CNI plugin a stopped agent
        // had started, a guest its launcher was stopping) goes before its namespace and its
        // files do: otherwise it can create a file while the directory is being removed.
        processes::stop_stragglers(&dir, &paths, Duration::from_secs(2));
        let mut errors = Vec::new();
        for name in owned {
            if let Err(e) = weft_host::Netns::delete_named(&name) {
                errors.push(format!("delete netns {name}: {e}"));
            }
        }
        // Bounded retries: a process outside the namespaces may still be finishing a write.
        let mut attempt = 0;
        loop {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) if attempt < 3 => {
                    tracing::debug!("remove {}: {e}; retrying", dir.display());
                    processes::stop_stragglers(&dir, &[], Duration::from_secs(1));
                    std::thread::sleep(Duration::from_millis(100));
                    attempt += 1;
                }
                Err(e) => {
                    errors.push(format!("remove {}: {e}", dir.display()));
                    break;
                }
            }
        }
        errors
    })
    .await?;
    println!("stopped {} processes; local cluster removed", stopped.len());
    if errors.is_empty() {
        Ok(0)
    } else {
        anyhow::bail!(errors.join("; "))
    }
}
