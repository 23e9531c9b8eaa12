//! The launcher's guest agent poller (KubeVirt's virt-launcher agent poller): asks the guest's
//! qemu-guest-agent for its interfaces and OS every few seconds, backing off while it does not
//! answer, and gives what the VMI's `status.interfaces` (guest-agent source),
//! `status.guestOSInfo` and the `AgentConnected` condition are made of
//! (`weft_vm::status::apply_launcher_report` makes them).
//!
//! The session itself (socket, handshake, bounded reads) runs on a short-lived thread of its
//! own: [`AgentPoller::tick`] never blocks, it only starts a session when one is due and
//! collects the one that finished.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use weft_guest::qga::{self, AgentReport, GuestInterface, GuestOsInfo, QgaError};
use weft_vm::status::{AgentView, GuestAgentInterface};

/// How often an answering agent is asked (KubeVirt polls interfaces every few seconds too).
pub const POLL_PERIOD: Duration = Duration::from_secs(3);

/// The longest wait between attempts at an agent that does not answer.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Bound on each read of a session (a session is 5 round trips).
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The poller of one guest's agent.
#[derive(Default)]
pub struct AgentPoller {
    pending: Option<mpsc::Receiver<Result<AgentReport, QgaError>>>,
    next_at: Option<Instant>,
    failures: u32,
    interfaces: Vec<GuestInterface>,
    os: Option<GuestOsInfo>,
    connected: bool,
    last_error: Option<String>,
}

impl AgentPoller {
    /// Collects a finished session and starts the next one when due, on a thread of its own
    /// (never blocking the caller). Returns whether what the agent reports changed.
    pub fn tick(&mut self, socket: &Path, now: Instant) -> bool {
        let mut changed = false;
        if let Some(receiver) = &self.pending {
            match receiver.try_recv() {
                Ok(result) => {
                    self.pending = None;
                    changed = self.record(result);
                    self.next_at = Some(now + qga::next_poll(self.failures, POLL_PERIOD, MAX_BACKOFF));
                }
                Err(mpsc::TryRecvError::Empty) => return false,
                Err(mpsc::TryRecvError::Disconnected) => {
                    // The session thread panicked: count it as a failed session.
                    self.pending = None;
                    changed = self.record(Err(QgaError::Closed("a session that ended early".into())));
                    self.next_at = Some(now + qga::next_poll(self.failures, POLL_PERIOD, MAX_BACKOFF));
                }
            }
        }
        if self.pending.is_none() && self.next_at.is_none_or(|at| now >= at) {
            let (sender, receiver) = mpsc::channel();
            let socket = socket.to_path_buf();
            let spawned = std::thread::Builder::new()
                .name("weft-qga".into())
                .spawn(move || {
                    let _ = sender.send(qga::query(&socket, READ_TIMEOUT));
                });
            match spawned {
                Ok(_) => self.pending = Some(receiver),
                Err(e) => {
                    tracing::warn!("guest agent session thread: {e}");
                    self.next_at = Some(now + POLL_PERIOD);
                }
            }
        }
        changed
    }

    /// Takes in a session's result; returns whether the view changed.
    fn record(&mut self, result: Result<AgentReport, QgaError>) -> bool {
        let before = (self.connected, self.interfaces.clone(), self.os.clone());
        match result {
            Ok(report) => {
                self.failures = 0;
                self.connected = true;
                self.last_error = None;
                self.interfaces = report.interfaces;
                self.os = Some(report.os);
            }
            Err(e) => {
                self.failures = self.failures.saturating_add(1);
                if self.connected {
                    tracing::info!("the guest agent stopped answering: {e}");
                }
                self.connected = false;
                self.last_error = Some(e.to_string());
                // No agent, no guest-agent view: the status falls back to the domain's.
                self.interfaces.clear();
            }
        }
        before != (self.connected, self.interfaces.clone(), self.os.clone())
    }

    /// What the status needs of the agent now: whether it answers, and its last OS info
    /// (kept when the agent stops answering, like KubeVirt's cached domain OS info).
    pub fn view(&self) -> AgentView {
        AgentView {
            connected: self.connected,
            os: self.os.as_ref().and_then(|os| serde_json::to_value(os).ok()),
        }
    }

    /// `guest-network-get-interfaces` as the status merge takes it (none while the agent does
    /// not answer).
    pub fn interfaces(&self) -> Vec<GuestAgentInterface> {
        status_interfaces(&self.interfaces)
    }
}

