//! DEL without a search: release the addresses the DEL already knows.
//!
//! A DEL usually knows what it frees: the runtime hands it the ADD's result (`prevResult`),
//! and a long-lived process that served the ADD (the node agent) remembers the reservations it
//! made ([`HeldCache`]), resourceVersion included. Then a release is one conditional DELETE
//! per address (`preconditions.resourceVersion` = the one the ADD stored), with no read: on
//! Kubernetes one request instead of the four home-slot GETs of [`allocator::release`].
//!
//! Safety: a stale DEL never frees someone else's address. A remembered resourceVersion is the
//! reservation this attachment created; if the address was freed and taken again since, the
//! stored object has another resourceVersion and the DELETE fails with 409. Then, as for a
//! `prevResult` address (no resourceVersion), the reservation is read and deleted only when it
//! is this attachment's (unclaimed, same containerID and ifname), again with a resourceVersion
//! precondition. A range with no known address, or whose known address is not (or no longer)
//! this attachment's, falls back to the lookup of [`allocator::release`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use weft_store::{Api, Resource, Store};

use crate::allocator::{self, delete_if_unchanged};
use crate::config::IpamConfig;
use crate::error::IpamError;
use crate::reservation::{IpReservation, reservation_name};

/// An address a DEL knows the attachment holds, with the reservation's resourceVersion when
/// known (remembered from the ADD; absent for an address read from `prevResult`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Known {
    /// The address.
    pub ip: IpAddr,
    /// resourceVersion of the reservation as the ADD stored it.
    pub resource_version: Option<String>,
}

impl Known {
    /// What an ADD's reservation tells a later DEL.
    pub fn from_reservation(r: &IpReservation) -> Option<Self> {
        Some(Self {
            ip: r.spec.ip?,
            resource_version: r.metadata.resource_version.clone(),
        })
    }
}

/// Most attachments remembered by a [`HeldCache`]; beyond it an arbitrary entry is forgotten
/// (its DEL then looks the address up: slower, still correct).
pub const HELD_CACHE_CAPACITY: usize = 65_536;

/// `(network, containerID, ifname)`.
type AttachmentKey = (String, String, String);

/// The unclaimed reservations this process's ADDs made or found, per attachment, until the
/// attachment's DEL releases them. In memory only: after a restart DELs fall back to
/// `prevResult` or the lookup.
#[derive(Debug, Default)]
pub struct HeldCache {
    entries: Mutex<HashMap<AttachmentKey, Vec<Known>>>,
}

impl HeldCache {
    /// An empty cache, shared.
    pub fn shared() -> Arc<Self> {
        Arc::default()
    }

    fn key(network: &str, container_id: &str, ifname: &str) -> AttachmentKey {
        (network.into(), container_id.into(), ifname.into())
    }

    /// Remember what an ADD of the attachment got (added to what earlier ADDs got: a retried
    /// ADD may hold a second address, and its DEL frees both).
    pub fn remember(&self, network: &str, container_id: &str, ifname: &str, held: Vec<Known>) {
        let mut entries = self.entries.lock().expect("held cache lock");
        let key = Self::key(network, container_id, ifname);
        if !entries.contains_key(&key)
            && entries.len() >= HELD_CACHE_CAPACITY
            && let Some(victim) = entries.keys().next().cloned()
        {
            entries.remove(&victim);
        }
        let known = entries.entry(key).or_default();
        for k in held {
            match known.iter_mut().find(|old| old.ip == k.ip) {
                Some(old) => *old = k,
                None => known.push(k),
            }
        }
    }

    /// What the attachment's ADDs got, if remembered.
    pub fn recall(&self, network: &str, container_id: &str, ifname: &str) -> Vec<Known> {
        let entries = self.entries.lock().expect("held cache lock");
        entries
            .get(&Self::key(network, container_id, ifname))
            .cloned()
            .unwrap_or_default()
    }

    /// Forget the attachment (its DEL released everything).
    pub fn forget(&self, network: &str, container_id: &str, ifname: &str) {
        let mut entries = self.entries.lock().expect("held cache lock");
        entries.remove(&Self::key(network, container_id, ifname));
    }

    /// How many attachments are remembered.
    pub fn len(&self) -> usize {
        self.entries.lock().expect("held cache lock").len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Merge what the cache remembers with the addresses of `prevResult` (the cache's entry wins
/// for an address both name: it carries the resourceVersion).
pub fn merge_known(remembered: Vec<Known>, prev_result: impl IntoIterator<Item = IpAddr>) -> Vec<Known> {
    let mut out = remembered;
    for ip in prev_result {
        if !out.iter().any(|k| k.ip == ip) {
            out.push(Known {
                ip,
                resource_version: None,
            });
        }
    }
    out
}

/// Free what `(container_id, ifname)` holds on the network, given the addresses it is known to
/// hold (see the module doc). Returns the freed addresses; succeeds when nothing is held.
pub async fn release_known(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    container_id: &str,
    ifname: &str,
    known: &[Known],
) -> Result<Vec<IpAddr>, IpamError> {
    let mut freed = Vec::new();
    let mut pending = vec![true; config.ranges.len()];
    for k in known {
        let Some(range) = config.ranges.iter().position(|r| r.contains(k.ip)) else {
            // Not from this network's ranges (a static address, another plugin's): not ours.
            continue;
        };
        if release_one(store, config, container_id, ifname, k).await? {
            if !freed.contains(&k.ip) {
                freed.push(k.ip);
            }
            pending[range] = false;
        }
    }
    if pending.iter().any(|p| *p) {
        allocator::release_lookup(store, config, container_id, ifname, &pending, &mut freed).await?;
    }
    Ok(freed)
}

/// Delete the reservation of `k.ip` if it is the attachment's: one conditional DELETE when the
/// resourceVersion is known and still current, else a read and a conditional DELETE. Whether
/// it was freed.
async fn release_one(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    container_id: &str,
    ifname: &str,
    k: &Known,
) -> Result<bool, IpamError> {
    let ty = IpReservation::resource_type();
    let name = reservation_name(&config.network, k.ip);
    if let Some(rv) = &k.resource_version {
        match store.delete(&ty, None, &name, Some(rv)).await {
            Ok(Some(_)) => return Ok(true),
            Ok(None) => return Ok(false),
            Err(e) if e.is_not_found() => return Ok(false),
            // Changed since the ADD (updated, or freed and taken by someone else): read it.
            Err(e) if e.is_conflict() => {}
            Err(e) => return Err(e.into()),
        }
    }
    let api: Api<IpReservation> = Api::all(store.clone());
    match api.get(&name).await? {
        Some(r) if r.spec.claim.is_none() && r.held_by(container_id, ifname) => {
            Ok(delete_if_unchanged(store, &r).await?)
        }
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests;
