//! `weft install-cni`: put weft's CNI plugins into a CNI bin dir.
//!
//! * `passthru` — the weft binary (head of an auxiliary CNI chain, and the full plugin the
//!   static clients run under their own names for what they cannot do themselves);
//! * `weft-cni` — the static shim of crates/plugin-client, which this binary carries (compiled
//!   by build.rs): it hands every call to the node agent;
//! * `weft-ipam` — the same static executable as the IPAM client (it picks its role from its
//!   name): it hands delegated calls to the node agent and runs the weft binary as `weft-ipam`
//!   for the others.
//!
//! Every file is written under a temporary name and renamed into place, so a runtime exec'ing
//! a plugin during an upgrade sees the old file or the new one, never half of one.

use std::path::{Path, PathBuf};

/// The installed `weft-cni` and `weft-ipam`: one statically linked executable, its role chosen
/// by its name.
pub const CLIENTS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/weft-plugins"));

/// How the weft binary gets into the bin dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullBinary {
    /// A copy (a node's bin dir: the binary's own path may not be visible to the runtime).
    Copy,
    /// A symbolic link to the binary (the local cluster, tests: same filesystem view).
    Link,
}

/// Which program is installed as `weft-ipam`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpamPlugin {
    /// The static client (nodes running weft's agent: delegated calls go to the agent).
    Client,
    /// The weft binary itself (nodes without weft's agent, e.g. weft-ipam under another
    /// meta-plugin: the client could only ever run the binary, one exec later).
    FullBinary,
}

/// Install the plugins into `bin_dir` (created if missing), the weft binary being `weft`.
/// Returns the installed paths.
pub fn install_cni(
    bin_dir: &Path,
    weft: &Path,
    how: FullBinary,
    ipam: IpamPlugin,
) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(bin_dir)?;
    let mut installed = Vec::new();
    let mut full_names = vec![weft_plugin_client::full::FULL_BINARY];
    if ipam == IpamPlugin::FullBinary {
        full_names.push(weft_plugin_client::PLUGIN_NAME);
    }
    for name in full_names {
        let path = bin_dir.join(name);
        replace(&path, |temp| match how {
            FullBinary::Copy => std::fs::copy(weft, temp).map(|_| ()),
            FullBinary::Link => std::os::unix::fs::symlink(weft, temp),
        })?;
        installed.push(path);
    }
    let mut clients = vec![weft_plugin_client::shim::SHIM_NAME];
    if ipam == IpamPlugin::Client {
        clients.push(weft_plugin_client::PLUGIN_NAME);
    }
    for name in clients {
        let path = bin_dir.join(name);
        replace(&path, |temp| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(temp, CLIENTS)?;
            std::fs::set_permissions(temp, std::fs::Permissions::from_mode(0o755))
        })?;
        installed.push(path);
    }
    Ok(installed)
}

/// Create `path`'s new content under a temporary name in the same directory with `create`,
/// then rename it over `path`.
fn replace(path: &Path, create: impl FnOnce(&Path) -> std::io::Result<()>) -> std::io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("plugin");
    let temp = path.with_file_name(format!(".{name}.weft-tmp.{}", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    let created = create(&temp).and_then(|()| std::fs::rename(&temp, path));
    if created.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    created.map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// `weft install-cni`.
/// Copy the runtime's conflist `source` into `conf_dir` (created if missing) under its own
/// name, mode 0644, replacing an existing one atomically. Returns the installed path.
pub fn install_conflist(source: &Path, conf_dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let name = source.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: not a file name", source.display()),
        )
    })?;
    std::fs::create_dir_all(conf_dir)?;
    let path = conf_dir.join(name);
    replace(&path, |temp| {
        std::fs::copy(source, temp)?;
        std::fs::set_permissions(temp, std::fs::Permissions::from_mode(0o644))
    })?;
    Ok(path)
}

