//! The scripts inside the initramfs: `/init` and the udhcpc hook.
//!
//! `/init` loads the virtio modules, starts qemu-guest-agent (when the image has it) on the
//! virtio-serial port `org.qemu.guest_agent.0`, runs `udhcpc` on every `ethN`, runs the checks
//! requested on the kernel command line, then prints an interface line per interface every ~2 s
//! for the guest's own checks (and retries DHCP on any NIC without an IPv4 address, which covers
//! hot-plugged NICs). The host's view of the guest (`status.interfaces`, `guestOSInfo`) comes
//! from qemu-guest-agent ([`crate::qga`]), not from these lines. Report lines, parsed
//! by [`crate::report`]: `WEFT-BOOT`, `WEFT-LEASE <if> <ip/prefix> key=value…`,
//! `WEFT-LEASEFAIL <if>`, `WEFT-ROUTE <ip route line>`, `WEFT-READY`, `WEFT-CHECK …`,
//! `WEFT-GA <if> <mac> <ip/prefix>…`, `WEFT-ERROR …`; with IPv6 (dhcpcd, [`crate::dhcpcd`])
//! `WEFT-LEASE6 <if> <ip/prefix> router=… dns=…` and, when a ping target is IPv6,
//! `WEFT-ROUTE6 <ip -6 route line>` once a route to it is in ([`crate::lease6`]). Kernel command-line options it understands
//! (comma-separated lists):
//!
//! | option | effect | report |
//! |---|---|---|
//! | `weft.ping=IP[,IP]` | ping each (5 tries) | `WEFT-CHECK ping <ip> ok\|fail` |
//! | `weft.wget=URL[,URL]` | HTTP GET (10 s bound) | `WEFT-CHECK wget <url> ok <first line>\|fail` |
//! | `weft.httpd=PORT` | start busybox httpd on PORT serving `/www` | `WEFT-CHECK httpd <port> ok\|fail` |
//! | `weft.hostname=NAME` | set the guest host name | – |
//! | `weft.ga_interval=SECONDS` | guest-agent period (default 2) | `WEFT-GA <if> <mac> <ip/prefix>…` |

use crate::kernel::VIRTIO_MODULES;

/// The udhcpc hook script (`/bin/udhcpc.script`).
pub const UDHCPC_SCRIPT: &str = include_str!("udhcpc.sh");

/// Placeholder in `init.sh` for the module load order.
const MODULES_PLACEHOLDER: &str = "@MODULES@";

/// The page busybox httpd serves from `/www/index.html` (with `weft.httpd`).
pub const INDEX_HTML: &str = "hello-from-weft-guest\n";

/// The `/init` script, loading `modules` in the given order.
pub fn init_script(modules: &[&str]) -> String {
    include_str!("init.sh").replace(MODULES_PLACEHOLDER, &modules.join(" "))
}

/// The `/init` script with the standard virtio module order.
pub fn default_init_script() -> String {
    init_script(&VIRTIO_MODULES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_loads_modules_in_order_and_reports() {
        let init = default_init_script();
        assert!(init.starts_with("#!/bin/busybox sh\n"));
        assert!(init.contains(
            "for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci failover net_failover virtio_net; do"
        ));
        assert!(!init.contains(MODULES_PLACEHOLDER));
        for marker in [
            "WEFT-BOOT",
            "WEFT-READY",
            "WEFT-CHECK ping",
            "WEFT-GA",
            "timeout 10 wget",
            "/usr/sbin/qemu-ga -m virtio-serial -p /dev/virtio-ports/org.qemu.guest_agent.0",
            "/sys/class/virtio-ports/",
        ] {
            assert!(init.contains(marker), "{marker}");
        }
        assert!(!init.contains("wget -T"), "busybox wget -T segfaults");
        assert!(UDHCPC_SCRIPT.contains("WEFT-LEASE $interface"));
        assert!(init.contains("dhcpcd -6") && init.contains("WEFT-ROUTE6"));
        assert!(crate::dhcpcd::DHCPCD_SCRIPT.contains("WEFT-LEASE6 $interface"));
    }
}
