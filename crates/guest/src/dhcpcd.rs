//! The guest's IPv6 client: Debian's `dhcpcd` (busybox's `udhcpc6` is not built into Debian's
//! busybox) with the C library it links, put into the initramfs when the host has it
//! (`dhcpcd-base`). dhcpcd follows router advertisements (on-link prefix, default router)
//! and asks DHCPv6 for an address when they carry the managed flag; `/bin/dhcpcd.script`
//! reports each lease as a `WEFT-LEASE6` line.

use std::path::Path;

use crate::bundle::{self, BundleError, FileContents};
use crate::initramfs::Entry;

/// Where `dhcpcd-base` installs dhcpcd.
pub const DEFAULT_DHCPCD: &str = "/usr/sbin/dhcpcd";

/// The dhcpcd hook script (`/bin/dhcpcd.script`).
pub const DHCPCD_SCRIPT: &str = include_str!("dhcpcd.sh");

/// Archive members for dhcpcd beside what `existing` has: `sbin/dhcpcd` and the libraries in
/// `files` ([`bundle::binary_files`]), the hook script and dhcpcd's state directory.
pub fn dhcpcd_entries(existing: &[Entry], files: FileContents) -> Vec<Entry> {
    let mut entries = bundle::entries(existing, files);
    for dir in ["var", "var/lib", "var/lib/dhcpcd"] {
        if !existing.iter().chain(entries.iter()).any(|e| e.path == dir) {
            entries.push(Entry::dir(dir));
        }
    }
    entries.push(Entry::file("bin/dhcpcd.script", 0o755, DHCPCD_SCRIPT));
    entries
}

/// dhcpcd at `path` (stored as `/sbin/dhcpcd`) and the libraries `ldd` names for it, as entries
/// beside `existing`; `None` when there is no dhcpcd there (the guest then follows router
/// advertisements in the kernel, without DHCPv6).
pub fn host_dhcpcd(path: &Path, existing: &[Entry]) -> Result<Option<Vec<Entry>>, BundleError> {
    if !path.exists() {
        return Ok(None);
    }
    let files = bundle::binary_files(path, Path::new("/sbin/dhcpcd"))?;
    Ok(Some(dhcpcd_entries(existing, files)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::initramfs::EntryKind;

    #[test]
    fn entries_put_dhcpcd_its_libraries_and_its_state_dir_in_once() {
        let existing = vec![Entry::dir("bin"), Entry::dir("lib"), Entry::dir("sbin")];
        let files = vec![
            ("/sbin/dhcpcd".into(), b"DHCPCD".to_vec()),
            ("/lib/x86_64-linux-gnu/libc.so.6".into(), b"ELF".to_vec()),
            ("/lib64/ld-linux-x86-64.so.2".into(), b"ELF".to_vec()),
        ];
        let entries = dhcpcd_entries(&existing, files);
        let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        let at = |p: &str| {
            paths
                .iter()
                .position(|x| *x == p)
                .unwrap_or_else(|| panic!("{p} in {paths:?}"))
        };
        assert!(at("lib/x86_64-linux-gnu") < at("lib/x86_64-linux-gnu/libc.so.6"));
        assert!(at("lib64") < at("lib64/ld-linux-x86-64.so.2"));
        assert!(!paths.contains(&"lib"), "the base archive has /lib");
        assert!(paths.contains(&"var/lib/dhcpcd"));
        let dhcpcd = &entries[at("sbin/dhcpcd")];
        assert_eq!(dhcpcd.kind, EntryKind::File(b"DHCPCD".to_vec()));
        assert!(paths.contains(&"bin/dhcpcd.script"));
    }
}
