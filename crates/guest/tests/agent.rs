//! Root test: a real QEMU guest whose image carries Debian's qemu-guest-agent on the
//! virtio-serial channel `org.qemu.guest_agent.0`; weft's QGA client handshakes with it and
//! reads `guest-info`, `guest-get-osinfo`, `guest-get-host-name` and
//! `guest-network-get-interfaces`, which shows the address the guest leased over DHCP on the
//! NIC with the domain's MAC.
//!
//! `WEFT_QGA_RECORD=DIR` writes the agent's replies to DIR (how the unit-test vectors of
//! `crates/guest/src/qga_tests.rs` were captured).

mod support;

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use support::{boot_files_or_skip, bridge_with_tap, mac_bytes};
use weft_dhcp::{ServerConfig, bind_server_socket, spawn};
use weft_guest::qga::{self, QgaClient};
use weft_guest::{GuestNic, GuestSpec, RunningGuest};
use weft_testing::Netns;

const MAC0: &str = "52:54:00:78:00:01";

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn qemu_guest_agent_answers_and_reports_the_leased_address_on_the_right_mac() {
    let name = "qemu_guest_agent_answers_and_reports_the_leased_address_on_the_right_mac";
    if !Path::new(weft_guest::agent::QEMU_GA).exists() {
        weft_testing::skip(name, "qemu-guest-agent is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(boot) = boot_files_or_skip(name, dir.path()) else {
        return;
    };
    assert!(
        boot.kernel
            .modules
            .iter()
            .any(|m| m.ends_with("virtio_console.ko")),
        "the guest kernel cache lacks virtio_console.ko: run crates/guest/fetch-kernel.sh"
    );
    let launcher = Netns::new("qga");
    bridge_with_tap(&launcher, 0, "10.0.4.1/24");
    let mut config = ServerConfig::new("10.0.4.2/24".parse().unwrap(), Ipv4Addr::new(10, 0, 4, 1));
    config.client_mac = Some(mac_bytes(MAC0));
    let socket = launcher.enter(|| bind_server_socket("wt-br0")).unwrap();
    let _server = spawn(socket, config).unwrap();

    let mut spec = GuestSpec::new("vmqga", &boot.kernel.vmlinux, &boot.initrd, dir.path());
    spec.cmdline_extras = vec!["weft.hostname=qga-vm".into()];
    spec.nics = vec![GuestNic::virtio("wt-tap0", MAC0)];
    let mut guest = RunningGuest::spawn(&spec, Some(&launcher.name)).unwrap();
    let serial = || std::fs::read_to_string(spec.serial_log()).unwrap_or_default();
    guest
        .wait_for(Duration::from_secs(90), |r| r.lease("eth0").is_some())
        .unwrap_or_else(|e| panic!("{e}\nserial log:\n{}", serial()));

    // The agent starts in the background at boot: ask until it answers with the lease, within
    // a deadline (each session is bounded by its own timeouts).
    let deadline = Instant::now() + Duration::from_secs(60);
    let leased = |r: &qga::AgentReport| {
        r.interfaces
            .iter()
            .any(|i| i.mac == MAC0 && i.addresses.iter().any(|a| a.address.is_ipv4()))
    };
    let report = loop {
        let attempt = qga::query(&spec.qga_socket(), Duration::from_secs(3));
        match attempt {
            Ok(report) if leased(&report) => break report,
            attempt if Instant::now() > deadline => {
                panic!(
                    "the agent never reported eth0's lease: {attempt:?}\nserial log:\n{}",
                    serial()
                )
            }
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    };

    assert!(!report.info.version.is_empty(), "{report:?}");
    for command in [
        "guest-network-get-interfaces",
        "guest-get-osinfo",
        "guest-get-host-name",
    ] {
        assert!(
            report.info.commands.iter().any(|c| c == command),
            "{command} not enabled: {:?}",
            report.info.commands
        );
    }
    let eth0 = report
        .interfaces
        .iter()
        .find(|i| i.mac == MAC0)
        .unwrap_or_else(|| panic!("no interface with {MAC0}: {:?}", report.interfaces));
    assert_eq!(eth0.name, "eth0");
    assert!(
        eth0.addresses
            .iter()
            .any(|a| a.address == Ipv4Addr::new(10, 0, 4, 2) && a.prefix == 24),
        "{eth0:?}"
    );
    assert!(report.interfaces.iter().all(|i| i.name != "lo"));
    assert_eq!(report.os.id, "weft");
    assert_eq!(report.os.kernel_release, boot.kernel.release);
    assert_eq!(report.os.machine, "x86_64");
    assert_eq!(report.host_name, "qga-vm");

    if let Some(out) = std::env::var_os("WEFT_QGA_RECORD") {
        let mut client = QgaClient::connect(&spec.qga_socket(), Duration::from_secs(3)).unwrap();
        for command in [
            "guest-info",
            "guest-get-osinfo",
            "guest-network-get-interfaces",
            "guest-get-host-name",
        ] {
            let value = client.execute(command).unwrap();
            let text = serde_json::json!({ "return": value }).to_string();
            std::fs::write(Path::new(&out).join(format!("{command}.json")), text).unwrap();
        }
    }
    guest.stop().unwrap();
}
