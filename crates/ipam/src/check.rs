//! `weft ipam check`'s decision: the store's reservations against what the pods say they hold.
//! Pure: the caller lists reservations, claims, pods (and their network-status addresses) and
//! the pools of weft-ipam networks, then prints the report and applies the repair.
//!
//! Two findings matter: reservations nothing uses any more (the reconciler's verdict, which a
//! repair frees), and addresses a live pod holds with no reservation behind them — what a store
//! that lost rows (restored from an old backup, emptied and re-created by hand) leaves, and
//! what a new ADD would hand out a second time. Those are reported, never repaired blindly:
//! which attachment should own the address is the operator's call.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use jiff::Timestamp;

use crate::reconcile::{FreeDecision, LivePod, reservations_to_free};
use crate::reservation::IpReservation;

/// An address a pod reports (its network-status annotation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAddress {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The address.
    pub ip: IpAddr,
}

/// What `weft ipam check` found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Reservations checked.
    pub reservations: usize,
    /// Reservations nothing uses (freed by `--repair`).
    pub leaked: Vec<FreeDecision>,
    /// Addresses in a weft-ipam pool that live pods hold without any reservation, with the pods
    /// holding each (more than one: the address was handed out twice).
    pub unreserved: BTreeMap<IpAddr, Vec<String>>,
}

impl CheckReport {
    /// Nothing to report.
    pub fn is_clean(&self) -> bool {
        self.leaked.is_empty() && self.unreserved.is_empty()
    }
}

/// Compare `reservations` with the pods: `pods` for the reconciler's verdict (see
/// [`reservations_to_free`]), `addresses` for what the pods hold; only addresses inside one of
/// `pools` (the ranges of weft-ipam networks) are weft's to reserve.
pub fn check(
    reservations: &[IpReservation],
    pods: &[LivePod],
    addresses: &[PodAddress],
    pools: &[IpNet],
    claims: &HashSet<String>,
    now: Timestamp,
    grace: Duration,
) -> CheckReport {
    let reserved: HashSet<IpAddr> = reservations.iter().filter_map(|r| r.spec.ip).collect();
    let live: HashSet<String> = pods
        .iter()
        .filter(|p| !p.terminating)
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    let mut unreserved: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();
    for a in addresses {
        if live.contains(&a.pod) && !reserved.contains(&a.ip) && pools.iter().any(|p| p.contains(&a.ip)) {
            let holders = unreserved.entry(a.ip).or_default();
            if !holders.contains(&a.pod) {
                holders.push(a.pod.clone());
            }
        }
    }
    CheckReport {
        reservations: reservations.len(),
        leaked: reservations_to_free(reservations, pods, claims, now, grace),
        unreserved,
    }
}

