//! Where the cluster lives: opening the store and the kinds weft knows.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use weft_store::{Object, Resource, ResourceType, Store};

/// File name of the embedded store inside the state directory.
pub const STORE_FILE: &str = "store.db";

/// Which weft component a process is, as the API server sees it: its `User-Agent`
/// (`<name>/<version>`) and the `fieldManager` of its writes (`<name>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// The node agent (`weft agent`): `weft-node`, like its ServiceAccount.
    Node,
    /// The controller (`weft controller`): `weft-controller`.
    Controller,
    /// The command line (`weft apply`, `get`, ...): `weft`.
    Cli,
    /// The IPAM plugin (`weft-ipam`), run by the agent or a runtime: `weft-ipam`.
    Ipam,
}

impl Component {
    /// The component's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Node => "weft-node",
            Self::Controller => "weft-controller",
            Self::Cli => "weft",
            Self::Ipam => "weft-ipam",
        }
    }

    /// The client identity: the name at this binary's version.
    pub fn identity(self) -> weft_store::ClientIdentity {
        weft_store::ClientIdentity::new(self.name(), env!("CARGO_PKG_VERSION"))
    }
}

/// Which cluster the process talks to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StoreTarget {
    /// The embedded store of the local cluster (`<state>/store.db`), the default.
    #[default]
    Embedded,
    /// A Kubernetes API server, from a kubeconfig file or (`None`) the in-cluster config.
    Kubernetes(Option<PathBuf>),
}

static TARGET: OnceLock<StoreTarget> = OnceLock::new();

/// Choose the cluster for this process (once, from the command line).
pub fn set_target(target: StoreTarget) {
    let _ = TARGET.set(target);
}

/// Whether the process talks to a Kubernetes API server.
pub fn is_kubernetes() -> bool {
    matches!(TARGET.get(), Some(StoreTarget::Kubernetes(_)))
}

/// Open the cluster store: the embedded store at `state/store.db`, or Kubernetes (as
/// `component`).
pub async fn open_store(state: &Path, component: Component) -> anyhow::Result<Arc<dyn Store>> {
    match TARGET.get().cloned().unwrap_or_default() {
        StoreTarget::Embedded => {
            // The store creates a missing state directory itself, 0700 (and checks an existing one).
            let path = state.join(STORE_FILE);
            let store = weft_store::SqliteStore::open(&path)
                .with_context(|| format!("open store {}", path.display()))?;
            Ok(Arc::new(store))
        }
        StoreTarget::Kubernetes(Some(path)) => {
            let store = weft_store::KubeStore::from_kubeconfig(&path, &component.identity())
                .await
                .with_context(|| format!("kubeconfig {}", path.display()))?;
            Ok(Arc::new(store))
        }
        StoreTarget::Kubernetes(None) => Ok(Arc::new(
            weft_store::KubeStore::try_default(&component.identity())
                .await
                .context("in-cluster Kubernetes config")?,
        )),
    }
}

/// `weft init`: create the embedded store of `state` (an existing one is kept as it is).
pub async fn init_store(state: &Path) -> anyhow::Result<i32> {
    if target() != StoreTarget::Embedded {
        anyhow::bail!("weft init creates an embedded store; the Kubernetes API needs none");
    }
    open_store(state, Component::Cli).await?;
    println!("store ready at {}", state.join(STORE_FILE).display());
    Ok(0)
}

/// Open the store of a cluster that must already exist, for commands that only talk to one
/// (`apply`, `get`, `delete`, ...): with the embedded store, a state directory without a store
/// (no `weft up` ran there, or `weft down` removed it) is an error, and nothing is created.
pub async fn open_running_store(state: &Path) -> anyhow::Result<Arc<dyn Store>> {
    if target() == StoreTarget::Embedded && !state.join(STORE_FILE).is_file() {
        anyhow::bail!("no local cluster at {}: run `weft up`", state.display());
    }
    open_store(state, Component::Cli).await
}

/// How a store is named when the agent and a `weft-ipam` process compare theirs: the canonical
/// path of the embedded store file, of a kubeconfig, or `in-cluster`. `None` when it cannot be
/// named (the file does not exist): then nothing matches it.
pub fn store_identity(target: &StoreTarget, state: &Path) -> Option<String> {
    let canonical = |path: &Path| std::fs::canonicalize(path).ok().map(|p| p.display().to_string());
    match target {
        StoreTarget::Embedded => canonical(&state.join(STORE_FILE)).map(|p| format!("sqlite:{p}")),
        StoreTarget::Kubernetes(Some(kubeconfig)) => canonical(kubeconfig).map(|p| format!("kubeconfig:{p}")),
        StoreTarget::Kubernetes(None) => Some("in-cluster".into()),
    }
}

