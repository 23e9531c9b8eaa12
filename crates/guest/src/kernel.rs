//! Locating the guest kernel: an uncompressed PVH `vmlinux` plus the virtio modules, in a cache
//! directory laid out by `crates/guest/fetch-kernel.sh`.

use std::path::{Path, PathBuf};

/// Where weft keeps its guest kernel unless told otherwise.
pub const DEFAULT_KERNEL_DIR: &str = "/var/cache/weft/kernel";

/// Environment variable that overrides [`DEFAULT_KERNEL_DIR`].
pub const KERNEL_DIR_ENV: &str = "WEFT_KERNEL_DIR";

/// The modules the guest loads, in load order: the Debian kernel builds virtio and virtio-net as
/// modules, and each needs symbols of the ones before it (`virtio` needs `virtio_ring`).
pub const VIRTIO_MODULES: [&str; 8] = [
    "virtio_ring",
    "virtio",
    "virtio_pci_legacy_dev",
    "virtio_pci_modern_dev",
    "virtio_pci",
    "failover",
    "net_failover",
    "virtio_net",
];

/// Modules loaded after [`VIRTIO_MODULES`] when the cache has them: `virtio_console` gives the
/// guest its virtio-serial ports, qemu-guest-agent's channel (a cache fetched before the agent
/// lacks it; `fetch-kernel.sh` adds it).
pub const AGENT_MODULES: [&str; 1] = ["virtio_console"];

/// Errors locating the kernel; each names the path that is missing.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The cache directory has no `vmlinux-*`.
    #[error("no uncompressed guest kernel (vmlinux-*) in {0}; run crates/guest/fetch-kernel.sh {0}")]
    NoKernel(PathBuf),
    /// A module the guest needs is missing.
    #[error("guest kernel module {module} not found under {dir}; run crates/guest/fetch-kernel.sh")]
    MissingModule {
        /// Module name.
        module: &'static str,
        /// Where it was looked for.
        dir: PathBuf,
    },
    /// Reading the cache directory failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The path being read.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// A guest kernel found in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestKernel {
    /// Kernel release, e.g. `6.1.0-56-amd64`.
    pub release: String,
    /// The uncompressed PVH-bootable kernel image.
    pub vmlinux: PathBuf,
    /// The module files, in [`VIRTIO_MODULES`] order, then the [`AGENT_MODULES`] found.
    pub modules: Vec<PathBuf>,
}

/// The kernel cache directory: `$WEFT_KERNEL_DIR` if set, else [`DEFAULT_KERNEL_DIR`].
pub fn kernel_dir() -> PathBuf {
    std::env::var_os(KERNEL_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_KERNEL_DIR))
}

/// Finds `vmlinux-<release>` and the virtio modules of that release in `dir`.
pub fn locate_kernel(dir: &Path) -> Result<GuestKernel, KernelError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| KernelError::Io { path, source }
    };
    let mut releases: Vec<String> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let release = name.strip_prefix("vmlinux-")?;
            (!release.ends_with(".tmp")).then(|| release.to_string())
        })
        .collect();
    releases.sort();
    let release = releases
        .pop()
        .ok_or_else(|| KernelError::NoKernel(dir.to_path_buf()))?;
    let module_root = dir.join("lib/modules").join(&release).join("kernel");
    let mut candidates = Vec::new();
    collect_files(&module_root, &mut candidates).map_err(io(&module_root))?;
    let mut modules: Vec<PathBuf> = VIRTIO_MODULES
        .iter()
        .map(|module| {
            candidates
                .iter()
                .find(|path| module_file_name(path) == Some(module))
                .cloned()
                .ok_or_else(|| KernelError::MissingModule {
                    module,
                    dir: module_root.clone(),
                })
        })
        .collect::<Result<_, _>>()?;
    modules.extend(AGENT_MODULES.iter().filter_map(|module| {
        candidates
            .iter()
            .find(|path| module_file_name(path) == Some(module))
            .cloned()
    }));
    Ok(GuestKernel {
        vmlinux: dir.join(format!("vmlinux-{release}")),
        release,
        modules,
    })
}

/// `virtio_net` for `.../virtio_net.ko`; compressed modules (`.ko.xz`) are not loadable by
/// busybox insmod, so they don't count.
fn module_file_name(path: &Path) -> Option<&str> {
    path.file_name()?.to_str()?.strip_suffix(".ko")
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            collect_files(&entry.path(), out)?;
        } else {
            out.push(entry.path());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_cache(modules: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("vmlinux-6.1.0-test"), b"\x7fELF").unwrap();
        std::fs::write(dir.path().join("vmlinuz-6.1.0-test"), b"bz").unwrap();
        let kdir = dir.path().join("lib/modules/6.1.0-test/kernel/drivers/virtio");
        std::fs::create_dir_all(&kdir).unwrap();
        for module in modules {
            std::fs::write(kdir.join(format!("{module}.ko")), b"mod").unwrap();
        }
        dir
    }

    #[test]
    fn finds_kernel_and_modules_in_load_order() {
        let cache = fake_cache(&VIRTIO_MODULES);
        let kernel = locate_kernel(cache.path()).unwrap();
        assert_eq!(kernel.release, "6.1.0-test");
        assert_eq!(kernel.vmlinux, cache.path().join("vmlinux-6.1.0-test"));
        let names: Vec<_> = kernel
            .modules
            .iter()
            .map(|p| module_file_name(p).unwrap().to_string())
            .collect();
        assert_eq!(names, VIRTIO_MODULES);
    }

    #[test]
    fn the_agent_module_follows_when_present() {
        let cache = fake_cache(&VIRTIO_MODULES);
        let char_dir = cache.path().join("lib/modules/6.1.0-test/kernel/drivers/char");
        std::fs::create_dir_all(&char_dir).unwrap();
        std::fs::write(char_dir.join("virtio_console.ko"), b"mod").unwrap();
        let kernel = locate_kernel(cache.path()).unwrap();
        let names: Vec<_> = kernel
            .modules
            .iter()
            .map(|p| module_file_name(p).unwrap().to_string())
            .collect();
        assert_eq!(names.len(), VIRTIO_MODULES.len() + 1);
        assert_eq!(names.last().unwrap(), "virtio_console");
    }

    #[test]
    fn missing_module_is_named() {
        let cache = fake_cache(&VIRTIO_MODULES[..7]);
        let error = locate_kernel(cache.path()).unwrap_err();
        assert!(error.to_string().contains("virtio_net"), "{error}");
    }

    #[test]
    fn empty_dir_says_how_to_fetch() {
        let dir = tempfile::tempdir().unwrap();
        let error = locate_kernel(dir.path()).unwrap_err();
        assert!(error.to_string().contains("fetch-kernel.sh"), "{error}");
    }
}
