//! The controller's watch-driven reconcilers (weft_store::reconcile): the kinds it watches, which
//! keys each change touches (pure: [`keys_for`]), and per key the reconcile of mod.rs it runs.
//! Reads come from the watch cache; with nothing changing the controller makes no request
//! besides its open watches.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use weft_ipam::{IpReservation, IpamClaim};
use weft_netconf::NetworkAttachmentDefinition;
use weft_store::reconcile::{self, Action, Backoff, Change, Resync};
use weft_store::{Api, CachedStore, ListOptions, Object, Resource, ResourceType, Store, WatchEvent};
use weft_vm::api::KubeVirt;
use weft_vm::{VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceMigration};

use super::{Roles, launcher_pod};
use crate::kinds::{Node, Pod};

/// What one reconcile is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    /// A VirtualMachine (namespace, name): its VMI, template changes, printable status.
    Vm(String, String),
    /// A VirtualMachineInstance: its launcher pod, status, migration, or deletion as an orphan.
    Vmi(String, String),
    /// A launcher pod: deleted when its VMI is gone.
    LauncherPod(String, String),
    /// An IPAMClaim: deleted (addresses released) when its VM is gone.
    Claim(String, String),
    /// Leaked IP reservations (their own resync, every 30 s).
    IpamSweep,
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Vm(ns, name) => write!(f, "vm {ns}/{name}"),
            Key::Vmi(ns, name) => write!(f, "vmi {ns}/{name}"),
            Key::LauncherPod(ns, name) => write!(f, "pod {ns}/{name}"),
            Key::Claim(ns, name) => write!(f, "claim {ns}/{name}"),
            Key::IpamSweep => f.write_str("ipam sweep"),
        }
    }
}

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Every key is reconciled again at least this often, even without changes.
    pub resync: Duration,
    /// How often leaked IP reservations are looked for.
    pub ipam_sweep: Duration,
    /// Error backoff per key.
    pub backoff: Backoff,
}

/// Environment variable overriding [`Options::resync`] in seconds (tests use short ones).
pub const RESYNC_ENV: &str = "WEFT_CONTROLLER_RESYNC_SECS";

impl Default for Options {
    fn default() -> Self {
        Self {
            resync: Duration::from_secs(300),
            ipam_sweep: Duration::from_secs(30),
            backoff: Backoff::default(),
        }
    }
}

impl Options {
    /// The defaults, with [`RESYNC_ENV`] applied.
    pub fn from_env() -> Self {
        let mut options = Self::default();
        if let Some(secs) = std::env::var(RESYNC_ENV).ok().and_then(|v| v.parse::<u64>().ok()) {
            options.resync = Duration::from_secs(secs.max(1));
        }
        options
    }
}

/// The kinds the controller watches (and reads from its cache) for `roles`: beside KubeVirt
/// only what the claims and the reservation sweep read (VMs, NADs, claims, pods,
/// reservations), so weft-controller's role needs nothing of KubeVirt's but VMs.
pub fn watched(roles: Roles) -> Vec<(ResourceType, ListOptions)> {
    let mut kinds = vec![
        VirtualMachine::resource_type(),
        Pod::resource_type(),
        NetworkAttachmentDefinition::resource_type(),
        IpamClaim::resource_type(),
        IpReservation::resource_type(),
    ];
    if roles.kubevirt {
        kinds.extend([
            VirtualMachineInstance::resource_type(),
            VirtualMachineInstanceMigration::resource_type(),
            Node::resource_type(),
            KubeVirt::resource_type(),
        ]);
    }
    kinds.into_iter().map(|ty| (ty, ListOptions::default())).collect()
}

fn ns_name(object: &Object) -> (String, String) {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone(),
    )
}

fn vmi_keys(objects: &[Object], filter: impl Fn(&Object) -> bool) -> Vec<Key> {
    objects
        .iter()
        .filter(|o| filter(o))
        .map(|o| {
            let (ns, name) = ns_name(o);
            Key::Vmi(ns, name)
        })
        .collect()
}

/// Whether a VMI (as JSON) has no launcher pod running yet: waiting for a NAD or a node.
fn vmi_not_running(vmi: &Object) -> bool {
    let phase = vmi
        .data
        .get("status")
        .and_then(|s| s.get("phase"))
        .and_then(|p| p.as_str())
        .unwrap_or("");
    !matches!(phase, "Running" | "Failed" | "Succeeded")
}

