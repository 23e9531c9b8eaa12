//! Allocation over the store, without any global lock: each address is one [`IpReservation`]
//! whose name is derived from (network, address), so `create` either takes the address or fails
//! with AlreadyExists (another allocator won the race) and the allocator moves on.
//!
//! Per allocation, in the common case: one `create` per range and no read at all (see
//! [`allocate`]). Lists happen only when a pool is dense, for CHECK/STATUS/GC, and for a DEL
//! that finds nothing at the attachment's home addresses.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use weft_store::{Api, ListOptions, Resource, Store, StoreError};

use crate::claim::IpamClaim;
use crate::config::IpamConfig;
use crate::error::IpamError;
use crate::range::AddressRange;
use crate::reservation::{IpReservation, IpReservationSpec, NETWORK_LABEL, network_label, reservation_name};

/// How many lost races per range before giving up with [`IpamError::Contention`].
const MAX_ATTEMPTS: usize = 64;
/// After this many lost races in a row the allocator backs off and re-reads the network.
const RELIST_EVERY: usize = 8;
/// Home addresses tried per range before falling back to listing the network.
const HOME_SLOTS: u32 = 4;

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
/// Fast path, O(1) store calls: each attachment (or claim) has a few pseudo-random "home"
/// addresses per range, derived from its identity; the first one that can be created is taken,
/// and a retried ADD finds it again with one read. Only when every home address is held by
/// someone else does the allocator list the network once and pick a free address at random
/// (bounded, jittered retries when it loses races). Requested addresses are reserved exactly or rejected with [`IpamError::AddressTaken`].
/// On failure, reservations created by this call are removed again.
pub async fn allocate(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    holder: &Holder,
    requested: &[IpAddr],
    claim: Option<&str>,
) -> Result<Vec<Lease>, IpamError> {
    let held = allocate_reservations(store, config, holder, requested, claim).await?;
    Ok(held.into_iter().map(|(lease, _)| lease).collect())
}

/// [`allocate`], also returning each lease's reservation as stored (its resourceVersion lets a
/// later DEL release it with one conditional delete: [`crate::held`]).
pub async fn allocate_reservations(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    holder: &Holder,
    requested: &[IpAddr],
    claim: Option<&str>,
) -> Result<Vec<(Lease, IpReservation)>, IpamError> {
    let wanted = requests_per_range(config, requested)?;
    let key = identity_key(holder, claim);
    let mut listed: Option<Vec<IpReservation>> = None;
    let mut created: Vec<IpReservation> = Vec::new();
    let mut leases = Vec::with_capacity(config.ranges.len());
    for (i, range) in config.ranges.iter().enumerate() {
        let outcome = match wanted[i] {
            Some(ip) => reserve_exact(store, config, holder, claim, ip).await,
            None => reserve_dynamic(store, config, i, holder, claim, &key, &mut listed).await,
        };
        match outcome {
            Ok((r, fresh)) => {
                let ip = r.spec.ip.expect("reservations we write carry an ip");
                if fresh {
                    created.push(r.clone());
                }
                debug_assert!(range.contains(ip));
                leases.push((Lease { range: i, ip }, r));
            }
            Err(e) => {
                roll_back(store, &created).await;
                return Err(e);
            }
        }
    }
    Ok(leases)
}

/// What home addresses are derived from: the claim, or the attachment.
fn identity_key(holder: &Holder, claim: Option<&str>) -> String {
    match claim {
        Some(c) => format!("claim:{c}"),
        None => format!("attachment:{}/{}", holder.container_id, holder.ifname),
    }
}

/// The `slot`-th home address of `key` in range `range_index` of `network`.
pub fn home_address(range: &AddressRange, network: &str, key: &str, range_index: usize, slot: u32) -> IpAddr {
    let digest = Sha256::new()
        .chain_update(network.as_bytes())
        .chain_update([0])
        .chain_update(key.as_bytes())
        .chain_update((range_index as u64).to_be_bytes())
        .chain_update(slot.to_be_bytes())
        .finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    let start = range.start_offset(u128::from_be_bytes(bytes));
    let offset = range
        .offsets_from(start)
        .next()
        .expect("a range has at least one usable address");
    range.address_at(offset)
}

