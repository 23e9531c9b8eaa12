//! The guest's initramfs: a gzip'd newc cpio archive with busybox, `/dev/console`, the virtio
//! modules, the scripts of [`crate::init`] and, when the host has it, qemu-guest-agent with its
//! libraries ([`crate::agent`]).
//!
//! Deciding the archive's content ([`initramfs_entries`]) and encoding it ([`encode`]) are pure;
//! [`build_initramfs`] only reads the input files and [`write_initramfs`] writes the result.

use std::io::Write;
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;

use crate::agent;
use crate::bundle::BundleError;
use crate::init;
use crate::kernel::GuestKernel;

/// Where busybox-static installs its binary.
pub const DEFAULT_BUSYBOX: &str = "/bin/busybox";

/// Errors building the initramfs; each names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum InitramfsError {
    /// An input or output file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A module file name is not `<name>.ko`.
    #[error("module {0}: not a .ko file")]
    ModuleName(PathBuf),
    /// A host binary the image carries (qemu-guest-agent, dhcpcd) is installed but its files
    /// could not be collected.
    #[error("guest image: {0}")]
    Bundle(#[from] BundleError),
}

/// What one archive member is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Directory,
    /// A regular file with these contents.
    File(Vec<u8>),
    /// A symbolic link to this target.
    Symlink(String),
    /// A character device (major, minor).
    CharDevice(u32, u32),
}

/// One member of the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path inside the archive, without a leading `/`.
    pub path: String,
    /// Permission bits (the file type comes from `kind`).
    pub permissions: u32,
    /// What it is.
    pub kind: EntryKind,
}

impl Entry {
    pub(crate) fn dir(path: &str) -> Self {
        Self {
            path: path.into(),
            permissions: 0o755,
            kind: EntryKind::Directory,
        }
    }

    pub(crate) fn file(path: &str, permissions: u32, contents: impl Into<Vec<u8>>) -> Self {
        Self {
            path: path.into(),
            permissions,
            kind: EntryKind::File(contents.into()),
        }
    }

    /// The full newc mode: file type bits plus permissions.
    pub fn mode(&self) -> u32 {
        let file_type = match self.kind {
            EntryKind::Directory => 0o040000,
            EntryKind::File(_) => 0o100000,
            EntryKind::Symlink(_) => 0o120000,
            EntryKind::CharDevice(..) => 0o020000,
        };
        file_type | self.permissions
    }
}

/// The archive's members: directories, `/dev/console`, busybox (+ `/bin/sh`), the modules as
/// `/lib/modules/<name>.ko` (`modules` are (name, contents), in load order), `/init`, the
/// udhcpc hook, the httpd page and `/etc/os-release`.
pub fn initramfs_entries(busybox: Vec<u8>, modules: Vec<(String, Vec<u8>)>) -> Vec<Entry> {
    let mut entries: Vec<Entry> = [
        "bin",
        "dev",
        "etc",
        "lib",
        "lib/modules",
        "proc",
        "run",
        "sys",
        "tmp",
        "www",
    ]
    .into_iter()
    .map(Entry::dir)
    .collect();
    entries.push(Entry {
        path: "dev/console".into(),
        permissions: 0o600,
        kind: EntryKind::CharDevice(5, 1),
    });
    entries.push(Entry::file("bin/busybox", 0o755, busybox));
    entries.push(Entry {
        path: "bin/sh".into(),
        permissions: 0o777,
        kind: EntryKind::Symlink("busybox".into()),
    });
    let names: Vec<String> = modules.iter().map(|(name, _)| name.clone()).collect();
    for (name, contents) in modules {
        entries.push(Entry::file(&format!("lib/modules/{name}.ko"), 0o644, contents));
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    entries.push(Entry::file("init", 0o755, init::init_script(&names)));
    entries.push(Entry::file("bin/udhcpc.script", 0o755, init::UDHCPC_SCRIPT));
    entries.push(Entry::file("www/index.html", 0o644, init::INDEX_HTML));
    entries.push(Entry::file("etc/os-release", 0o644, agent::OS_RELEASE));
    entries
}

/// Encodes entries as a newc cpio archive (mtime 0, uid/gid 0: reproducible), gzip'd.
pub fn encode(entries: &[Entry]) -> std::io::Result<Vec<u8>> {
    let mut gzip = GzEncoder::new(Vec::new(), Compression::fast());
    for (index, entry) in entries.iter().enumerate() {
        let mut builder = cpio::newc::Builder::new(&entry.path)
            .ino(index as u32 + 1)
            .mode(entry.mode())
            .uid(0)
            .gid(0)
            .mtime(0)
            .nlink(if entry.kind == EntryKind::Directory { 2 } else { 1 });
        if let EntryKind::CharDevice(major, minor) = entry.kind {
            builder = builder.rdev_major(major).rdev_minor(minor);
        }
        let data: &[u8] = match &entry.kind {
            EntryKind::File(contents) => contents,
            EntryKind::Symlink(target) => target.as_bytes(),
            EntryKind::Directory | EntryKind::CharDevice(..) => &[],
        };
        let mut writer = builder.write(&mut gzip, data.len() as u32);
        writer.write_all(data)?;
        writer.finish()?;
    }
    cpio::newc::trailer(&mut gzip)?;
    gzip.finish()
}

/// Reads busybox, the kernel's modules and qemu-guest-agent ([`agent::QEMU_GA`], left out
/// when not installed) and builds the gzip'd archive.
pub fn build_initramfs(kernel: &GuestKernel, busybox: &Path) -> Result<Vec<u8>, InitramfsError> {
    build_initramfs_with_agent(kernel, busybox, Path::new(agent::QEMU_GA))
}

/// [`build_initramfs`] with the guest agent binary at `qemu_ga`.
pub fn build_initramfs_with_agent(
    kernel: &GuestKernel,
    busybox: &Path,
    qemu_ga: &Path,
) -> Result<Vec<u8>, InitramfsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| InitramfsError::Io {
            path: path.to_path_buf(),
            source,
        })
    };
    let modules = kernel
        .modules
        .iter()
        .map(|path| {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".ko"))
                .ok_or_else(|| InitramfsError::ModuleName(path.clone()))?;
            Ok((name.to_string(), read(path)?))
        })
        .collect::<Result<Vec<_>, InitramfsError>>()?;
    let mut entries = initramfs_entries(read(busybox)?, modules);
    if let Some(files) = agent::agent_files(qemu_ga)? {
        let extra = crate::bundle::entries(&entries, files);
        entries.extend(extra);
    }
    // The IPv6 client, when the host has it (crate::dhcpcd).
    let dhcpcd = Path::new(crate::dhcpcd::DEFAULT_DHCPCD);
    if let Some(extra) = crate::dhcpcd::host_dhcpcd(dhcpcd, &entries)? {
        entries.extend(extra);
    }
    encode(&entries).map_err(|source| InitramfsError::Io {
        path: PathBuf::from("<initramfs>"),
        source,
    })
}

