//! Allocation over the store, without any global lock: each address is one [`IpReservation`]
//! whose name is derived from (network, address), so `create` either takes the address or fails
//! with AlreadyExists (another allocator won the race) and the allocator moves on.
//!
//! Per allocation: one list of the network's reservations, then one `create` per range (more
//! only when racing). Allocators start at a random offset, so concurrent ones rarely collide.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use weft_store::{Api, ListOptions, Resource, Store, StoreError};

use crate::claim::IpamClaim;
use crate::config::IpamConfig;
use crate::error::IpamError;
use crate::range::AddressRange;
use crate::reservation::{IpReservation, IpReservationSpec, NETWORK_LABEL, network_label};

/// How many lost races per range before giving up with [`IpamError::Contention`].
const MAX_ATTEMPTS: usize = 64;
/// After this many lost races in a row the allocator backs off and re-reads the network.
const RELIST_EVERY: usize = 8;

/// Who an ADD allocates for: the attachment identity plus what is recorded for reconcilers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holder {
    /// CNI_CONTAINERID.
    pub container_id: String,
    /// CNI_IFNAME.
    pub ifname: String,
    /// `namespace/name` of the pod, when known.
    pub pod_ref: String,
    /// Pod uid, when known.
    pub pod_uid: String,
    /// Node of the runtime, when known.
    pub node: String,
}

/// One address handed out, with the range it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Lease {
    /// Index of the range in the config.
    pub range: usize,
    /// The address.
    pub ip: IpAddr,
}

/// Every reservation of `network` (one list).
pub async fn list_reservations(
    store: &Arc<dyn Store>,
    network: &str,
) -> Result<Vec<IpReservation>, StoreError> {
    let opts = ListOptions::default().label(NETWORK_LABEL, &network_label(network));
    let list = store.list(&IpReservation::resource_type(), None, &opts).await?;
    let mut out = Vec::with_capacity(list.items.len());
    for obj in &list.items {
        let r: IpReservation = obj.to_typed()?;
        if r.spec.network == network {
            out.push(r);
        }
    }
    Ok(out)
}

/// Whether `r` belongs to this ADD: the claim's when a claim is given, else the attachment's.
fn owns(r: &IpReservation, holder: &Holder, claim: Option<&str>) -> bool {
    match claim {
        Some(c) => r.spec.claim.as_deref() == Some(c),
        None => r.spec.claim.is_none() && r.held_by(&holder.container_id, &holder.ifname),
    }
}

fn describe_holder(r: &IpReservation) -> String {
    match &r.spec.claim {
        Some(c) => format!("IPAMClaim {c}"),
        None if !r.spec.pod_ref.is_empty() => {
            format!(
                "pod {} (container {}, {})",
                r.spec.pod_ref, r.spec.container_id, r.spec.ifname
            )
        }
        None => format!("container {} ({})", r.spec.container_id, r.spec.ifname),
    }
}

/// Map requested addresses onto ranges (at most one per range).
fn requests_per_range(config: &IpamConfig, requested: &[IpAddr]) -> Result<Vec<Option<IpAddr>>, IpamError> {
    let mut wanted = vec![None; config.ranges.len()];
    for ip in requested {
        let i = config
            .ranges
            .iter()
            .position(|r| r.contains(*ip))
            .ok_or_else(|| IpamError::RequestedOutsidePool {
                ip: *ip,
                network: config.network.clone(),
            })?;
        if let Some(other) = wanted[i] {
            return Err(IpamError::Request(format!(
                "requested IPs {other} and {ip} both fall in range {} of network {}; one address per range",
                config.ranges[i].subnet(),
                config.network
            )));
        }
        wanted[i] = Some(*ip);
    }
    Ok(wanted)
}

/// Hand out one address per range for `holder` (or for `claim`, when given).
///
/// Idempotent: addresses the attachment (or claim) already holds are returned again. Requested
/// addresses are reserved from the pool or rejected with [`IpamError::AddressTaken`]. On failure,
/// reservations created by this call are removed again.
pub async fn allocate(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    holder: &Holder,
    requested: &[IpAddr],
    claim: Option<&str>,
) -> Result<Vec<Lease>, IpamError> {
    let wanted = requests_per_range(config, requested)?;
    let mut existing = list_reservations(store, &config.network).await?;
    let mut created: Vec<IpReservation> = Vec::new();
    let mut leases = Vec::with_capacity(config.ranges.len());
    for (i, range) in config.ranges.iter().enumerate() {
        let held = existing.iter().find(|r| {
            r.spec
                .ip
                .is_some_and(|ip| range.contains(ip) && wanted[i].is_none_or(|w| w == ip))
                && owns(r, holder, claim)
        });
        if let Some(ip) = held.and_then(|r| r.spec.ip) {
            leases.push(Lease { range: i, ip });
            continue;
        }
        let outcome = match wanted[i] {
            Some(ip) => reserve_exact(store, config, holder, claim, ip).await,
            None => reserve_any(store, config, range, holder, claim, &mut existing).await,
        };
        match outcome {
            Ok((r, fresh)) => {
                let ip = r.spec.ip.expect("reservations we write carry an ip");
                if fresh {
                    created.push(r);
                }
                leases.push(Lease { range: i, ip });
            }
            Err(e) => {
                roll_back(store, &created).await;
                return Err(e);
            }
        }
    }
    Ok(leases)
}

