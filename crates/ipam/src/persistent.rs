//! Persistent IPs: find the IPAMClaim an attachment belongs to, allocate for the claim, and
//! record the outcome in the claim's status as OVN-Kubernetes does.
//!
//! Meta-plugins do not forward `ipam-claim-reference`, so the plugin reads the pod's networks
//! annotation from the store and picks the element whose `interface` is CNI_IFNAME.

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use weft_netconf::{NETWORKS_ANNOTATION, parse_networks_annotation};
use weft_store::{Api, ListOptions, ResourceType, Store, now_rfc3339};

use crate::allocator::{self, Holder, Lease};
use crate::claim::{IpamClaim, OwnerPod, ips_allocated, reasons, set_condition};
use crate::config::IpamConfig;
use crate::error::IpamError;
use crate::request::parse_ip_or_cidr;
use crate::vm_claim::{CLAIM_VM_LABEL, POD_VM_LABEL, match_vm_claim};

/// The core/v1 Pod type (read as a dynamic object: only its annotations matter here).
pub fn pod_type() -> ResourceType {
    ResourceType::new("v1", "Pod", "pods", true)
}

/// The claim of the pod's attachment `ifname`, when the network allows persistent IPs: the one
/// the pod's networks annotation element for `ifname` names in `ipam-claim-reference`, or, for
/// a KubeVirt launcher pod without one (label `vm.kubevirt.io/name`), the VM's claim for this
/// interface ([`match_vm_claim`]; none yet is a retriable error).
pub async fn resolve_claim(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    pod: Option<(&str, &str)>,
    ifname: &str,
) -> Result<Option<IpamClaim>, IpamError> {
    let (true, Some((pod_ns, pod_name))) = (config.allow_persistent_ips, pod) else {
        return Ok(None);
    };
    let pod_obj = store
        .get(&pod_type(), Some(pod_ns), pod_name)
        .await?
        .ok_or_else(|| {
            IpamError::Object(format!(
                "pod {pod_ns}/{pod_name} not found in the store (network {} allows persistent IPs, so its IPAMClaim must be looked up)",
                config.config_name
            ))
        })?;
    let Some(annotation) = pod_obj.metadata.annotation(NETWORKS_ANNOTATION) else {
        return Ok(None);
    };
    let elements = parse_networks_annotation(annotation, pod_ns).map_err(|e| {
        IpamError::Object(format!(
            "pod {pod_ns}/{pod_name}: annotation {NETWORKS_ANNOTATION}: {e}"
        ))
    })?;
    let Some(element) = elements
        .iter()
        .find(|e| e.interface == ifname || (e.interface.is_empty() && e.interface_request == ifname))
    else {
        return Ok(None);
    };
    if element.ipam_claim_reference.is_empty() {
        // A launcher pod as virt-controller renders it (no webhook wrote the reference): the
        // claim is the VM's for this interface, found among the VM's claims.
        let Some(vm) = pod_obj.metadata.label(POD_VM_LABEL) else {
            return Ok(None);
        };
        let claims = Api::<IpamClaim>::namespaced(store.clone(), pod_ns)
            .list(&ListOptions::default().label(CLAIM_VM_LABEL, vm))
            .await?;
        return match match_vm_claim(vm, ifname, &config.config_name, &claims)? {
            Some(claim) => Ok(Some(claim.clone())),
            None => Err(IpamError::ClaimNotYet {
                pod: format!("{pod_ns}/{pod_name}"),
                vm: vm.into(),
                network: config.config_name.clone(),
                ifname: ifname.into(),
            }),
        };
    }
    // The claim is the pod's namespace's, never the NAD's (`element.namespace`): a pod using
    // a NAD of another namespace must not reach that namespace's claims (and their addresses).
    // OVN-Kubernetes looks claims up in the pod's namespace too.
    let claim_ns = pod_ns;
    let api: Api<IpamClaim> = Api::namespaced(store.clone(), claim_ns);
    let claim = api.get(&element.ipam_claim_reference).await?.ok_or_else(|| {
        IpamError::Object(format!(
            "IPAMClaim {claim_ns}/{} referenced by pod {pod_ns}/{pod_name} (interface {ifname}) not found",
            element.ipam_claim_reference
        ))
    })?;
    if claim.spec.network != config.config_name {
        return Err(IpamError::Object(format!(
            "IPAMClaim {} is for network {:?}, not {:?}",
            claim.reference(),
            claim.spec.network,
            config.config_name
        )));
    }
    Ok(Some(claim))
}

