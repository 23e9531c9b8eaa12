//! The IPAM's error type and its mapping to CNI error codes.

use std::net::IpAddr;

use ipnet::IpNet;
use weft_cni::{CniError, codes};
use weft_store::StoreError;

use crate::config::ConfigError;

/// Everything that can go wrong handling an IPAM request.
#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    /// The network configuration is invalid (names the key).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The CNI environment or arguments are invalid (names the variable or field).
    #[error("{0}")]
    Request(String),
    /// A requested address cannot come from this network's pool.
    #[error(
        "requested IP {ip} is not available in any range of network {network} (outside the ranges, excluded, or a network/broadcast/gateway address)"
    )]
    RequestedOutsidePool {
        /// Requested address.
        ip: IpAddr,
        /// Network.
        network: String,
    },
    /// A range has no free address.
    #[error("no free IP address in range {range} of network {network}")]
    Exhausted {
        /// Network.
        network: String,
        /// The exhausted range.
        range: IpNet,
    },
    /// A requested (or claimed) address is held by another attachment.
    #[error("IP {ip} of network {network} is already held by {holder}")]
    AddressTaken {
        /// The address.
        ip: IpAddr,
        /// Network.
        network: String,
        /// Who holds it (`container/ifname`, pod or claim).
        holder: String,
    },
    /// Allocators kept colliding; the caller should try again.
    #[error(
        "gave up allocating on network {network} after {attempts} attempts lost to concurrent allocations"
    )]
    Contention {
        /// Network.
        network: String,
        /// Attempts made.
        attempts: usize,
    },
    /// A pod or claim the request depends on is missing or does not match.
    #[error("{0}")]
    Object(String),
    /// A KubeVirt launcher pod's VM has no claim (yet) for a network that allows persistent
    /// IPs: weft's controller creates it when it sees the VM, so the runtime retries.
    #[error(
        "pod {pod}: VM {vm} has no IPAMClaim for network {network:?} interface {ifname} yet (weft controller creates <vm>.<network> when it sees the VM)"
    )]
    ClaimNotYet {
        /// `namespace/name` of the pod.
        pod: String,
        /// The VM.
        vm: String,
        /// The CNI network name.
        network: String,
        /// CNI_IFNAME.
        ifname: String,
    },
    /// The VM's claims do not name one claim for the attachment.
    #[error(transparent)]
    VmClaim(#[from] crate::vm_claim::VmClaimError),
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl IpamError {
    /// The CNI error code for this error.
    pub fn code(&self) -> u32 {
        match self {
            IpamError::Config(_) | IpamError::RequestedOutsidePool { .. } => codes::INVALID_NETWORK_CONFIG,
            IpamError::Request(_) => codes::INVALID_ENVIRONMENT,
            IpamError::Exhausted { .. } => codes::POOL_EXHAUSTED,
            IpamError::AddressTaken { .. } => codes::ADDRESS_TAKEN,
            IpamError::Contention { .. } => codes::TRY_AGAIN_LATER,
            IpamError::Object(_) | IpamError::VmClaim(_) => codes::OBJECT_INVALID,
            IpamError::ClaimNotYet { .. } => codes::TRY_AGAIN_LATER,
            // A refused store (unsafe files, damage) will not get better by trying again.
            IpamError::Store(StoreError::Refused(_)) => codes::IO_FAILURE,
            IpamError::Store(_) => codes::TRY_AGAIN_LATER,
        }
    }
}

impl From<IpamError> for CniError {
    fn from(e: IpamError) -> Self {
        CniError::new(e.code(), e.to_string())
    }
}
