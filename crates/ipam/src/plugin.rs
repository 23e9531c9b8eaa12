//! The `weft-ipam` CNI plugin as a library: one entry point per invocation, over any store.

use std::collections::HashSet;
use std::sync::Arc;

use weft_cni::plugin::{LEGACY_ATTACHMENTS_KEY, VALID_ATTACHMENTS_KEY};
use weft_cni::{CniCommand, CniError, CniResult, IpConfig, codes};
use weft_store::Store;

use crate::allocator::{self, Lease};
use crate::config::{IpamConfig, parse_network_config};
use crate::error::IpamError;
use crate::held::{HeldCache, Known, merge_known, release_known};
use crate::persistent::{allocate_for_claim, lease_net, resolve_claim};
use crate::request::IpamRequest;

/// Handle one IPAM invocation: ADD returns the result; DEL, CHECK, STATUS and GC return `None`
/// on success. VERSION is answered by the CNI runtime layer and returns `None` here.
pub async fn handle(request: IpamRequest, store: Arc<dyn Store>) -> Result<Option<CniResult>, CniError> {
    handle_held(request, store, None).await
}

/// [`handle`] in a long-lived process that remembers what its ADDs reserved (`held`), so that
/// the attachment's DEL releases with one conditional delete per address ([`crate::held`]).
pub async fn handle_held(
    request: IpamRequest,
    store: Arc<dyn Store>,
    held: Option<&HeldCache>,
) -> Result<Option<CniResult>, CniError> {
    let version = request.version.to_string();
    let outcome = match request.command() {
        CniCommand::Version => Ok(None),
        CniCommand::Status => status(&request, &store).await.map(|()| None),
        command => run(command, &request, &store, held).await.map_err(CniError::from),
    };
    outcome.map_err(|e| {
        if e.cni_version.is_empty() {
            e.with_version(version)
        } else {
            e
        }
    })
}

/// A DEL's release alone, with its typed error (a node agent journals one that could not
/// reach the store: [`crate::journal`]).
pub async fn release(request: &IpamRequest, store: &Arc<dyn Store>) -> Result<(), IpamError> {
    release_held(request, store, None).await
}

/// [`release`] using what `held` remembers of the attachment's ADDs.
pub async fn release_held(
    request: &IpamRequest,
    store: &Arc<dyn Store>,
    held: Option<&HeldCache>,
) -> Result<(), IpamError> {
    let config = parse_network_config(&request.config_json())?;
    release_with(request, &config, store, held).await
}

/// A DEL frees the addresses it knows (the remembered reservations, `prevResult`) without a
/// search; it looks up only ranges it knows nothing of.
async fn release_with(
    request: &IpamRequest,
    config: &IpamConfig,
    store: &Arc<dyn Store>,
    held: Option<&HeldCache>,
) -> Result<(), IpamError> {
    let env = &request.env;
    let remembered = held
        .map(|h| h.recall(&config.network, &env.container_id, &env.ifname))
        .unwrap_or_default();
    let known = merge_known(remembered, prev_result_ips(request));
    release_known(store, config, &env.container_id, &env.ifname, &known).await?;
    if let Some(h) = held {
        h.forget(&config.network, &env.container_id, &env.ifname);
    }
    Ok(())
}

/// The addresses of the DEL's `prevResult` (none when it has none or it does not decode: the
/// DEL then looks its addresses up).
fn prev_result_ips(request: &IpamRequest) -> Vec<std::net::IpAddr> {
    request
        .config
        .prev_result()
        .and_then(|v| weft_cni::result_from_value(v.clone()).ok())
        .map(|r| r.ips.iter().map(|ip| ip.address.addr()).collect())
        .unwrap_or_default()
}

