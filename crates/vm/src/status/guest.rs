//! What a VMI's status says about its guest: the guest-agent-absent mark the launcher sets (and
//! the controller, `weft up` and `weft explain` read), the `AgentConnected` condition and
//! `status.guestOSInfo` from qemu-guest-agent, and whether every NIC has its guest address.

use std::collections::BTreeMap;

use serde_json::Value;

use weft_netconf::NetworkStatus;

use crate::api::{Condition, InterfaceStatus, VirtualMachineInstance, VmiStatus};
use crate::infosource;

/// VMI annotation the launcher sets (`absent`) when the guest's image was built without
/// qemu-guest-agent (the host lacks the package): nothing will ever report from inside that
/// guest, so waiting for a guest-agent source (`weft up`) is pointless.
pub const AGENT_ABSENT_ANNOTATION: &str = "weft.dev/guest-agent";

/// KubeVirt's condition type: the guest agent is connected.
pub const AGENT_CONNECTED: &str = "AgentConnected";

/// `status.guestOSInfo`.
pub const GUEST_OS_INFO: &str = "guestOSInfo";

/// Sets or clears [`AGENT_ABSENT_ANNOTATION`].
pub fn mark_absent(annotations: &mut BTreeMap<String, String>, absent: bool) {
    if absent {
        annotations.insert(AGENT_ABSENT_ANNOTATION.into(), "absent".into());
    } else {
        annotations.remove(AGENT_ABSENT_ANNOTATION);
    }
}

/// Whether `vmi`'s guest runs without qemu-guest-agent ([`AGENT_ABSENT_ANNOTATION`]).
pub fn agent_absent(vmi: &VirtualMachineInstance) -> bool {
    vmi.metadata.annotation(AGENT_ABSENT_ANNOTATION) == Some("absent")
}

/// Whether the VMI runs and every NIC of it has an address reported from inside the guest
/// (a `guest-agent` entry in its `infoSource`), or, without guests (`no_guests`) or with a
/// guest image without qemu-guest-agent ([`agent_absent`]), any address (from the pod).
///
/// A link-local address is no lease (a guest agent asked before the guest's DHCP client got
/// its lease reports the kernel's own `fe80::` address), unless the NIC's pod interface has
/// no other address in `pod_statuses` (the launcher pod's network-status): an L2-only network
/// gives the guest nothing to lease.
pub fn all_nics_leased(
    vmi: &VirtualMachineInstance,
    no_guests: bool,
    pod_statuses: &[NetworkStatus],
) -> bool {
    let any_source = no_guests || agent_absent(vmi);
    let running = vmi.status.as_ref().is_some_and(|s| s.phase == "Running");
    let status = vmi.status_interfaces();
    running
        && vmi.spec.networks.iter().all(|network| {
            status.iter().any(|s| {
                let pod_entry = pod_statuses
                    .iter()
                    .find(|e| !s.pod_interface_name.is_empty() && e.interface == s.pod_interface_name);
                s.name == network.name
                    && nic_leased(s, pod_entry)
                    && (any_source || infosource::contains(&s.info_source, infosource::GUEST_AGENT))
            })
        })
}

/// Whether `nic` (a `status.interfaces` entry) shows the address the guest was given: one
/// that is not link-local (a guest agent asked before the guest's DHCP client got its lease
/// reports the kernel's own `fe80::` address), or a link-local one when the NIC's entry in the
/// launcher pod's network-status (`pod_entry`) has no other address either: an L2-only network
/// gives the guest nothing to lease. Without a `pod_entry` a link-local address is no lease.
pub fn nic_leased(nic: &InterfaceStatus, pod_entry: Option<&NetworkStatus>) -> bool {
    !nic.ip_address.is_empty()
        && (leased_address(&nic.ip_address)
            || pod_entry.is_some_and(|e| !e.ips.iter().any(|ip| leased_address(ip))))
}