/// Builds the initramfs and writes it to `out` (atomically: a temporary file, then rename).
pub fn write_initramfs(kernel: &GuestKernel, busybox: &Path, out: &Path) -> Result<(), InitramfsError> {
    let bytes = build_initramfs(kernel, busybox)?;
    let tmp = out.with_extension("tmp");
    let io = |source| InitramfsError::Io {
        path: out.to_path_buf(),
        source,
    };
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, out).map_err(io)
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn read_back(archive: &[u8]) -> Vec<(String, u32, u32, u32, Vec<u8>)> {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(archive)
            .read_to_end(&mut raw)
            .unwrap();
        let mut out = Vec::new();
        let mut rest: &[u8] = &raw;
        loop {
            let mut reader = cpio::NewcReader::new(rest).unwrap();
            if reader.entry().is_trailer() {
                break;
            }
            let entry = reader.entry();
            let (name, mode, major, minor) = (
                entry.name().to_string(),
                entry.mode(),
                entry.rdev_major(),
                entry.rdev_minor(),
            );
            let mut data = Vec::new();
            reader.read_to_end(&mut data).unwrap();
            out.push((name, mode, major, minor, data));
            rest = reader.finish().unwrap();
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn every_member_reads_back_unchanged(
            busybox in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048),
            modules in proptest::collection::vec(("[a-z_]{1,16}", proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)), 0..4),
        ) {
            let entries = initramfs_entries(busybox, modules);
            let members = read_back(&encode(&entries).unwrap());
            proptest::prop_assert_eq!(members.len(), entries.len());
            for (entry, member) in entries.iter().zip(&members) {
                proptest::prop_assert_eq!(&entry.path, &member.0);
                proptest::prop_assert_eq!(entry.mode(), member.1);
                let data: &[u8] = match &entry.kind {
                    EntryKind::File(contents) => contents,
                    EntryKind::Symlink(target) => target.as_bytes(),
                    _ => &[],
                };
                proptest::prop_assert_eq!(data, member.4.as_slice());
            }
        }
    }

    #[test]
    fn without_qemu_ga_on_the_host_the_image_has_no_agent_but_builds() {
        let dir = tempfile::tempdir().unwrap();
        let (busybox, module) = (dir.path().join("busybox"), dir.path().join("virtio.ko"));
        std::fs::write(&busybox, b"BB").unwrap();
        std::fs::write(&module, b"m").unwrap();
        let kernel = GuestKernel {
            release: "6.1.0-test".into(),
            vmlinux: dir.path().join("vmlinux"),
            modules: vec![module],
        };
        let archive = build_initramfs_with_agent(&kernel, &busybox, &dir.path().join("no-qemu-ga")).unwrap();
        let members = read_back(&archive);
        assert!(members.iter().all(|m| m.0 != "usr/sbin/qemu-ga"));
        let os = members.iter().find(|m| m.0 == "etc/os-release").unwrap();
        assert_eq!(os.4, agent::OS_RELEASE.as_bytes());
    }

    #[test]
    fn archive_has_console_busybox_modules_and_init() {
        let entries = initramfs_entries(
            b"BUSYBOX".to_vec(),
            vec![
                ("virtio_ring".into(), b"r".to_vec()),
                ("virtio".into(), b"v".to_vec()),
            ],
        );
        let archive = encode(&entries).unwrap();
        let members = read_back(&archive);
        let find = |name: &str| {
            members
                .iter()
                .find(|m| m.0 == name)
                .unwrap_or_else(|| panic!("{name}"))
        };
        assert_eq!(find("dev/console").1, 0o020600);
        assert_eq!((find("dev/console").2, find("dev/console").3), (5, 1));
        assert_eq!(find("bin/busybox").4, b"BUSYBOX");
        assert_eq!(find("bin/sh").1 & 0o170000, 0o120000);
        assert_eq!(find("lib/modules/virtio.ko").4, b"v");
        let init = String::from_utf8(find("init").4.clone()).unwrap();
        assert_eq!(find("init").1, 0o100755);
        assert!(init.contains("for m in virtio_ring virtio; do"));
        // Reproducible: same input, same bytes.
        assert_eq!(archive, encode(&entries).unwrap());
    }
}