fn new_reservation(config: &IpamConfig, holder: &Holder, claim: Option<&str>, ip: IpAddr) -> IpReservation {
    IpReservation::new(IpReservationSpec {
        network: config.network.clone(),
        ip: Some(ip),
        container_id: holder.container_id.clone(),
        ifname: holder.ifname.clone(),
        pod_ref: holder.pod_ref.clone(),
        pod_uid: holder.pod_uid.clone(),
        node: holder.node.clone(),
        claim: claim.map(String::from),
    })
}

/// Reserve exactly `ip`; an existing reservation is accepted only when it is ours. Returns the
/// reservation and whether this call created it.
async fn reserve_exact(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    holder: &Holder,
    claim: Option<&str>,
    ip: IpAddr,
) -> Result<(IpReservation, bool), IpamError> {
    let api: Api<IpReservation> = Api::all(store.clone());
    let wanted = new_reservation(config, holder, claim, ip);
    for _ in 0..MAX_ATTEMPTS {
        match api.create(&wanted).await {
            Ok(r) => return Ok((r, true)),
            Err(e) if e.is_already_exists() => {}
            Err(e) => return Err(e.into()),
        }
        // Held already: ours (a retried ADD, or the claim's second owner) or someone else's.
        // It may vanish between the create and this get; then simply try the create again.
        if let Some(current) = api.get(&wanted.metadata.name).await? {
            if owns(&current, holder, claim) {
                return Ok((current, false));
            }
            return Err(IpamError::AddressTaken {
                ip,
                network: config.network.clone(),
                holder: describe_holder(&current),
            });
        }
    }
    Err(IpamError::Contention {
        network: config.network.clone(),
        attempts: MAX_ATTEMPTS,
    })
}

/// Reserve any free address of `range`, starting from a random offset.
async fn reserve_any(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    range: &AddressRange,
    holder: &Holder,
    claim: Option<&str>,
    existing: &mut Vec<IpReservation>,
) -> Result<(IpReservation, bool), IpamError> {
    let api: Api<IpReservation> = Api::all(store.clone());
    let mut taken: HashSet<IpAddr> = existing.iter().filter_map(|r| r.spec.ip).collect();
    for attempt in 1..=MAX_ATTEMPTS {
        let start = range.start_offset(rand::random::<u128>());
        let ip = range
            .pick_free(&taken, start)
            .ok_or_else(|| IpamError::Exhausted {
                network: config.network.clone(),
                range: range.subnet(),
            })?;
        match api.create(&new_reservation(config, holder, claim, ip)).await {
            Ok(r) => return Ok((r, true)),
            Err(e) if e.is_already_exists() => {
                taken.insert(ip);
            }
            Err(e) => return Err(e.into()),
        }
        if attempt % RELIST_EVERY == 0 {
            let jitter = rand::random::<u64>() % (2 * attempt as u64);
            tokio::time::sleep(Duration::from_millis(1 + jitter)).await;
            *existing = list_reservations(store, &config.network).await?;
            taken.extend(existing.iter().filter_map(|r| r.spec.ip));
        }
    }
    Err(IpamError::Contention {
        network: config.network.clone(),
        attempts: MAX_ATTEMPTS,
    })
}

/// Undo the reservations an ADD created before it failed (best effort; GC and the reconciler
/// catch what this misses).
async fn roll_back(store: &Arc<dyn Store>, created: &[IpReservation]) {
    for r in created {
        if let Err(e) = delete_if_unchanged(store, r).await {
            tracing::warn!(reservation = %r.metadata.name, error = %e, "rolling back a reservation failed");
        }
    }
}