/// The subnets of the weft-ipam ranges in a CNI config (one plugin or a conflist); configs
/// that do not parse give none (they allocate nothing).
pub fn pools_of(config: &serde_json::Value) -> Vec<IpNet> {
    let name = config.get("name").cloned().unwrap_or_default();
    let plugins: Vec<&serde_json::Value> = match config.get("plugins").and_then(|p| p.as_array()) {
        Some(list) => list.iter().collect(),
        None => vec![config],
    };
    plugins
        .into_iter()
        .filter(|p| p.pointer("/ipam/type").and_then(|t| t.as_str()) == Some(crate::config::PLUGIN_TYPE))
        .filter_map(|p| {
            let mut p = p.clone();
            if p.get("name").is_none() {
                p["name"] = name.clone();
            }
            crate::config::parse_network_config(&p).ok()
        })
        .flat_map(|c| c.ranges.iter().map(|r| r.subnet()).collect::<Vec<_>>())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::FreeReason;
    use crate::reservation::IpReservationSpec;

    fn now() -> Timestamp {
        "2026-12-01T10:00:00Z".parse().unwrap()
    }

    fn reservation(ip: &str, pod: &str, container: &str) -> IpReservation {
        let mut r = IpReservation::new(IpReservationSpec {
            network: "blue".into(),
            ip: Some(ip.parse().unwrap()),
            container_id: container.into(),
            ifname: "net1".into(),
            pod_ref: pod.into(),
            ..Default::default()
        });
        r.metadata.name = ip.replace('.', "-");
        r.metadata.creation_timestamp = Some("2026-12-01T09:00:00Z".into());
        r
    }

    fn pod(name: &str, container: &str) -> LivePod {
        LivePod {
            namespace: "ns".into(),
            name: name.into(),
            uid: String::new(),
            container_ids: vec![container.into()],
            terminating: false,
        }
    }

    fn address(pod: &str, ip: &str) -> PodAddress {
        PodAddress {
            pod: pod.into(),
            ip: ip.parse().unwrap(),
        }
    }

    #[test]
    fn reports_leaked_reservations_and_addresses_held_without_one() {
        let reservations = [
            reservation("10.0.0.2", "ns/a", "ca"),
            reservation("10.0.0.3", "ns/gone", "cg"),
        ];
        let pods = [pod("a", "ca"), pod("b", "cb"), pod("c", "cc")];
        let addresses = [
            address("ns/a", "10.0.0.2"),
            // Two pods hold .4, which no reservation protects: the next ADD may hand it out.
            address("ns/b", "10.0.0.4"),
            address("ns/c", "10.0.0.4"),
            // Not a weft-ipam pool (host-local, the cluster network...): not weft's to reserve.
            address("ns/b", "192.168.5.7"),
            // A pod the check does not know as live.
            address("ns/old", "10.0.0.9"),
        ];
        let pools: [IpNet; 1] = ["10.0.0.0/24".parse().unwrap()];
        let report = check(
            &reservations,
            &pods,
            &addresses,
            &pools,
            &HashSet::new(),
            now(),
            Duration::from_secs(60),
        );
        assert_eq!(report.reservations, 2);
        assert_eq!(report.leaked.len(), 1);
        assert_eq!(report.leaked[0].name, "10-0-0-3");
        assert_eq!(report.leaked[0].reason, FreeReason::PodGone);
        assert_eq!(
            report.unreserved,
            BTreeMap::from([(
                "10.0.0.4".parse().unwrap(),
                vec!["ns/b".to_string(), "ns/c".to_string()]
            )])
        );
        assert!(!report.is_clean());
    }

    #[test]
    fn pools_come_from_weft_ipam_ranges_of_single_configs_and_conflists() {
        let single = serde_json::json!({"name": "blue", "type": "bridge",
            "ipam": {"type": "weft-ipam", "range": "10.0.0.0/24", "ipRanges": [{"range": "fd00::/64"}]}});
        assert_eq!(
            pools_of(&single),
            [
                "10.0.0.0/24".parse::<IpNet>().unwrap(),
                "fd00::/64".parse().unwrap()
            ]
        );
        let list = serde_json::json!({"name": "green", "plugins": [
            {"type": "bridge", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.9.0.0/24"}]]}},
            {"type": "macvlan", "ipam": {"type": "weft-ipam", "range": "10.1.0.0/16"}},
            {"type": "tuning"}]});
        assert_eq!(pools_of(&list), ["10.1.0.0/16".parse::<IpNet>().unwrap()]);
        let broken = serde_json::json!({"name": "x", "ipam": {"type": "weft-ipam", "range": "0.0.0.0/0"}});
        assert!(pools_of(&broken).is_empty());
    }

    #[test]
    fn a_consistent_store_is_clean() {
        let reservations = [reservation("10.0.0.2", "ns/a", "ca")];
        let report = check(
            &reservations,
            &[pod("a", "ca")],
            &[address("ns/a", "10.0.0.2")],
            &["10.0.0.0/24".parse().unwrap()],
            &HashSet::new(),
            now(),
            Duration::from_secs(60),
        );
        assert!(report.is_clean(), "{report:?}");
    }
}
