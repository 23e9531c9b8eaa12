//! What `weft controller --kubeconfig` asks of the API server (the fake API over TCP on
//! 127.0.0.1, no root needed): with nothing changing, nothing besides its open watches; per VM
//! lifecycle a bounded number of requests, counted for the IPAMClaim role (the only one that
//! runs on a Kubernetes cluster beside KubeVirt) and for all roles (the local cluster's).
//!
//! Pods are accepted without containers here (as the local cluster's store does): the
//! KubeVirt roles render launcher pods that only weft's local runtime runs.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use weft_store::fake_api::{FakeApiServer, TcpServer};
use weft_store::{ListOptions, MemoryStore, Object, Resource, ResourceType, Store};

fn pods() -> ResourceType {
    ResourceType::new("v1", "Pod", "pods", true)
}

struct Cluster {
    api: FakeApiServer,
    objects: Arc<dyn Store>,
    tcp: Option<TcpServer>,
    runtime: tokio::runtime::Runtime,
}

impl Cluster {
    fn start() -> Self {
        Self::serving(controller_kinds())
    }

    fn serving(types: Vec<ResourceType>) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let objects = MemoryStore::shared();
        let api = FakeApiServer::new(objects.clone(), types);
        api.accept_pods_without_containers();
        let tcp = {
            let _entered = runtime.enter();
            api.serve_tcp().unwrap()
        };
        Self {
            api,
            objects,
            tcp: Some(tcp),
            runtime,
        }
    }

    fn create(&self, value: Value) -> Object {
        let object: Object = serde_json::from_value(value).unwrap();
        let ty = controller_kinds()
            .into_iter()
            .find(|t| t.kind == object.kind)
            .unwrap();
        self.runtime.block_on(self.objects.create(&ty, object)).unwrap()
    }

    fn list(&self, ty: &ResourceType) -> Vec<Object> {
        self.runtime
            .block_on(self.objects.list(ty, None, &ListOptions::default()))
            .unwrap()
            .items
    }

    /// Requests since the last clear, without the watches (opened once, kept open).
    fn requests(&self) -> Vec<String> {
        self.api
            .requests()
            .into_iter()
            .filter(|r| !r.contains("watch=true"))
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _entered = self.runtime.enter();
        self.tcp.take();
    }
}

/// `weft controller --roles local` (all roles) on `cluster`'s kubeconfig in `dir`; its log.
fn start_controller(cluster: &Cluster, dir: &Path) -> (KillOnDrop, std::path::PathBuf) {
    let kubeconfig = dir.join("kubeconfig");
    cluster
        .tcp
        .as_ref()
        .unwrap()
        .write_kubeconfig(&kubeconfig)
        .unwrap();
    let log = dir.join("controller.log");
    let child = std::process::Command::new(weft_bin())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--state-dir")
        .arg(dir)
        // All roles: the local cluster's are counted too (beside KubeVirt only the claims').
        .args(["--log", "info", "controller", "--roles", "local"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    (KillOnDrop(child), log)
}

fn wait_until(what: &str, log: &Path, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within 30 s\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn vm1() -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm1", "namespace": "default"},
        "spec": {"running": true, "template": {"spec": {
            "domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}}, {"name": "blue", "bridge": {}}]}},
            "networks": [{"name": "default", "pod": {}},
                         {"name": "blue", "multus": {"networkName": "blue"}}]}}}})
}

fn node_and_nad(cluster: &Cluster) {
    cluster.create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}));
    let blue = json!({"cniVersion": "1.0.0", "name": "blue", "type": "bridge",
                      "allowPersistentIPs": true,
                      "ipam": {"type": "weft-ipam", "range": "10.77.0.0/24"}});
    cluster.create(
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "blue", "namespace": "default"}, "spec": {"config": blue.to_string()}}),
    );
}

