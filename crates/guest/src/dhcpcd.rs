//! The guest's IPv6 client: Debian's `dhcpcd` (busybox's `udhcpc6` is not built into Debian's
//! busybox) with the C library it links, put into the initramfs when the host has it
//! (`dhcpcd-base`). dhcpcd follows router advertisements (on-link prefix, default router)
//! and asks DHCPv6 for an address when they carry the managed flag; `/bin/dhcpcd.script`
//! reports each lease as a `WEFT-LEASE6` line.

use std::path::{Path, PathBuf};

use crate::initramfs::Entry;

/// Where `dhcpcd-base` installs dhcpcd.
pub const DEFAULT_DHCPCD: &str = "/usr/sbin/dhcpcd";

/// The dhcpcd hook script (`/bin/dhcpcd.script`).
pub const DHCPCD_SCRIPT: &str = include_str!("dhcpcd.sh");

/// The absolute paths of the shared objects `ldd` lists (`name => /path (addr)` and
/// `/path (addr)` lines; `linux-vdso` and unresolved `not found` lines have none).
pub fn parse_ldd(output: &str) -> Vec<PathBuf> {
    output
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.trim(),
                None => line,
            };
            let path = path.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Archive members for dhcpcd: `sbin/dhcpcd`, each library at its own path (with the
/// directories above it), the hook script and dhcpcd's state directory. `libs` are
/// (absolute path, contents).
pub fn dhcpcd_entries(dhcpcd: Vec<u8>, libs: Vec<(PathBuf, Vec<u8>)>) -> Vec<Entry> {
    let mut dirs: Vec<String> = vec![
        "sbin".into(),
        "var".into(),
        "var/lib".into(),
        "var/lib/dhcpcd".into(),
    ];
    let mut files = Vec::new();
    for (path, contents) in libs {
        let relative = path.to_string_lossy().trim_start_matches('/').to_string();
        let mut parent = Path::new(&relative).parent();
        let mut chain = Vec::new();
        while let Some(dir) = parent.filter(|d| !d.as_os_str().is_empty()) {
            chain.push(dir.to_string_lossy().to_string());
            parent = dir.parent();
        }
        for dir in chain.into_iter().rev() {
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        files.push(Entry::file(&relative, 0o755, contents));
    }
    let mut entries: Vec<Entry> = dirs
        .iter()
        // The base archive has these already.
        .filter(|d| !matches!(d.as_str(), "lib" | "bin"))
        .map(|d| Entry::dir(d))
        .collect();
    entries.extend(files);
    entries.push(Entry::file("sbin/dhcpcd", 0o755, dhcpcd));
    entries.push(Entry::file("bin/dhcpcd.script", 0o755, DHCPCD_SCRIPT));
    entries
}

/// Reads dhcpcd at `path` and the libraries `ldd` names for it; `None` when there is no
/// dhcpcd there (the guest then follows router advertisements in the kernel, without DHCPv6).
pub fn host_dhcpcd(path: &Path) -> std::io::Result<Option<Vec<Entry>>> {
    if !path.exists() {
        return Ok(None);
    }
    let binary = std::fs::read(path)?;
    let ldd = std::process::Command::new("ldd").arg(path).output()?;
    if !ldd.status.success() {
        return Err(std::io::Error::other(format!(
            "ldd {}: {}",
            path.display(),
            String::from_utf8_lossy(&ldd.stderr).trim()
        )));
    }
    let libs = parse_ldd(&String::from_utf8_lossy(&ldd.stdout))
        .into_iter()
        .map(|lib| Ok((lib.clone(), std::fs::read(&lib)?)))
        .collect::<std::io::Result<Vec<_>>>()?;
    Ok(Some(dhcpcd_entries(binary, libs)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::initramfs::EntryKind;

    const LDD: &str = "\tlinux-vdso.so.1 (0x00007ffd)\n\
        \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f1b)\n\
        \tlibmissing.so => not found\n\
        \t/lib64/ld-linux-x86-64.so.2 (0x00007f1c)\n";

    #[test]
    fn ldd_paths_are_the_resolved_libraries_and_the_loader() {
        assert_eq!(
            parse_ldd(LDD),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
    }

    #[test]
    fn entries_put_every_library_under_its_directories() {
        let libs = parse_ldd(LDD).into_iter().map(|p| (p, b"ELF".to_vec())).collect();
        let entries = dhcpcd_entries(b"DHCPCD".to_vec(), libs);
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