/// The store this process was told to use.
pub fn target() -> StoreTarget {
    TARGET.get().cloned().unwrap_or_default()
}

/// Every kind weft reads or writes.
pub fn known_types() -> Vec<ResourceType> {
    vec![
        crate::kinds::Pod::resource_type(),
        crate::kinds::Node::resource_type(),
        weft_netconf::NetworkAttachmentDefinition::resource_type(),
        weft_vm::VirtualMachine::resource_type(),
        weft_vm::VirtualMachineInstance::resource_type(),
        weft_vm::VirtualMachineInstanceMigration::resource_type(),
        weft_ipam::IpamClaim::resource_type(),
        crate::kinds::Event::resource_type(),
        weft_vm::KubeVirt::resource_type(),
    ]
}

/// The resource type of an object, if weft knows its kind (apiVersion and kind both match).
pub fn known_type_of(object: &Object) -> Option<ResourceType> {
    known_types()
        .into_iter()
        .find(|t| t.kind == object.kind && t.api_version == object.api_version)
}

/// Resolve a kind as typed on the command line, in kubectl's forms: singular, plural, short
/// name, any case (`vm`, `vmis`, `po`, `net-attach-def`, `ipreservations`, ...).
pub fn resolve_kind(name: &str) -> anyhow::Result<ResourceType> {
    let lower = name.to_lowercase();
    // `kind.group` (kubectl's `virtualmachines.kubevirt.io`, `-o name` output) is the kind.
    let lower = lower
        .split_once('.')
        .map(|(kind, _)| kind.to_string())
        .unwrap_or(lower);
    let wanted = match lower.as_str() {
        "vm" | "vms" | "virtualmachine" | "virtualmachines" => "VirtualMachine",
        "vmi" | "vmis" | "virtualmachineinstance" | "virtualmachineinstances" => "VirtualMachineInstance",
        "vmim" | "vmims" | "virtualmachineinstancemigration" | "virtualmachineinstancemigrations" => {
            "VirtualMachineInstanceMigration"
        }
        "pod" | "pods" | "po" => "Pod",
        "node" | "nodes" | "no" => "Node",
        "nad"
        | "nads"
        | "net-attach-def"
        | "net-attach-defs"
        | "network-attachment-definition"
        | "network-attachment-definitions"
        | "networkattachmentdefinition"
        | "networkattachmentdefinitions" => "NetworkAttachmentDefinition",
        "ipamclaim" | "ipamclaims" => "IPAMClaim",
        "event" | "events" | "ev" => "Event",
        "kubevirt" | "kubevirts" | "kv" => "KubeVirt",
        "ipreservation" | "ipreservations" => weft_ipam::IpReservation::KIND,
        _ => anyhow::bail!(
            "the server doesn't have a resource type {name:?} (known: vm, vmi, vmim, pod, node, nad, ipamclaim, event, ipreservation, kubevirt)"
        ),
    };
    known_types()
        .into_iter()
        .chain([weft_ipam::IpReservation::resource_type()])
        .find(|t| t.kind == wanted)
        .context("kind table")
}

#[cfg(test)]
mod tests {
    use super::resolve_kind;

    #[test]
    fn kinds_in_kubectls_forms() {
        for (typed, kind) in [
            ("vm", "VirtualMachine"),
            ("VirtualMachines", "VirtualMachine"),
            ("virtualmachine.kubevirt.io", "VirtualMachine"),
            ("vmi", "VirtualMachineInstance"),
            ("po", "Pod"),
            ("no", "Node"),
            ("nad", "NetworkAttachmentDefinition"),
            ("net-attach-def", "NetworkAttachmentDefinition"),
            (
                "network-attachment-definitions.k8s.cni.cncf.io",
                "NetworkAttachmentDefinition",
            ),
            ("ipamclaims", "IPAMClaim"),
            ("ev", "Event"),
            ("ipreservations", "IPReservation"),
            ("vmim", "VirtualMachineInstanceMigration"),
            (
                "virtualmachineinstancemigrations.kubevirt.io",
                "VirtualMachineInstanceMigration",
            ),
        ] {
            assert_eq!(resolve_kind(typed).unwrap().kind, kind, "{typed}");
        }
        assert!(resolve_kind("deployment").is_err());
    }
}