/// Started on a cluster without KubeVirt's and the IPAMClaim CRDs: each is said once and
/// re-checked with backoff; installed later, they are served without a restart.
#[test]
fn crds_installed_after_the_controller_started_are_served_without_a_restart() {
    let later = [
        weft_vm::VirtualMachine::resource_type(),
        weft_vm::VirtualMachineInstance::resource_type(),
        weft_vm::VirtualMachineInstanceMigration::resource_type(),
        weft_vm::api::KubeVirt::resource_type(),
        weft_ipam::IpamClaim::resource_type(),
    ];
    let cluster = Cluster::serving(
        controller_kinds()
            .into_iter()
            .filter(|k| !later.contains(k))
            .collect(),
    );
    node_and_nad(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let (_controller, log) = start_controller(&cluster, dir.path());
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    let vm_lists = || {
        cluster
            .api
            .requests()
            .iter()
            .filter(|r| {
                r.starts_with("GET /apis/kubevirt.io/v1/virtualmachines?") && !r.contains("watch=true")
            })
            .count()
    };
    // Listed, found missing, re-checked (after 1 s): and said once.
    wait_until("a re-check of the missing VM CRD", &log, || vm_lists() >= 2);
    let said = text()
        .lines()
        .filter(|l| l.contains("virtualmachines.kubevirt.io not installed; waiting"))
        .count();
    assert_eq!(said, 1, "{}", text());
    assert!(
        text().contains("ipamclaims.k8s.cni.cncf.io not installed; waiting"),
        "{}",
        text()
    );
    // Nothing else is warned about (was: `WARN reconcile: VirtualMachine (all) not found` every
    // 400 ms).
    let warnings: Vec<String> = text()
        .lines()
        .filter(|l| l.contains("WARN") && !l.contains("not installed; waiting"))
        .map(String::from)
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");

    // The CRDs appear; a VM created now gets its claim, VMI and launcher pod.
    for ty in later {
        cluster.api.serve_type(ty);
    }
    cluster.create(vm1());
    wait_until("claim, VMI and launcher pod", &log, || {
        cluster.list(&weft_ipam::IpamClaim::resource_type()).len() == 1
            && cluster
                .list(&weft_vm::VirtualMachineInstance::resource_type())
                .len()
                == 1
            && cluster
                .list(&pods())
                .iter()
                .any(|p| p.metadata.label("kubevirt.io") == Some("virt-launcher"))
    });
    assert!(
        text().contains("virtualmachines.kubevirt.io is served now"),
        "{}",
        text()
    );
    // Re-checked with backoff, not every pass.
    assert!(vm_lists() <= 8, "{} lists of the missing kind", vm_lists());
}

#[test]
fn controller_requests_idle_and_per_vm_lifecycle_are_bounded() {
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    node_and_nad(&cluster);

    let (_controller, log) = start_controller(&cluster, dir.path());
    // Started: every kind listed once and watched.
    let watched = controller_kinds().len() - 1; // not Events
    wait_until("watches open", &log, || {
        cluster
            .api
            .requests()
            .iter()
            .filter(|r| r.contains("watch=true"))
            .count()
            >= watched
    });
    let startup = cluster.api.requests();
    eprintln!("startup: {} requests ({} watches)", startup.len(), watched);

    // Idle: nothing changes, nothing is asked (the 400 ms loop made ~10 requests/s).
    cluster.api.clear_requests();
    let window = Instant::now() + Duration::from_secs(5);
    while Instant::now() < window {
        std::thread::sleep(Duration::from_millis(100));
    }
    let idle = cluster.api.requests();
    eprintln!("idle: {} requests in 5 s", idle.len());
    assert!(idle.is_empty(), "idle requests: {idle:#?}");

    // A VM with a persistent-IP network: create → running.
    cluster.api.clear_requests();
    let started = Instant::now();
    cluster.create(vm1());
    let launcher = || {
        cluster
            .list(&pods())
            .into_iter()
            .find(|p| p.metadata.label("kubevirt.io") == Some("virt-launcher"))
    };
    wait_until("launcher pod", &log, || launcher().is_some());
    // The node runs it (the local runtime's part, not the controller's: straight in the store).
    let mut pod = launcher().unwrap();
    pod.data.insert("status".into(), json!({"phase": "Running"}));
    cluster
        .runtime
        .block_on(cluster.objects.update_status(&pods(), pod))
        .unwrap();
    let vms = weft_vm::VirtualMachine::resource_type();
    let printable = || {
        cluster.list(&vms).first().and_then(|vm| {
            vm.data
                .get("status")?
                .get("printableStatus")?
                .as_str()
                .map(String::from)
        })
    };
    wait_until("VM Running", &log, || printable().as_deref() == Some("Running"));
    let to_running = started.elapsed();
    // Settled: the reconciles the last writes trigger read the cache only.
    std::thread::sleep(Duration::from_millis(500));
    let create = cluster.requests();
    let claims = |requests: &[String]| requests.iter().filter(|r| r.contains("/ipamclaims")).count();
    eprintln!(
        "create→running: {} requests ({} IPAMClaim) in {to_running:?}: {create:#?}",
        create.len(),
        claims(&create)
    );
    assert_eq!(
        cluster.list(&weft_ipam::IpamClaim::resource_type()).len(),
        1,
        "the persistent network's claim"
    );

    // Delete.
    cluster.api.clear_requests();
    let started = Instant::now();
    cluster
        .runtime
        .block_on(cluster.objects.delete(&vms, Some("default"), "vm1", None))
        .unwrap();
    let vmis = weft_vm::VirtualMachineInstance::resource_type();
    wait_until("VMI, pod and claim gone", &log, || {
        cluster.list(&vmis).is_empty()
            && launcher().is_none()
            && cluster.list(&weft_ipam::IpamClaim::resource_type()).is_empty()
    });
    let to_gone = started.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let delete = cluster.requests();
    eprintln!(
        "delete: {} requests ({} IPAMClaim) in {to_gone:?}: {delete:#?}",
        delete.len(),
        claims(&delete)
    );

    // The budget for the role that runs on Kubernetes (IPAMClaims).
    assert!(claims(&create) <= 5, "{create:#?}");
    assert!(claims(&delete) <= 3, "{delete:#?}");
    // All roles (the local cluster's): each write once, reads from the cache.
    assert!(create.len() <= 9, "{create:#?}");
    assert!(delete.len() <= 6, "{delete:#?}");
    assert!(
        create.iter().chain(&delete).all(|r| !r.starts_with("GET ")),
        "reads come from the cache: {create:#?} {delete:#?}"
    );

    // And idle again.
    cluster.api.clear_requests();
    let window = Instant::now() + Duration::from_secs(2);
    while Instant::now() < window {
        std::thread::sleep(Duration::from_millis(100));
    }
    let idle = cluster.requests();
    assert!(idle.is_empty(), "idle requests after the VM: {idle:#?}");
}