/// The keys a change touches (pure). `cached(kind)` gives the cached objects of a kind, read
/// only for the changes that fan out (a deleted VMI's pods, a NAD's waiting VMIs).
pub fn keys_for(change: &Change, cached: &dyn Fn(&ResourceType) -> Vec<Object>) -> Vec<Key> {
    let object = change.event.object();
    let (ns, name) = ns_name(object);
    let deleted = matches!(change.event, WatchEvent::Deleted(_));
    let owner = |kind: &str| {
        object
            .metadata
            .owner_references
            .iter()
            .find(|o| o.kind == kind)
            .map(|o| o.name.clone())
    };
    match change.ty.kind.as_str() {
        "VirtualMachine" => {
            let mut keys = vec![Key::Vm(ns.clone(), name.clone()), Key::Vmi(ns.clone(), name)];
            if deleted {
                // Its claims, by name (pure: no scan of every claim per deleted VM).
                keys.extend(
                    crate::claims::claim_names_of_vm_object(object)
                        .into_iter()
                        .map(|claim| Key::Claim(ns.clone(), claim)),
                );
            }
            keys
        }
        "VirtualMachineInstance" => {
            let vm = object
                .metadata
                .label(launcher_pod::VM_NAME_LABEL)
                .map(String::from)
                .or_else(|| owner(VirtualMachine::KIND))
                .unwrap_or_else(|| name.clone());
            let mut keys = vec![Key::Vmi(ns.clone(), name), Key::Vm(ns.clone(), vm)];
            if deleted && let Some(uid) = object.metadata.uid.as_deref() {
                keys.extend(
                    cached(&Pod::resource_type())
                        .iter()
                        .filter(|p| p.metadata.label(launcher_pod::CREATED_BY_LABEL) == Some(uid))
                        .map(|p| {
                            let (ns, name) = ns_name(p);
                            Key::LauncherPod(ns, name)
                        }),
                );
            }
            keys
        }
        "Pod" => {
            let (label, value) = launcher_pod::LAUNCHER_LABEL;
            if object.metadata.label(label) != Some(value) {
                return Vec::new();
            }
            let vmi = owner(VirtualMachineInstance::KIND).or_else(|| {
                object
                    .metadata
                    .annotation(launcher_pod::DOMAIN_ANNOTATION)
                    .map(String::from)
            });
            let mut keys = vec![Key::LauncherPod(ns.clone(), name)];
            keys.extend(vmi.map(|vmi| Key::Vmi(ns, vmi)));
            keys
        }
        // A migration (created, its phase, deleted: the cancel) moves on in its VMI's reconcile.
        "VirtualMachineInstanceMigration" => object
            .data
            .get("spec")
            .and_then(|s| s.get("vmiName"))
            .and_then(|v| v.as_str())
            .map(|vmi| vec![Key::Vmi(ns, vmi.to_string())])
            .unwrap_or_default(),
        // A VMI waits in Pending for its NADs and for a node to run on.
        "NetworkAttachmentDefinition" | "Node" => {
            vmi_keys(&cached(&VirtualMachineInstance::resource_type()), vmi_not_running)
        }
        "IPAMClaim" => {
            // A claim made or changed: is its VM still there? A claim deleted: its VM (if it
            // still wants it) makes it again.
            let mut keys = match deleted {
                false => vec![Key::Claim(ns.clone(), name)],
                true => Vec::new(),
            };
            if let Some(vm) = object
                .metadata
                .label(crate::claims::VM_LABEL)
                .map(String::from)
                .or_else(|| owner(VirtualMachine::KIND))
            {
                // The VMI's pod annotations name its claims.
                if deleted {
                    keys.push(Key::Vm(ns.clone(), vm.clone()));
                }
                keys.push(Key::Vmi(ns, vm));
            }
            keys
        }
        // The cluster configuration (binding plugins, the default interface): everything.
        "KubeVirt" => {
            let mut keys: Vec<Key> = cached(&VirtualMachine::resource_type())
                .iter()
                .map(|o| {
                    let (ns, name) = ns_name(o);
                    Key::Vm(ns, name)
                })
                .collect();
            keys.extend(vmi_keys(
                &cached(&VirtualMachineInstance::resource_type()),
                |_| true,
            ));
            keys
        }
        _ => Vec::new(),
    }
}