/// Delete `r` only if the stored object is still the one we read (resourceVersion precondition),
/// so that an address someone else took in the meantime is never freed.
pub async fn delete_if_unchanged(store: &Arc<dyn Store>, r: &IpReservation) -> Result<bool, StoreError> {
    let ty = IpReservation::resource_type();
    match store
        .delete(
            &ty,
            None,
            &r.metadata.name,
            r.metadata.resource_version.as_deref(),
        )
        .await
    {
        Ok(gone) => Ok(gone.is_some()),
        Err(e) if e.is_conflict() || e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Free every unclaimed address `(container_id, ifname)` holds on `network`, and claimed ones
/// whose claim no longer exists. Returns the freed addresses. Succeeds when nothing is held.
pub async fn release(
    store: &Arc<dyn Store>,
    network: &str,
    container_id: &str,
    ifname: &str,
) -> Result<Vec<IpAddr>, IpamError> {
    let mut freed = Vec::new();
    for r in list_reservations(store, network).await? {
        if !r.held_by(container_id, ifname) {
            continue;
        }
        if let Some(claim) = &r.spec.claim
            && claim_exists(store, claim).await?
        {
            continue;
        }
        if delete_if_unchanged(store, &r).await?
            && let Some(ip) = r.spec.ip
        {
            freed.push(ip);
        }
    }
    Ok(freed)
}

/// Whether the IPAMClaim `namespace/name` exists.
async fn claim_exists(store: &Arc<dyn Store>, claim_ref: &str) -> Result<bool, IpamError> {
    let (namespace, name) = claim_ref.split_once('/').unwrap_or(("", claim_ref));
    let api: Api<IpamClaim> = Api::namespaced(store.clone(), namespace);
    Ok(api.get(name).await?.is_some())
}

/// Free every reservation owned by the claim `namespace/name` (the claim was deleted). Returns
/// the freed addresses. Called by the controller when it sees an IPAMClaim go away.
pub async fn release_claim(store: &Arc<dyn Store>, claim_ref: &str) -> Result<Vec<IpAddr>, IpamError> {
    let api: Api<IpReservation> = Api::all(store.clone());
    let mut freed = Vec::new();
    for r in api.list(&ListOptions::default()).await? {
        if r.spec.claim.as_deref() == Some(claim_ref)
            && delete_if_unchanged(store, &r).await?
            && let Some(ip) = r.spec.ip
        {
            freed.push(ip);
        }
    }
    Ok(freed)
}

/// CHECK: every range has an address held by the attachment (or by `claim`).
pub async fn check(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    holder: &Holder,
    claim: Option<&str>,
) -> Result<Vec<Lease>, IpamError> {
    let existing = list_reservations(store, &config.network).await?;
    let mut leases = Vec::with_capacity(config.ranges.len());
    for (i, range) in config.ranges.iter().enumerate() {
        let ip = existing
            .iter()
            .filter(|r| owns(r, holder, claim))
            .find_map(|r| r.spec.ip.filter(|ip| range.contains(*ip)))
            .ok_or_else(|| {
                IpamError::Object(format!(
                    "no address of range {} on network {} is reserved for container {} ({})",
                    range.subnet(),
                    config.network,
                    holder.container_id,
                    holder.ifname
                ))
            })?;
        leases.push(Lease { range: i, ip });
    }
    Ok(leases)
}

/// CNI GC: free every unclaimed reservation of `network` made on `node` whose
/// `(containerID, ifname)` is not in `valid`. An empty `valid` frees all of them.
/// Reservations of other nodes are never touched: a runtime only knows its own attachments.
pub async fn gc(
    store: &Arc<dyn Store>,
    network: &str,
    node: &str,
    valid: &HashSet<(String, String)>,
) -> Result<Vec<IpAddr>, IpamError> {
    let mut freed = Vec::new();
    for r in list_reservations(store, network).await? {
        let attachment = (r.spec.container_id.clone(), r.spec.ifname.clone());
        if r.spec.claim.is_some() || r.spec.node != node || valid.contains(&attachment) {
            continue;
        }
        if delete_if_unchanged(store, &r).await?
            && let Some(ip) = r.spec.ip
        {
            freed.push(ip);
        }
    }
    Ok(freed)
}

/// How full each range is: `(usable, held)` per range, in config order.
pub async fn usage(store: &Arc<dyn Store>, config: &IpamConfig) -> Result<Vec<(u128, u128)>, IpamError> {
    let existing = list_reservations(store, &config.network).await?;
    Ok(config
        .ranges
        .iter()
        .map(|range| {
            let held = existing
                .iter()
                .filter(|r| r.spec.ip.is_some_and(|ip| range.contains(ip)))
                .count() as u128;
            (range.usable_count(), held)
        })
        .collect())
}

#[cfg(test)]
mod tests;
