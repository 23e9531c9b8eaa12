//! The reconciler's decision: which reservations are leaked and may be freed, given the live
//! pods and claims. Pure (time is a parameter) and deliberately conservative, against the races
//! that gave whereabouts duplicate addresses:
//!
//! * #162/#207 — a reconciler listed pods, a new pod allocated, and its brand-new reservation
//!   looked orphaned: reservations younger than a grace period are never freed (callers must
//!   also list reservations *before* pods).
//! * #176 — a StatefulSet pod recreated under the same name: reservations are matched on the
//!   pod uid and container id, never on the name alone, so the new pod's address is kept and
//!   only the old incarnation's is freed.
//! * A pod that still has the reservation's container, or is terminating (its DEL is still to
//!   come), keeps it; claimed reservations go only when their claim is gone and no pod still
//!   runs with the sandbox that took it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use weft_store::{Api, ListOptions, Store};

use crate::allocator::delete_if_unchanged;
use crate::claim::IpamClaim;
use crate::error::IpamError;
use crate::reservation::IpReservation;

/// A pod as the reconciler sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LivePod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Uid (empty when unknown).
    pub uid: String,
    /// Sandbox/container ids the pod currently has; empty = unknown (then the container is not
    /// used to decide anything).
    pub container_ids: Vec<String>,
    /// The pod is being deleted (its CNI DEL may still come).
    pub terminating: bool,
}

/// Why a reservation is freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeReason {
    /// Its claim no longer exists.
    ClaimGone,
    /// No pod with its pod reference exists.
    PodGone,
    /// A pod with that name exists but is another incarnation (different uid).
    PodReplaced,
    /// The pod exists but no longer has that sandbox (a DEL was lost).
    StaleSandbox,
}

/// One reservation to free, with the resourceVersion it was judged at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreeDecision {
    /// Reservation name.
    pub name: String,
    /// resourceVersion read (the delete precondition).
    pub resource_version: Option<String>,
    /// The address.
    pub ip: Option<IpAddr>,
    /// Why.
    pub reason: FreeReason,
}

/// Decide which of `reservations` to free. `claims` holds `namespace/name` of live claims.
pub fn reservations_to_free(
    reservations: &[IpReservation],
    pods: &[LivePod],
    claims: &HashSet<String>,
    now: Timestamp,
    grace: Duration,
) -> Vec<FreeDecision> {
    let by_ref: HashMap<String, &LivePod> = pods
        .iter()
        .map(|p| (format!("{}/{}", p.namespace, p.name), p))
        .collect();
    reservations
        .iter()
        .filter(|r| old_enough(r, now, grace))
        .filter_map(|r| {
            verdict(r, &by_ref, claims).map(|reason| FreeDecision {
                name: r.metadata.name.clone(),
                resource_version: r.metadata.resource_version.clone(),
                ip: r.spec.ip,
                reason,
            })
        })
        .collect()
}

fn old_enough(r: &IpReservation, now: Timestamp, grace: Duration) -> bool {
    let Some(created) = r
        .metadata
        .creation_timestamp
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok())
    else {
        return false;
    };
    let age = now.duration_since(created);
    age.is_positive() && age.unsigned_abs() >= grace
}

fn verdict(
    r: &IpReservation,
    pods: &HashMap<String, &LivePod>,
    claims: &HashSet<String>,
) -> Option<FreeReason> {
    if let Some(claim) = &r.spec.claim {
        if claims.contains(claim) {
            return None;
        }
        // The claim is gone, but a pod still running with this sandbox keeps using the address.
        let in_use = pods
            .get(&r.spec.pod_ref)
            .is_some_and(|p| p.terminating || p.container_ids.contains(&r.spec.container_id));
        return (!in_use).then_some(FreeReason::ClaimGone);
    }
    if r.spec.pod_ref.is_empty() {
        // Nothing ties it to a pod: only CNI GC (which knows the runtime's attachments) frees it.
        return None;
    }
    let Some(pod) = pods.get(&r.spec.pod_ref) else {
        return Some(FreeReason::PodGone);
    };
    if pod.container_ids.contains(&r.spec.container_id) || pod.terminating {
        return None;
    }
    if !r.spec.pod_uid.is_empty() && !pod.uid.is_empty() && r.spec.pod_uid != pod.uid {
        return Some(FreeReason::PodReplaced);
    }
    (!pod.container_ids.is_empty()).then_some(FreeReason::StaleSandbox)
}

