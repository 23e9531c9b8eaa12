//! Root test: a real QEMU guest with two NICs on TAPs enslaved to two bridges in a launcher
//! netns, each bridge served by weft's own DHCP server; the guest reports both leases, the
//! guest agent's view and pings to both bridge addresses over its serial console.

mod support;

use std::net::Ipv4Addr;
use std::time::Duration;

use support::{boot_files_or_skip, bridge_with_tap, mac_bytes};
use weft_dhcp::{ClasslessRoute, ServerConfig, bind_server_socket, spawn};
use weft_guest::{GuestNic, GuestSpec, RunningGuest};
use weft_testing::Netns;

const MAC0: &str = "52:54:00:77:00:01";
const MAC1: &str = "52:54:00:77:00:02";

/// Kills and reaps a helper process when the test ends, even on failure.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn guest_leases_both_nics_from_weft_dhcp_and_pings_the_bridges() {
    let name = "guest_leases_both_nics_from_weft_dhcp_and_pings_the_bridges";
    let dir = tempfile::tempdir().unwrap();
    let Some(boot) = boot_files_or_skip(name, dir.path()) else {
        return;
    };
    // Dropped last: the guest and the DHCP servers go first.
    let launcher = Netns::new("gl");
    for (index, addr) in ["10.0.2.1/24", "10.0.3.1/24"].iter().enumerate() {
        bridge_with_tap(&launcher, index, addr);
    }

    let mut pod_network = ServerConfig::new("10.0.2.2/24".parse().unwrap(), Ipv4Addr::new(10, 0, 2, 1));
    pod_network.router = Some(Ipv4Addr::new(10, 0, 2, 1));
    pod_network.dns_servers = vec![Ipv4Addr::new(10, 0, 2, 1)];
    pod_network.search_domains = vec!["default.svc.cluster.local".into()];
    pod_network.hostname = "weft-vm".into();
    pod_network.mtu = 1400;
    pod_network.client_mac = Some(mac_bytes(MAC0));
    let mut secondary = ServerConfig::new("10.0.3.2/24".parse().unwrap(), Ipv4Addr::new(10, 0, 3, 1));
    secondary.routes = vec![ClasslessRoute {
        destination: Some("198.51.100.0/24".parse().unwrap()),
        gateway: Some(Ipv4Addr::new(10, 0, 3, 1)),
    }];
    secondary.client_mac = Some(mac_bytes(MAC1));
    let sockets = launcher.enter(|| (bind_server_socket("wt-br0"), bind_server_socket("wt-br1")));
    let _server0 = spawn(sockets.0.unwrap(), pod_network).unwrap();
    let _server1 = spawn(sockets.1.unwrap(), secondary).unwrap();

    let www = dir.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello-from-launcher\n").unwrap();
    let _httpd = KillOnDrop(
        launcher
            .command(&["busybox", "httpd", "-f", "-p", "10.0.2.1:8080"])
            .arg("-h")
            .arg(&www)
            .spawn()
            .unwrap(),
    );
    let mut spec = GuestSpec::new("vm1", &boot.kernel.vmlinux, &boot.initrd, dir.path());
    spec.cmdline_extras = vec![
        "weft.ping=10.0.2.1,10.0.3.1".into(),
        "weft.wget=http://10.0.2.1:8080/index.html".into(),
        "weft.httpd=80".into(),
    ];
    spec.nics = vec![
        GuestNic::virtio("wt-tap0", MAC0),
        GuestNic::virtio("wt-tap1", MAC1),
    ];
    let mut guest = RunningGuest::spawn(&spec, Some(&launcher.name)).unwrap();

    let report = guest
        .wait_for(Duration::from_secs(60), |report| {
            report.check("httpd", "80").is_some()
                && ["eth0", "eth1"].iter().all(|i| {
                    report.lease(i).is_some()
                        && report
                            .agent_interface(i)
                            .is_some_and(|ga| ga.addresses.iter().any(|a| a.addr().is_ipv4()))
                })
        })
        .unwrap_or_else(|error| {
            let log = std::fs::read_to_string(spec.serial_log()).unwrap_or_default();
            panic!("{error}\nserial log:\n{log}")
        });

    // The logs name leases and addresses: root's only.
    for log in [spec.serial_log(), spec.qemu_log()] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", log.display());
    }
    let eth0 = report.lease("eth0").expect("eth0 lease");
    assert_eq!(eth0.address, "10.0.2.2/24".parse().unwrap());
    assert_eq!(eth0.router, Some(Ipv4Addr::new(10, 0, 2, 1)));
    assert_eq!(eth0.mtu, Some(1400));
    assert_eq!(eth0.dns, vec![Ipv4Addr::new(10, 0, 2, 1)]);
    assert_eq!(eth0.search, vec!["default.svc.cluster.local"]);
    assert_eq!(eth0.hostname.as_deref(), Some("weft-vm"));
    assert_eq!(eth0.lease_seconds, Some(86_313_600));
    let eth1 = report.lease("eth1").expect("eth1 lease");
    assert_eq!(eth1.address, "10.0.3.2/24".parse().unwrap());
    assert_eq!(eth1.router, None);
    assert_eq!(
        eth1.static_routes,
        vec![("198.51.100.0/24".parse().unwrap(), Ipv4Addr::new(10, 0, 3, 1))]
    );
    for route in [
        "default via 10.0.2.1 dev eth0 metric 100",
        "198.51.100.0/24 via 10.0.3.1 dev eth1 metric 101",
    ] {
        assert!(
            report.routes.iter().any(|r| r == route),
            "{route}: {:?}",
            report.routes
        );
    }
    assert!(report.check("ping", "10.0.2.1").unwrap().ok, "{report:?}");
    assert!(report.check("ping", "10.0.3.1").unwrap().ok, "{report:?}");
    let ga0 = report.agent_interface("eth0").unwrap();
    assert_eq!(ga0.mac, MAC0);
    assert!(ga0.addresses.contains(&"10.0.2.2/24".parse().unwrap()), "{ga0:?}");
    assert_eq!(report.agent_interface("eth1").unwrap().mac, MAC1);
    assert!(
        report.lease_failures.is_empty() && report.errors.is_empty(),
        "{report:?}"
    );
    guest.stop().unwrap();
}