async fn run(
    command: CniCommand,
    request: &IpamRequest,
    store: &Arc<dyn Store>,
    held: Option<&HeldCache>,
) -> Result<Option<CniResult>, IpamError> {
    let config = parse_network_config(&request.config_json())?;
    match command {
        CniCommand::Add => add(request, &config, store, held).await.map(Some),
        CniCommand::Del => release_with(request, &config, store, held).await.map(|()| None),
        CniCommand::Check => {
            let claim = resolve_claim(store, &config, request.pod(), &request.env.ifname).await?;
            let claim_ref = claim.as_ref().map(|c| c.reference());
            allocator::check(store, &config, &request.holder(), claim_ref.as_deref()).await?;
            Ok(None)
        }
        CniCommand::Gc => {
            let valid = valid_attachments(request)?;
            allocator::gc(store, &config.network, &request.node, &valid).await?;
            Ok(None)
        }
        CniCommand::Status | CniCommand::Version => Ok(None),
    }
}

async fn add(
    request: &IpamRequest,
    config: &IpamConfig,
    store: &Arc<dyn Store>,
    held: Option<&HeldCache>,
) -> Result<CniResult, IpamError> {
    let holder = request.holder();
    let requested = request.requested_ips()?;
    let claim = resolve_claim(store, config, request.pod(), &request.env.ifname).await?;
    let leases = match &claim {
        Some(claim) => {
            let pod_name = request.pod().map(|(_, n)| n).unwrap_or_default();
            allocate_for_claim(store, config, &holder, &requested, claim, pod_name).await?
        }
        None => {
            let reserved = allocator::allocate_reservations(store, config, &holder, &requested, None).await?;
            if let Some(h) = held {
                let known = reserved
                    .iter()
                    .filter_map(|(_, r)| Known::from_reservation(r))
                    .collect();
                h.remember(&config.network, &holder.container_id, &holder.ifname, known);
            }
            reserved.into_iter().map(|(lease, _)| lease).collect()
        }
    };
    Ok(build_result(config, &leases, &request.version.to_string()))
}

/// The ADD result: one address per range (with the range's gateway), then the static
/// `addresses`, the routes and DNS of the config.
pub fn build_result(config: &IpamConfig, leases: &[Lease], cni_version: &str) -> CniResult {
    let mut ips: Vec<IpConfig> = leases
        .iter()
        .map(|lease| {
            let range = &config.ranges[lease.range];
            IpConfig {
                address: lease_net(config, lease),
                gateway: range.gateway().filter(|gw| gw.is_ipv4() == lease.ip.is_ipv4()),
                interface: None,
            }
        })
        .collect();
    ips.extend(config.addresses.iter().cloned());
    CniResult {
        cni_version: cni_version.into(),
        interfaces: Vec::new(),
        ips,
        routes: config.routes.clone(),
        dns: config.dns.clone(),
    }
}

fn valid_attachments(request: &IpamRequest) -> Result<HashSet<(String, String)>, IpamError> {
    let object = request.config.as_object();
    // A missing list is refused rather than read as "nothing is valid": on a cluster-wide
    // pool that reading would free every address this node holds.
    let Some(list) = object
        .get(VALID_ATTACHMENTS_KEY)
        .or_else(|| object.get(LEGACY_ATTACHMENTS_KEY))
    else {
        return Err(IpamError::Request(format!(
            "GC: {VALID_ATTACHMENTS_KEY} is missing"
        )));
    };
    let items: Vec<weft_cni::plugin::GcAttachment> = serde_json::from_value(list.clone())
        .map_err(|e| IpamError::Request(format!("{VALID_ATTACHMENTS_KEY}: {e}")))?;
    Ok(items.into_iter().map(|a| (a.container_id, a.ifname)).collect())
}

/// STATUS: code 50 when the store cannot be read or a range has no free address.
async fn status(request: &IpamRequest, store: &Arc<dyn Store>) -> Result<(), CniError> {
    let config = parse_network_config(&request.config_json()).map_err(CniError::from)?;
    let unavailable = |msg: String| CniError::new(codes::PLUGIN_NOT_AVAILABLE, msg);
    let usage = allocator::usage(store, &config)
        .await
        .map_err(|e| unavailable(format!("cannot read the IPAM store: {e}")))?;
    for (range, (usable, held)) in config.ranges.iter().zip(usage) {
        if held >= usable {
            return Err(unavailable(format!(
                "range {} of network {} is exhausted ({held} of {usable} addresses held)",
                range.subnet(),
                config.network
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
