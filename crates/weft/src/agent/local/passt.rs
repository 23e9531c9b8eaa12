//! The passt binding in the local launcher (what the passt plugin's sidecar and libvirt do in
//! KubeVirt): one `passt` per interface, started in the pod netns and supervised like QEMU
//! (recorded by pid and start time in the processes registry, so `weft down` stops it too),
//! its socket the guest NIC's `-netdev stream`. Nothing is wired in the pod: no bridge, no tap,
//! no NAT rule. The decisions are `weft_launcher::passt`'s.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use weft_launcher::exec::NetnsBackend;
use weft_launcher::passt::{PASST_PLUGIN_NAME, PasstPlan, PasstRequest, listening_in, plan_passt};
use weft_vm::VirtualMachineInstance;
use weft_vm::api::{BindingKind, Interface};

use crate::agent::local::nic::{DomainNic, PasstNic};
use crate::local::processes::{self, ProcessRecord};

/// The user passt drops to (`nobody`): it owns the socket directory.
pub const PASST_USER: (u32, u32) = (65534, 65534);

/// How long passt may take to listen on its socket.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// sysctls KubeVirt sets in the pod for passt (§7.5): its unprivileged user may bind low ports
/// and open ICMP echo sockets (the group range is passt's own group here).
fn pod_sysctls() -> [(&'static str, String); 2] {
    [
        ("net/ipv4/ip_unprivileged_port_start", "0".to_string()),
        (
            "net/ipv4/ping_group_range",
            format!("{} {}", PASST_USER.1, PASST_USER.1),
        ),
    ]
}

impl PasstNic {
    fn process(&self) -> ProcessRecord {
        ProcessRecord {
            pid: self.pid,
            start_time: self.start_time,
        }
    }
}

/// Whether `iface` is bound by passt: the `passt` plugin (KubeVirt's network binding plugin,
/// whose sidecar acts on that name) or the core `passtBinding`.
pub fn is_passt(iface: &Interface) -> bool {
    match iface.binding_kind() {
        BindingKind::PasstBinding => true,
        BindingKind::Plugin(name) => name == PASST_PLUGIN_NAME,
        _ => false,
    }
}

/// The sidecar's own check: passt serves the pod network only (`pod network not found`,
/// `interface %q is not set with Passt network binding plugin`).
fn check_pod_network(vmi: &VirtualMachineInstance, iface: &Interface) -> anyhow::Result<()> {
    let network = vmi
        .spec
        .networks
        .iter()
        .find(|n| n.name == iface.name)
        .with_context(|| format!("interface {}: no network", iface.name))?;
    anyhow::ensure!(
        network.pod.is_some(),
        "interface {:?}: the passt binding serves the pod network only (network {:?} is not `pod: {{}}`)",
        iface.name,
        network.name
    );
    Ok(())
}

/// The parts of a launcher's state [`wire`] reads and writes.
pub struct WireState<'a> {
    /// The pod netns path.
    pub netns_path: &'a str,
    /// The pod's directory.
    pub dir: &'a Path,
    /// The pod interface cache (pod IPs per network): `wire` adds the passt NIC's.
    pub pod_ips: &'a mut std::collections::BTreeMap<String, Vec<String>>,
}

