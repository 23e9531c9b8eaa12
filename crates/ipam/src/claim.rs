//! `IPAMClaim` (`k8s.cni.cncf.io/v1alpha1`), as k8snetworkplumbingwg/ipamclaims defines it and
//! OVN-Kubernetes writes its status, plus the pure status transitions weft applies.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weft_store::{ObjectMeta, Resource};

/// Condition type written on claims.
pub const IPS_ALLOCATED: &str = "IPsAllocated";

/// Reasons of the `IPsAllocated` condition (OVN-Kubernetes' strings).
pub mod reasons {
    /// The claim's addresses are allocated.
    pub const SUCCESSFUL_ALLOCATION: &str = "SuccessfulAllocation";
    /// A range of the network has no free address.
    pub const SUBNET_EXHAUSTED: &str = "SubnetExhausted";
    /// An address in `status.ips` is held by someone else.
    pub const IP_ADDRESS_CONFLICT: &str = "IPAddressConflict";
    /// Anything else (store failure, bad claim).
    pub const INTERNAL_ERROR: &str = "InternalError";
}

/// A claim on addresses that outlive the pods using them (a VM's interface on one network).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IpamClaim {
    /// Metadata (ipam-extensions names it `<vm>.<network>`).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the claim is for.
    #[serde(default)]
    pub spec: IpamClaimSpec,
    /// What the IPAM gave it.
    #[serde(default, skip_serializing_if = "IpamClaimStatus::is_empty")]
    pub status: IpamClaimStatus,
}

/// `spec` of an IPAMClaim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IpamClaimSpec {
    /// The network name (the CNI config `name`, not the NAD name).
    #[serde(default)]
    pub network: String,
    /// Pod interface name (ipam-extensions leaves it empty).
    #[serde(default)]
    pub interface: String,
    /// Fields weft does not use, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `status` of an IPAMClaim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpamClaimStatus {
    /// Allocated addresses, CIDR strings.
    #[serde(default)]
    pub ips: Vec<String>,
    /// The pod currently holding the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_pod: Option<OwnerPod>,
    /// Conditions (metav1.Condition).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl IpamClaimStatus {
    /// Nothing recorded yet.
    pub fn is_empty(&self) -> bool {
        self.ips.is_empty() && self.owner_pod.is_none() && self.conditions.is_empty()
    }
}

/// `status.ownerPod`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerPod {
    /// Pod name.
    pub name: String,
}

/// A Kubernetes `metav1.Condition`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    #[serde(default)]
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// When the status last changed (RFC 3339).
    #[serde(default)]
    pub last_transition_time: String,
    /// Generation the condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Resource for IpamClaim {
    const API_VERSION: &'static str = "k8s.cni.cncf.io/v1alpha1";
    const KIND: &'static str = "IPAMClaim";
    const PLURAL: &'static str = "ipamclaims";
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl IpamClaim {
    /// A new claim `namespace/name` for `network` and pod interface `interface`.
    pub fn new(namespace: &str, name: &str, network: &str, interface: &str) -> Self {
        Self {
            metadata: ObjectMeta::named(Some(namespace), name),
            spec: IpamClaimSpec {
                network: network.into(),
                interface: interface.into(),
                extra: Map::new(),
            },
            status: IpamClaimStatus::default(),
        }
    }

    /// `namespace/name`, as reservations refer to the claim.
    pub fn reference(&self) -> String {
        claim_reference(
            self.metadata.namespace.as_deref().unwrap_or_default(),
            &self.metadata.name,
        )
    }
}

/// `namespace/name` of a claim, as stored in `IpReservation.spec.claim`.
pub fn claim_reference(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Set condition `type_` on `conditions`, keeping `lastTransitionTime` when the status does not
/// change (Kubernetes' `meta.SetStatusCondition`). Returns whether anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition, now: &str) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            new.last_transition_time = if old.status == new.status {
                old.last_transition_time.clone()
            } else {
                now.to_string()
            };
            let changed = *old != new;
            *old = new;
            changed
        }
        None => {
            new.last_transition_time = now.to_string();
            conditions.push(new);
            true
        }
    }
}

/// The `IPsAllocated` condition for an outcome: `None` reason = success.
pub fn ips_allocated(failure: Option<(&str, String)>) -> Condition {
    match failure {
        None => Condition {
            type_: IPS_ALLOCATED.into(),
            status: "True".into(),
            reason: reasons::SUCCESSFUL_ALLOCATION.into(),
            message: "IP addresses allocated".into(),
            ..Default::default()
        },
        Some((reason, message)) => Condition {
            type_: IPS_ALLOCATED.into(),
            status: "False".into(),
            reason: reason.into(),
            message,
            ..Default::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_format_matches_ovn_kubernetes() {
        let claim: IpamClaim = serde_json::from_value(json!({
            "metadata": {"name": "vm1.tenantblue", "namespace": "ns"},
            "spec": {"network": "tenantblue", "interface": "pod16477688c0e"},
            "status": {"ips": ["10.0.0.5/24"], "ownerPod": {"name": "virt-launcher-vm1-abcde"},
              "conditions": [{"type": "IPsAllocated", "status": "True", "reason": "SuccessfulAllocation",
                "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        assert_eq!(claim.reference(), "ns/vm1.tenantblue");
        assert_eq!(
            claim.status.owner_pod.as_ref().unwrap().name,
            "virt-launcher-vm1-abcde"
        );
        let back = serde_json::to_value(&claim).unwrap();
        assert_eq!(back["status"]["conditions"][0]["type"], "IPsAllocated");
        assert_eq!(back["status"]["ownerPod"]["name"], "virt-launcher-vm1-abcde");
    }

    #[test]
    fn condition_transition_time_changes_only_with_status() {
        let mut conds = Vec::new();
        assert!(set_condition(&mut conds, ips_allocated(None), "t1"));
        assert!(!set_condition(&mut conds, ips_allocated(None), "t2"));
        assert_eq!(conds[0].last_transition_time, "t1");
        let failed = ips_allocated(Some((reasons::SUBNET_EXHAUSTED, "full".into())));
        assert!(set_condition(&mut conds, failed, "t3"));
        assert_eq!((conds.len(), conds[0].last_transition_time.as_str()), (1, "t3"));
    }
}