/// `weft install-cni`: the plugins into `bin_dir`, and with `conflist` (`(source, conf dir)`)
/// the runtime's conflist too: the DaemonSet's init container runs this one command, exec
/// form, so the image needs no shell.
pub fn run(
    bin_dir: &Path,
    link: bool,
    without_agent: bool,
    conflist: Option<(&Path, &Path)>,
) -> anyhow::Result<i32> {
    let weft = std::env::current_exe()?;
    let how = if link { FullBinary::Link } else { FullBinary::Copy };
    let ipam = if without_agent {
        IpamPlugin::FullBinary
    } else {
        IpamPlugin::Client
    };
    for path in install_cni(bin_dir, &weft, how, ipam)? {
        println!("installed {}", path.display());
    }
    if let Some((source, conf_dir)) = conflist {
        use anyhow::Context;
        let path = install_conflist(source, conf_dir)
            .with_context(|| format!("install {} into {}", source.display(), conf_dir.display()))?;
        println!("installed {}", path.display());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_carried_clients_are_static_executables() {
        assert_eq!(weft_plugin_client::full::FULL_BINARY, weft_meta::PASSTHRU_TYPE);
        assert_static(CLIENTS);
    }

    fn assert_static(elf: &[u8]) {
        assert_eq!(&elf[..4], b"\x7fELF", "an ELF executable");
        // ELF64 header: program headers at e_phoff (8 bytes at 32), e_phentsize and e_phnum
        // (2 bytes each at 54 and 56). A dynamically linked executable has a PT_INTERP (3).
        let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
        let phoff = u64::from_le_bytes(elf[32..40].try_into().unwrap()) as usize;
        let (entry_size, entries) = (u16_at(54), u16_at(56));
        let interpreters = (0..entries)
            .map(|i| phoff + i * entry_size)
            .filter(|&at| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) == 3)
            .count();
        assert_eq!(
            interpreters, 0,
            "linked statically (the build warned if this machine has no static libc)"
        );
    }

    #[test]
    fn installing_twice_replaces_every_plugin_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let weft = dir.path().join("weft-binary");
        std::fs::write(&weft, b"full weft").unwrap();
        let bin = dir.path().join("opt/cni/bin");
        for how in [FullBinary::Link, FullBinary::Copy, FullBinary::Copy] {
            let installed = install_cni(&bin, &weft, how, IpamPlugin::Client).unwrap();
            let names: Vec<_> = installed
                .iter()
                .map(|p| p.file_name().unwrap().to_owned())
                .collect();
            assert_eq!(names, ["passthru", "weft-cni", "weft-ipam"]);
            assert_eq!(std::fs::read(bin.join("passthru")).unwrap(), b"full weft");
            let linked = std::fs::symlink_metadata(bin.join("passthru"))
                .unwrap()
                .is_symlink();
            assert_eq!(linked, how == FullBinary::Link);
            assert_eq!(std::fs::read(bin.join("weft-cni")).unwrap(), CLIENTS);
            assert_eq!(std::fs::read(bin.join("weft-ipam")).unwrap(), CLIENTS);
            let mut left: Vec<_> = std::fs::read_dir(&bin)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            left.sort();
            assert_eq!(
                left,
                ["passthru", "weft-cni", "weft-ipam"],
                "no temporary file left"
            );
        }
        install_cni(&bin, &weft, FullBinary::Copy, IpamPlugin::FullBinary).unwrap();
        let source = dir.path().join("00-weft.conflist");
        std::fs::write(&source, b"{}").unwrap();
        let conf_dir = dir.path().join("etc/cni/net.d");
        for _ in 0..2 {
            let installed = install_conflist(&source, &conf_dir).unwrap();
            assert_eq!(installed, conf_dir.join("00-weft.conflist"));
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&installed).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644);
        }
        assert_eq!(
            std::fs::read_dir(&conf_dir).unwrap().count(),
            1,
            "no temporary file left"
        );
        for full in ["passthru", "weft-ipam"] {
            assert_eq!(std::fs::read(bin.join(full)).unwrap(), b"full weft", "{full}");
        }
        assert_eq!(std::fs::read(bin.join("weft-cni")).unwrap(), CLIENTS);
    }
}
