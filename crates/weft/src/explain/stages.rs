//! The eight stages of one interface, each a pure look at the [`Snapshot`].

use weft_launcher::names::LinkNames;
use weft_netconf::{DEFAULT_NETWORK_ANNOTATION, NETWORKS_ANNOTATION, NetworkStatus};
use weft_vm::api::{BindingKind, Interface, InterfaceStatus, Network};

use super::{DHCP_RECORD_ANNOTATION, DhcpRecord, Finding, Snapshot, Stage, classify};

/// Reason of the Event the local kubelet role records when a pod's sandbox (CNI ADD) fails
/// (kubelet's own reason).
pub const FAILED_SANDBOX_REASON: &str = "FailedCreatePodSandBox";

/// One interface in its snapshot, with what every stage shares.
pub(crate) struct Context<'a> {
    snapshot: &'a Snapshot,
    index: usize,
    interface: &'a Interface,
    network: Option<&'a Network>,
    statuses: Vec<NetworkStatus>,
    pod_iface: Option<String>,
    dhcp: Option<DhcpRecord>,
}

impl<'a> Context<'a> {
    pub(crate) fn new(snapshot: &'a Snapshot, index: usize) -> Self {
        let spec = &snapshot.vmi.spec;
        let interface = &spec.interfaces()[index];
        let network = spec.networks.iter().find(|n| n.name == interface.name);
        let statuses = snapshot
            .pod
            .as_ref()
            .map(|p| weft_vm::network_statuses(&p.metadata.annotations))
            .unwrap_or_default();
        let pod_iface = weft_vm::pod_interface_names(&spec.networks, &statuses).remove(&interface.name);
        let dhcp = snapshot
            .vmi
            .metadata
            .annotation(DHCP_RECORD_ANNOTATION)
            .and_then(|raw| serde_json::from_str(raw).ok());
        Context {
            snapshot,
            index,
            interface,
            network,
            statuses,
            pod_iface,
            dhcp,
        }
    }

    fn primary(&self) -> bool {
        self.network.is_some_and(Network::is_primary)
    }

    /// `(namespace, name)` of the network's NAD (multus networks only).
    fn nad(&self) -> Option<(String, String)> {
        let multus = self.network?.multus.as_ref()?;
        let (ns, name) = weft_netconf::split_namespaced(&multus.network_name, self.snapshot.vmi.namespace());
        Some((ns.to_string(), name.to_string()))
    }

    pub(crate) fn network_label(&self) -> String {
        match (self.network, self.nad()) {
            (None, _) => "missing".into(),
            (Some(n), _) if n.pod.is_some() => "pod".into(),
            (Some(n), Some((ns, name))) if n.is_primary() => format!("multus default {ns}/{name}"),
            (Some(_), Some((ns, name))) => format!("multus {ns}/{name}"),
            (Some(_), None) => "other".into(),
        }
    }

    pub(crate) fn binding_label(&self) -> String {
        match self.interface.binding_kind() {
            BindingKind::Bridge => "bridge".into(),
            BindingKind::Masquerade => "masquerade".into(),
            BindingKind::Sriov => "sriov".into(),
            BindingKind::PasstBinding => "passtBinding".into(),
            BindingKind::Plugin(name) => format!("plugin {name}"),
            BindingKind::None => "none".into(),
        }
    }

