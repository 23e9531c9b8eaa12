//! The launcher role of the local agent (what virt-handler and virt-launcher do in KubeVirt):
//! for each VMI interface, plan the wiring in the pod netns and apply it, serve its guest lease
//! over DHCP, then boot the guest on the taps, and report domain and guest-agent status (the
//! guest agent is qemu-guest-agent, polled by [`crate::agent::local::guest_agent`]).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use weft_launcher::exec::{self, NetnsBackend};
use weft_launcher::{
    Binding, GuestLease, NatOptions, TapOwner, TapSettings, VmNetworkCidrs, WiringPlan, WiringRequest,
};
use weft_store::Api;
use weft_vm::VirtualMachineInstance;

use crate::agent::local::context::AgentContext;
use crate::agent::local::nic::DomainNic;
use crate::agent::local::sandbox::Sandbox;
use crate::kinds::Pod;

/// What the launcher role keeps for a running VMI.
#[derive(Default)]
pub struct LauncherState {
    /// VMI name (in the pod's namespace).
    pub vmi: String,
    /// Pod netns path.
    pub netns_path: String,
    /// Applied plans, in interface order.
    pub plans: Vec<WiringPlan>,
    /// DHCP servers by interface name (stopped on drop).
    pub dhcp: std::collections::BTreeMap<String, weft_dhcp::ServerHandle>,
    /// DHCPv6 servers and router advertisers by interface name (stopped on drop).
    pub dhcp6: std::collections::BTreeMap<String, crate::agent::local::guest_v6::V6Servers>,
    /// The guest, when one runs.
    pub guest: Option<weft_guest::RunningGuest>,
    /// Domain interfaces (network name, MAC, tap).
    pub domain: Vec<DomainNic>,
    /// Pod IPs per network (the pod interface cache).
    pub pod_ips: std::collections::BTreeMap<String, Vec<String>>,
    /// The pod's directory (serial log, domain XML, the launcher record).
    pub dir: PathBuf,
    /// The NICs the guest booted with (its QEMU spec).
    pub boot_nics: Vec<DomainNic>,
    /// Interfaces whose first answered DHCP exchange was recorded as an Event.
    pub dhcp_announced: std::collections::BTreeSet<String>,
    /// The guest's qemu-guest-agent, polled for the status.
    pub guest_agent: crate::agent::local::guest_agent::AgentPoller,
}

/// What a launcher records in its pod directory (`launcher.json`) so that a restarted agent
/// takes over the wiring, the DHCP servers and the running guest instead of orphaning them.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LauncherRecord {
    vmi: String,
    netns_path: String,
    plans: Vec<WiringPlan>,
    domain: Vec<DomainNic>,
    pod_ips: std::collections::BTreeMap<String, Vec<String>>,
    boot_nics: Vec<DomainNic>,
    /// The guest's QEMU: pid, start time, hot-plug slots.
    guest: Option<(u32, u64, Vec<Option<String>>)>,
}

const RECORD_FILE: &str = "launcher.json";

/// Record `state` in its pod directory (atomically: a restarted agent reads all or nothing).
/// File I/O: call it on a blocking thread.
pub fn save(state: &LauncherState) -> anyhow::Result<()> {
    let guest = match state.guest.as_ref().and_then(|g| g.pid().map(|pid| (g, pid))) {
        Some((guest, pid)) => {
            let record = crate::local::processes::ProcessRecord::of(pid)
                .with_context(|| format!("the guest's QEMU (pid {pid}) is gone"))?;
            Some((pid, record.start_time, guest.plugged().to_vec()))
        }
        None => None,
    };
    let record = LauncherRecord {
        vmi: state.vmi.clone(),
        netns_path: state.netns_path.clone(),
        plans: state.plans.clone(),
        domain: state.domain.clone(),
        pod_ips: state.pod_ips.clone(),
        boot_nics: state.boot_nics.clone(),
        guest,
    };
    std::fs::create_dir_all(&state.dir)?;
    let file = state.dir.join(RECORD_FILE);
    let tmp = file.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&record)?)
        .with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, &file).with_context(|| format!("write {}", file.display()))?;
    Ok(())
}

