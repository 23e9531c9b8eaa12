//! Root test: a NIC hot-plugged into a running guest over QMP gets its DHCP lease from inside
//! the guest (the agent loop runs udhcpc for new NICs), and is unplugged again.

mod support;

use std::net::Ipv4Addr;
use std::time::Duration;

use support::{boot_files_or_skip, bridge_with_tap, mac_bytes};
use weft_dhcp::{ServerConfig, bind_server_socket, spawn};
use weft_guest::{GuestNic, GuestSpec, RunningGuest};
use weft_testing::Netns;

const MAC0: &str = "52:54:00:78:00:01";
const MAC1: &str = "52:54:00:78:00:02";

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn hotplugged_nic_is_leased_inside_the_guest() {
    let name = "hotplugged_nic_is_leased_inside_the_guest";
    let dir = tempfile::tempdir().unwrap();
    let Some(boot) = boot_files_or_skip(name, dir.path()) else {
        return;
    };
    let launcher = Netns::new("gh");
    let mut servers = Vec::new();
    for (index, mac) in [MAC0, MAC1].iter().enumerate() {
        let third = 2 + index as u8;
        bridge_with_tap(&launcher, index, &format!("10.0.{third}.1/24"));
        let bridge = format!("wt-br{index}");
        let mut config = ServerConfig::new(
            format!("10.0.{third}.2/24").parse().unwrap(),
            Ipv4Addr::new(10, 0, third, 1),
        );
        config.client_mac = Some(mac_bytes(mac));
        let socket = launcher.enter(move || bind_server_socket(&bridge)).unwrap();
        servers.push(spawn(socket, config).unwrap());
    }

    let mut spec = GuestSpec::new("vm-hp", &boot.kernel.vmlinux, &boot.initrd, dir.path());
    spec.nics = vec![GuestNic::virtio("wt-tap0", MAC0)];
    spec.hotplug_slots = 2;
    spec.cmdline_extras = vec!["weft.ga_interval=1".into()];
    let mut guest = RunningGuest::spawn(&spec, Some(&launcher.name)).unwrap();
    let serial = spec.serial_log();
    let explain = move |error: weft_guest::QemuError| -> ! {
        let log = std::fs::read_to_string(&serial).unwrap_or_default();
        panic!("{error}\nserial log:\n{log}")
    };
    guest
        .wait_for(Duration::from_secs(60), |r| r.ready && r.lease("eth0").is_some())
        .unwrap_or_else(|e| explain(e));

    guest
        .hotplug_nic(&GuestNic::virtio("wt-tap1", MAC1), "weft-nic1")
        .unwrap_or_else(|e| explain(e));
    let report = guest
        // Both the lease line and an IPv4 address in the agent's report: the interface shows
        // its IPv6 link-local address before udhcpc has its lease.
        .wait_for(Duration::from_secs(30), |r| {
            r.lease("eth1").is_some()
                && r.agent_interface("eth1")
                    .is_some_and(|ga| ga.addresses.iter().any(|a| a.addr().is_ipv4()))
        })
        .unwrap_or_else(|e| explain(e));
    let eth1 = report.lease("eth1").expect("hot-plugged NIC leased");
    assert_eq!(eth1.address, "10.0.3.2/24".parse().unwrap());
    assert_eq!(report.agent_interface("eth1").unwrap().mac, MAC1);

    guest.unplug_nic("weft-nic1").unwrap_or_else(|e| explain(e));
    // The slot is free again: the same NIC can come back.
    guest
        .hotplug_nic(&GuestNic::virtio("wt-tap1", MAC1), "weft-nic1b")
        .unwrap_or_else(|e| explain(e));
    guest.stop().unwrap();
}
