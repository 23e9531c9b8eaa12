//! The `weft` command line.

mod describe;
mod explain;
mod get;
mod help;
mod inspect;
mod ipam_check;
mod targets;
mod up;
mod wide;

use std::path::PathBuf;

use clap::{FromArgMatches, Parser, Subcommand};

pub use crate::manifests::{admit_objects, apply_objects, parse_manifests};
pub use inspect::table;
// `weft apply` and `get -f` (the manifests are not the CLI's alone: `weft up` applies them too).
use crate::manifests;

/// weft: multi-network for virtual machines on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "weft", version, about)]
pub struct Cli {
    /// State directory of the local cluster (store, logs, pids).
    #[arg(long, global = true, env = "WEFT_STATE_DIR", default_value = "/var/lib/weft")]
    pub state_dir: PathBuf,
    /// Talk to a Kubernetes API server with this kubeconfig instead of the embedded store.
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Talk to the Kubernetes API server of the cluster this runs in (service account).
    #[arg(long, global = true)]
    pub in_cluster: bool,
    /// Write logs to this file (appended) instead of stderr.
    #[arg(long, global = true, env = "WEFT_LOG_FILE")]
    pub log_file: Option<PathBuf>,
    /// Log filter (tracing env-filter syntax), e.g. `info`, `weft=debug`.
    #[arg(long, global = true, env = "WEFT_LOG", default_value = "info")]
    pub log: String,
    /// The namespace of the objects a command names (kubectl's `-n`).
    #[arg(short = 'n', long, global = true, default_value = "default")]
    pub namespace: String,
    /// List objects of every namespace (`get`, `delete -l`).
    #[arg(short = 'A', long, global = true)]
    pub all_namespaces: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Which namespaces a command is about: `-n` and `-A`.
#[derive(Debug, Clone)]
pub struct Scope {
    /// `-n`: the namespace of named objects, and of lists without `-A`.
    pub namespace: String,
    /// `-A`: lists span every namespace.
    pub all_namespaces: bool,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Bring up the local cluster, apply the examples and start the example VM.
    Up(crate::local::UpArgs),
    /// Remove everything the local cluster of this state directory created (nothing else).
    Down,
    /// Create an empty embedded store in the state directory, for agents and controllers run
    /// by hand on the embedded store (`weft up` creates its own). Commands such as `apply` and
    /// `get` need an existing store and never create one.
    Init,
    /// Keep the local cluster's agents and controller running (started by `weft up`).
    #[command(hide = true)]
    Supervise,
    /// Create or update objects from a YAML/JSON manifest.
    Apply {
        /// Manifest file (`-` for stdin).
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
    },
    /// List objects, or show some (kubectl's forms: `KIND [NAME]`, `KIND/NAME`, `-l`, `-o`).
    ///
    /// `weft get vmi`, `get vm/vm1 -o yaml`, `get pods -l app=web -o wide`, `get vmi vm1 -o
    /// jsonpath='{.status.interfaces[0].ipAddress}'`, `get ipreservations`.
    Get(get::GetArgs),
    /// Show one object in kubectl's describe layout, with its conditions and the Events about it.
    Describe(describe::DescribeArgs),
    /// Explain, stage by stage, why each interface of a VMI works or not (spec, pod
    /// annotations, network-status, pod links, wiring, DHCP, guest, status), with what to
    /// change; exits 1 when a stage fails.
    Explain(explain::ExplainArgs),
    /// Delete objects (`KIND NAME`, `KIND/NAME`, `-f FILE`, `KIND -l SELECTOR`).
    Delete(get::DeleteArgs),
    /// Start a VirtualMachine (spec.running = true).
    Start {
        /// VM name.
        name: String,
    },
    /// Stop a VirtualMachine (spec.running = false).
    Stop {
        /// VM name.
        name: String,
    },
    /// Live-migrate a running VM to another node: creates a VirtualMachineInstanceMigration
    /// (`weft get vmim`), as `virtctl migrate`; the guest moves without a reboot, claimed
    /// addresses stay.
    Migrate {
        /// VM (VMI) name.
        name: String,
        /// Target node (default: any other node).
        #[arg(long, conflicts_with = "cancel")]
        to: Option<String>,
        /// Cancel the VM's migration in progress (deletes its VirtualMachineInstanceMigration).
        #[arg(long)]
        cancel: bool,
    },
    /// VM network decisions.
    #[command(subcommand)]
    Vm(VmCommand),
    /// Meta-plugin inspection.
    #[command(subcommand)]
    Net(NetCommand),
    /// IPAM inspection.
    #[command(subcommand)]
    Ipam(IpamCommand),
    /// Run the node agent (thick CNI plugin, kubelet and launcher roles in the local cluster).
    Agent(crate::agent::AgentArgs),
    /// Exit 0 if a node agent answers `/readyz` on its socket (a readiness probe that a
    /// leftover socket file of a stopped agent does not satisfy).
    AgentReady {
        /// The agent's Unix socket.
        #[arg(long, default_value = crate::protocol::DEFAULT_SOCKET)]
        socket: PathBuf,
    },
    /// Run the controller (VMs, VMIs, launcher pods, IPAM claims, status).
    Controller {
        /// Which roles run: `beside-kubevirt` (IPAMClaims and reservation GC only; the default
        /// on Kubernetes) or `local` (also KubeVirt's: VMIs, launcher pods, status, migrations;
        /// the default on the embedded store, where weft is the VM runtime).
        #[arg(long, value_parser = ["local", "beside-kubevirt"])]
        roles: Option<String>,
    },
    /// Install weft's CNI plugins (weft-cni, weft-ipam, passthru) into a CNI bin dir.
    InstallCni {
        /// The CNI bin dir, e.g. /opt/cni/bin.
        #[arg(long)]
        bin_dir: PathBuf,
        /// Link weft-cni and passthru to this binary instead of copying it.
        #[arg(long)]
        link: bool,
        /// For nodes without weft's agent (weft-ipam under another meta-plugin): install the
        /// weft binary itself as weft-ipam, instead of the client that hands calls to the agent.
        #[arg(long)]
        without_agent: bool,
        /// Also install this conflist (the runtime's, e.g. 00-weft.conflist) into --conf-dir.
        #[arg(long, requires = "conf_dir")]
        conflist: Option<PathBuf>,
        /// The runtime's CNI config dir, e.g. /etc/cni/net.d (with --conflist).
        #[arg(long, requires = "conflist")]
        conf_dir: Option<PathBuf>,
    },
}

/// `weft vm ...`
#[derive(Debug, Subcommand)]
pub enum VmCommand {
    /// Show what weft decides for a VMI: defaults, validation, pod annotations, names, status.
    Render {
        /// File with a VirtualMachineInstance (and optionally its Pod and a KubeVirt object).
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
    },
}

/// `weft ipam ...`
#[derive(Debug, Subcommand)]
pub enum IpamCommand {
    /// Every reserved address: network, IP, and who holds it (pod attachment or claim).
    List {
        /// Only this network.
        #[arg(long)]
        network: Option<String>,
    },
    /// Verify the store: its integrity (the embedded store's pages, checked on open) and its
    /// reservations against the pods (leaked reservations, addresses pods hold without one),
    /// saying what a repair would do; exits 1 when anything was found.
    Check {
        /// Free the leaked reservations (as the reconciler does: only those unchanged since).
        #[arg(long)]
        repair: bool,
    },
}

/// `weft net ...`
#[derive(Debug, Subcommand)]
pub enum NetCommand {
    /// Parse a `k8s.v1.cni.cncf.io/networks` annotation value as the meta-plugin does (`-n`:
    /// the pod's namespace, the default of elements without one).
    Parse {
        /// The annotation value.
        annotation: String,
    },
    /// Print a pod's network-status.
    Status {
        /// Pod name.
        pod: String,
    },
}

/// Parse arguments, run, return the exit code.
pub fn run() -> i32 {
    let cli = match Cli::from_arg_matches(&help::command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    init_logging(&cli.log, cli.log_file.as_deref());
    // The long-running components' heaps (crate::allocator): the agent runs delegates on many
    // short-lived threads at once, the controller holds large caches.
    if matches!(cli.command, Command::Controller { .. } | Command::Agent(_)) {
        crate::allocator::limit_arenas();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

/// The tracing filter for a `--log` spec: kube-rs's own per-request failure line (target
/// `kube_client::client::builder`, at ERROR, once per attempt and per retry) is off unless the
/// spec names a `kube_client` target itself. weft reports the same failures in its own words,
/// throttled (`weft_store::throttle`): left on, an API server outage logged ~6 lines a second.
/// Its watch decoder's `eof in poll` / `timeout in poll` (target `kube_client::client`, WARN,
/// once per broken watch, so on every attempt while the API server drops connections) only
/// end the stream: weft's reflector re-lists and logs that throttled, so that target is at
/// ERROR.
pub fn log_filter(spec: &str) -> String {
    const KUBE_CLIENT: &str = "kube_client::client=error,kube_client::client::builder=off";
    if spec.contains("kube_client") {
        spec.to_string()
    } else if spec.trim().is_empty() {
        format!("info,{KUBE_CLIENT}")
    } else {
        format!("{spec},{KUBE_CLIENT}")
    }
}

fn init_logging(filter: &str, file: Option<&std::path::Path>) {
    let filter = tracing_subscriber::EnvFilter::try_new(log_filter(filter))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A log file weft creates is readable by root only (logs name pods, addresses, errors).
    let opened = file.and_then(|path| {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .ok()
    });
    let _ = match opened {
        Some(file) => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .try_init(),
        // Colours only on a terminal: the local cluster's daemons log to files through stderr.
        None => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .try_init(),
    };
}

async fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let state = cli.state_dir.clone();
    let scope = Scope {
        namespace: cli.namespace.clone(),
        all_namespaces: cli.all_namespaces,
    };
    let namespace = scope.namespace.as_str();
    crate::cluster::set_target(match (&cli.kubeconfig, cli.in_cluster) {
        (Some(path), _) => crate::cluster::StoreTarget::Kubernetes(Some(path.clone())),
        (None, true) => crate::cluster::StoreTarget::Kubernetes(None),
        (None, false) => crate::cluster::StoreTarget::Embedded,
    });
    match cli.command {
        Command::Up(args) => up::run(&state, args).await,
        Command::Down => crate::local::down(&state).await,
        Command::Init => crate::cluster::init_store(&state).await,
        Command::Supervise => crate::local::supervisor::run(&state).await,
        Command::Apply { file } => manifests::apply(&state, &file, namespace).await,
        Command::Get(args) => get::get(&state, args, &scope).await,
        Command::Describe(args) => describe::run(&state, args, namespace).await,
        Command::Explain(args) => explain::run(&state, args, namespace).await,
        Command::Delete(args) => get::delete(&state, args, &scope).await,
        Command::Start { name } => inspect::set_running(&state, &name, namespace, true).await,
        Command::Stop { name } => inspect::set_running(&state, &name, namespace, false).await,
        Command::Migrate { name, to, cancel } => {
            inspect::migrate(&state, &name, to.as_deref(), cancel, namespace).await
        }
        Command::Vm(VmCommand::Render { file }) => inspect::vm_render(&file),
        Command::Net(NetCommand::Parse { annotation }) => inspect::net_parse(namespace, &annotation),
        Command::Net(NetCommand::Status { pod }) => inspect::net_status(&state, &pod, namespace).await,
        Command::Ipam(IpamCommand::List { network }) => inspect::ipam_list(&state, network.as_deref()).await,
        Command::Ipam(IpamCommand::Check { repair }) => ipam_check::run(&state, repair).await,
        Command::Agent(args) => crate::agent::run(&state, args).await,
        Command::AgentReady { socket } => crate::agent::probe_ready(socket).await,
        Command::Controller { roles } => {
            let roles = match roles.as_deref() {
                Some("local") => crate::controller::Roles::LOCAL,
                Some(_) => crate::controller::Roles::BESIDE_KUBEVIRT,
                None => crate::controller::Roles::for_backend(),
            };
            crate::controller::run(&state, roles).await
        }
        Command::InstallCni {
            bin_dir,
            link,
            without_agent,
            conflist,
            conf_dir,
        } => crate::install::run(
            &bin_dir,
            link,
            without_agent,
            conflist.as_deref().zip(conf_dir.as_deref()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn kube_rs_request_failures_are_off_unless_asked_for() {
        let kube = "kube_client::client=error,kube_client::client::builder=off";
        assert_eq!(log_filter("info"), format!("info,{kube}"));
        assert_eq!(log_filter("debug,weft=trace"), format!("debug,weft=trace,{kube}"));
        assert_eq!(log_filter(""), format!("info,{kube}"));
        assert_eq!(log_filter("kube_client=debug"), "kube_client=debug");
    }

    /// kube-client's watch decoder warns `eof in poll` (target `kube_client::client`) each
    /// time a watch breaks, as during an API server outage; the filter drops it (and its
    /// request-failure line) but keeps that module's errors and everything of weft's.
    #[test]
    fn kube_clients_eof_in_poll_warning_is_filtered_out() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Lines(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::try_new(log_filter("info")).unwrap())
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            // The events exactly as kube-client 5 emits them (its targets are module paths).
            tracing::warn!(target: "kube_client::client", "eof in poll: {:?}", "unexpected EOF");
            tracing::warn!(target: "kube_client::client", "timeout in poll: deadline");
            tracing::error!(target: "kube_client::client::builder", "failed with error error trying to connect");
            tracing::error!(target: "kube_client::client", "a real client error");
            tracing::warn!(target: "weft_store::cached", "cache watch failed: down");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("eof in poll"), "{text}");
        assert!(!text.contains("timeout in poll"), "{text}");
        assert!(!text.contains("trying to connect"), "{text}");
        assert!(text.contains("a real client error"), "{text}");
        assert!(text.contains("cache watch failed"), "{text}");
    }
}
