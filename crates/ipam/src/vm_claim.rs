//! Which IPAMClaim a KubeVirt launcher pod's attachment belongs to when its networks annotation
//! carries no `ipam-claim-reference` (pods exactly as virt-controller renders them: that field is
//! written by ipam-extensions' webhook, which weft does not run). Pure: the plugin lists the
//! VM's claims and this decides.
//!
//! The pod names its VM in the label `vm.kubevirt.io/name`; claims are `<vm>.<network>` (the
//! VM's network name) and record the pod interface name in `spec.interface`, which for
//! KubeVirt's hashed scheme is `pod<hash of the network name>` and matches CNI_IFNAME.

use crate::claim::IpamClaim;

/// Label virt-controller puts on a VM's launcher pods, naming the VM.
pub const POD_VM_LABEL: &str = "vm.kubevirt.io/name";

/// Label weft's controller puts on the claims it creates, naming their VM.
pub const CLAIM_VM_LABEL: &str = "kubevirt.io/vm";

/// The name of VM `vm`'s claim for its network `network` (the VM's network name, not the
/// NAD's): `<vm>.<network>`, ipam-extensions' convention.
pub fn claim_name(vm: &str, network: &str) -> String {
    format!("{vm}.{network}")
}

/// Why the VM's claims do not name one claim for the attachment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmClaimError {
    /// Several claims without an interface are candidates: which one is meant is unknowable.
    #[error(
        "VM {vm}: claims {names:?} are all for network {network:?} and none names interface {ifname}: set spec.interface on the claims"
    )]
    Ambiguous {
        /// The VM.
        vm: String,
        /// The CNI network name.
        network: String,
        /// CNI_IFNAME.
        ifname: String,
        /// The candidate claims.
        names: Vec<String>,
    },
}

/// The claim of VM `vm`'s attachment `ifname` on CNI network `network`, among `claims` (any
/// claims of the pod's namespace). A claim is a candidate when it is named `<vm>.<something>`,
/// is for `network` and is not being deleted. The candidate whose `spec.interface` is `ifname`
/// wins; for a legacy ordinal `ifname` (`net<k>`) the only candidate; else a single candidate
/// without an interface (claims made by ipam-extensions, which leaves it empty); otherwise a
/// candidate naming another interface is another NIC of the VM, never this one. `Ok(None)`: the VM has no claim for this attachment.
pub fn match_vm_claim<'a>(
    vm: &str,
    ifname: &str,
    network: &str,
    claims: &'a [IpamClaim],
) -> Result<Option<&'a IpamClaim>, VmClaimError> {
    let prefix = claim_name(vm, "");
    let candidates: Vec<&IpamClaim> = claims
        .iter()
        .filter(|c| {
            c.metadata
                .name
                .strip_prefix(&prefix)
                .is_some_and(|network_name| !network_name.is_empty())
                && c.spec.network == network
                && c.metadata.deletion_timestamp.is_none()
        })
        .collect();
    if let Some(exact) = candidates.iter().find(|c| c.spec.interface == ifname) {
        return Ok(Some(exact));
    }
    // A pod with KubeVirt's legacy ordinal names (`net<k>`, pods from before hashed names)
    // cannot match a claim's hashed interface: there the VM's only claim on the network is it.
    if is_ordinal(ifname)
        && let [only] = candidates.as_slice()
    {
        return Ok(Some(only));
    }
    let unnamed: Vec<&IpamClaim> = candidates
        .into_iter()
        .filter(|c| c.spec.interface.is_empty())
        .collect();
    match unnamed.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        many => Err(VmClaimError::Ambiguous {
            vm: vm.into(),
            network: network.into(),
            ifname: ifname.into(),
            names: many.iter().map(|c| c.metadata.name.clone()).collect(),
        }),
    }
}

