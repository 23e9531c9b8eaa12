//! Booting a VMI's guest in its launcher pod: the initramfs (built once per state directory),
//! the kernel command line checks a VMI asks for, and QEMU on the pod's taps.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use weft_guest::{GuestNic, GuestSpec, RunningGuest};
use weft_vm::VirtualMachineInstance;

use crate::agent::local::context::AgentContext;
use crate::agent::local::nic::DomainNic;

/// VMI annotation listing connectivity checks the guest runs after its leases, as
/// `kind=target` words separated by spaces (`ping=172.31.255.254 wget=http://…`).
pub const GUEST_CHECKS_ANNOTATION: &str = "weft.dev/guest-checks";

/// PCIe slots a guest keeps for hot-plug, counting the NICs it boots with (as KubeVirt).
pub const HOTPLUG_SLOTS: u8 = 4;

/// Kernel command-line words for the checks a VMI asks for.
pub fn check_words(vmi: &VirtualMachineInstance) -> Vec<String> {
    vmi.metadata
        .annotation(GUEST_CHECKS_ANNOTATION)
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|word| word.split_once('='))
        .filter(|(kind, target)| {
            matches!(
                *kind,
                "ping" | "wget" | "httpd" | "uptime" | "pingflood" | "streamfrom" | "streamto"
            ) && !target.is_empty()
        })
        .map(|(kind, target)| format!("weft.{kind}={target}"))
        .collect()
}

/// The QEMU spec of `vmi`'s guest booting on `nics`, its files in `dir` (built the same way at
/// boot and when a restarted agent takes the running guest over).
pub fn spec_for(
    agent: &Arc<AgentContext>,
    vmi: &VirtualMachineInstance,
    nics: &[DomainNic],
    dir: &Path,
) -> anyhow::Result<GuestSpec> {
    let kernel = weft_guest::locate_kernel(&weft_guest::kernel::kernel_dir()).context("guest kernel")?;
    // Named by whether it carries qemu-guest-agent: installing or removing the package gives a
    // new image, and the guest's spec says which it boots.
    let guest_agent = weft_guest::agent::available();
    let flavour = if guest_agent { "qga" } else { "noagent" };
    let initrd = agent
        .state_dir
        .join("guest")
        .join(format!("initramfs-{}-{flavour}.cpio.gz", kernel.release));
    if !initrd.exists() {
        std::fs::create_dir_all(initrd.parent().unwrap_or(dir))?;
        let busybox = crate::sys::which("busybox").context("busybox is missing")?;
        let tmp = initrd.with_extension("tmp");
        weft_guest::write_initramfs(&kernel, &busybox, &tmp).context("initramfs")?;
        std::fs::rename(&tmp, &initrd)?;
    }
    let mut spec = GuestSpec::new(&vmi.metadata.name, &kernel.vmlinux, &initrd, dir);
    spec.guest_agent = guest_agent;
    spec.cmdline_extras = check_words(vmi);
    spec.nics = nics
        .iter()
        .map(|nic| match &nic.passt {
            Some(passt) => GuestNic::virtio_stream(&passt.socket, &nic.mac),
            None => GuestNic::virtio(&nic.tap, &nic.mac),
        })
        .collect();
    // Free PCIe root ports for NIC hot-plug (KubeVirt keeps 4 − interfaces placeholders; at
    // least one here so a VM with many NICs can still take one more).
    spec.hotplug_slots = HOTPLUG_SLOTS.saturating_sub(nics.len() as u8).max(1);
    // A migration target: the same devices, waiting for the source's state.
    if vmi
        .metadata
        .annotation(crate::agent::local::incoming::INCOMING_ANNOTATION)
        .is_some()
    {
        spec.incoming = true;
        spec.serial_append = true;
    }
    Ok(spec)
}

/// Boot the guest on the NICs' taps inside the pod netns.
pub fn boot(
    agent: &Arc<AgentContext>,
    vmi: &VirtualMachineInstance,
    nics: &[DomainNic],
    netns: &weft_host::Netns,
    dir: &Path,
) -> anyhow::Result<RunningGuest> {
    std::fs::create_dir_all(dir)?;
    let spec = spec_for(agent, vmi, nics, dir)?;
    // A domain weft cannot render is an error of the VM's start, not a comment in a file.
    let domain_xml = crate::agent::local::domain::render(vmi, nics, &spec)?;
    std::fs::write(dir.join("domain.xml"), domain_xml)?;
    let netns_name = Path::new(&netns.label().to_string())
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_string();
    crate::agent::local::incoming::seed_serial_log(vmi, &spec.serial_log())?;
    let guest = RunningGuest::spawn(&spec, Some(&netns_name))
        .with_context(|| format!("start QEMU for {}", vmi.metadata.name))?;
    if let Some(pid) = guest.pid() {
        crate::local::processes::record(
            &agent.state_dir,
            &format!("qemu-{}-{}", vmi.namespace(), vmi.metadata.name),
            pid,
        )?;
    }
    Ok(guest)
}
