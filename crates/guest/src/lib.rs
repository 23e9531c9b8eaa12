//! Local guests: the Debian kernel they boot, the busybox initramfs weft builds, the QEMU runner,
//! the parser of the reports the guest prints on its serial console and the client of its
//! qemu-guest-agent.
//!
//! Layout: [`kernel`] finds a cached kernel (fetched by `fetch-kernel.sh`), [`initramfs`] builds
//! the guest's root file system around [`init`]'s scripts, [`image`] does both in one call, [`qemu`] turns a [`qemu::GuestSpec`]
//! into a QEMU command line and runs it inside a network namespace, and [`report`] reads what
//! the guest printed back into typed reports ([`lease6`] its IPv6 ones). [`agent`] puts
//! Debian's qemu-guest-agent into the image and [`qga`] talks to it over its virtio-serial
//! channel; [`dhcpcd`] is the guest's IPv6 client; [`bundle`] brings a host binary and its
//! libraries into the image.

pub mod agent;
pub mod bundle;
pub mod dhcpcd;
pub mod image;
pub mod init;
pub mod initramfs;
pub mod kernel;
pub mod lease6;
pub mod migrate;
pub mod qemu;
pub mod qga;
pub mod qmp;
pub mod report;

pub use image::{BootFiles, PrepareError, prepare_boot_files};
pub use initramfs::{InitramfsError, build_initramfs, write_initramfs};
pub use kernel::{GuestKernel, KernelError, locate_kernel};
pub use qemu::{GuestNic, GuestSpec, QemuError, RunningGuest};
pub use report::{AgentInterface, Check, GuestReport, Lease, LogFollower, parse_serial_log};