/// The claim's current addresses (status.ips), ignoring prefix lengths.
fn claimed_ips(claim: &IpamClaim) -> Result<Vec<IpAddr>, IpamError> {
    claim
        .status
        .ips
        .iter()
        .map(|s| {
            parse_ip_or_cidr(s).ok_or_else(|| {
                IpamError::Object(format!(
                    "IPAMClaim {}: status.ips: {s} is not an IP address",
                    claim.reference()
                ))
            })
        })
        .collect()
}

/// ADD for a claimed attachment: reuse `status.ips` (a second owner during migration is
/// fine), else allocate (honouring `requested`) and record the addresses on the claim.
pub async fn allocate_for_claim(
    store: &Arc<dyn Store>,
    config: &IpamConfig,
    holder: &Holder,
    requested: &[IpAddr],
    claim: &IpamClaim,
    pod_name: &str,
) -> Result<Vec<Lease>, IpamError> {
    let claim_ref = claim.reference();
    let outcome = match claimed_ips(claim) {
        Ok(ips) if !ips.is_empty() => {
            allocator::allocate(store, config, holder, &ips, Some(&claim_ref)).await
        }
        Ok(_) => allocator::allocate(store, config, holder, requested, Some(&claim_ref)).await,
        Err(e) => Err(e),
    };
    let (ips, failure) = match &outcome {
        Ok(leases) => (Some(lease_cidrs(config, leases)), None),
        Err(e) => (None, Some((failure_reason(e), e.to_string()))),
    };
    let write = write_claim_status(store, claim, ips, pod_name, failure).await;
    let leases = outcome?;
    // The addresses are held by reservations whatever happens to the status write, so a
    // retried ADD finds them again; still, report the failure so the runtime retries.
    write?;
    Ok(leases)
}

fn failure_reason(e: &IpamError) -> &'static str {
    match e {
        IpamError::Exhausted { .. } => reasons::SUBNET_EXHAUSTED,
        IpamError::AddressTaken { .. } | IpamError::RequestedOutsidePool { .. } => {
            reasons::IP_ADDRESS_CONFLICT
        }
        _ => reasons::INTERNAL_ERROR,
    }
}

/// Leases as the CIDR strings a claim and a result carry (the range's prefix length).
pub fn lease_cidrs(config: &IpamConfig, leases: &[Lease]) -> Vec<String> {
    leases.iter().map(|l| lease_net(config, l).to_string()).collect()
}

/// A lease with its range's prefix length.
pub fn lease_net(config: &IpamConfig, lease: &Lease) -> IpNet {
    let prefix = config.ranges[lease.range].subnet().prefix_len();
    IpNet::new(lease.ip, prefix).expect("a range's prefix fits its own addresses")
}

async fn write_claim_status(
    store: &Arc<dyn Store>,
    claim: &IpamClaim,
    ips: Option<Vec<String>>,
    pod_name: &str,
    failure: Option<(&str, String)>,
) -> Result<(), IpamError> {
    let namespace = claim.metadata.namespace.clone().unwrap_or_default();
    let api: Api<IpamClaim> = Api::namespaced(store.clone(), &namespace);
    let now = now_rfc3339();
    let condition = ips_allocated(failure);
    api.modify_status(&claim.metadata.name, |c| {
        let mut changed = set_condition(&mut c.status.conditions, condition.clone(), &now);
        if let Some(ips) = &ips {
            if c.status.ips != *ips {
                c.status.ips = ips.clone();
                changed = true;
            }
            let owner = Some(OwnerPod {
                name: pod_name.into(),
            });
            if c.status.owner_pod != owner {
                c.status.owner_pod = owner;
                changed = true;
            }
        }
        changed
    })
    .await?;
    Ok(())
}
