//! Runs libvirt's own schema check on the XML the tests produce.

use std::process::Command;

use weft_domain::document::DirectKernelBoot;
use weft_domain::{HostDev, Interface};

/// Validate a complete domain document with `virt-xml-validate FILE domain`. Without the tool
/// the check is skipped with a message, unless `CI` is set, where it fails.
pub fn validate_domain(xml: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("domain.xml");
    std::fs::write(&path, xml).unwrap();
    match Command::new("virt-xml-validate")
        .arg(&path)
        .arg("domain")
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "virt-xml-validate rejected:\n{xml}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("skipping virt-xml-validate (install libvirt-clients + libxml2-utils): {e}")
        }
        Err(e) => panic!("virt-xml-validate is required in CI: {e}"),
    }
}

/// A small direct-kernel-boot guest.
pub fn guest() -> DirectKernelBoot {
    DirectKernelBoot {
        name: "weft-test-vm".to_string(),
        uuid: Some("6a1f1c6e-3a8e-4f0e-9d63-2b7c0f4f6a10".to_string()),
        memory_mib: 256,
        vcpus: 1,
        kernel: "/var/cache/weft/vmlinux".to_string(),
        initrd: Some("/var/cache/weft/initramfs.gz".to_string()),
        cmdline: "console=ttyS0 quiet panic=-1".to_string(),
        serial_log: Some("/run/weft/serial.log".to_string()),
        emulator: Some("/usr/bin/qemu-system-x86_64".to_string()),
    }
}

/// Validate elements by embedding them in a complete domain.
pub fn validate_in_domain(interfaces: Vec<Interface>, hostdevs: Vec<HostDev>) {
    let xml = guest().domain(interfaces, hostdevs).to_xml().unwrap();
    validate_domain(&xml);
}
