//! Which of the controller's roles run where. On a Kubernetes cluster KubeVirt's virt-controller
//! owns VMIs, launcher pods, VMI status and migrations; weft only replaces Multus, whereabouts
//! and ipam-extensions there, so its controller keeps IPAMClaims and garbage-collects
//! reservations, and never writes what KubeVirt owns. In the local cluster weft is the VM
//! runtime too and runs every role.

/// The roles the controller runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Roles {
    /// KubeVirt's roles: VM → VMI, VMI → launcher pod, VM and VMI status, migrations (and the
    /// garbage collection of VMIs and pods whose owner is gone).
    pub kubevirt: bool,
    /// IPAMClaims for VMs whose networks allow persistent IPs, created with the VM and deleted
    /// (addresses released) when it goes.
    pub claims: bool,
    /// Freeing reservations whose pod and container are gone.
    pub reservation_gc: bool,
}

impl Roles {
    /// Everything: weft is the VM runtime (the local cluster).
    pub const LOCAL: Roles = Roles {
        kubevirt: true,
        claims: true,
        reservation_gc: true,
    };

    /// weft's own work beside KubeVirt (a Kubernetes cluster).
    pub const BESIDE_KUBEVIRT: Roles = Roles {
        kubevirt: false,
        claims: true,
        reservation_gc: true,
    };

    /// The roles for a store: Kubernetes ([`crate::cluster::is_kubernetes`]) or the local
    /// cluster's embedded store.
    pub fn for_store(kubernetes: bool) -> Roles {
        if kubernetes {
            Self::BESIDE_KUBEVIRT
        } else {
            Self::LOCAL
        }
    }

    /// The roles for the store this process was told to use.
    pub fn for_backend() -> Roles {
        Self::for_store(crate::cluster::is_kubernetes())
    }
}

#[cfg(test)]
mod tests {
    use super::Roles;

    #[test]
    fn kubevirt_roles_run_only_in_the_local_cluster() {
        let kube = Roles::for_store(true);
        assert!(
            !kube.kubevirt,
            "virt-controller owns VMIs, pods, status, migrations"
        );
        assert!(kube.claims && kube.reservation_gc);
        let local = Roles::for_store(false);
        assert_eq!(local, Roles::LOCAL);
        assert!(local.kubevirt && local.claims && local.reservation_gc);
    }
}