    fn status_interface(&self) -> Option<&'a InterfaceStatus> {
        self.snapshot
            .vmi
            .status
            .as_ref()?
            .interfaces
            .iter()
            .find(|s| s.name == self.interface.name)
    }

    fn status_entry(&self) -> Option<&NetworkStatus> {
        if self.primary() {
            return self.statuses.iter().find(|s| s.default);
        }
        let pod_iface = self.pod_iface.as_deref()?;
        self.statuses.iter().find(|s| s.interface == pod_iface)
    }

    pub(crate) fn evaluate(&self, stage: Stage) -> Finding {
        match stage {
            Stage::Spec => self.spec(),
            Stage::PodAnnotation => self.pod_annotation(),
            Stage::NetworkStatus => self.network_status(),
            Stage::PodLink => self.pod_link(),
            Stage::Wiring => self.wiring(),
            Stage::Dhcp => self.dhcp(),
            Stage::GuestReport => self.guest_report(),
            Stage::StatusIp => self.status_ip(),
        }
    }

    fn spec(&self) -> Finding {
        let name = &self.interface.name;
        let Some(network) = self.network else {
            return Finding::failed(
                format!("interface {name} has no network of that name in spec.networks"),
                format!("add a network named {name} to spec.networks (or rename the interface)"),
            );
        };
        let decision = weft_vm::admission::admit_vmi(
            &self.snapshot.vmi.spec,
            weft_vm::admission::Operation::Update,
            &self.snapshot.config,
        );
        let network_index = self
            .snapshot
            .vmi
            .spec
            .networks
            .iter()
            .position(|n| n.name == network.name);
        let mine = |field: &str| {
            let interface = format!("interfaces[{}]", self.index);
            let net = network_index.map(|i| format!("networks[{i}]"));
            field.contains(&interface)
                || net.is_some_and(|n| field.contains(&n))
                || !(field.contains("interfaces[") || field.contains("networks["))
        };
        let causes: Vec<&weft_vm::Cause> = decision.causes.iter().filter(|c| mine(&c.field)).collect();
        if !causes.is_empty() {
            return Finding::failed(
                format!(
                    "admission refuses it: {}",
                    weft_vm::admission::causes_message(causes)
                ),
                "fix the VM's spec as the message says and apply it again",
            );
        }
        if let Some((ns, nad)) = self.nad() {
            if !self.snapshot.nads.contains(&(ns.clone(), nad.clone())) {
                return Finding::failed(
                    format!("NAD {ns}/{nad} does not exist"),
                    format!(
                        "create NetworkAttachmentDefinition {ns}/{nad} (or fix the network's networkName)"
                    ),
                );
            }
            return Finding::ok(format!(
                "valid ({} on network {}); NAD {ns}/{nad} exists",
                self.binding_label(),
                network.name
            ));
        }
        Finding::ok(format!("valid ({} on the pod network)", self.binding_label()))
    }

    fn pod_annotation(&self) -> Finding {
        let Some(pod) = &self.snapshot.pod else {
            let waiting = self.snapshot.vmi.status.as_ref().and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.status == "False" && !c.message.is_empty())
            });
            return match waiting {
                Some(c) => Finding::failed(
                    format!("no launcher pod: {} ({}: {})", c.message, c.type_, c.reason),
                    "fix what the condition names; the controller then creates the launcher pod",
                ),
                None => Finding::failed(
                    "no launcher pod for the VMI",
                    "is the controller running? (`weft get events -A`, `weft describe vmi`)",
                ),
            };
        };
        let Some(pod_iface) = self.pod_iface.clone() else {
            return Finding::failed(
                "no pod interface name for this network",
                "the network must be the pod network or a multus network",
            );
        };
        let Some((ns, nad)) = self.nad() else {
            return Finding::ok(format!(
                "the pod network is the pod's own interface ({pod_iface})"
            ));
        };
        if self.primary() {
            let named = pod
                .metadata
                .annotation(DEFAULT_NETWORK_ANNOTATION)
                .is_some_and(|v| v == format!("{ns}/{nad}") || v == nad);
            return if named {
                Finding::ok(format!("{DEFAULT_NETWORK_ANNOTATION} names {ns}/{nad}"))
            } else {
                Finding::failed(
                    format!("{DEFAULT_NETWORK_ANNOTATION} does not name {ns}/{nad}"),
                    "restart the VM so that its launcher pod is rendered again",
                )
            };
        }
        let elements = pod.metadata.annotation(NETWORKS_ANNOTATION).map(|v| {
            weft_netconf::parse_networks_annotation(v, pod.metadata.namespace.as_deref().unwrap_or(""))
        });
        let elements = match elements {
            None => Vec::new(),
            Some(Ok(elements)) => elements,
            Some(Err(e)) => {
                return Finding::failed(
                    format!("the pod's {NETWORKS_ANNOTATION} annotation does not parse: {e}"),
                    "restart the VM so that its launcher pod is rendered again",
                );
            }
        };
        let element = elements.iter().find(|e| {
            let e_ns = if e.namespace.is_empty() {
                ns.as_str()
            } else {
                e.namespace.as_str()
            };
            e.name == nad && e_ns == ns && (e.interface.is_empty() || e.interface == pod_iface)
        });
        match element {
            Some(_) => Finding::ok(format!("names {ns}/{nad} as {pod_iface}")),
            None => Finding::failed(
                format!("the pod's {NETWORKS_ANNOTATION} annotation does not name {ns}/{nad} as {pod_iface}"),
                "a hot-plugged network is patched into the pod by the controller: wait for its sync, \
                 or check `weft get events -A`",
            ),
        }
    }

    /// The CNI error the pod's Events or status carry, if its sandbox failed.
    fn sandbox_error(&self) -> Option<String> {
        let pod = self.snapshot.pod.as_ref()?;
        let event = self
            .snapshot
            .events
            .iter()
            .filter(|e| {
                e.involved_object.kind == "Pod"
                    && e.involved_object.name == pod.metadata.name
                    && e.reason == FAILED_SANDBOX_REASON
            })
            .max_by(|a, b| a.last_timestamp.cmp(&b.last_timestamp))
            .map(|e| e.message.clone());
        event.or_else(|| (pod.status.phase == "Failed").then(|| pod.status.message.clone()))
    }

    fn network_status(&self) -> Finding {
        if let Some(entry) = self.status_entry() {
            return Finding::ok(format!(
                "{} on {}: ips [{}], mac {}",
                if entry.name.is_empty() {
                    "(unnamed)"
                } else {
                    &entry.name
                },
                entry.interface,
                entry.ips.join(", "),
                if entry.mac.is_empty() { "-" } else { &entry.mac }
            ));
        }
        let pod_iface = self.pod_iface.clone().unwrap_or_default();
        if let Some(error) = self.sandbox_error() {
            let (reason, fix) = classify(&error).reason_and_fix(&self.snapshot.reservations);
            return Finding::failed(reason, fix);
        }
        let phase = self
            .snapshot
            .pod
            .as_ref()
            .map(|p| p.status.phase.as_str())
            .unwrap_or("");
        let what = if self.primary() {
            "no default network-status entry".to_string()
        } else {
            format!("no network-status entry for {pod_iface}")
        };
        if phase == "Running" {
            Finding::failed(
                format!("{what} although the pod runs (a hot-plugged network not attached yet?)"),
                "the node agent attaches hot-plugged networks: check `weft get events -A` and its log",
            )
        } else {
            Finding::failed(
                format!(
                    "{what} (pod phase {})",
                    if phase.is_empty() { "unknown" } else { phase }
                ),
                "wait for the node agent's CNI ADD; if it does not come, `weft describe pod` says why",
            )
        }
    }

    fn link_names(&self) -> Option<LinkNames> {
        Some(LinkNames::derive(self.pod_iface.as_deref()?, self.primary()))
    }

    fn pod_link(&self) -> Finding {
        let Some(facts) = &self.snapshot.netns else {
            return Finding::unchecked(format!("not checked: {}", self.snapshot.netns_unchecked));
        };
        let (Some(pod_iface), Some(names)) = (self.pod_iface.clone(), self.link_names()) else {
            return Finding::unchecked("not checked: no pod interface name");
        };
        if facts.links.contains(&pod_iface) || facts.links.contains(&names.renamed_pod_nic) {
            Finding::ok(format!("{pod_iface} is in the pod netns"))
        } else {
            Finding::failed(
                format!(
                    "neither {pod_iface} nor {} is in the pod netns",
                    names.renamed_pod_nic
                ),
                "the CNI ADD reported it but the link is gone: restart the VM (`weft stop`, `weft start`)",
            )
        }
    }

    fn wiring(&self) -> Finding {
        let Some(facts) = &self.snapshot.netns else {
            return Finding::unchecked(format!("not checked: {}", self.snapshot.netns_unchecked));
        };
        let Some(names) = self.link_names() else {
            return Finding::unchecked("not checked: no pod interface name");
        };
        let mut wanted = vec![names.bridge.clone(), names.tap.clone()];
        let mut missing: Vec<String> = Vec::new();
        match self.interface.binding_kind() {
            BindingKind::Masquerade => {
                let table = weft_launcher::nft::NAT_TABLE;
                if !facts
                    .nft_tables
                    .iter()
                    .any(|t| t.split_whitespace().last() == Some(table))
                {
                    missing.push(format!("nft table {table}"));
                }
            }
            BindingKind::Bridge => wanted.push(names.renamed_pod_nic.clone()),
            other => {
                return Finding::unchecked(format!(
                    "not checked: binding {other:?} is not wired by weft's launcher"
                ));
            }
        }
        let mut absent: Vec<String> = wanted
            .iter()
            .filter(|l| !facts.links.contains(*l))
            .cloned()
            .collect();
        absent.append(&mut missing);
        if absent.is_empty() {
            let mut found = wanted.join(", ");
            if matches!(self.interface.binding_kind(), BindingKind::Masquerade) {
                found += ", nft table nat";
            }
            Finding::ok(found)
        } else {
            Finding::failed(
                format!("missing in the pod netns: {}", absent.join(", ")),
                "the launcher did not wire it (see the node agent's log): restart the VM",
            )
        }
    }

    fn no_guest(&self) -> bool {
        self.dhcp.as_ref().is_some_and(|d| !d.guest)
    }

    fn dhcp(&self) -> Finding {
        let name = &self.interface.name;
        let Some(record) = &self.dhcp else {
            return Finding::unchecked(
                "unknown: no DHCP record (not weft's local launcher, or it has not reported yet)",
            );
        };
        if !record.guest {
            return Finding::unchecked(
                "not checked: no guest runs (weft up --no-guests), nobody asks for a lease",
            );
        }
        let Some(counters) = record.interfaces.get(name) else {
            return Finding::unchecked(format!("unknown: no DHCP record for {name} yet"));
        };
        if !counters.served {
            return Finding::unchecked(format!(
                "no DHCP server for {name}: its pod interface has no IPv4 address to lease"
            ));
        }
        if counters.received == 0 {
            return Finding::failed(
                format!("the guest never asked for a lease on {name}"),
                "is its DHCP client running on that NIC? (a hot-plugged NIC needs the guest to run DHCP on it)",
            );
        }
        if counters.replied == 0 {
            return Finding::failed(
                format!(
                    "the guest sent {} DHCP requests on {name}, none was answered ({} dropped: not from the guest's MAC)",
                    counters.received, counters.dropped
                ),
                "the guest NIC's MAC must be the one its lease is for (the domain's MAC)",
            );
        }
        Finding::ok(format!(
            "the DHCP server answered {} of {} requests on {name}",
            counters.replied, counters.received
        ))
    }

    fn guest_report(&self) -> Finding {
        let status = self.status_interface();
        if let Some(s) = status
            && weft_vm::infosource::contains(&s.info_source, weft_vm::infosource::GUEST_AGENT)
            && weft_vm::status::nic_leased(s, self.status_entry())
        {
            let on = if s.interface_name.is_empty() {
                "-"
            } else {
                &s.interface_name
            };
            return Finding::ok(format!("qemu-guest-agent reports {} on {on}", s.ip_address));
        }
        if self.no_guest() {
            return Finding::unchecked("not checked: no guest runs (weft up --no-guests)");
        }
        if weft_vm::status::agent_absent(&self.snapshot.vmi) {
            return Finding::unchecked(
                "not checked: the guest image was built without qemu-guest-agent \
                 (apt-get install qemu-guest-agent on the node, then restart the VM)",
            );
        }
        if self.dhcp.is_none() {
            return Finding::unchecked("unknown: no guest report (not weft's local launcher)");
        }
        let guest_iface = status.map(|s| s.interface_name.clone()).unwrap_or_default();
        if !guest_iface.is_empty()
            && self
                .dhcp
                .as_ref()
                .is_some_and(|d| d.lease_failures.contains(&guest_iface))
        {
            return Finding::failed(
                format!("the guest's DHCP client gave up on {guest_iface} (WEFT-LEASEFAIL on its console)"),
                "check that the DHCP server answers on that NIC (stage 6) and the guest's MAC",
            );
        }
        let agent_connected = self.snapshot.vmi.status.as_ref().is_some_and(|st| {
            st.conditions
                .iter()
                .any(|c| c.type_ == "AgentConnected" && c.status == "True")
        });
        if !agent_connected {
            return Finding::failed(
                format!(
                    "qemu-guest-agent does not answer (no AgentConnected condition): nothing reports {}'s address from inside the guest",
                    self.interface.name
                ),
                "is qemu-ga running in the guest on the virtio-serial port org.qemu.guest_agent.0? \
                 (a guest image built without qemu-guest-agent installed on the host has none: \
                 apt-get install qemu-guest-agent; the serial log in the pod directory shows the guest's own WEFT- lines)",
            );
        }
        // An agent asked before the guest's DHCP client got its lease reports the kernel's own
        // link-local address (`nic_leased` above does not count it).
        let reported = match status {
            Some(s)
                if weft_vm::infosource::contains(&s.info_source, weft_vm::infosource::GUEST_AGENT)
                    && !s.ip_address.is_empty() =>
            {
                format!("only the link-local {}", s.ip_address)
            }
            _ => "no address".to_string(),
        };
        Finding::failed(
            format!("qemu-guest-agent reports {reported} for {}", self.interface.name),
            "the agent answers but the guest NIC has no address yet: did its DHCP client get a lease? \
             (the serial log in the pod directory shows WEFT-LEASE lines)",
        )
    }

    fn status_ip(&self) -> Finding {
        let name = &self.interface.name;
        match self.status_interface() {
            Some(s) if !s.ip_address.is_empty() => {
                Finding::ok(format!("status.interfaces[{name}].ipAddress = {}", s.ip_address))
            }
            status => {
                let entry_ips = self.status_entry().map(|e| e.ips.is_empty());
                let where_ = if status.is_some() {
                    format!("status.interfaces[{name}] has no IP")
                } else {
                    format!("status.interfaces has no entry {name}")
                };
                if entry_ips == Some(true) {
                    Finding::failed(
                        format!("{where_}: its network-status entry has no IP either (the NAD gives none)"),
                        "add an ipam section to the NAD, or configure the guest's address statically \
                         (then no IP here is expected)",
                    )
                } else {
                    Finding::failed(
                        where_,
                        "wait for the next status sync; a hot-plugged NIC reports once the guest brings it up",
                    )
                }
            }
        }
    }
}
