//! The node launcher's report into a VMI: `status.interfaces` from the domain and the guest
//! agent, `AgentConnected`/`guestOSInfo`, `Ready`, and the annotations weft adds for
//! `weft explain` and the tests (the guest's own checks, the DHCP record, the agent-absent
//! mark). The launcher gathers a [`LauncherReport`] and writes what [`apply_launcher_report`]
//! makes of it.

use super::guest::{AgentView, apply_agent_view, mark_absent};
use super::handler::{DomainReport, handler_status_interfaces};
use super::lifecycle::set_ready_condition;
use crate::api::VirtualMachineInstance;

/// VMI annotation where the launcher reports the guest's own checks (a compact JSON list of
/// `{kind, target, ok}` from its serial console).
pub const GUEST_REPORT_ANNOTATION: &str = "weft.dev/guest-report";

/// VMI annotation where the local launcher records, per VMI interface, what its DHCP server
/// saw (requests received, replies sent), and whether a guest runs at all (`weft explain`
/// reads it).
pub const DHCP_RECORD_ANNOTATION: &str = "weft.dev/dhcp";

/// What the launcher knows of its VMI's guest at one report (plain data).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LauncherReport {
    /// The domain's NICs, the guest agent's interfaces and the pod IPs.
    pub domain: DomainReport,
    /// qemu-guest-agent's connection and OS info.
    pub agent: AgentView,
    /// The guest's checks ([`GUEST_REPORT_ANNOTATION`]); `None` leaves the last ones in place
    /// (the serial report is not always readable, and has no checks before the guest ran them).
    pub checks: Option<String>,
    /// The DHCP record, serialized ([`DHCP_RECORD_ANNOTATION`]).
    pub dhcp_record: String,
    /// The `Ready` condition: the guest leased every NIC (or there is no guest).
    pub ready: bool,
    /// The guest image has no qemu-guest-agent ([`super::guest::AGENT_ABSENT_ANNOTATION`]).
    pub agent_absent: bool,
}

