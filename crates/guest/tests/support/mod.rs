//! What the guest root tests share: the skip checks and boot files, the launcher-side links.

use std::path::Path;
use std::process::Command;

use weft_guest::initramfs::DEFAULT_BUSYBOX;
use weft_guest::kernel::kernel_dir;
use weft_guest::{BootFiles, PrepareError, prepare_boot_files};
use weft_testing::{Netns, can_run_root_test};

/// Kernel and initramfs for a test guest in `dir`, or `None` (the reason printed) when test
/// `name` must skip: not root, QEMU missing, or no guest kernel found.
pub fn boot_files_or_skip(name: &str, dir: &Path) -> Option<BootFiles> {
    if !can_run_root_test(name) {
        return None;
    }
    if Command::new(weft_guest::qemu::QEMU_BINARY)
        .arg("--version")
        .output()
        .is_err()
    {
        weft_testing::skip(name, &format!("{} not installed", weft_guest::qemu::QEMU_BINARY));
        return None;
    }
    match prepare_boot_files(&kernel_dir(), DEFAULT_BUSYBOX.as_ref(), dir) {
        Ok(boot) => Some(boot),
        Err(PrepareError::Kernel(error)) => {
            weft_testing::skip(name, &error.to_string());
            None
        }
        Err(error) => panic!("{error}"),
    }
}

/// In `launcher`: bridge `wt-br<index>` holding `address`, and TAP `wt-tap<index>` enslaved to it.
pub fn bridge_with_tap(launcher: &Netns, index: usize, address: &str) {
    let (bridge, tap) = (format!("wt-br{index}"), format!("wt-tap{index}"));
    launcher.ip(&["link", "add", &bridge, "type", "bridge"]);
    launcher.ip(&["addr", "add", address, "dev", &bridge]);
    launcher.ip(&["link", "set", &bridge, "up"]);
    launcher.ip(&["tuntap", "add", "dev", &tap, "mode", "tap"]);
    launcher.ip(&["link", "set", &tap, "master", &bridge, "up"]);
}

/// The six bytes of a `aa:bb:cc:dd:ee:ff` MAC address.
pub fn mac_bytes(mac: &str) -> [u8; 6] {
    let parts: Vec<u8> = mac
        .split(':')
        .map(|p| u8::from_str_radix(p, 16).unwrap())
        .collect();
    parts.try_into().unwrap()
}
