//! Everything a guest boots from, ready in one call: the cached kernel and a fresh initramfs.

use std::path::{Path, PathBuf};

use crate::initramfs::{InitramfsError, write_initramfs};
use crate::kernel::{GuestKernel, KernelError, locate_kernel};

/// File name of the initramfs inside the output directory.
pub const INITRAMFS_FILE: &str = "weft-initramfs.gz";

/// Errors preparing the boot files.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// No usable kernel in the cache.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// The initramfs could not be built.
    #[error(transparent)]
    Initramfs(#[from] InitramfsError),
    /// The output directory could not be created.
    #[error("creating {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// A kernel and the initramfs built for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootFiles {
    /// The kernel (its `vmlinux` is what QEMU boots).
    pub kernel: GuestKernel,
    /// The initramfs, `<out_dir>/weft-initramfs.gz`.
    pub initrd: PathBuf,
}

/// Finds the kernel in `kernel_dir` and builds the initramfs (busybox from `busybox`, the
/// kernel's virtio modules) into `out_dir`.
pub fn prepare_boot_files(
    kernel_dir: &Path,
    busybox: &Path,
    out_dir: &Path,
) -> Result<BootFiles, PrepareError> {
    let kernel = locate_kernel(kernel_dir)?;
    std::fs::create_dir_all(out_dir).map_err(|source| PrepareError::Io {
        path: out_dir.to_path_buf(),
        source,
    })?;
    let initrd = out_dir.join(INITRAMFS_FILE);
    write_initramfs(&kernel, busybox, &initrd)?;
    Ok(BootFiles { kernel, initrd })
}
