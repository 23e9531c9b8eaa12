//! `weft ipam check [--repair]`: list what the comparison needs, print
//! `weft_ipam::check`'s report, and free the leaked reservations when asked.

use std::collections::HashSet;
use std::path::Path;

use anyhow::Context;
use weft_ipam::check::{PodAddress, check, pools_of};
use weft_ipam::{IpReservation, IpamClaim};
use weft_netconf::NetworkAttachmentDefinition;
use weft_store::{Api, ListOptions};

use crate::cluster;

/// Run the check; exit code 0 when the store is clean (or was repaired and nothing else was
/// found), 1 otherwise.
pub async fn run(state: &Path, repair: bool) -> anyhow::Result<i32> {
    // Opening the embedded store runs SQLite's quick_check: a damaged store fails here.
    let store = cluster::open_running_store(state).await?;
    if cluster::is_kubernetes() {
        println!("store: the Kubernetes API server (no file to check)");
    } else {
        println!(
            "store: {} passed its integrity check",
            state.join(cluster::STORE_FILE).display()
        );
    }
    let all = ListOptions::default();
    // Reservations before pods, as the reconciler lists them (a new ADD never looks leaked).
    let reservations = Api::<IpReservation>::all(store.clone()).list(&all).await?;
    let claims: HashSet<String> = Api::<IpamClaim>::all(store.clone())
        .list(&all)
        .await?
        .iter()
        .map(IpamClaim::reference)
        .collect();
    let pods = Api::<crate::kinds::Pod>::all(store.clone()).list(&all).await?;
    let nads = Api::<NetworkAttachmentDefinition>::all(store.clone())
        .list(&all)
        .await?;
    let pools: Vec<_> = nads
        .iter()
        .filter_map(|n| serde_json::from_str(&n.spec.config).ok())
        .flat_map(|config| pools_of(&config))
        .collect();
    let addresses: Vec<PodAddress> = pods
        .iter()
        .flat_map(|p| {
            let pod = format!(
                "{}/{}",
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name
            );
            let status = p
                .metadata
                .annotation(weft_netconf::NETWORK_STATUS_ANNOTATION)
                .and_then(|a| weft_netconf::parse_network_status_annotation(a).ok())
                .unwrap_or_default();
            status
                .into_iter()
                .flat_map(|s| s.ips)
                .filter_map(|ip| ip.parse().ok())
                .map(move |ip| PodAddress { pod: pod.clone(), ip })
                .collect::<Vec<_>>()
        })
        .collect();
    let report = check(
        &reservations,
        &crate::claims::live_pods(&pods),
        &addresses,
        &pools,
        &claims,
        jiff::Timestamp::now(),
        crate::claims::RECONCILE_GRACE,
    );
    println!(
        "reservations: {} checked against {} pods and {} weft-ipam pools",
        report.reservations,
        pods.len(),
        pools.len()
    );
    for leaked in &report.leaked {
        let ip = leaked.ip.map(|ip| ip.to_string()).unwrap_or_default();
        let action = if repair { "freeing" } else { "--repair would free" };
        println!("leaked: {} ({ip}): {:?}; {action} it", leaked.name, leaked.reason);
    }
    for (ip, holders) in &report.unreserved {
        println!(
            "unreserved: {ip} is held by {} with no reservation: a new ADD may hand it out again; \
             not repaired (re-run the pods' ADD, or reserve it by hand)",
            holders.join(", ")
        );
    }
    if repair && !report.leaked.is_empty() {
        let freed = crate::claims::reconcile_reservations(&store)
            .await
            .context("freeing leaked reservations")?;
        println!("repair: freed {freed} leaked reservations");
        return Ok(if report.unreserved.is_empty() { 0 } else { 1 });
    }
    if report.is_clean() {
        println!("ok: nothing to repair");
        return Ok(0);
    }
    Ok(1)
}