/// Take over the launcher a previous agent of this node ran for `vmi` in `sandbox`: its wiring
/// stays as it is, its DHCP servers (which lived in that agent) start again on the same leases,
/// and its QEMU, if the record's pid still is that process, is adopted. A guest whose QEMU died
/// meanwhile is an error (the caller marks the VMI with it).
pub async fn adopt(
    agent: &Arc<AgentContext>,
    pod: &Pod,
    vmi: &VirtualMachineInstance,
    sandbox: &Sandbox,
    dir: &Path,
) -> anyhow::Result<LauncherState> {
    let file = dir.join(RECORD_FILE);
    let record = {
        let file = file.clone();
        crate::sys::blocking(move || -> anyhow::Result<LauncherRecord> {
            let bytes = std::fs::read(&file).with_context(|| format!("read {}", file.display()))?;
            serde_json::from_slice(&bytes).with_context(|| format!("parse {}", file.display()))
        })
        .await??
    };
    anyhow::ensure!(
        record.netns_path == sandbox.netns_path() && record.vmi == vmi.metadata.name,
        "{} records another sandbox or VMI",
        file.display()
    );
    let mut state = LauncherState {
        vmi: record.vmi,
        netns_path: record.netns_path,
        plans: record.plans,
        dhcp: Default::default(),
        dhcp6: Default::default(),
        guest: None,
        domain: record.domain,
        pod_ips: record.pod_ips,
        dir: dir.to_path_buf(),
        boot_nics: record.boot_nics,
        dhcp_announced: Default::default(),
        guest_agent: Default::default(),
    };
    let (agent2, pod2, vmi2, guest) = (agent.clone(), pod.clone(), vmi.clone(), record.guest);
    let taken = crate::sys::blocking_with(&mut state, move |state| {
        take_over(&agent2, &pod2, &vmi2, state, guest)
    })
    .await?;
    if let Err(e) = taken {
        // What was taken over (a guest handle, DHCP servers, the wiring) is undone, not leaked.
        stop(agent, state).await;
        return Err(e);
    }
    report(agent, vmi.namespace(), &mut state).await?;
    crate::sys::blocking_with(&mut state, |state| save(state)).await??;
    Ok(state)
}

fn take_over(
    agent: &Arc<AgentContext>,
    pod: &Pod,
    vmi: &VirtualMachineInstance,
    state: &mut LauncherState,
    guest: Option<(u32, u64, Vec<Option<String>>)>,
) -> anyhow::Result<()> {
    crate::agent::local::passt::check_adopted(&state.domain)?;
    if let Some((pid, start_time, plugged)) = guest {
        let qemu = crate::local::processes::ProcessRecord { pid, start_time };
        anyhow::ensure!(
            qemu.is_running(),
            "the guest's QEMU (pid {pid}) exited while the node agent was down"
        );
        let spec = crate::agent::local::guest::spec_for(agent, vmi, &state.boot_nics, &state.dir)?;
        state.guest = Some(weft_guest::RunningGuest::adopt(&spec, pid, plugged));
    }
    let statuses = weft_vm::network_statuses(&pod.metadata.annotations);
    let netns = weft_host::Netns::open(&state.netns_path)?;
    for plan in state.plans.clone() {
        let Some(lease) = plan.lease.clone() else {
            continue;
        };
        let Some(nic) = state.domain.iter().find(|n| n.tap == plan.names.tap).cloned() else {
            continue;
        };
        serve_dhcp(state, &netns, vmi, &nic.name, &nic.tap, lease, &statuses)?;
    }
    Ok(())
}

