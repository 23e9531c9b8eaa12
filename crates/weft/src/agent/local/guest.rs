//! Booting a VMI's guest in its launcher pod: the initramfs (built once per state directory),
//! the kernel command line checks a VMI asks for, and QEMU on the pod's taps.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use weft_guest::{GuestNic, GuestSpec, RunningGuest};
use weft_vm::VirtualMachineInstance;

use crate::agent::local::context::AgentContext;
use crate::agent::local::nic::DomainNic;

/// VMI annotation listing what the guest does after its leases, as `kind=target` words
/// separated by spaces: connectivity checks (`ping=172.31.255.254 wget=http://…`) and static
/// addresses for NICs that nothing leases (`addr=02:00:00:0c:00:02=10.99.0.2/24`: the NIC with
/// that MAC, on an L2-only network, gets that address instead of a DHCP attempt).
pub const GUEST_CHECKS_ANNOTATION: &str = "weft.dev/guest-checks";

/// PCIe slots a guest keeps for hot-plug, counting the NICs it boots with (as KubeVirt).
pub const HOTPLUG_SLOTS: u8 = 4;

/// The kinds of word the guest's /init acts on (crates/guest/src/init.sh).
const GUEST_WORDS: [&str; 8] = [
    "ping",
    "wget",
    "httpd",
    "uptime",
    "pingflood",
    "streamfrom",
    "streamto",
    "addr",
];

/// Kernel command-line words for what a VMI asks its guest to do ([`guest_words`] of its
/// annotation).
pub fn check_words(vmi: &VirtualMachineInstance) -> Vec<String> {
    guest_words(vmi.metadata.annotation(GUEST_CHECKS_ANNOTATION).unwrap_or(""))
}

/// Kernel command-line words for the `kind=target` words of `annotation` (pure): one
/// `weft.<kind>=<target>,<target>…` per kind, in the order kinds first appear (/init reads one
/// word per kind and splits it at commas). The annotation is a tenant's: a word of another
/// kind, or a target with anything but the characters of addresses and URLs (a quote would
/// run into the next kernel parameter), is left out; so is an `addr` that is not
/// `<MAC>=<IPv4 CIDR>` (its MAC in the colon form the guest's sysfs shows).
pub fn guest_words(annotation: &str) -> Vec<String> {
    let mut kinds: Vec<(&str, Vec<String>)> = Vec::new();
    for (kind, target) in annotation
        .split_whitespace()
        .filter_map(|word| word.split_once('='))
    {
        let Some(kind) = GUEST_WORDS.iter().find(|k| **k == kind) else {
            continue;
        };
        let target = match *kind {
            "addr" => static_address(target),
            _ => Some(target.to_string()).filter(|t| safe_target(t)),
        };
        let Some(target) = target else { continue };
        match kinds.iter_mut().find(|(k, _)| k == kind) {
            Some((_, targets)) => targets.push(target),
            None => kinds.push((kind, vec![target])),
        }
    }
    kinds
        .into_iter()
        .map(|(kind, targets)| format!("weft.{kind}={}", targets.join(",")))
        .collect()
}

/// Whether `target` is made only of what addresses, ports and URLs use, and commas (a word
/// may hold several targets, `ping=10.0.0.1,fd00::1`).
fn safe_target(target: &str) -> bool {
    !target.is_empty()
        && target
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".:/%?&=@+~_-[],".contains(&b))
}

/// `<MAC>=<IPv4 CIDR>[,…]` as /init takes it (MACs in the lowercase colon form the guest's
/// sysfs shows), if every one is.
fn static_address(target: &str) -> Option<String> {
    target
        .split(',')
        .map(one_static_address)
        .collect::<Option<Vec<_>>>()
        .map(|all| all.join(","))
}

fn one_static_address(target: &str) -> Option<String> {
    let (mac, cidr) = target.split_once('=')?;
    let mac: weft_cni::MacAddr = mac.parse().ok()?;
    let cidr: ipnet::Ipv4Net = cidr.parse().ok()?;
    Some(format!("{mac}={cidr}"))
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

#[cfg(test)]
mod tests {
    use super::guest_words;

    #[test]
    fn words_are_grouped_by_kind_and_a_tenants_bad_words_left_out() {
        assert_eq!(
            guest_words("ping=10.0.0.1 wget=http://[fd00::1]:8080/?a=b ping=10.0.0.2"),
            [
                "weft.ping=10.0.0.1,10.0.0.2",
                "weft.wget=http://[fd00::1]:8080/?a=b"
            ]
        );
        assert_eq!(
            guest_words(r#"ping="x init=/bin/sh ping=a;b wget=\\ nope=1 ping= httpd=80"#),
            ["weft.httpd=80"]
        );
        // Several targets in one word, as examples/ipv6/vm.yaml.
        assert_eq!(
            guest_words("ping=172.31.255.254,fd00:31::fe"),
            ["weft.ping=172.31.255.254,fd00:31::fe"]
        );
        assert!(guest_words("").is_empty());
    }

    #[test]
    fn a_static_address_names_a_mac_and_an_ipv4_cidr() {
        assert_eq!(
            guest_words(
                "addr=02:00:00:0C:00:02=10.99.0.2/24 addr=02:00:00:0c:00:03=10.99.0.3/24,02-00-00-0c-00-04=10.99.1.4/24"
            ),
            [
                "weft.addr=02:00:00:0c:00:02=10.99.0.2/24,02:00:00:0c:00:03=10.99.0.3/24,02:00:00:0c:00:04=10.99.1.4/24"
            ]
        );
        for bad in [
            "addr=02:00:00:0c:00=10.99.0.2/24",
            "addr=02:00:00:0c:00:0g=10.99.0.2/24",
            "addr=02:00:00:0c:00:02=10.99.0.2",
            "addr=02:00:00:0c:00:02=fd00::2/64",
            "addr=02:00:00:0c:00:02",
            "addr=02:00:00:0c:00:02=10.99.0.2/24,x",
            "addr=02:00:00:0c:00:02=10.99.0.2/24,",
        ] {
            assert!(guest_words(bad).is_empty(), "{bad}");
        }
    }
}