/// Writes `input` into `vmi` (its status and the launcher's annotations), `now` being the
/// time of any condition that changes. Returns whether anything changed (no write otherwise).
pub fn apply_launcher_report(vmi: &mut VirtualMachineInstance, input: &LauncherReport, now: &str) -> bool {
    let (status_before, annotations_before) = (vmi.status.clone(), vmi.metadata.annotations.clone());
    let interfaces = handler_status_interfaces(&vmi.spec, vmi.status_interfaces(), &input.domain);
    let annotations = &mut vmi.metadata.annotations;
    if let Some(checks) = &input.checks {
        annotations.insert(GUEST_REPORT_ANNOTATION.into(), checks.clone());
    }
    annotations.insert(DHCP_RECORD_ANNOTATION.into(), input.dhcp_record.clone());
    mark_absent(annotations, input.agent_absent);
    let status = vmi.status.get_or_insert_with(Default::default);
    status.interfaces = interfaces;
    apply_agent_view(status, &input.agent, now);
    set_ready_condition(&mut status.conditions, input.ready, now);
    vmi.status != status_before || vmi.metadata.annotations != annotations_before
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infosource;
    use crate::status::guest::{AGENT_ABSENT_ANNOTATION, AGENT_CONNECTED, GUEST_OS_INFO, agent_absent};
    use crate::status::handler::{DomainInterface, GuestAgentInterface};
    use crate::status::lifecycle::READY;
    use serde_json::json;

    const T0: &str = "2026-12-02T00:00:00Z";
    const T1: &str = "2026-12-02T00:00:09Z";

    fn vmi() -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "default"},
            "spec": {"domain": {"devices": {"interfaces": [{"name": "blue", "bridge": {}}]}},
                     "networks": [{"name": "blue", "multus": {"networkName": "blue-net"}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    fn report() -> LauncherReport {
        LauncherReport {
            domain: DomainReport {
                interfaces: vec![DomainInterface {
                    alias: "ua-blue".into(),
                    mac: "52:54:00:78:00:01".into(),
                    ..Default::default()
                }],
                guest_agent_interfaces: vec![GuestAgentInterface {
                    mac: "52:54:00:78:00:01".into(),
                    ip: "10.0.4.2".into(),
                    ips: vec!["10.0.4.2".into()],
                    interface_name: "eth0".into(),
                }],
                ..Default::default()
            },
            agent: AgentView {
                connected: true,
                os: Some(json!({"id": "weft"})),
            },
            checks: Some(r#"[{"kind":"ping","target":"10.0.4.1","ok":true}]"#.into()),
            dhcp_record: r#"{"guest":true,"interfaces":{}}"#.into(),
            ready: true,
            agent_absent: false,
        }
    }

    fn condition<'a>(vmi: &'a VirtualMachineInstance, type_: &str) -> Option<&'a str> {
        vmi.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.as_str())
    }

    #[test]
    fn a_report_writes_interfaces_conditions_and_annotations() {
        let mut vmi = vmi();
        assert!(apply_launcher_report(&mut vmi, &report(), T0));
        let status = vmi.status.as_ref().unwrap();
        assert_eq!(status.interfaces.len(), 1, "{:?}", status.interfaces);
        assert_eq!(status.interfaces[0].ip_address, "10.0.4.2");
        assert!(infosource::contains(
            &status.interfaces[0].info_source,
            infosource::GUEST_AGENT
        ));
        assert_eq!(status.extra[GUEST_OS_INFO], json!({"id": "weft"}));
        assert_eq!(condition(&vmi, AGENT_CONNECTED), Some("True"));
        assert_eq!(condition(&vmi, READY), Some("True"));
        let annotations = &vmi.metadata.annotations;
        assert_eq!(annotations[GUEST_REPORT_ANNOTATION], report().checks.unwrap());
        assert_eq!(annotations[DHCP_RECORD_ANNOTATION], report().dhcp_record);
        assert!(!annotations.contains_key(AGENT_ABSENT_ANNOTATION));
        assert!(crate::status::guest::all_nics_leased(&vmi, false, &[]));
    }

    #[test]
    fn the_same_report_twice_changes_nothing_the_second_time() {
        let mut vmi = vmi();
        assert!(apply_launcher_report(&mut vmi, &report(), T0));
        let snapshot = vmi.clone();
        assert!(!apply_launcher_report(&mut vmi, &report(), T1), "no write");
        assert_eq!(vmi, snapshot, "times stay those of the first report");
    }

    #[test]
    fn ready_is_set_and_cleared() {
        let mut vmi = vmi();
        let not_ready = LauncherReport {
            ready: false,
            ..report()
        };
        assert!(apply_launcher_report(&mut vmi, &not_ready, T0));
        assert_eq!(condition(&vmi, READY), Some("False"));
        assert!(apply_launcher_report(&mut vmi, &report(), T1));
        assert_eq!(condition(&vmi, READY), Some("True"));
        assert!(apply_launcher_report(&mut vmi, &not_ready, T1));
        assert_eq!(condition(&vmi, READY), Some("False"));
    }

    #[test]
    fn agent_connected_follows_the_agent_and_os_info_follows_what_it_gave() {
        let mut vmi = vmi();
        let mut input = report();
        input.agent = AgentView::default();
        apply_launcher_report(&mut vmi, &input, T0);
        assert_eq!(condition(&vmi, AGENT_CONNECTED), None, "never added");
        assert!(!vmi.status.as_ref().unwrap().extra.contains_key(GUEST_OS_INFO));
        assert!(!apply_launcher_report(&mut vmi, &input, T1), "untouched");
        input.agent = report().agent;
        assert!(apply_launcher_report(&mut vmi, &input, T1));
        assert_eq!(condition(&vmi, AGENT_CONNECTED), Some("True"));
        assert_eq!(
            vmi.status.as_ref().unwrap().extra[GUEST_OS_INFO],
            json!({"id": "weft"})
        );
        // The agent stops answering: the condition goes, the last OS info stays.
        input.agent.connected = false;
        assert!(apply_launcher_report(&mut vmi, &input, T1));
        assert_eq!(condition(&vmi, AGENT_CONNECTED), None);
        assert_eq!(
            vmi.status.as_ref().unwrap().extra[GUEST_OS_INFO],
            json!({"id": "weft"})
        );
        input.agent.os = None;
        assert!(apply_launcher_report(&mut vmi, &input, T1));
        assert!(!vmi.status.as_ref().unwrap().extra.contains_key(GUEST_OS_INFO));
    }

    #[test]
    fn the_absent_mark_is_set_and_cleared() {
        let mut vmi = vmi();
        let absent = LauncherReport {
            agent_absent: true,
            agent: AgentView::default(),
            ..report()
        };
        assert!(apply_launcher_report(&mut vmi, &absent, T0));
        assert!(agent_absent(&vmi));
        assert!(!apply_launcher_report(&mut vmi, &absent, T1));
        assert!(apply_launcher_report(&mut vmi, &report(), T1));
        assert!(!agent_absent(&vmi));
    }

    #[test]
    fn checks_are_written_only_when_reported() {
        let mut vmi = vmi();
        let unread = LauncherReport {
            checks: None,
            ..report()
        };
        apply_launcher_report(&mut vmi, &unread, T0);
        assert!(!vmi.metadata.annotations.contains_key(GUEST_REPORT_ANNOTATION));
        apply_launcher_report(&mut vmi, &report(), T0);
        // A later report without checks keeps the last ones.
        assert!(!apply_launcher_report(&mut vmi, &unread, T1));
        assert_eq!(
            vmi.metadata.annotations[GUEST_REPORT_ANNOTATION],
            report().checks.unwrap()
        );
    }
}