/// Serve `lease` over DHCP in the pod netns for interface `interface`, to the guest behind
/// `tap` only: the server reads requests off the guest's own tap and answers only the guest's
/// MAC (KubeVirt answers any frame on the bridge).
fn serve_dhcp(
    state: &mut LauncherState,
    netns: &weft_host::Netns,
    vmi: &VirtualMachineInstance,
    interface: &str,
    tap: &str,
    lease: GuestLease,
    statuses: &[weft_netconf::NetworkStatus],
) -> anyhow::Result<()> {
    if let Some(servers) = crate::agent::local::guest_v6::serve(netns, tap, &lease, statuses)? {
        state.dhcp6.insert(interface.to_string(), servers);
    }
    let default = statuses.iter().find(|s| s.default);
    let dns: Vec<Ipv4Addr> = default
        .map(|s| s.dns.nameservers.iter().filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_default();
    let search = default.map(|s| s.dns.search.clone()).unwrap_or_default();
    let Some(config) = dhcp_config(&lease, &vmi.metadata.name, &dns, &search) else {
        return Ok(());
    };
    let (bridge, guest_tap) = (lease.server_interface.clone(), tap.to_string());
    let sockets = netns
        .run_in(move || weft_dhcp::bind_guest_v4(&bridge, &guest_tap))?
        .with_context(|| format!("DHCP sockets on {} / {tap}", lease.server_interface))?;
    state.dhcp.insert(
        interface.to_string(),
        weft_dhcp::spawn_guest(sockets, config)
            .with_context(|| format!("DHCP on {}", lease.server_interface))?,
    );
    Ok(())
}

/// The DHCP server config of a guest lease (IPv4 part), with the pod's DNS and the guest's hostname.
pub fn dhcp_config(
    lease: &GuestLease,
    hostname: &str,
    dns: &[Ipv4Addr],
    search: &[String],
) -> Option<weft_dhcp::ServerConfig> {
    let v4 = lease.ipv4.as_ref()?;
    let mut config = weft_dhcp::ServerConfig::new(v4.address, v4.server_ip);
    config.router = v4.router;
    config.routes = v4
        .routes
        .iter()
        .map(|r| weft_dhcp::ClasslessRoute {
            destination: Some(r.destination).filter(|d| d.prefix_len() > 0),
            gateway: r.gateway,
        })
        .collect();
    config.mtu = lease.mtu;
    config.hostname = hostname.to_string();
    config.client_mac = lease.client_mac.map(|m| m.0);
    config.dns_servers = dns.to_vec();
    config.search_domains = search.to_vec();
    Some(config)
}

/// Wire one VMI interface (at `index` in the VMI's interface list) in the pod netns and serve
/// its lease; the plan is recorded in `state` (for teardown) even when DHCP does not start.
fn wire_interface(
    state: &mut LauncherState,
    netns: &weft_host::Netns,
    vmi: &VirtualMachineInstance,
    index: usize,
    statuses: &[weft_netconf::NetworkStatus],
) -> anyhow::Result<DomainNic> {
    let interface = &vmi.spec.interfaces()[index];
    let network = vmi
        .spec
        .networks
        .iter()
        .find(|n| n.name == interface.name)
        .context("interface without network")?;
    let binding = match interface.binding_kind() {
        weft_vm::api::BindingKind::Masquerade => Binding::Masquerade(NatOptions {
            ports: interface
                .ports
                .iter()
                .filter_map(|p| {
                    Some(weft_launcher::nft::ForwardedPort {
                        protocol: p.protocol.to_lowercase(),
                        port: u16::try_from(p.port).ok()?,
                    })
                })
                .collect(),
            istio: vmi
                .metadata
                .annotation("sidecar.istio.io/inject")
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
            ..NatOptions::default()
        }),
        weft_vm::api::BindingKind::Bridge => Binding::Bridge,
        other => anyhow::bail!(
            "interface {}: binding {other:?} is not supported by the local launcher",
            interface.name
        ),
    };
    let names = weft_vm::pod_interface_names(&vmi.spec.networks, statuses);
    let pod_iface = names
        .get(&interface.name)
        .cloned()
        .with_context(|| format!("no pod interface for network {}", interface.name))?;
    let mut backend = weft_launcher::exec::NetlinkBackend::open(&state.netns_path)?;
    let pod_link = backend
        .discover(&pod_iface)
        .with_context(|| format!("discover {pod_iface}"))?
        .with_context(|| format!("pod link ({pod_iface}) is missing"))?;
    let guest_mac = Some(interface.mac_address.as_str())
        .filter(|m| !m.is_empty())
        .map(str::parse)
        .transpose()
        .with_context(|| format!("interface {}: macAddress", interface.name))?;
    let request = WiringRequest {
        binding,
        pod_iface: pod_iface.clone(),
        primary: network.is_primary(),
        interface_index: index,
        pod_link,
        guest_mac,
        vm_cidrs: VmNetworkCidrs::default(),
        tap: TapSettings {
            owner: TapOwner { uid: 0, gid: 0 },
            queues: 1,
        },
    };
    let plan = weft_launcher::plan_wiring(&request).with_context(|| format!("plan {}", interface.name))?;
    exec::apply(&mut backend, &plan)?;
    let nic = DomainNic {
        name: interface.name.clone(),
        mac: plan.guest_mac.to_string(),
        tap: plan.names.tap.clone(),
        mtu: plan.mtu,
        passt: None,
    };
    state.pod_ips.insert(
        interface.name.clone(),
        plan.pod_ips.iter().map(ToString::to_string).collect(),
    );
    let lease = plan.lease.clone();
    state.plans.push(plan);
    if let Some(lease) = lease {
        serve_dhcp(
            state,
            netns,
            vmi,
            &vmi.spec.interfaces()[index].name,
            &nic.tap,
            lease,
            statuses,
        )?;
    }
    Ok(nic)
}

/// Wire every NIC of `vmi` in the sandbox, start DHCP, boot the guest.
pub async fn start(
    agent: &Arc<AgentContext>,
    pod: &Pod,
    vmi: &VirtualMachineInstance,
    sandbox: &Sandbox,
) -> anyhow::Result<LauncherState> {
    let statuses = weft_vm::network_statuses(&pod.metadata.annotations);
    let mut state = LauncherState {
        vmi: vmi.metadata.name.clone(),
        netns_path: sandbox.netns_path(),
        plans: Vec::new(),
        dhcp: Default::default(),
        dhcp6: Default::default(),
        guest: None,
        domain: Vec::new(),
        pod_ips: Default::default(),
        dir: crate::agent::local::pods::pod_dir(agent, vmi.namespace(), &pod.metadata.name),
        boot_nics: Vec::new(),
        dhcp_announced: Default::default(),
        guest_agent: Default::default(),
    };
    let (agent2, vmi2) = (agent.clone(), vmi.clone());
    let wired = crate::sys::blocking_with(&mut state, move |state| {
        wire_and_boot(&agent2, &vmi2, &statuses, state)?;
        save(state).context("record the launcher")
    })
    .await?;
    if let Err(e) = wired {
        stop(agent, state).await;
        return Err(e);
    }
    report(agent, vmi.namespace(), &mut state).await?;
    Ok(state)
}

/// The blocking part of [`start`] (netlink, DHCP sockets, QEMU): wire every present NIC of
/// `vmi` into `state`, then boot the guest unless the agent runs with `--no-guests`. On error `state` holds
/// what was done, for [`stop`] to undo.
fn wire_and_boot(
    agent: &Arc<AgentContext>,
    vmi: &VirtualMachineInstance,
    statuses: &[weft_netconf::NetworkStatus],
    state: &mut LauncherState,
) -> anyhow::Result<()> {
    let netns = weft_host::Netns::open(&state.netns_path)?;
    let indexes: Vec<usize> = (0..vmi.spec.interfaces().len())
        .filter(|i| !vmi.spec.interfaces()[*i].is_absent())
        .collect();
    for index in indexes {
        let nic = if crate::agent::local::passt::is_passt(&vmi.spec.interfaces()[index]) {
            let parts = crate::agent::local::passt::WireState {
                netns_path: &state.netns_path,
                dir: &state.dir,
                pod_ips: &mut state.pod_ips,
            };
            crate::agent::local::passt::wire(parts, &netns, vmi, index, statuses, &agent.state_dir)?
        } else {
            wire_interface(state, &netns, vmi, index, statuses)?
        };
        state.domain.push(nic);
    }
    if !agent.no_guests {
        let dir = state.dir.clone();
        let guest = crate::agent::local::guest::boot(agent, vmi, &state.domain, &netns, &dir)?;
        state.guest = Some(guest);
        state.boot_nics = state.domain.clone();
    }
    Ok(())
}

/// Hot-plug on the launcher side (KubeVirt's `networks_to_hotplug` then the launcher's attach):
/// wire the pod side of every interface whose pod interface is attached (`multus-status`) but
/// not wired yet, then attach the NIC to the running guest (QMP `device_add`), after which it
/// is part of the domain. Unplug (`state: absent`) detaches the NIC and undoes the wiring.
pub async fn hotplug(
    agent: &Arc<AgentContext>,
    pod: &Pod,
    vmi: &VirtualMachineInstance,
    state: &mut LauncherState,
) -> anyhow::Result<usize> {
    let statuses = weft_vm::network_statuses(&pod.metadata.annotations);
    let vmi2 = vmi.clone();
    let changes =
        crate::sys::blocking_with(state, move |state| apply_hotplug(&vmi2, &statuses, state)).await??;
    if changes > 0 {
        report(agent, vmi.namespace(), state).await?;
    }
    Ok(changes)
}

/// The blocking part of [`hotplug`] (netlink, QMP `device_add`/`device_del`, DHCP sockets):
/// plug and unplug, then record `state` when anything changed. Returns the number of changes.
fn apply_hotplug(
    vmi: &VirtualMachineInstance,
    statuses: &[weft_netconf::NetworkStatus],
    state: &mut LauncherState,
) -> anyhow::Result<usize> {
    // What changes is weft_vm's decision (KubeVirt's hot-plug selection) on what this launcher
    // sees: the pod interfaces the meta-plugin attached, the guest's NICs, the pod-side wiring.
    let names = weft_vm::pod_interface_names(&vmi.spec.networks, statuses);
    let network_of = |pod_iface: &str| {
        names
            .iter()
            .find(|(_, iface)| iface.as_str() == pod_iface)
            .map(|(network, _)| network.clone())
    };
    let attached: Vec<String> = statuses.iter().filter_map(|s| network_of(&s.interface)).collect();
    let wired: Vec<String> = state
        .plans
        .iter()
        .filter_map(|p| network_of(&p.pod_iface))
        .collect();
    let in_domain: Vec<String> = state.domain.iter().map(|nic| nic.name.clone()).collect();
    fn strs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let plan = weft_vm::plan_hotplug(vmi, &strs(&attached), &strs(&in_domain), &strs(&wired));
    if plan.is_empty() {
        return Ok(0);
    }
    let netns = weft_host::Netns::open(&state.netns_path)?;
    let mut changes = 0;
    for network in &plan.attach {
        let Some(index) = vmi.spec.interfaces().iter().position(|i| &i.name == network) else {
            continue;
        };
        let nic = wire_interface(state, &netns, vmi, index, statuses)?;
        if let Some(guest) = state.guest.as_mut() {
            guest
                .hotplug_nic(
                    &weft_guest::GuestNic::virtio(&nic.tap, &nic.mac),
                    &format!("ua-{}", nic.name),
                )
                .with_context(|| format!("attach {} to the guest", nic.name))?;
        }
        state.domain.push(nic);
        changes += 1;
    }
    for name in &plan.detach {
        let Some(position) = state.domain.iter().position(|nic| &nic.name == name) else {
            continue;
        };
        let nic = state.domain.remove(position);
        if let Some(guest) = state.guest.as_mut() {
            guest
                .unplug_nic(&format!("ua-{}", nic.name))
                .with_context(|| format!("detach {name} from the guest"))?;
        }
        changes += 1;
    }
    // The pod side of what left the domain, now or in an earlier pass whose teardown failed.
    for name in plan.detach.iter().chain(&plan.unplug) {
        let Some(pod_iface) = names.get(name) else {
            continue;
        };
        if let Some(plan_index) = state.plans.iter().position(|p| &p.pod_iface == pod_iface) {
            let plan = state.plans.remove(plan_index);
            let mut backend = weft_launcher::exec::NetlinkBackend::open(&state.netns_path)?;
            exec::teardown(&mut backend, &plan)?;
        }
        if let Some(server) = state.dhcp.remove(name) {
            let _ = server.stop();
        }
        state.dhcp6.remove(name);
        state.pod_ips.remove(name);
        if !plan.detach.contains(name) {
            changes += 1;
        }
    }
    if changes > 0 {
        save(state)?;
    }
    Ok(changes)
}

impl LauncherState {
    /// Let go of the guest handle (one whose QEMU exited) off the async workers: the handle's
    /// drop reaps QEMU and removes its pid file and sockets.
    pub async fn drop_guest(&mut self) {
        if let Some(guest) = self.guest.take()
            && let Err(e) = crate::sys::blocking(move || drop(guest)).await
        {
            tracing::warn!(vmi = %self.vmi, "guest: {e:#}");
        }
    }
}

/// The guest's check results as a compact JSON list (`weft_vm::status::GUEST_REPORT_ANNOTATION`).
pub fn checks_summary(report: &weft_guest::GuestReport) -> String {
    let checks: Vec<serde_json::Value> = report
        .checks
        .iter()
        .map(|c| serde_json::json!({"kind": c.kind, "target": c.target, "ok": c.ok}))
        .collect();
    serde_json::to_string(&checks).unwrap_or_default()
}

/// Update the VMI's status from the domain and qemu-guest-agent: interfaces, `guestOSInfo`,
/// the `AgentConnected` condition, the `Ready` condition (the guest has leased every NIC, from
/// its serial report), and the guest's check results. This gathers the report; what it means
/// for the VMI is `weft_vm::status::apply_launcher_report`'s decision.
pub async fn report(
    agent: &Arc<AgentContext>,
    namespace: &str,
    state: &mut LauncherState,
) -> anyhow::Result<()> {
    // The guest's serial report (its own checks, leases, Ready) is file I/O: off the async workers.
    let guest_report =
        crate::sys::blocking_with(state, |state| state.guest.as_mut().and_then(|g| g.report().ok())).await?;
    // qemu-guest-agent: a session on its own thread when due, never waited on here.
    let agent_absent = state.guest.as_ref().is_some_and(|g| !g.spec().guest_agent);
    match state
        .guest
        .as_ref()
        .map(|g| g.spec())
        .filter(|spec| spec.guest_agent)
    {
        Some(spec) => {
            state
                .guest_agent
                .tick(&spec.qga_socket(), std::time::Instant::now());
        }
        None => state.guest_agent = Default::default(),
    }
    let record = dhcp_record(state, guest_report.as_ref());
    let input = weft_vm::status::LauncherReport {
        domain: domain_report(state, state.guest_agent.interfaces()),
        agent: state.guest_agent.view(),
        checks: guest_report.as_ref().map(checks_summary).filter(|c| c != "[]"),
        dhcp_record: serde_json::to_string(&record).unwrap_or_default(),
        ready: state.guest.is_none() || guest_report.as_ref().is_some_and(|r| r.ready),
        agent_absent,
    };
    let now = weft_store::now_rfc3339();
    Api::<VirtualMachineInstance>::namespaced(agent.store.clone(), namespace)
        .modify_status(&state.vmi, |vmi| {
            weft_vm::status::apply_launcher_report(vmi, &input, &now)
        })
        .await?;
    announce_dhcp(agent, namespace, state, &record).await;
    Ok(())
}

/// Reason of the Event recorded on a VMI the first time an interface's DHCP server answered
/// its guest.
pub const DHCP_SERVED_REASON: &str = "DHCPLeaseServed";

/// Record an Event on the VMI when an interface's DHCP server answered its guest for the first
/// time. Events are one per (object, reason), so the message names every interface answered so
/// far rather than only the newest.
async fn announce_dhcp(
    agent: &Arc<AgentContext>,
    namespace: &str,
    state: &mut LauncherState,
    record: &crate::explain::DhcpRecord,
) {
    let answered: Vec<(&String, &crate::explain::DhcpCounters)> =
        record.interfaces.iter().filter(|(_, c)| c.replied > 0).collect();
    if answered
        .iter()
        .all(|(name, _)| state.dhcp_announced.contains(*name))
    {
        return;
    }
    let object = crate::kinds::ObjectReference {
        api_version: "kubevirt.io/v1".into(),
        kind: "VirtualMachineInstance".into(),
        namespace: namespace.into(),
        name: state.vmi.clone(),
    };
    let message = format!(
        "the DHCP server answered the guest on {}",
        answered
            .iter()
            .map(|(name, c)| format!("{name} ({} replies to {} requests)", c.replied, c.received))
            .collect::<Vec<_>>()
            .join(", ")
    );
    match crate::events::emit(
        &agent.store,
        &object,
        crate::events::NORMAL,
        DHCP_SERVED_REASON,
        &message,
        "weft-launcher",
    )
    .await
    {
        Ok(_) => state
            .dhcp_announced
            .extend(answered.iter().map(|(name, _)| (*name).clone())),
        Err(e) => tracing::warn!(vmi = %state.vmi, "event: {e}"),
    }
}

/// What the launcher's DHCP servers saw, per domain NIC, for `weft explain`.
pub fn dhcp_record(
    state: &LauncherState,
    guest: Option<&weft_guest::GuestReport>,
) -> crate::explain::DhcpRecord {
    use std::sync::atomic::Ordering::Relaxed;
    crate::explain::DhcpRecord {
        guest: state.guest.is_some(),
        interfaces: state
            .domain
            .iter()
            .map(|nic| {
                let counters = match state.dhcp.get(&nic.name) {
                    Some(server) => {
                        let stats = server.stats();
                        crate::explain::DhcpCounters {
                            served: true,
                            received: stats.received.load(Relaxed),
                            replied: stats.replied.load(Relaxed),
                            dropped: stats.dropped.load(Relaxed),
                        }
                    }
                    None => crate::explain::DhcpCounters::default(),
                };
                (nic.name.clone(), counters)
            })
            .collect(),
        lease_failures: guest.map(|g| g.lease_failures.clone()).unwrap_or_default(),
    }
}

/// What the node knows of the domain: its NICs, qemu-guest-agent's interfaces (`agent`), the
/// pod IPs.
pub fn domain_report(
    state: &LauncherState,
    agent: Vec<weft_vm::status::GuestAgentInterface>,
) -> weft_vm::DomainReport {
    weft_vm::DomainReport {
        interfaces: state
            .domain
            .iter()
            .map(|nic| weft_vm::status::DomainInterface {
                alias: format!("ua-{}", nic.name),
                mac: nic.mac.clone(),
                ..Default::default()
            })
            .collect(),
        guest_agent_interfaces: agent,
        pod_interface_cache: state
            .pod_ips
            .iter()
            .map(|(name, ips)| {
                (
                    name.clone(),
                    weft_vm::status::PodInterfaceCache {
                        pod_ip: ips.first().cloned().unwrap_or_default(),
                        pod_ips: ips.clone(),
                    },
                )
            })
            .collect(),
        ..Default::default()
    }
}

/// Stop the guest and the DHCP servers, and undo the wiring (on the blocking pool).
pub async fn stop(agent: &Arc<AgentContext>, state: LauncherState) {
    let state_dir = agent.state_dir.clone();
    let pid = state.guest.as_ref().and_then(|g| g.pid());
    let stopped = crate::sys::blocking(move || {
        stop_blocking(state);
        // The guest's QEMU record goes with it (`weft down` would skip it anyway: not running).
        if let Some(pid) = pid {
            crate::local::processes::forget(&state_dir, pid);
        }
    })
    .await;
    if let Err(e) = stopped {
        tracing::warn!("stop the launcher: {e:#}");
    }
}

fn stop_blocking(state: LauncherState) {
    let _ = std::fs::remove_file(state.dir.join(RECORD_FILE));
    if let Some(guest) = state.guest {
        let _ = guest.stop();
    }
    crate::agent::local::passt::stop_all(&state.domain);
    for server in state.dhcp.into_values() {
        let _ = server.stop();
    }
    let Ok(mut backend) = weft_launcher::exec::NetlinkBackend::open(&state.netns_path) else {
        return;
    };
    // The pod is deleted next: its interfaces do not get their addresses back (a migration
    // source's would answer for the guest that now runs on the target).
    for plan in state.plans.iter().rev() {
        for op in plan.teardown_before_deletion() {
            if let Err(e) = backend.run(&op)
                && !e.not_found
            {
                tracing::warn!("teardown {}: {e}", plan.pod_iface);
            }
        }
    }
}