/// Whether `ip` is an address a guest was given: not link-local and not unspecified.
fn leased_address(ip: &str) -> bool {
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(v4)) => !v4.is_link_local() && !v4.is_unspecified(),
        Ok(std::net::IpAddr::V6(v6)) => !v6.is_unicast_link_local() && !v6.is_unspecified(),
        // Not ours to judge: an address we cannot read is whatever the reporter said it was.
        Err(_) => !ip.is_empty(),
    }
}

/// What the status needs of qemu-guest-agent, as the launcher's poller last saw it (its
/// interfaces go into [`crate::DomainReport::guest_agent_interfaces`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentView {
    /// The last session succeeded.
    pub connected: bool,
    /// `guest-get-osinfo` as `status.guestOSInfo` carries it (kept when the agent stops
    /// answering, like KubeVirt's cached domain OS info).
    pub os: Option<Value>,
}

/// Writes the agent's `guestOSInfo` and the `AgentConnected` condition into `status`, as
/// virt-handler does: the condition is added (True, probed `now`) when the agent answers and
/// removed when it does not (an existing one keeps its times: no status churn);
/// `guestOSInfo` is the last OS info the agent gave.
pub fn apply_agent_view(status: &mut VmiStatus, view: &AgentView, now: &str) {
    let present = status.conditions.iter().any(|c| c.type_ == AGENT_CONNECTED);
    if view.connected && !present {
        status.conditions.push(Condition {
            type_: AGENT_CONNECTED.into(),
            status: "True".into(),
            last_probe_time: Some(now.into()),
            last_transition_time: Some(now.into()),
            ..Default::default()
        });
    } else if !view.connected && present {
        status.conditions.retain(|c| c.type_ != AGENT_CONNECTED);
    }
    match &view.os {
        Some(os) => {
            status.extra.insert(GUEST_OS_INFO.into(), os.clone());
        }
        None => {
            status.extra.remove(GUEST_OS_INFO);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(phase: &str, interfaces: Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "default"},
            "spec": {"networks": [{"name": "default", "pod": {}}, {"name": "blue",
                     "multus": {"networkName": "blue-net"}}]},
            "status": {"phase": phase, "interfaces": interfaces}
        }))
        .unwrap()
    }

    fn both(source: &str) -> Value {
        json!([{"name": "default", "ipAddress": "10.244.1.5", "infoSource": source},
               {"name": "blue", "ipAddress": "10.0.4.2", "infoSource": source}])
    }

    #[test]
    fn a_vmi_that_does_not_run_has_no_leases() {
        let vmi = vmi("Scheduled", both("domain, guest-agent"));
        assert!(!all_nics_leased(&vmi, false, &[]));
        assert!(!all_nics_leased(&vmi, true, &[]));
    }

    #[test]
    fn every_nic_needs_an_address() {
        let one = json!([{"name": "default", "ipAddress": "10.244.1.5",
                          "infoSource": "domain, guest-agent"}]);
        assert!(
            !all_nics_leased(&vmi("Running", one), true, &[]),
            "blue is missing"
        );
        let empty = json!([{"name": "default", "ipAddress": "10.244.1.5", "infoSource": "guest-agent"},
                           {"name": "blue", "infoSource": "domain, guest-agent"}]);
        assert!(
            !all_nics_leased(&vmi("Running", empty), true, &[]),
            "blue has no address"
        );
    }

    #[test]
    fn a_link_local_address_is_no_lease() {
        // The agent answered before udhcpc's lease: the kernel's own fe80:: address only.
        for early in ["fe80::5054:ff:feaf:6497", "169.254.0.7", "0.0.0.0", "::"] {
            let nics = json!([{"name": "default", "ipAddress": early, "infoSource": "domain, guest-agent"},
                              {"name": "blue", "ipAddress": "10.0.4.2", "infoSource": "domain, guest-agent"}]);
            assert!(!all_nics_leased(&vmi("Running", nics), false, &[]), "{early}");
        }
        // ...unless the pod interface has no address either: an L2-only network.
        let l2 = json!([{"name": "default", "ipAddress": "10.244.1.5", "infoSource": "guest-agent"},
                        {"name": "blue", "ipAddress": "fe80::1", "ipAddresses": ["fe80::1"],
                         "podInterfaceName": "pod16477688c0e", "infoSource": "domain, guest-agent, multus-status"}]);
        let pod = |ips: &[&str]| {
            vec![NetworkStatus {
                name: "default/blue-net".into(),
                interface: "pod16477688c0e".into(),
                ips: ips.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }]
        };
        assert!(all_nics_leased(&vmi("Running", l2.clone()), false, &pod(&[])));
        assert!(all_nics_leased(
            &vmi("Running", l2.clone()),
            false,
            &pod(&["fe80::2"])
        ));
        assert!(!all_nics_leased(
            &vmi("Running", l2.clone()),
            false,
            &pod(&["10.0.4.2"])
        ));
        assert!(
            !all_nics_leased(&vmi("Running", l2), false, &[]),
            "no pod status: wait"
        );
        let v6 = json!([{"name": "default", "ipAddress": "fd10:244::5", "infoSource": "guest-agent"},
                        {"name": "blue", "ipAddress": "2001:db8::2", "infoSource": "guest-agent"}]);
        assert!(
            all_nics_leased(&vmi("Running", v6), false, &[]),
            "global IPv6 addresses are leases"
        );
    }

    #[test]
    fn the_guest_agent_is_one_entry_of_the_source_list() {
        assert!(all_nics_leased(
            &vmi("Running", both("domain, guest-agent")),
            false,
            &[]
        ));
        assert!(all_nics_leased(
            &vmi("Running", both("guest-agent,multus-status")),
            false,
            &[]
        ));
        assert!(all_nics_leased(&vmi("Running", both("guest-agent")), false, &[]));
        for source in ["domain", "guest-agent-foo", "domain, my-guest-agent", ""] {
            assert!(
                !all_nics_leased(&vmi("Running", both(source)), false, &[]),
                "{source:?}"
            );
        }
        // Without guests, the pod's address suffices.
        assert!(all_nics_leased(&vmi("Running", both("domain")), true, &[]));
    }

    #[test]
    fn weft_up_does_not_wait_for_an_agent_the_image_lacks() {
        let mut vmi = vmi("Running", both("domain"));
        assert!(!all_nics_leased(&vmi, false, &[]), "waits for the agent");
        mark_absent(&mut vmi.metadata.annotations, true);
        assert!(agent_absent(&vmi));
        assert_eq!(vmi.metadata.annotation(AGENT_ABSENT_ANNOTATION), Some("absent"));
        assert!(all_nics_leased(&vmi, false, &[]), "no agent to wait for");
        mark_absent(&mut vmi.metadata.annotations, false);
        assert!(!agent_absent(&vmi));
        assert!(vmi.metadata.annotations.is_empty());
    }

    #[test]
    fn the_condition_follows_the_agent_and_os_info_stays() {
        let os = json!({"id": "weft", "kernelRelease": "6.1.0-48-amd64"});
        let mut status = VmiStatus::default();
        let up = AgentView {
            connected: true,
            os: Some(os.clone()),
        };
        apply_agent_view(&mut status, &up, "2026-12-02T00:00:00Z");
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == AGENT_CONNECTED)
            .unwrap();
        assert_eq!(condition.status, "True");
        assert_eq!(condition.last_probe_time, Some(json!("2026-12-02T00:00:00Z")));
        assert_eq!(status.extra[GUEST_OS_INFO], os);
        // Applied again later: the condition keeps its first probe time (no status churn).
        let snapshot = status.clone();
        apply_agent_view(&mut status, &up, "2026-12-02T00:00:09Z");
        assert_eq!(status, snapshot);
        let down = AgentView {
            connected: false,
            ..up
        };
        apply_agent_view(&mut status, &down, "2026-12-02T00:01:00Z");
        assert!(status.conditions.iter().all(|c| c.type_ != AGENT_CONNECTED));
        assert_eq!(status.extra[GUEST_OS_INFO], os, "the last OS info stays");
        // An agent that never gave OS info: none in the status.
        apply_agent_view(&mut status, &AgentView::default(), "2026-12-02T00:02:00Z");
        assert!(!status.extra.contains_key(GUEST_OS_INFO));
        assert!(status.conditions.is_empty());
    }
}