/// The agent's interfaces as KubeVirt's virt-launcher converts them: every address (no
/// prefix), the first IPv4 one as the interface's IP, else the first address.
pub fn status_interfaces(interfaces: &[GuestInterface]) -> Vec<GuestAgentInterface> {
    interfaces
        .iter()
        .map(|i| {
            let ips: Vec<String> = i.addresses.iter().map(|a| a.address.to_string()).collect();
            let ip = i
                .addresses
                .iter()
                .find(|a| a.address.is_ipv4())
                .map(|a| a.address.to_string())
                .or_else(|| ips.first().cloned())
                .unwrap_or_default();
            GuestAgentInterface {
                mac: i.mac.clone(),
                ip,
                ips,
                interface_name: i.name.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded_interfaces() -> Vec<GuestInterface> {
        let value = serde_json::json!([
            {"name": "lo", "hardware-address": "00:00:00:00:00:00",
             "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8}]},
            {"name": "eth0", "hardware-address": "52:54:00:78:00:01", "ip-addresses": [
                {"ip-address-type": "ipv6", "ip-address": "fe80::5054:ff:fe78:1%eth0", "prefix": 64},
                {"ip-address-type": "ipv4", "ip-address": "10.0.4.2", "prefix": 24}]}
        ]);
        qga::parse_interfaces(&value).unwrap()
    }

    #[test]
    fn the_first_ipv4_address_is_the_interface_ip() {
        let out = status_interfaces(&recorded_interfaces());
        assert_eq!(
            out,
            [GuestAgentInterface {
                mac: "52:54:00:78:00:01".into(),
                ip: "10.0.4.2".into(),
                ips: vec!["fe80::5054:ff:fe78:1".into(), "10.0.4.2".into()],
                interface_name: "eth0".into(),
            }]
        );
    }

    #[test]
    fn agent_interfaces_merge_as_kubevirt_with_the_guest_agent_source() {
        let vmi: weft_vm::VirtualMachineInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "default"},
            "spec": {"domain": {"devices": {"interfaces": [{"name": "blue", "bridge": {}}]}},
                     "networks": [{"name": "blue", "multus": {"networkName": "blue-net"}}]}
        }))
        .unwrap();
        let report = weft_vm::DomainReport {
            interfaces: vec![weft_vm::status::DomainInterface {
                alias: "ua-blue".into(),
                mac: "52:54:00:78:00:01".into(),
                ..Default::default()
            }],
            guest_agent_interfaces: status_interfaces(&recorded_interfaces()),
            ..Default::default()
        };
        let status = weft_vm::handler_status_interfaces(&vmi.spec, &[], &report);
        assert_eq!(status.len(), 1, "{status:?}");
        assert_eq!(status[0].name, "blue");
        assert_eq!(status[0].interface_name, "eth0");
        assert_eq!(status[0].ip_address, "10.0.4.2");
        assert!(
            weft_vm::infosource::contains(&status[0].info_source, weft_vm::infosource::GUEST_AGENT),
            "{}",
            status[0].info_source
        );
        assert!(weft_vm::infosource::contains(
            &status[0].info_source,
            weft_vm::infosource::DOMAIN
        ));
        // Without the agent, the domain alone.
        let report = weft_vm::DomainReport {
            guest_agent_interfaces: Vec::new(),
            ..report
        };
        let status = weft_vm::handler_status_interfaces(&vmi.spec, &[], &report);
        assert_eq!(status[0].info_source, "domain");
    }

    #[test]
    fn a_guest_without_an_agent_is_asked_less_and_less_and_never_blocks() {
        // A socket that accepts and never answers, like QEMU's with no agent in the guest.
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("qga.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let held = std::thread::spawn(move || listener.accept().map(|(stream, _)| stream));
        let mut poller = AgentPoller::default();
        let start = Instant::now();
        assert!(
            !poller.tick(&socket, start),
            "a session starts, nothing known yet"
        );
        assert!(
            start.elapsed() < Duration::from_millis(500),
            "tick must not block"
        );
        // Wait (bounded) for the session to time out.
        let deadline = Instant::now() + READ_TIMEOUT * 3;
        while poller.failures == 0 {
            assert!(Instant::now() < deadline, "the session never ended");
            poller.tick(&socket, Instant::now());
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!poller.view().connected);
        assert!(poller.last_error.as_deref().unwrap_or("").contains("no reply"));
        let next = poller.next_at.unwrap();
        assert!(next >= Instant::now() + POLL_PERIOD, "backed off past the period");
        // Not due: no new session.
        poller.tick(&socket, Instant::now());
        assert!(poller.pending.is_none());
        let _stream = held.join().unwrap().unwrap();
    }
}
