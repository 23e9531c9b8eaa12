//! The IPAM plugin in full: what the weft binary does under the name `weft-ipam`. The installed
//! `weft-ipam` (crates/plugin-client) hands delegated calls to the node agent, which serves them
//! with the same code (`agent::ipam`), and runs this for every other call. It opens the cluster
//! store itself — the one the config names (the Kubernetes API for `ipam.kubernetes.kubeconfig`,
//! whereabouts' key, else the embedded store in `ipam.stateDir`), else the node agent's store
//! (announced to its delegates: on Kubernetes the API server), else the embedded store in
//! `$WEFT_STATE_DIR` or /var/lib/weft — and lets `weft_ipam` allocate, release, check, report
//! status and collect garbage.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use weft_cni::plugin::{Plugin, PluginRequest};
use weft_cni::{CniError, CniResult, codes};
use weft_store::Store;

use crate::cluster::StoreTarget;

struct IpamPlugin;

/// Run the IPAM plugin as the current process.
pub fn run() -> ExitCode {
    weft_cni::plugin::run(&IpamPlugin)
}

/// The store a weft-ipam call uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IpamStore {
    /// The embedded store in this state directory (`<dir>/store.db`).
    Embedded(PathBuf),
    /// A Kubernetes API server: from a kubeconfig, or the in-cluster config (`None`).
    Kubernetes(Option<PathBuf>),
}

impl IpamStore {
    /// How it is named when compared with the node agent's store (`cluster::store_identity`).
    pub fn identity(&self) -> Option<String> {
        match self {
            Self::Embedded(state) => crate::cluster::store_identity(&StoreTarget::Embedded, state),
            Self::Kubernetes(kubeconfig) => {
                crate::cluster::store_identity(&StoreTarget::Kubernetes(kubeconfig.clone()), Path::new(""))
            }
        }
    }

    /// The store a `cluster::store_identity` names (what the node agent announces to its
    /// delegates in [`crate::protocol::IPAM_DEFAULT_STORE_ENV`]).
    pub fn from_identity(identity: &str) -> Option<Self> {
        if identity == "in-cluster" {
            return Some(Self::Kubernetes(None));
        }
        if let Some(kubeconfig) = identity.strip_prefix("kubeconfig:") {
            return Some(Self::Kubernetes(Some(kubeconfig.into())));
        }
        let store_file = Path::new(identity.strip_prefix("sqlite:")?);
        Some(Self::Embedded(store_file.parent()?.to_path_buf()))
    }
}

/// The store a call's `ipam` section names: `kubernetes.kubeconfig` (whereabouts' key), else
/// `stateDir`; `None` when it names none (the node's default store is meant).
pub fn named_store(ipam: Option<&serde_json::Map<String, serde_json::Value>>) -> Option<IpamStore> {
    let ipam = ipam?;
    let text =
        |value: Option<&serde_json::Value>| value?.as_str().filter(|s| !s.is_empty()).map(PathBuf::from);
    if let Some(kubeconfig) = text(ipam.get("kubernetes").and_then(|k| k.get("kubeconfig"))) {
        return Some(IpamStore::Kubernetes(Some(kubeconfig)));
    }
    text(ipam.get("stateDir")).map(IpamStore::Embedded)
}

/// The node's default store, for a call that names none: the one the node agent announced to
/// its delegates (`announced`, a store identity: on Kubernetes the API server, so addresses
/// stay unique across nodes), else the embedded store in `state_dir_env` or /var/lib/weft.
pub fn default_store(announced: Option<&str>, state_dir_env: Option<PathBuf>) -> IpamStore {
    announced.and_then(IpamStore::from_identity).unwrap_or_else(|| {
        IpamStore::Embedded(state_dir_env.unwrap_or_else(|| PathBuf::from("/var/lib/weft")))
    })
}

/// Directories (`:`-separated) under which a config's `ipam.stateDir` may name a store, besides
/// /var/lib/weft, `$WEFT_STATE_DIR` and the node agent's store: set by the node's administrator
/// in the runtime's environment, out of reach of whoever writes the config.
pub const STATE_ROOTS_ENV: &str = "WEFT_IPAM_STATE_ROOTS";

/// Why a config's `ipam.stateDir` is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateDirError {
    /// Not an absolute path, or one with `.`/`..` components.
    #[error("ipam.stateDir: {0} is not an absolute path without `.` or `..` components")]
    NotPlain(PathBuf),
    /// Under none of the allowed roots.
    #[error(
        "ipam.stateDir: {dir} is not under a state directory this node allows ({roots}); the node's administrator can allow more in {STATE_ROOTS_ENV}"
    )]
    NotAllowed {
        /// The directory named.
        dir: PathBuf,
        /// The allowed roots, listed.
        roots: String,
    },
}

