//! qemu-guest-agent in the guest image: Debian's `/usr/sbin/qemu-ga`, the shared libraries
//! it links (as the host's dynamic loader resolves them, `ldd`) and the loader itself.
//!
//! The files are bundled as every host binary is ([`crate::bundle`]). Without the package the image is built without an agent
//! (said once on stderr): the guest is then a VM without qemu-ga, and its status falls back to
//! the domain's view.

use std::path::Path;
use std::sync::Once;

use crate::bundle::{self, BundleError, FileContents};

/// Where Debian's `qemu-guest-agent` package installs the agent.
pub const QEMU_GA: &str = "/usr/sbin/qemu-ga";

/// The virtio-serial port name QEMU, libvirt and KubeVirt give the agent's channel.
pub const CHANNEL_NAME: &str = "org.qemu.guest_agent.0";

/// The `/etc/os-release` of the guest image (what `guest-get-osinfo` reads).
pub const OS_RELEASE: &str = concat!(
    "NAME=\"weft guest\"\n",
    "ID=weft\n",
    "ID_LIKE=busybox\n",
    "VERSION_ID=\"",
    env!("CARGO_PKG_VERSION"),
    "\"\n",
    "VERSION=\"",
    env!("CARGO_PKG_VERSION"),
    " (busybox initramfs)\"\n",
    "PRETTY_NAME=\"weft guest ",
    env!("CARGO_PKG_VERSION"),
    " (busybox initramfs, Debian kernel)\"\n",
);

/// Whether an image built now carries the agent (the host has the package).
pub fn available() -> bool {
    Path::new(QEMU_GA).exists()
}

/// qemu-ga and what it needs, read from the host: `None` (said once on stderr) when the
/// `qemu-guest-agent` package is not installed.
pub fn agent_files(qemu_ga: &Path) -> Result<Option<FileContents>, BundleError> {
    if !qemu_ga.exists() {
        static SAID: Once = Once::new();
        SAID.call_once(|| {
            eprintln!(
                "weft: {} is missing (apt-get install qemu-guest-agent): guests are built without \
                 a guest agent, their status shows the domain's view only",
                qemu_ga.display()
            )
        });
        return Ok(None);
    }
    bundle::binary_files(qemu_ga, qemu_ga).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release_names_the_image() {
        assert!(OS_RELEASE.contains("ID=weft\n"));
        assert!(OS_RELEASE.contains(&format!("VERSION_ID=\"{}\"", env!("CARGO_PKG_VERSION"))));
    }
}