/// Every key, for the full resync (the cache's keys only: no object is copied).
fn all_keys(cache: &CachedStore) -> Vec<Key> {
    let every = |_: &Object| true;
    let (label, value) = launcher_pod::LAUNCHER_LABEL;
    let keyed = |ty: ResourceType, filter: &dyn Fn(&Object) -> bool, key: fn(String, String) -> Key| {
        cache
            .keys_where(&ty, filter)
            .into_iter()
            .map(move |(ns, name)| key(ns, name))
    };
    keyed(VirtualMachine::resource_type(), &every, Key::Vm)
        .chain(keyed(VirtualMachineInstance::resource_type(), &every, Key::Vmi))
        .chain(keyed(
            Pod::resource_type(),
            &|pod| pod.metadata.label(label) == Some(value),
            Key::LauncherPod,
        ))
        .chain(keyed(IpamClaim::resource_type(), &every, Key::Claim))
        .collect()
}

/// Run the controller on `inner` until `shutdown` completes.
pub async fn serve(
    inner: Arc<dyn Store>,
    options: Options,
    roles: Roles,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let (cache, changes) =
        CachedStore::with_changes_projected(inner, watched(roles), super::projection::for_roles(roles));
    // Until synced, reads go to the API (correct, only slower): no need to wait forever.
    if let Err(e) = cache.wait_synced(Duration::from_secs(30)).await {
        tracing::warn!("controller: {e}; reconciling from the API meanwhile");
    } else {
        tracing::info!("controller: watch caches synced");
    }
    let cache = Arc::new(cache);
    let store: Arc<dyn Store> = cache.clone();
    let for_map = cache.clone();
    let for_resync = cache.clone();
    let mut trim_policy = crate::allocator::TrimPolicy::default();
    let config = reconcile::Config {
        name: "controller",
        backoff: options.backoff,
        resyncs: vec![
            Resync::new(options.resync, move || all_keys(&for_resync)),
            Resync::new(options.ipam_sweep, || vec![Key::IpamSweep]),
        ],
        // What a burst of reconciles freed (the initial LIST pages, the claims' POSTs and
        // their watch events) goes back to the system once the queue is dry.
        on_idle: Some(Box::new(move |reconciled| {
            if trim_policy.on_idle(reconciled, std::time::Instant::now()) {
                crate::allocator::trim();
            }
        })),
    };
    reconcile::run(
        changes,
        move |change: &Change| keys_for(change, &|ty| for_map.snapshot(ty, None)),
        move |key: Key| {
            let store = store.clone();
            Box::pin(async move { reconcile_key(&store, roles, key).await })
        },
        config,
        shutdown,
    )
    .await;
    Ok(())
}