/// The roots a config's `ipam.stateDir` may name a directory under, all chosen by the node:
/// /var/lib/weft, the state directory (`$WEFT_STATE_DIR`), the directory of the store the node
/// agent announced, and the administrator's list ([`STATE_ROOTS_ENV`]). Relative or non-plain
/// entries are dropped.
pub fn state_roots(
    announced: Option<&str>,
    state_dir_env: Option<PathBuf>,
    roots_env: Option<&std::ffi::OsStr>,
) -> Vec<PathBuf> {
    let announced_dir = announced
        .and_then(IpamStore::from_identity)
        .and_then(|store| match store {
            IpamStore::Embedded(dir) => Some(dir),
            IpamStore::Kubernetes(_) => None,
        });
    let mut roots: Vec<PathBuf> = [PathBuf::from(weft_ipam::config::DEFAULT_STATE_DIR)]
        .into_iter()
        .chain(state_dir_env)
        .chain(announced_dir)
        .chain(
            roots_env
                .map(|r| std::env::split_paths(r).collect::<Vec<_>>())
                .unwrap_or_default(),
        )
        .filter(|root| is_plain(root))
        .collect();
    roots.dedup();
    roots
}

/// Absolute, and no `.`/`..` component: compared with another such path, a prefix means
/// "inside" without asking the filesystem.
fn is_plain(path: &Path) -> bool {
    path.is_absolute()
        && path
            .as_os_str()
            .to_str()
            .is_some_and(|s| !s.split('/').any(|part| part == "." || part == ".."))
}

