//! A tenant going after another namespace's persistent VM addresses through weft-ipam (as the
//! node runs it: the `weft-node` identity on the Kubernetes backend, deploy/'s role enforced by
//! the fake API server). A VM's IPAMClaim lives in the VM's namespace; a tenant in another
//! namespace may still use a NAD of the VM's namespace (NPWG allows `namespace/nad`), and
//! writes its own pod's annotations and labels with any content.
//!
//! * naming the victim's claim in `ipam-claim-reference` on an element whose NAD is in the
//!   victim's namespace: the claim was looked up in the NAD's namespace, so the attacker's pod
//!   got the victim VM's address (a second "owner"). Now claims are looked up in the pod's own
//!   namespace only, as OVN-Kubernetes does: the ADD fails, nothing is allocated.
//! * labelling its pod `vm.kubevirt.io/name: <victim vm>` with no reference (the KubeVirt
//!   launcher-pod path): the VM's claims are searched in the pod's namespace only.

mod common;
mod kube_cluster;

use std::sync::Arc;

use kube_cluster::{NODE_TOKEN, NODE_USER, deploy_role};
use serde_json::json;
use weft_ipam::{IpReservation, IpamClaim, IpamRequest};
use weft_store::fake_api::FakeApiServer;
use weft_store::{Api, ListOptions, MemoryStore, Object, Resource, ResourceType, Store};

const BLUE_IF: &str = "pod16477688c0e";

fn config() -> serde_json::Value {
    json!({"cniVersion": "1.0.0", "name": "blue", "type": "bridge", "allowPersistentIPs": true,
           "ipam": {"type": "weft-ipam", "range": "10.66.0.0/24"}})
}

fn add(namespace: &str, pod: &str, ifname: &str) -> IpamRequest {
    let (namespace, pod, ifname) = (namespace.to_string(), pod.to_string(), ifname.to_string());
    let env = move |key: &str| -> Option<String> {
        match key {
            "CNI_COMMAND" => Some("ADD".into()),
            "CNI_CONTAINERID" => Some(format!("sandbox-{pod}")),
            "CNI_NETNS" => Some("/run/netns/x".into()),
            "CNI_IFNAME" => Some(ifname.clone()),
            "CNI_ARGS" => Some(format!(
                "IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={pod}"
            )),
            "CNI_PATH" => Some("/usr/lib/cni".into()),
            "WEFT_NODE_NAME" => Some("node1".into()),
            _ => None,
        }
    };
    IpamRequest::from_lookup(env, config().to_string().as_bytes()).expect("request")
}

/// The victim: VM vm1 in namespace `victim` with claim vm1.blue holding VICTIM_IP (and its
/// reservation, taken by its launcher pod through weft-ipam), on NAD victim/blue. Returns the
/// victim's address.
async fn victim(backing: &Arc<dyn Store>, store: &Arc<dyn Store>) -> String {
    let mut claim = IpamClaim::new("victim", "vm1.blue", "blue", BLUE_IF);
    claim
        .metadata
        .labels
        .insert(weft_ipam::vm_claim::CLAIM_VM_LABEL.into(), "vm1".into());
    Api::<IpamClaim>::namespaced(backing.clone(), "victim")
        .create(&claim)
        .await
        .unwrap();
    // The victim's launcher pod takes the claim's address first, through weft-ipam itself.
    let pod: Object = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "virt-launcher-vm1-aaaaa", "namespace": "victim",
            "labels": {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": "vm1"},
            "annotations": {"k8s.v1.cni.cncf.io/networks":
                format!(r#"[{{"name":"blue","namespace":"victim","interface":"{BLUE_IF}","ipam-claim-reference":"vm1.blue"}}]"#)}},
        "spec": {"containers": [{"name": "compute", "image": "virt-launcher"}]}}))
    .unwrap();
    backing.create(&pods(), pod).await.unwrap();
    let result = weft_ipam::handle(add("victim", "virt-launcher-vm1-aaaaa", BLUE_IF), store.clone())
        .await
        .expect("the victim's ADD")
        .expect("a result");
    let got = format!("{}/24", result.ips[0].address.addr());
    let claim = Api::<IpamClaim>::namespaced(backing.clone(), "victim")
        .get_required("vm1.blue")
        .await
        .unwrap();
    assert_eq!(claim.status.ips, vec![got.clone()]);
    got
}

