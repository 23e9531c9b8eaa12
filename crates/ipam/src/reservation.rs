//! `IPReservation` (`ipam.weft.dev/v1alpha1`): one small cluster-scoped object per handed-out
//! address. Its name is derived from (network, address), so the store's name uniqueness is the
//! cross-node lock: whoever creates it first holds the address.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use weft_store::{ObjectMeta, Resource};

/// API version of [`IpReservation`].
pub const RESERVATION_API_VERSION: &str = "ipam.weft.dev/v1alpha1";
/// Label carrying the (DNS-safe) network of a reservation, for selecting a network's reservations.
pub const NETWORK_LABEL: &str = "ipam.weft.dev/network";

/// A held address.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IpReservation {
    /// Metadata; the name is [`reservation_name`] of (network, ip).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Who holds the address.
    pub spec: IpReservationSpec,
}

/// Who holds an address.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpReservationSpec {
    /// Network the address belongs to (`network_name` or the network config's `name`).
    pub network: String,
    /// The address.
    pub ip: Option<IpAddr>,
    /// Container (sandbox) id of the ADD that took it.
    #[serde(rename = "containerID", default)]
    pub container_id: String,
    /// Interface name of the ADD that took it.
    #[serde(default)]
    pub ifname: String,
    /// `namespace/name` of the pod, when known (from CNI_ARGS).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_ref: String,
    /// Pod uid, when known (`K8S_POD_UID`): tells a recreated StatefulSet pod from its predecessor.
    #[serde(rename = "podUID", default, skip_serializing_if = "String::is_empty")]
    pub pod_uid: String,
    /// Node whose runtime made the ADD (scopes CNI GC to that node's attachments).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node: String,
    /// `namespace/name` of the IPAMClaim owning the address; set → pod DEL and GC keep it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

impl Resource for IpReservation {
    const API_VERSION: &'static str = RESERVATION_API_VERSION;
    const KIND: &'static str = "IPReservation";
    const PLURAL: &'static str = "ipreservations";
    const NAMESPACED: bool = false;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl IpReservation {
    /// A new (unsaved) reservation of `spec.ip` on `spec.network`.
    pub fn new(spec: IpReservationSpec) -> Self {
        let ip = spec.ip.unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let mut metadata = ObjectMeta::named(None, &reservation_name(&spec.network, ip));
        metadata
            .labels
            .insert(NETWORK_LABEL.into(), network_label(&spec.network));
        Self { metadata, spec }
    }

    /// Whether the ADD `(container_id, ifname)` holds this reservation.
    pub fn held_by(&self, container_id: &str, ifname: &str) -> bool {
        self.spec.container_id == container_id && self.spec.ifname == ifname
    }
}

/// The network as a DNS label (≤ 63 chars, `[a-z0-9-]`, alphanumeric at both ends). Names that
/// are not already such a label are sanitised and suffixed with a hash, so two different
/// networks never share a label.
pub fn network_label(network: &str) -> String {
    let valid = !network.is_empty()
        && network.len() <= 63
        && network
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !network.starts_with('-')
        && !network.ends_with('-');
    if valid {
        return network.to_string();
    }
    let mut clean: String = network
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .take(50)
        .collect();
    clean = clean.trim_matches('-').to_string();
    let hash = hex::encode(&Sha256::digest(network.as_bytes())[..5]);
    if clean.is_empty() {
        format!("n-{hash}")
    } else {
        format!("{clean}-{hash}")
    }
}

/// The address as a DNS-safe name part: `10.0.0.5` stays, `fd00::5` becomes `fd00-0-0-0-0-0-0-5`
/// (every group written, so the form is unique and never starts with `-`).
pub fn address_label(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => v6
            .segments()
            .iter()
            .map(|s| format!("{s:x}"))
            .collect::<Vec<_>>()
            .join("-"),
    }
}

/// Name of the reservation of `ip` on `network`: `<network label>.<address label>`.
pub fn reservation_name(network: &str, ip: IpAddr) -> String {
    format!("{}.{}", network_label(network), address_label(ip))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_are_dns_safe_and_readable() {
        assert_eq!(
            reservation_name("blue", "10.0.0.5".parse().unwrap()),
            "blue.10.0.0.5"
        );
        assert_eq!(
            reservation_name("blue", "fd00::5".parse().unwrap()),
            "blue.fd00-0-0-0-0-0-0-5"
        );
        let odd = network_label("My_Net");
        assert!(odd.starts_with("my-net-"), "{odd}");
        assert_ne!(network_label("my-net"), network_label("My-Net"));
    }

    proptest! {
        #[test]
        fn network_labels_are_dns_labels(name in ".{0,80}") {
            let l = network_label(&name);
            prop_assert!(!l.is_empty() && l.len() <= 63);
            prop_assert!(l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
            prop_assert!(!l.starts_with('-') && !l.ends_with('-'));
        }

        #[test]
        fn ipv6_names_are_unique(a in any::<u128>(), b in any::<u128>()) {
            let (x, y) = (IpAddr::from(std::net::Ipv6Addr::from(a)), IpAddr::from(std::net::Ipv6Addr::from(b)));
            prop_assert_eq!(address_label(x) == address_label(y), a == b);
        }
    }
}