/// Start passt for interface `index` of `vmi` in the pod netns and wait until it listens; the
/// NIC is recorded in `state` only once passt runs (a failed start leaves nothing behind).
pub fn wire(
    state: WireState<'_>,
    netns: &weft_host::Netns,
    vmi: &VirtualMachineInstance,
    index: usize,
    statuses: &[weft_netconf::NetworkStatus],
    state_dir: &Path,
) -> anyhow::Result<DomainNic> {
    let iface = &vmi.spec.interfaces()[index];
    check_pod_network(vmi, iface)?;
    let names = weft_vm::pod_interface_names(&vmi.spec.networks, statuses);
    let pod_iface = names
        .get(&iface.name)
        .map(String::as_str)
        .with_context(|| format!("no pod interface for network {}", iface.name))?;
    let program = crate::sys::which(weft_launcher::passt::PASST_PROGRAM)
        .context("passt is missing: the passt binding needs Debian's passt (scripts/install-deps.sh)")?;
    let mut backend = weft_launcher::exec::NetlinkBackend::open(state.netns_path)?;
    let pod_link = backend
        .discover(pod_iface)
        .with_context(|| format!("discover {pod_iface}"))?
        .with_context(|| format!("pod link ({pod_iface}) is missing"))?;
    let ports = iface
        .ports
        .iter()
        .map(|p| {
            Ok(weft_launcher::nft::ForwardedPort {
                protocol: p.protocol.clone(),
                port: u16::try_from(p.port).with_context(|| format!("port {}", p.port))?,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let plan = plan_passt(&PasstRequest {
        interface: iface.name.clone(),
        pod_iface: pod_iface.to_string(),
        pod_dir: state.dir.to_path_buf(),
        ports,
        runas: PASST_USER,
    })?;
    for (key, value) in pod_sysctls() {
        netns
            .run_in(|| weft_host::write_sysctl(key, &value))?
            .with_context(|| format!("sysctl {key} in the pod"))?;
    }
    let name = format!("passt-{}-{}-{}", vmi.namespace(), vmi.metadata.name, iface.name);
    let nic = start(&plan, &program, netns, state_dir, &name, pod_iface)?;
    let mac = match iface.mac_address.as_str() {
        "" => weft_launcher::passt::generated_mac(&format!(
            "{}/{}",
            vmi.metadata.uid.as_deref().unwrap_or(&vmi.metadata.name),
            iface.name
        )),
        mac => mac.to_string(),
    };
    // KubeVirt's pod interface cache for passt: the pod's own IPs (the guest gets them).
    state.pod_ips.insert(
        iface.name.clone(),
        pod_link.addresses.iter().map(|a| a.addr().to_string()).collect(),
    );
    Ok(DomainNic {
        name: iface.name.clone(),
        mac,
        tap: String::new(),
        mtu: pod_link.mtu,
        passt: Some(nic),
    })
}

fn start(
    plan: &PasstPlan,
    program: &Path,
    netns: &weft_host::Netns,
    state_dir: &Path,
    name: &str,
    pod_iface: &str,
) -> anyhow::Result<PasstNic> {
    use std::os::unix::fs::PermissionsExt;
    // A socket left by a passt of an earlier start of this pod would make passt pick another
    // path: start from an empty directory only passt's user may write.
    let _ = std::fs::remove_dir_all(&plan.dir);
    std::fs::create_dir_all(&plan.dir).with_context(|| format!("create {}", plan.dir.display()))?;
    std::os::unix::fs::chown(&plan.dir, Some(plan.runas.0), Some(plan.runas.1))
        .with_context(|| format!("chown {}", plan.dir.display()))?;
    std::fs::set_permissions(&plan.dir, std::fs::Permissions::from_mode(0o700))?;
    let mut command = std::process::Command::new(program);
    command.args(&plan.argv[1..]);
    let stderr_log = plan.log.with_extension("stderr.log");
    let mut child = processes::spawn_child(name, Some(netns), command, &stderr_log, true)?;
    let pid = child.id();
    let record_file = processes::pid_dir(state_dir).join(format!("{name}.pid"));
    let record = processes::record(state_dir, name, pid);
    // passt runs in the foreground as our child: reap it whenever it exits (an agent that
    // restarts leaves it to init, which does the same).
    let reaper = std::thread::Builder::new()
        .name(format!("reap-{pid}"))
        .spawn(move || child.wait());
    let record = match (record, reaper) {
        (Ok(record), Ok(_)) => record,
        (record, _) => {
            stop_process(ProcessRecord::of(pid), &plan.dir, Some(&record_file));
            return Err(record
                .err()
                .unwrap_or_else(|| anyhow::anyhow!("cannot watch passt (pid {pid})")));
        }
    };
    let nic = PasstNic {
        pod_iface: pod_iface.to_string(),
        socket: plan.socket.clone(),
        dir: plan.dir.clone(),
        pid,
        start_time: record.start_time,
        record: record_file,
    };
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if !record.is_running() {
            let log = std::fs::read_to_string(&plan.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            stop(&nic);
            anyhow::bail!(
                "passt for {pod_iface} exited at start ({}): {}{}",
                plan.log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
                if log.contains("Too many open files") {
                    " — forwarding every port (an interface without `ports`) needs a socket per port; list the ports or raise RLIMIT_NOFILE"
                } else {
                    ""
                }
            );
        }
        let table = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap_or_default();
        if listening_in(&table, &plan.socket) {
            return Ok(nic);
        }
        if Instant::now() >= deadline {
            stop(&nic);
            anyhow::bail!(
                "passt for {pod_iface} did not listen on {} within {READY_TIMEOUT:?}",
                plan.socket.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop_process(process: Option<ProcessRecord>, dir: &Path, record: Option<&Path>) {
    if let Some(process) = process {
        process.signal(nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(3);
        while process.is_running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        process.signal(nix::sys::signal::Signal::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(2);
        while process.is_running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // passt leaves its socket behind: the directory goes with it.
    let _ = std::fs::remove_dir_all(dir);
    if let Some(record) = record {
        let _ = std::fs::remove_file(record);
    }
}

/// Stop one passt (SIGTERM, then SIGKILL), remove its socket directory and its record.
pub fn stop(nic: &PasstNic) {
    stop_process(Some(nic.process()), &nic.dir, Some(&nic.record));
}

/// Stop every passt of `nics` (after the guest stopped).
pub fn stop_all(nics: &[DomainNic]) {
    for nic in nics.iter().filter_map(|n| n.passt.as_ref()) {
        stop(nic);
    }
}

/// A restarted agent takes the launcher over: every passt it recorded must still run (the
/// guest's pod network is gone otherwise).
pub fn check_adopted(nics: &[DomainNic]) -> anyhow::Result<()> {
    for nic in nics.iter().filter_map(|n| n.passt.as_ref()) {
        anyhow::ensure!(
            nic.process().is_running(),
            "passt (pid {}) for {} exited while the node agent was down",
            nic.pid,
            nic.pod_iface
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_vm::api::{Marker, PluginBinding};

    #[test]
    fn passt_is_the_plugin_of_that_name_or_the_core_binding() {
        let plugin = |name: &str| Interface {
            name: "default".into(),
            binding: Some(PluginBinding {
                name: name.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(is_passt(&plugin("passt")));
        assert!(!is_passt(&plugin("slirp")));
        assert!(is_passt(&Interface {
            passt_binding: Some(Marker::new()),
            ..Default::default()
        }));
        assert!(!is_passt(&Interface::masquerade("default")));
    }
}