/// The root `dir` (a config's `ipam.stateDir`) lies in: the longest of `roots` that contains it.
pub fn state_root_of(dir: &Path, roots: &[PathBuf]) -> Result<PathBuf, StateDirError> {
    if !is_plain(dir) {
        return Err(StateDirError::NotPlain(dir.to_path_buf()));
    }
    roots
        .iter()
        .filter(|root| dir.starts_with(root))
        .max_by_key(|root| root.components().count())
        .cloned()
        .ok_or_else(|| StateDirError::NotAllowed {
            dir: dir.to_path_buf(),
            roots: roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Directories (`:`-separated) under which a config's `ipam.kubernetes.kubeconfig` may lie,
/// besides /etc/cni/net.d, /etc/kubernetes and /var/lib/weft (set by the node's administrator).
pub const KUBECONFIG_ROOTS_ENV: &str = "WEFT_IPAM_KUBECONFIG_ROOTS";

/// The roots a NAD's kubeconfig may lie under: where CNI and Kubernetes keep node credentials
/// (whereabouts' is /etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig), weft's state, and the
/// administrator's list.
pub fn kubeconfig_roots(roots_env: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    [
        "/etc/cni/net.d",
        "/etc/kubernetes",
        weft_ipam::config::DEFAULT_STATE_DIR,
    ]
    .into_iter()
    .map(PathBuf::from)
    .chain(
        roots_env
            .map(|r| std::env::split_paths(r).collect::<Vec<_>>())
            .unwrap_or_default(),
    )
    .filter(|root| is_plain(root))
    .collect()
}

/// Why a config's `ipam.kubernetes.kubeconfig` is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigError {
    /// Not plain, or under none of the roots.
    #[error(
        "ipam.kubernetes.kubeconfig: {path} is not under a directory this node allows for credentials ({roots}); the node's administrator can allow more in {KUBECONFIG_ROOTS_ENV}"
    )]
    NotAllowed {
        /// The path named.
        path: PathBuf,
        /// The allowed roots, listed.
        roots: String,
    },
    /// Not a regular file root owns and only root can write (a link, someone else's).
    #[error("ipam.kubernetes.kubeconfig: {path}: {reason}")]
    Untrusted {
        /// The path named.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// A NAD may make root read credentials only from where the node keeps them: `path` must be
/// plain and lie under one of `roots`.
pub fn check_kubeconfig_path(path: &Path, roots: &[PathBuf]) -> Result<(), KubeconfigError> {
    if is_plain(path) && roots.iter().any(|root| path.starts_with(root)) {
        return Ok(());
    }
    Err(KubeconfigError::NotAllowed {
        path: path.to_path_buf(),
        roots: roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// What is wrong with a kubeconfig file's kind, owner (`uid`) and mode for this process
/// (`euid`), if anything: it must be a regular file (not a link) that only its owner, root or
/// this process's user, can write.
pub fn kubeconfig_file_problem(
    is_file: bool,
    is_link: bool,
    uid: u32,
    mode: u32,
    euid: u32,
) -> Option<String> {
    if is_link {
        return Some("is a symbolic link; name the file itself".into());
    }
    if !is_file {
        return Some("is not a regular file".into());
    }
    if uid != 0 && uid != euid {
        return Some(format!("is owned by uid {uid}, not root"));
    }
    if mode & 0o022 != 0 {
        return Some(format!("is writable by others (mode {:o})", mode & 0o777));
    }
    None
}

/// The kubeconfig check as this process applies it: path, then the file itself.
fn check_kubeconfig(path: &Path) -> Result<(), KubeconfigError> {
    use std::os::unix::fs::MetadataExt;
    check_kubeconfig_path(
        path,
        &kubeconfig_roots(std::env::var_os(KUBECONFIG_ROOTS_ENV).as_deref()),
    )?;
    let untrusted = |reason: String| KubeconfigError::Untrusted {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::symlink_metadata(path).map_err(|e| untrusted(e.to_string()))?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { nix::libc::geteuid() };
    let problem = kubeconfig_file_problem(
        meta.file_type().is_file(),
        meta.file_type().is_symlink(),
        meta.uid(),
        meta.mode(),
        euid,
    );
    problem.map_or(Ok(()), |reason| Err(untrusted(reason)))
}

/// Where this process finds a call's store: the store, and for an embedded store a config named
/// (`ipam.stateDir`), the allowed root it lies under.
fn store_for(request: &PluginRequest) -> Result<(IpamStore, Option<PathBuf>), CniError> {
    let announced = std::env::var(crate::protocol::IPAM_DEFAULT_STORE_ENV).ok();
    let state_dir_env = std::env::var_os("WEFT_STATE_DIR").map(PathBuf::from);
    match named_store(request.config.ipam()) {
        Some(IpamStore::Embedded(dir)) => {
            let roots_env = std::env::var_os(STATE_ROOTS_ENV);
            let roots = state_roots(announced.as_deref(), state_dir_env, roots_env.as_deref());
            let root = state_root_of(&dir, &roots)
                .map_err(|e| CniError::new(codes::INVALID_NETWORK_CONFIG, e.to_string()))?;
            Ok((IpamStore::Embedded(dir), Some(root)))
        }
        Some(IpamStore::Kubernetes(Some(kubeconfig))) => {
            check_kubeconfig(&kubeconfig).map_err(|e| {
                let code = match e {
                    KubeconfigError::NotAllowed { .. } => codes::INVALID_NETWORK_CONFIG,
                    KubeconfigError::Untrusted { .. } => codes::IO_FAILURE,
                };
                CniError::new(code, e.to_string())
            })?;
            Ok((IpamStore::Kubernetes(Some(kubeconfig)), None))
        }
        Some(store) => Ok((store, None)),
        None => Ok((default_store(announced.as_deref(), state_dir_env), None)),
    }
}

/// Open the embedded store in `state`; under `root` when a config named it, so that no
/// directory between them is a link or someone else's.
fn open_embedded(state: &Path, root: Option<&Path>) -> Result<Arc<dyn Store>, CniError> {
    let path = state.join(crate::cluster::STORE_FILE);
    let failed = |e: weft_store::StoreError| {
        // A refused store (unsafe files, damage) will not get better by itself.
        let code = match e {
            weft_store::StoreError::Refused(_) => codes::IO_FAILURE,
            _ => codes::TRY_AGAIN_LATER,
        };
        CniError::new(code, format!("weft-ipam: cannot open store {}", path.display()))
            .with_details(e.to_string())
    };
    if let Some(root) = root {
        weft_store::prepare_state_dir_under(root, state).map_err(failed)?;
    }
    // A plugin process makes a handful of calls and exits: one connection, no extra threads,
    // and no integrity scan on open (it grows with the change log; the node agent runs it, and
    // damage met by a read or write is an error).
    let options = weft_store::SqliteOptions {
        single_connection: true,
        check_integrity: false,
        ..weft_store::SqliteOptions::default()
    };
    weft_store::SqliteStore::open_with(&path, options)
        .map(|s| Arc::new(s) as Arc<dyn Store>)
        .map_err(failed)
}

async fn open_kubernetes(kubeconfig: Option<PathBuf>) -> Result<Arc<dyn Store>, CniError> {
    let (store, what) = match &kubeconfig {
        Some(path) => (
            weft_store::KubeStore::from_kubeconfig(path, &crate::cluster::Component::Ipam.identity()).await,
            format!("kubeconfig {}", path.display()),
        ),
        None => (
            weft_store::KubeStore::try_default(&crate::cluster::Component::Ipam.identity()).await,
            "in-cluster Kubernetes config".to_string(),
        ),
    };
    store.map(|s| Arc::new(s) as Arc<dyn Store>).map_err(|e| {
        CniError::new(codes::TRY_AGAIN_LATER, format!("weft-ipam: {what}")).with_details(e.to_string())
    })
}

/// Run `future` on a current-thread runtime; `with_io` for the Kubernetes client (the embedded
/// store only needs timers, and each process start pays for what the runtime sets up).
fn block_on<T>(with_io: bool, future: impl std::future::Future<Output = T>) -> Result<T, CniError> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    if with_io {
        builder.enable_all();
    } else {
        builder.enable_time();
    }
    let runtime = builder.build().map_err(|e| {
        CniError::new(codes::IO_FAILURE, "weft-ipam: cannot start the async runtime")
            .with_details(e.to_string())
    })?;
    Ok(runtime.block_on(future))
}

impl IpamPlugin {
    fn call(&self, request: &PluginRequest) -> Result<Option<CniResult>, CniError> {
        let node = std::env::var("WEFT_NODE_NAME").unwrap_or_default();
        let ipam_request = weft_ipam::IpamRequest::from_plugin_request(request, node);
        // The whole config is valid before any store is opened (or created).
        weft_ipam::parse_network_config(&ipam_request.config_json())
            .map_err(|e| CniError::from(e).with_version(request.version.to_string()))?;
        let (store, root) = store_for(request).map_err(|e| e.with_version(request.version.to_string()))?;
        match store {
            IpamStore::Kubernetes(kubeconfig) => block_on(true, async move {
                let store = open_kubernetes(kubeconfig).await?;
                weft_ipam::plugin::handle(ipam_request, store).await
            })?,
            IpamStore::Embedded(state) => {
                let store = open_embedded(&state, root.as_deref())?;
                block_on(false, weft_ipam::plugin::handle(ipam_request, store))?
            }
        }
    }
}

impl Plugin for IpamPlugin {
    fn add(&self, request: &PluginRequest) -> Result<CniResult, CniError> {
        self.call(request)?
            .ok_or_else(|| CniError::new(codes::IO_FAILURE, "weft-ipam: ADD produced no result"))
    }
    fn del(&self, request: &PluginRequest) -> Result<(), CniError> {
        self.call(request).map(|_| ())
    }
    fn check(&self, request: &PluginRequest) -> Result<(), CniError> {
        self.call(request).map(|_| ())
    }
    fn status(&self, request: &PluginRequest) -> Result<(), CniError> {
        self.call(request).map(|_| ())
    }
    fn gc(&self, request: &PluginRequest) -> Result<(), CniError> {
        self.call(request).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_nad_kubeconfig_must_be_a_root_file_where_the_node_keeps_credentials() {
        use super::*;
        let roots = kubeconfig_roots(Some(std::ffi::OsStr::new("/opt/creds:relative")));
        assert_eq!(
            roots,
            ["/etc/cni/net.d", "/etc/kubernetes", "/var/lib/weft", "/opt/creds"].map(PathBuf::from)
        );
        for ok in [
            "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig",
            "/opt/creds/k",
        ] {
            assert_eq!(check_kubeconfig_path(Path::new(ok), &roots), Ok(()), "{ok}");
        }
        for bad in [
            "/root/.kube/config",
            "/etc/cni/net.d/../../shadow",
            "relative/k",
            "/etc/cni/net.dx/k",
        ] {
            assert!(check_kubeconfig_path(Path::new(bad), &roots).is_err(), "{bad}");
        }
        assert_eq!(kubeconfig_file_problem(true, false, 0, 0o100600, 0), None);
        assert_eq!(kubeconfig_file_problem(true, false, 0, 0o100644, 0), None);
        assert!(
            kubeconfig_file_problem(false, true, 0, 0o777, 0)
                .unwrap()
                .contains("link")
        );
        assert!(
            kubeconfig_file_problem(false, false, 0, 0o40700, 0)
                .unwrap()
                .contains("regular")
        );
        assert!(
            kubeconfig_file_problem(true, false, 1000, 0o600, 0)
                .unwrap()
                .contains("uid 1000")
        );
        assert!(
            kubeconfig_file_problem(true, false, 0, 0o666, 0)
                .unwrap()
                .contains("writable")
        );
    }

    use super::*;
    use serde_json::json;

    fn ipam(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_call_names_its_store_by_kubeconfig_then_state_dir() {
        let both = ipam(json!({"type": "weft-ipam", "stateDir": "/s", "kubernetes": {"kubeconfig": "/k"}}));
        assert_eq!(
            named_store(Some(&both)),
            Some(IpamStore::Kubernetes(Some("/k".into())))
        );
        let state = ipam(json!({"type": "weft-ipam", "stateDir": "/s", "kubernetes": {"kubeconfig": ""}}));
        assert_eq!(named_store(Some(&state)), Some(IpamStore::Embedded("/s".into())));
        assert_eq!(
            named_store(Some(&ipam(json!({"type": "weft-ipam", "stateDir": ""})))),
            None
        );
        assert_eq!(named_store(Some(&ipam(json!({"type": "weft-ipam"})))), None);
        assert_eq!(named_store(None), None);
    }

    #[test]
    fn the_default_store_is_the_one_the_agent_announced() {
        assert_eq!(
            default_store(Some("in-cluster"), None),
            IpamStore::Kubernetes(None)
        );
        assert_eq!(
            default_store(Some("kubeconfig:/etc/weft/kubeconfig"), Some("/x".into())),
            IpamStore::Kubernetes(Some("/etc/weft/kubeconfig".into()))
        );
        assert_eq!(
            default_store(Some("sqlite:/var/lib/weft-node/store.db"), None),
            IpamStore::Embedded("/var/lib/weft-node".into())
        );
        assert_eq!(
            default_store(Some("garbage"), Some("/x".into())),
            IpamStore::Embedded("/x".into())
        );
        assert_eq!(
            default_store(None, None),
            IpamStore::Embedded("/var/lib/weft".into())
        );
    }

    #[test]
    fn a_named_state_dir_must_lie_under_a_root_the_node_chose() {
        let roots = state_roots(
            Some("sqlite:/run/agent/store.db"),
            Some("/srv/weft".into()),
            Some(std::ffi::OsStr::new("/tmp/t1:relative:/data/../etc:/opt/w")),
        );
        let expected: Vec<PathBuf> = ["/var/lib/weft", "/srv/weft", "/run/agent", "/tmp/t1", "/opt/w"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(roots, expected);
        let root = |dir: &str| state_root_of(Path::new(dir), &roots);
        assert_eq!(root("/var/lib/weft"), Ok("/var/lib/weft".into()));
        assert_eq!(root("/var/lib/weft/tenant-a"), Ok("/var/lib/weft".into()));
        assert_eq!(root("/run/agent"), Ok("/run/agent".into()));
        assert_eq!(root("/tmp/t1/x/y"), Ok("/tmp/t1".into()));
        for outside in ["/etc", "/var/lib/weftx", "/var/lib", "/tmp/t10", "/"] {
            let err = root(outside).unwrap_err();
            assert!(
                matches!(err, StateDirError::NotAllowed { .. }),
                "{outside}: {err}"
            );
            assert!(err.to_string().starts_with("ipam.stateDir: "), "{err}");
        }
        for tricky in [
            "/var/lib/weft/../../etc",
            "/var/lib/weft/./x",
            "var/lib/weft",
            "/var/lib/weft/..",
        ] {
            assert_eq!(
                root(tricky),
                Err(StateDirError::NotPlain(tricky.into())),
                "{tricky}"
            );
        }
        // The longest root wins: the walk below it trusts what the administrator named.
        let nested = [PathBuf::from("/a"), PathBuf::from("/a/b")];
        assert_eq!(state_root_of(Path::new("/a/b/c"), &nested), Ok("/a/b".into()));
        // Only /var/lib/weft without anything set.
        assert_eq!(state_roots(None, None, None), [PathBuf::from("/var/lib/weft")]);
        assert_eq!(
            state_roots(Some("in-cluster"), None, None),
            [PathBuf::from("/var/lib/weft")]
        );
    }

    #[test]
    fn identities_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(crate::cluster::STORE_FILE), b"").unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, b"").unwrap();
        let state = std::fs::canonicalize(dir.path()).unwrap();
        for store in [
            IpamStore::Embedded(state.clone()),
            IpamStore::Kubernetes(Some(state.join("kubeconfig"))),
            IpamStore::Kubernetes(None),
        ] {
            let identity = store.identity().expect("an existing store has an identity");
            assert_eq!(IpamStore::from_identity(&identity), Some(store));
        }
        assert_eq!(IpamStore::Embedded(state.join("missing")).identity(), None);
    }
}