async fn reserve_dynamic(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    range_index: usize,
    holder: &Holder,
    claim: Option<&str>,
    key: &str,
    listed: &mut Option<Vec<IpReservation>>,
) -> Result<(IpReservation, bool), IpamError> {
    let range = &config.ranges[range_index];
    let api: Api<IpReservation> = Api::all(store.clone());
    let mut homes: Vec<IpAddr> = Vec::with_capacity(HOME_SLOTS as usize);
    for slot in 0..HOME_SLOTS {
        let ip = home_address(range, &config.network, key, range_index, slot);
        if !homes.contains(&ip) {
            homes.push(ip);
        }
    }
    // No read before the create: that keeps an allocation at one write (reading the homes first
    // halves the embedded store's rate). The price: a retried ADD whose earlier home was freed
    // since takes that one too; DEL reads every home and frees both (see `release`).
    for ip in homes {
        let wanted = new_reservation(config, holder, claim, ip);
        // Two tries: the holder may release it between our create and our read.
        for _ in 0..2 {
            match api.create(&wanted).await {
                Ok(r) => return Ok((r, true)),
                Err(e) if e.is_already_exists() => {}
                Err(e) => return Err(e.into()),
            }
            match api.get(&wanted.metadata.name).await? {
                Some(current) if owns(&current, holder, claim) => return Ok((current, false)),
                Some(_) => break,
                None => continue,
            }
        }
    }
    if listed.is_none() {
        *listed = Some(list_reservations(store, &config.network).await?);
    }
    let existing = listed.as_mut().expect("listed above");
    if let Some(r) = existing
        .iter()
        .find(|r| r.spec.ip.is_some_and(|ip| range.contains(ip)) && owns(r, holder, claim))
    {
        return Ok((r.clone(), false));
    }
    reserve_any(store, config, range, holder, claim, existing).await
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
    // A claim's addresses usually exist already (restart, migration): read first, so that
    // reusing them costs no write. A requested address is usually free: create first.
    let mut read_first = claim.is_some();
    for _ in 0..MAX_ATTEMPTS {
        if !read_first {
            match api.create(&wanted).await {
                Ok(r) => return Ok((r, true)),
                Err(e) if e.is_already_exists() => {}
                Err(e) => return Err(e.into()),
            }
        }
        read_first = false;
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

/// Reserve any free address of `range`, chosen at random (see [`AddressRange::choose_free`]).
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
        let ip = range
            .choose_free(&taken, rand::random::<u128>())
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

/// Free every unclaimed address `(container_id, ifname)` holds on the network, and claimed
/// ones whose claim no longer exists. Returns the freed addresses. Succeeds when nothing is held.
///
/// Knows nothing of the addresses: looks them up (see [`release_lookup`]). A DEL that knows
/// them (its `prevResult`, the agent's record of the ADD) uses [`crate::held::release_known`].
pub async fn release(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    container_id: &str,
    ifname: &str,
) -> Result<Vec<IpAddr>, IpamError> {
    let mut freed = Vec::new();
    let pending = vec![true; config.ranges.len()];
    release_lookup(store, config, container_id, ifname, &pending, &mut freed).await?;
    Ok(freed)
}

/// The release of the ranges marked in `pending` when the addresses are not known: the
/// attachment's home addresses first (one read each); only when some pending range has none of
/// them, one list of the network. Freed addresses are added to `freed`.
pub(crate) async fn release_lookup(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    container_id: &str,
    ifname: &str,
    pending: &[bool],
    freed: &mut Vec<IpAddr>,
) -> Result<(), IpamError> {
    let holder = Holder {
        container_id: container_id.into(),
        ifname: ifname.into(),
        ..Default::default()
    };
    let key = identity_key(&holder, None);
    let api: Api<IpReservation> = Api::all(store.clone());
    let mut every_range_found = true;
    for (i, range) in config.ranges.iter().enumerate() {
        if !pending[i] {
            continue;
        }
        let mut found = false;
        for slot in 0..HOME_SLOTS {
            let ip = home_address(range, &config.network, &key, i, slot);
            let name = reservation_name(&config.network, ip);
            // Every slot is read, not just up to the first hit: a retried ADD that found an
            // earlier slot freed in the meantime holds two, and DEL frees both.
            if let Some(r) = api.get(&name).await?
                && r.spec.claim.is_none()
                && r.held_by(container_id, ifname)
            {
                if delete_if_unchanged(store, &r).await? && !freed.contains(&ip) {
                    freed.push(ip);
                }
                found = true;
            }
        }
        every_range_found &= found;
    }
    if every_range_found {
        return Ok(());
    }
    for r in list_reservations(store, &config.network).await? {
        if !r.held_by(container_id, ifname) || r.spec.ip.is_some_and(|ip| freed.contains(&ip)) {
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
    Ok(())
}

/// Whether the IPAMClaim `namespace/name` exists.
async fn claim_exists(store: &Arc<dyn Store>, claim_ref: &str) -> Result<bool, IpamError> {
    let (namespace, name) = weft_netconf::split_namespaced(claim_ref, "");
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