/// Thin executor: list reservations (first), then read the claims they name, decide against `pods` (which the
/// caller must have listed *after* this call starts, or pass a grace period covering the gap),
/// and free the decided ones with a resourceVersion precondition. Returns what was freed.
pub async fn reconcile(
    store: &Arc<dyn Store>,
    pods: &[LivePod],
    now: Timestamp,
    grace: Duration,
) -> Result<Vec<FreeDecision>, IpamError> {
    let reservations = Api::<IpReservation>::all(store.clone())
        .list(&ListOptions::default())
        .await?;
    // Only the claims the reservations name are read (one read each, from the controller's
    // cache), not every claim listed: beside KubeVirt at 10,000 VMs the sweep's list of 20,000
    // typed claims every 30 s was most of the controller's peak memory (docs/benchmarks.md,
    // "Controller at 10,000 VMs"). A reference that names no namespace names no claim.
    let named: BTreeSet<&str> = reservations
        .iter()
        .filter_map(|r| r.spec.claim.as_deref())
        .collect();
    let mut claims = HashSet::new();
    for reference in named {
        let (namespace, name) = weft_netconf::split_namespaced(reference, "");
        if namespace.is_empty() || name.is_empty() {
            continue;
        }
        if Api::<IpamClaim>::namespaced(store.clone(), namespace)
            .get(name)
            .await?
            .is_some()
        {
            claims.insert(reference.to_string());
        }
    }
    let decisions = reservations_to_free(&reservations, pods, &claims, now, grace);
    let by_name: HashMap<&str, &IpReservation> = reservations
        .iter()
        .map(|r| (r.metadata.name.as_str(), r))
        .collect();
    let mut freed = Vec::new();
    for d in decisions {
        if let Some(r) = by_name.get(d.name.as_str())
            && delete_if_unchanged(store, r).await?
        {
            freed.push(d);
        }
    }
    Ok(freed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::IpReservationSpec;
    use proptest::prelude::*;

    const GRACE: Duration = Duration::from_secs(60);

    fn now() -> Timestamp {
        "2026-11-29T10:00:00Z".parse().unwrap()
    }

    fn res(ip: u8, container: &str, pod: &str, uid: &str, claim: Option<&str>, age_s: i64) -> IpReservation {
        let mut r = IpReservation::new(IpReservationSpec {
            network: "blue".into(),
            ip: Some(IpAddr::from([10, 0, 0, ip])),
            container_id: container.into(),
            ifname: "net1".into(),
            pod_ref: pod.into(),
            pod_uid: uid.into(),
            claim: claim.map(String::from),
            ..Default::default()
        });
        let created = now() - jiff::SignedDuration::from_secs(age_s);
        r.metadata.creation_timestamp = Some(created.to_string());
        r.metadata.resource_version = Some(format!("{ip}"));
        r
    }

    fn pod(name: &str, uid: &str, containers: &[&str]) -> LivePod {
        LivePod {
            namespace: "ns".into(),
            name: name.into(),
            uid: uid.into(),
            container_ids: containers.iter().map(|c| c.to_string()).collect(),
            terminating: false,
        }
    }

    fn decide(rs: &[IpReservation], pods: &[LivePod], claims: &[&str]) -> Vec<(u8, FreeReason)> {
        let claims = claims.iter().map(|c| c.to_string()).collect();
        reservations_to_free(rs, pods, &claims, now(), GRACE)
            .into_iter()
            .map(|d| match d.ip {
                Some(IpAddr::V4(v4)) => (v4.octets()[3], d.reason),
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn young_reservations_are_never_freed() {
        assert!(decide(&[res(1, "c", "ns/gone", "", None, 5)], &[], &[]).is_empty());
        let mut no_time = res(2, "c", "ns/gone", "", None, 500);
        no_time.metadata.creation_timestamp = None;
        assert!(decide(&[no_time], &[], &[]).is_empty());
    }

    #[test]
    fn gone_pods_and_claims_free_their_addresses() {
        let rs = [
            res(1, "c1", "ns/gone", "u1", None, 500),
            res(2, "c2", "ns/live", "u2", None, 500),
            res(3, "c3", "ns/gone", "u3", Some("ns/vm.blue"), 500),
            res(4, "c4", "ns/gone", "u4", Some("ns/deleted"), 500),
            res(5, "c5", "", "", None, 500),
        ];
        let got = decide(&rs, &[pod("live", "u2", &["c2"])], &["ns/vm.blue"]);
        assert_eq!(got, vec![(1, FreeReason::PodGone), (4, FreeReason::ClaimGone)]);
    }

    #[test]
    fn statefulset_name_reuse_frees_only_the_old_incarnation() {
        let rs = [
            res(1, "old", "ns/web-0", "uid-old", None, 500),
            res(2, "new", "ns/web-0", "uid-new", None, 500),
        ];
        // Sandbox ids unknown (Kubernetes does not publish them): the uid decides.
        let got = decide(&rs, &[pod("web-0", "uid-new", &[])], &[]);
        assert_eq!(got, vec![(1, FreeReason::PodReplaced)]);
    }

    #[test]
    fn live_sandbox_or_terminating_pod_keeps_and_lost_del_is_freed() {
        let rs = [
            res(1, "sandbox-1", "ns/p", "u", None, 500),
            res(2, "sandbox-2", "ns/p", "u", None, 500),
        ];
        assert_eq!(
            decide(&rs, &[pod("p", "u", &["sandbox-2"])], &[]),
            vec![(1, FreeReason::StaleSandbox)]
        );
        let mut terminating = pod("p", "u", &["sandbox-3"]);
        terminating.terminating = true;
        assert!(decide(&rs, &[terminating], &[]).is_empty());
        assert!(
            decide(&rs, &[pod("p", "u", &[])], &[]).is_empty(),
            "unknown sandboxes: keep"
        );
    }

    /// A memory store with network `blue` and one reservation per `(container, pod, claim)`.
    async fn blue_store_holding(holders: &[(&str, &str, Option<&str>)]) -> Arc<dyn Store> {
        use crate::allocator::{Holder, allocate};
        let store = weft_store::MemoryStore::shared();
        let config = crate::parse_network_config(&serde_json::json!({"name": "blue",
            "ipam": {"type": "weft-ipam", "range": "10.0.0.0/24"}}))
        .unwrap();
        for (container, pod, claim) in holders {
            let holder = Holder {
                container_id: container.to_string(),
                ifname: "net1".into(),
                pod_ref: pod.to_string(),
                ..Default::default()
            };
            allocate(&store, &config, &holder, &[], *claim).await.unwrap();
        }
        store
    }

    #[tokio::test]
    async fn reconcile_frees_leaks_in_the_store() {
        use crate::allocator::list_reservations;
        let store = blue_store_holding(&[("c1", "ns/gone", None), ("c2", "ns/live", None)]).await;
        let later = Timestamp::now() + jiff::SignedDuration::from_secs(120);
        let freed = reconcile(&store, &[pod("live", "", &["c2"])], later, GRACE)
            .await
            .unwrap();
        assert_eq!(freed.len(), 1);
        assert_eq!(freed[0].reason, FreeReason::PodGone);
        let left = list_reservations(&store, "blue").await.unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].spec.container_id, "c2");
        assert!(
            reconcile(&store, &[], Timestamp::now(), GRACE)
                .await
                .unwrap()
                .is_empty(),
            "too young"
        );
    }

    /// The executor reads the claims the reservations name: a reservation whose claim exists
    /// stays (whatever its pod), one whose claim is gone goes; a malformed reference names none.
    #[tokio::test]
    async fn reconcile_keeps_reservations_of_existing_claims_and_frees_those_of_gone_ones() {
        use crate::allocator::list_reservations;
        let store = blue_store_holding(&[
            ("c1", "ns/pod-c1", Some("ns/vm1.blue")),
            ("c2", "ns/pod-c2", Some("ns/vm2.blue")),
            ("c3", "ns/pod-c3", Some("no-namespace")),
        ])
        .await;
        Api::<IpamClaim>::namespaced(store.clone(), "ns")
            .create(&IpamClaim::new("ns", "vm1.blue", "blue", "podabc"))
            .await
            .unwrap();
        let later = Timestamp::now() + jiff::SignedDuration::from_secs(120);
        let freed = reconcile(&store, &[], later, GRACE).await.unwrap();
        let reasons: Vec<FreeReason> = freed.iter().map(|d| d.reason).collect();
        assert_eq!(reasons, [FreeReason::ClaimGone; 2], "{freed:?}");
        let left = list_reservations(&store, "blue").await.unwrap();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].spec.claim.as_deref(), Some("ns/vm1.blue"));
    }

    proptest! {
        #[test]
        fn never_frees_what_a_live_pod_or_claim_holds(
            entries in prop::collection::vec((0u8..4, 0u8..4, any::<bool>(), any::<bool>(), 0i64..200), 1..40),
        ) {
            let pods: Vec<LivePod> = (0..4).map(|i| pod(&format!("p{i}"), &format!("u{i}"), &[&format!("c{i}")])).collect();
            let rs: Vec<IpReservation> = entries.iter().enumerate().map(|(i, (p, c, claimed, live_claim, age))| {
                let claim = claimed.then(|| if *live_claim { "ns/live" } else { "ns/dead" });
                res(i as u8, &format!("c{c}"), &format!("ns/p{p}"), &format!("u{p}"), claim, *age)
            }).collect();
            let freed = reservations_to_free(&rs, &pods, &["ns/live".to_string()].into(), now(), GRACE);
            for d in freed {
                let r = rs.iter().find(|r| r.metadata.name == d.name).unwrap();
                prop_assert!(old_enough(r, now(), GRACE));
                prop_assert!(r.spec.claim.as_deref() != Some("ns/live"));
                let holder = pods.iter().find(|p| format!("ns/{}", p.name) == r.spec.pod_ref);
                prop_assert!(holder.is_none_or(|p| !p.container_ids.contains(&r.spec.container_id)));
            }
        }
    }
}