/// KubeVirt's legacy ordinal pod interface name (`^net\d+$`).
fn is_ordinal(ifname: &str) -> bool {
    ifname
        .strip_prefix("net")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, network: &str, interface: &str) -> IpamClaim {
        IpamClaim::new("default", name, network, interface)
    }

    #[test]
    fn the_claim_naming_the_pod_interface_wins() {
        // vm1 has two NICs on CNI network "blue" (VM networks blue and blue2) and one on red.
        let claims = vec![
            claim("vm1.blue", "blue", "pod16477688c0e"),
            claim("vm1.blue2", "blue", "pod0a1b2c3d4e5"),
            claim("vm1.red", "red", "podb1f51a511f1"),
            claim("vm10.blue", "blue", "pod16477688c0e"),
        ];
        let found = match_vm_claim("vm1", "pod0a1b2c3d4e5", "blue", &claims).unwrap();
        assert_eq!(found.unwrap().metadata.name, "vm1.blue2");
        let found = match_vm_claim("vm1", "pod16477688c0e", "blue", &claims).unwrap();
        assert_eq!(found.unwrap().metadata.name, "vm1.blue");
        let found = match_vm_claim("vm10", "pod16477688c0e", "blue", &claims).unwrap();
        assert_eq!(
            found.unwrap().metadata.name,
            "vm10.blue",
            "vm1 is not a prefix of vm10"
        );
    }

    #[test]
    fn another_network_another_vm_or_another_nic_is_no_match() {
        let claims = vec![
            claim("vm1.red", "red", "podb1f51a511f1"),
            claim("vm2.blue", "blue", "pod16477688c0e"),
            claim("vm1.blue", "blue", "pod16477688c0e"),
            claim("vm1.", "blue", ""),
        ];
        // The network of the NAD being ADDed is blue: vm1.red is not it.
        assert_eq!(match_vm_claim("vm1", "podb1f51a511f1", "blue", &claims), Ok(None));
        // vm3 has no claim.
        assert_eq!(match_vm_claim("vm3", "pod16477688c0e", "blue", &claims), Ok(None));
        // vm1.blue names interface pod1647…, so it is not eth9's (another NIC on blue).
        assert_eq!(match_vm_claim("vm1", "eth9", "blue", &claims), Ok(None));
    }

    #[test]
    fn an_ordinal_pod_takes_the_vms_only_claim_on_the_network() {
        let one = vec![
            claim("vm1.blue", "blue", "pod16477688c0e"),
            claim("vm1.red", "red", "podb1f51a511f1"),
        ];
        let found = match_vm_claim("vm1", "net1", "blue", &one).unwrap();
        assert_eq!(found.unwrap().metadata.name, "vm1.blue");
        // Two NICs on blue: which is net1 and which net2 is unknowable from the claims.
        let two = vec![
            claim("vm1.blue", "blue", "pod16477688c0e"),
            claim("vm1.blue2", "blue", "pod0a1b2c3d4e5"),
        ];
        assert_eq!(match_vm_claim("vm1", "net1", "blue", &two), Ok(None));
        assert!(!is_ordinal("net") && !is_ordinal("netx") && !is_ordinal("pod1") && is_ordinal("net12"));
    }

    #[test]
    fn a_claim_without_interface_matches_when_alone() {
        // ipam-extensions' claims leave spec.interface empty (ordinal pods: net1).
        let claims = vec![claim("vm1.blue", "blue", ""), claim("vm1.red", "red", "")];
        let found = match_vm_claim("vm1", "net1", "blue", &claims).unwrap();
        assert_eq!(found.unwrap().metadata.name, "vm1.blue");
        let two = vec![claim("vm1.a", "blue", ""), claim("vm1.b", "blue", "")];
        let err = match_vm_claim("vm1", "net1", "blue", &two).unwrap_err();
        assert!(err.to_string().contains("vm1.a"), "{err}");
    }

    #[test]
    fn a_claim_being_deleted_is_no_candidate() {
        let mut gone = claim("vm1.blue", "blue", "pod16477688c0e");
        gone.metadata.deletion_timestamp = Some("2026-01-01T00:00:00Z".into());
        assert_eq!(match_vm_claim("vm1", "pod16477688c0e", "blue", &[gone]), Ok(None));
    }
}