fn pods() -> ResourceType {
    ResourceType::new("v1", "Pod", "pods", true)
}

fn cluster() -> (FakeApiServer, Arc<dyn Store>, Arc<dyn Store>) {
    let backing = MemoryStore::shared();
    let fake = FakeApiServer::new(
        backing.clone(),
        [IpReservation::resource_type(), IpamClaim::resource_type(), pods()],
    );
    fake.grant(NODE_TOKEN, NODE_USER, deploy_role("weft-node"));
    let store: Arc<dyn Store> = Arc::new(fake.kube_store_as(NODE_TOKEN));
    (fake, backing, store)
}

async fn reservations(backing: &Arc<dyn Store>) -> Vec<IpReservation> {
    Api::<IpReservation>::all(backing.clone())
        .list(&ListOptions::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_tenant_cannot_name_another_namespaces_claim_through_its_nad() {
    let (_fake, backing, store) = cluster();
    let victim_ip = victim(&backing, &store).await;
    // The attacker's pod in its own namespace uses the victim's NAD and names the victim's claim.
    let pod: Object = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "thief", "namespace": "tenant-b", "annotations": {
            "k8s.v1.cni.cncf.io/networks":
                r#"[{"name":"blue","namespace":"victim","interface":"net1","ipam-claim-reference":"vm1.blue"}]"#}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}))
    .unwrap();
    backing.create(&pods(), pod).await.unwrap();
    let err = weft_ipam::handle(add("tenant-b", "thief", "net1"), store.clone())
        .await
        .expect_err("the victim's claim is not the attacker's");
    assert!(
        err.msg.contains("IPAMClaim tenant-b/vm1.blue") && err.msg.contains("not found"),
        "{err:?}"
    );
    let held = reservations(&backing).await;
    assert_eq!(held.len(), 1, "nothing allocated for the attacker: {held:?}");
    assert_eq!(held[0].spec.claim.as_deref(), Some("victim/vm1.blue"));
    let claim = Api::<IpamClaim>::namespaced(backing.clone(), "victim")
        .get_required("vm1.blue")
        .await
        .unwrap();
    assert_eq!(claim.status.ips, vec![victim_ip]);
    assert_eq!(
        claim.status.owner_pod.unwrap().name,
        "virt-launcher-vm1-aaaaa",
        "the victim's claim still names the victim's pod"
    );
}

#[tokio::test]
async fn a_tenant_cannot_pose_as_another_namespaces_vm_launcher() {
    let (_fake, backing, store) = cluster();
    victim(&backing, &store).await;
    // A launcher-looking pod (virt-controller's label naming the victim's VM), no reference.
    let pod: Object = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "virt-launcher-vm1-zzzzz", "namespace": "tenant-b",
            "labels": {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": "vm1"},
            "annotations": {"k8s.v1.cni.cncf.io/networks":
                format!(r#"[{{"name":"blue","namespace":"victim","interface":"{BLUE_IF}"}}]"#)}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}))
    .unwrap();
    backing.create(&pods(), pod).await.unwrap();
    let err = weft_ipam::handle(add("tenant-b", "virt-launcher-vm1-zzzzz", BLUE_IF), store.clone())
        .await
        .expect_err("the victim's claim is not the attacker's");
    assert!(err.msg.contains("VM vm1 has no IPAMClaim"), "{err:?}");
    assert_eq!(
        reservations(&backing).await.len(),
        1,
        "nothing allocated for the attacker"
    );
}