pub(super) async fn reconcile_key(store: &Arc<dyn Store>, roles: Roles, key: Key) -> anyhow::Result<Action> {
    match key {
        // Beside KubeVirt a VM only gets its claims; VMIs and launcher pods are KubeVirt's.
        Key::Vm(ns, name) if !roles.kubevirt => {
            let vm = Api::<VirtualMachine>::namespaced(store.clone(), &ns)
                .get(&name)
                .await?;
            if let Some(vm) = vm.filter(|vm| roles.claims && vm.metadata.deletion_timestamp.is_none()) {
                crate::claims::ensure_for_vm(store, &vm).await?;
            }
        }
        Key::Vmi(..) | Key::LauncherPod(..) if !roles.kubevirt => {}
        Key::Claim(..) if !roles.claims => {}
        Key::IpamSweep if !roles.reservation_gc => {}
        Key::Vm(ns, name) => {
            let Some(vm) = Api::<VirtualMachine>::namespaced(store.clone(), &ns)
                .get(&name)
                .await?
            else {
                return Ok(Action::Done);
            };
            let vmis = Api::<VirtualMachineInstance>::namespaced(store.clone(), &ns)
                .list(&ListOptions::default())
                .await?;
            super::reconcile_vm(store, &vm, &vmis).await?;
        }
        Key::Vmi(ns, name) => {
            let api = Api::<VirtualMachineInstance>::namespaced(store.clone(), &ns);
            let Some(vmi) = api.get(&name).await? else {
                return Ok(Action::Done);
            };
            // A VMI whose owning VM is gone (Kubernetes' garbage collector would delete it).
            if let Some(owner) = vmi
                .metadata
                .owner_references
                .iter()
                .find(|o| o.kind == VirtualMachine::KIND)
            {
                let vm = Api::<VirtualMachine>::namespaced(store.clone(), &ns)
                    .get(&owner.name)
                    .await?;
                let live = vm.is_some_and(|vm| vm.metadata.uid.as_deref() == Some(owner.uid.as_str()));
                if !live {
                    if vmi.metadata.deletion_timestamp.is_none() {
                        api.delete(&name).await?;
                    }
                    return Ok(Action::Done);
                }
            }
            let (label, value) = launcher_pod::LAUNCHER_LABEL;
            let pods = Api::<Pod>::namespaced(store.clone(), &ns)
                .list(&ListOptions::default().label(label, value))
                .await?;
            super::reconcile_vmi(store, &vmi, &pods).await?;
        }
        Key::LauncherPod(ns, name) => {
            let pods = Api::<Pod>::namespaced(store.clone(), &ns);
            let Some(pod) = pods.get(&name).await? else {
                return Ok(Action::Done);
            };
            let owner = pod.metadata.label(launcher_pod::CREATED_BY_LABEL).unwrap_or("");
            let live = Api::<VirtualMachineInstance>::namespaced(store.clone(), &ns)
                .list(&ListOptions::default())
                .await?
                .iter()
                .any(|v| v.metadata.uid.as_deref() == Some(owner));
            if !live && pod.metadata.deletion_timestamp.is_none() {
                pods.delete(&name).await?;
            }
        }
        Key::Claim(ns, name) => crate::claims::collect_if_orphan(store, &ns, &name).await?,
        Key::IpamSweep => {
            crate::claims::reconcile_reservations(store).await?;
        }
    }
    Ok(Action::Done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(value: serde_json::Value) -> Object {
        serde_json::from_value(value).unwrap()
    }

    fn change<T: Resource>(event: fn(Object) -> WatchEvent, object: Object) -> Change {
        Change {
            ty: T::resource_type(),
            event: event(object),
        }
    }

    fn launcher(name: &str, vmi: &str, uid: &str) -> Object {
        obj(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": "ns",
            "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": uid},
            "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                  "name": vmi, "uid": uid}]}}))
    }

    fn vmi(name: &str, uid: &str, phase: &str) -> Object {
        obj(
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": {
            "name": name, "namespace": "ns", "uid": uid,
            "labels": {"vm.kubevirt.io/name": format!("vm-of-{name}")}},
            "status": {"phase": phase}}),
        )
    }

    fn k(kind: fn(String, String) -> Key, name: &str) -> Key {
        kind("ns".into(), name.into())
    }

    #[test]
    fn a_vm_change_touches_the_vm_and_its_vmi_and_its_deletion_its_claims() {
        let vm = obj(json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm1", "namespace": "ns"},
            "spec": {"template": {"spec": {"networks": [
                {"name": "default", "pod": {}},
                {"name": "primary", "multus": {"networkName": "p", "default": true}},
                {"name": "blue", "multus": {"networkName": "blue-nad"}},
                {"name": "green", "multus": {"networkName": "other/green"}}]}}}}));
        let none = |_: &ResourceType| Vec::new();
        assert_eq!(
            keys_for(&change::<VirtualMachine>(WatchEvent::Added, vm.clone()), &none),
            vec![k(Key::Vm, "vm1"), k(Key::Vmi, "vm1")]
        );
        assert_eq!(
            keys_for(&change::<VirtualMachine>(WatchEvent::Deleted, vm), &none),
            vec![
                k(Key::Vm, "vm1"),
                k(Key::Vmi, "vm1"),
                k(Key::Claim, "vm1.blue"),
                k(Key::Claim, "vm1.green")
            ]
        );
    }

    #[test]
    fn a_launcher_pod_maps_to_its_vmi_and_other_pods_to_nothing() {
        let none = |_: &ResourceType| Vec::new();
        assert_eq!(
            keys_for(
                &change::<Pod>(WatchEvent::Modified, launcher("virt-launcher-a-x", "a", "u1")),
                &none
            ),
            vec![k(Key::LauncherPod, "virt-launcher-a-x"), k(Key::Vmi, "a")]
        );
        let plain = obj(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "ns"}}));
        assert!(keys_for(&change::<Pod>(WatchEvent::Modified, plain), &none).is_empty());
    }

    #[test]
    fn a_deleted_vmi_touches_its_vm_and_its_launcher_pods_only() {
        let pods = vec![
            launcher("virt-launcher-a-x", "a", "u1"),
            launcher("virt-launcher-a-x-m1", "a", "u1"),
            launcher("virt-launcher-b-y", "b", "u2"),
        ];
        let cached = move |ty: &ResourceType| {
            if ty.kind == "Pod" {
                pods.clone()
            } else {
                Vec::new()
            }
        };
        let keys = keys_for(
            &change::<VirtualMachineInstance>(WatchEvent::Deleted, vmi("a", "u1", "Running")),
            &cached,
        );
        assert_eq!(
            keys,
            vec![
                k(Key::Vmi, "a"),
                k(Key::Vm, "vm-of-a"),
                k(Key::LauncherPod, "virt-launcher-a-x"),
                k(Key::LauncherPod, "virt-launcher-a-x-m1"),
            ]
        );
    }

    #[test]
    fn a_nad_or_node_wakes_the_vmis_still_waiting_and_not_the_running_ones() {
        let vmis = vec![
            vmi("waiting", "u1", "Pending"),
            vmi("new", "u2", ""),
            vmi("up", "u3", "Running"),
        ];
        let cached = move |ty: &ResourceType| {
            if ty.kind == "VirtualMachineInstance" {
                vmis.clone()
            } else {
                Vec::new()
            }
        };
        let nad = obj(
            json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "br", "namespace": "ns"}}),
        );
        let want = vec![k(Key::Vmi, "waiting"), k(Key::Vmi, "new")];
        assert_eq!(
            keys_for(
                &change::<NetworkAttachmentDefinition>(WatchEvent::Added, nad),
                &cached
            ),
            want
        );
        let node = obj(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}}));
        assert_eq!(keys_for(&change::<Node>(WatchEvent::Added, node), &cached), want);
    }

    #[test]
    fn a_migration_touches_its_vmi() {
        let m = obj(
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "kubevirt-migrate-vm-x", "namespace": "ns"},
            "spec": {"vmiName": "vm1"}}),
        );
        let none = |_: &ResourceType| Vec::new();
        for event in [WatchEvent::Added, WatchEvent::Modified, WatchEvent::Deleted] {
            assert_eq!(
                keys_for(
                    &change::<VirtualMachineInstanceMigration>(event, m.clone()),
                    &none
                ),
                vec![k(Key::Vmi, "vm1")]
            );
        }
    }

    #[test]
    fn a_claim_touches_itself_and_its_vms_vmi_and_its_deletion_its_vm() {
        let claim = obj(
            json!({"apiVersion": "k8s.cni.cncf.io/v1alpha1", "kind": "IPAMClaim",
            "metadata": {"name": "vm1.net1", "namespace": "ns", "labels": {"kubevirt.io/vm": "vm1"}}}),
        );
        let none = |_: &ResourceType| Vec::new();
        assert_eq!(
            keys_for(&change::<IpamClaim>(WatchEvent::Added, claim.clone()), &none),
            vec![k(Key::Claim, "vm1.net1"), k(Key::Vmi, "vm1")]
        );
        assert_eq!(
            keys_for(&change::<IpamClaim>(WatchEvent::Deleted, claim), &none),
            vec![k(Key::Vm, "vm1"), k(Key::Vmi, "vm1")],
            "a claim deleted while its VM lives is made again"
        );
        let reservation = obj(json!({"apiVersion": "ipam.weft.dev/v1", "kind": "IPReservation",
            "metadata": {"name": "r"}}));
        assert!(keys_for(&change::<IpReservation>(WatchEvent::Added, reservation), &none).is_empty());
    }
}
