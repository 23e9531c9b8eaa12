//! Root test: a real IPv6 client (Debian's dhcpcd, the guest image's) behind a guest NIC's
//! servers — router advertisements into the "tap" ([`weft_dhcp::spawn_ra`]) and DHCPv6
//! ([`weft_dhcp::spawn_guest_v6`]) — gets the masquerade address fd10:0:2::2 and a default
//! route via the bridge's link-local address (what KubeVirt's masquerade guest lacks,
//! kubevirt #19193), and a prefix-only advertisement (the bridge binding's) gives the on-link
//! route and no default route.
//!
//! netns "pod": bridge wt-br0 (MAC 02:00:00:00:00:00, fd10:0:2::1/120) with port wt-v0 standing
//! in for the guest's tap; netns "guest": eth0 with the guest's MAC, where dhcpcd runs. In the
//! first test a neighbour on another bridge port must not hear the guest's advertisements.

mod support;

use weft_testing as common;

use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{Netns, can_run_root_test};
use weft_dhcp::{
    RaConfig, RaHandle, ServerHandle, V6Config, bind_guest_v6, bind_in_netns, bind_ra, spawn_guest_v6,
    spawn_ra,
};

const GUEST: [u8; 6] = [0x02, 0, 0, 0x0a, 0, 0x01];
const BRIDGE: [u8; 6] = [0x02, 0, 0, 0, 0, 0];
const DHCPCD: &str = "/usr/sbin/dhcpcd";

fn wait_for(netns: &Netns, args: &[&str], wanted: &str, what: &str, log: &dyn Fn() -> String) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = String::from_utf8_lossy(&netns.ip(args).stdout).into_owned();
        if text.contains(wanted) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no {wanted:?} in\n{text}\ndhcpcd:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// dhcpcd and everything it forked: its privilege-separation proxies outlive a killed dhcpcd
/// (orphans holding the test's netns and the files it inherited open), so the client runs in
/// a process group of its own and the whole group is killed.
struct Client(Child);

impl Drop for Client {
    fn drop(&mut self) {
        // The group's id is the leader's pid (spawned with `process_group(0)`).
        // SAFETY: kill(2) with a negative pid signals that process group; no memory involved.
        unsafe {
            libc::kill(-(self.0.id() as libc::pid_t), libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

/// dhcpcd on the guest's eth0, IPv6 only, with a DUID-UUID (as the guest's /init).
fn dhcpcd(guest: &Netns, dir: &std::path::Path) -> Client {
    let conf = dir.join("dhcpcd.conf");
    std::fs::write(
        &conf,
        "nodev\nipv6only\nnoipv4ll\nduid 00:04:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00\n",
    )
    .unwrap();
    // Its own /run (control socket) and /var/lib/dhcpcd (DUID, leases): a client of another
    // test, or of the host, is neither talked to nor read from.
    let script = format!(
        "mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/lib/dhcpcd && exec {DHCPCD} -6 -B -d -f {} -c /bin/true eth0",
        conf.display()
    );
    let child = guest
        .command(&["unshare", "-m", "--propagation", "private", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("dhcpcd.log")).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    Client(child)
}

fn setup(tag: &str) -> (Netns, Netns) {
    let (pod, guest) = support::pod_and_guest_without_dad(tag);
    pod.ip(&[
        "link",
        "add",
        "wt-br0",
        "address",
        "02:00:00:00:00:00",
        "type",
        "bridge",
    ]);
    pod.ip(&["addr", "add", "fd10:0:2::1/120", "dev", "wt-br0"]);
    pod.add_veth("wt-v0", &guest, "eth0");
    pod.ip(&["link", "set", "wt-v0", "master", "wt-br0", "up"]);
    guest.ip(&["link", "set", "eth0", "address", "02:00:00:0a:00:01", "up"]);
    pod.ip(&["link", "set", "wt-br0", "up"]);
    (pod, guest)
}

fn ra(router_lifetime: u16) -> RaConfig {
    RaConfig {
        router_mac: BRIDGE,
        guest_mac: GUEST,
        prefix: "fd10:0:2::/120".parse().unwrap(),
        router_lifetime,
        mtu: Some(1500),
        interval: Duration::from_secs(10),
    }
}

/// Whether test `name` can run: root and dhcpcd installed; otherwise says why it skips.
fn prerequisites_or_skip(name: &str) -> bool {
    if !can_run_root_test(name) {
        return false;
    }
    if !std::path::Path::new(DHCPCD).exists() {
        return common::skip(name, "dhcpcd not installed (dhcpcd-base)");
    }
    true
}

/// The guest NIC's servers in `pod` (DHCPv6 offering fd10:0:2::2, router advertisements with
/// `router_lifetime`) and dhcpcd in `guest`, logging into `dir`; all stop on drop.
struct Served {
    server: ServerHandle,
    advertiser: RaHandle,
    _client: Client,
}

fn serve(pod: &Netns, guest: &Netns, dir: &std::path::Path, router_lifetime: u16) -> Served {
    let sockets = bind_in_netns(&pod.path(), || bind_guest_v6("wt-br0", "wt-v0")).unwrap();
    let server = spawn_guest_v6(sockets, V6Config::new("fd10:0:2::2".parse().unwrap()), GUEST).unwrap();
    let socket = bind_in_netns(&pod.path(), || bind_ra("wt-v0")).unwrap();
    let advertiser = spawn_ra(socket, ra(router_lifetime)).unwrap();
    let _client = dhcpcd(guest, dir);
    Served {
        server,
        advertiser,
        _client,
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn dhcpcd_gets_the_address_and_a_default_route_via_the_bridge() {
    if !prerequisites_or_skip("dhcpcd_gets_the_address_and_a_default_route_via_the_bridge") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (pod, guest) = setup("d6r");
    let neighbour = Netns::new("d6rn");
    for key in ["all.accept_dad=0", "default.accept_dad=0", "default.accept_ra=1"] {
        neighbour.exec(&["sysctl", "-qw", &format!("net.ipv6.conf.{key}")]);
    }
    pod.add_veth("wt-v1", &neighbour, "eth0");
    pod.ip(&["link", "set", "wt-v1", "master", "wt-br0", "up"]);
    neighbour.ip(&["link", "set", "eth0", "up"]);
    let served = serve(&pod, &guest, dir.path(), weft_dhcp::ra::DEFAULT_ROUTER_LIFETIME);
    let log = || std::fs::read_to_string(dir.path().join("dhcpcd.log")).unwrap_or_default();

    let addresses = wait_for(
        &guest,
        &["-6", "addr", "show", "dev", "eth0"],
        "fd10:0:2::2",
        "DHCPv6 address",
        &log,
    );
    let routes = wait_for(
        &guest,
        &["-6", "route", "show", "default"],
        "via fe80::ff:fe00:0 dev eth0",
        "default route from the advertisement",
        &log,
    );
    let on_link = wait_for(
        &guest,
        &["-6", "route"],
        "fd10:0:2::/120",
        "on-link prefix route",
        &log,
    );
    // A neighbour on the same bridge (on the bridge binding: the pod's L2 network), up before
    // the first advertisement and accepting advertisements, heard none of those the guest got:
    // they go into the guest's port only.
    let heard = String::from_utf8_lossy(&neighbour.ip(&["-6", "route"]).stdout).into_owned();
    assert!(
        !heard.contains("fd10:0:2::/120") && !heard.contains("default"),
        "the neighbour got the guest's advertisement:\n{heard}"
    );
    // The bridge's own link-local is the advertised router: the default route resolves.
    let bridge =
        String::from_utf8_lossy(&pod.ip(&["-6", "addr", "show", "dev", "wt-br0"]).stdout).into_owned();
    assert!(bridge.contains("fe80::ff:fe00:0"), "{bridge}");
    guest.exec(&["busybox", "ping", "-c", "1", "-W", "5", "fd10:0:2::1"]);
    assert!(
        served
            .server
            .stats()
            .replied
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2,
        "ADVERTISE and REPLY (a fresh client solicits): {:?}\n{}",
        served.server.stats(),
        log()
    );
    assert!(
        served
            .advertiser
            .stats()
            .solicited
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1,
        "{}",
        log()
    );
    eprintln!("{addresses}{routes}{on_link}");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_prefix_only_advertisement_gives_the_on_link_route_and_no_default() {
    if !prerequisites_or_skip("a_prefix_only_advertisement_gives_the_on_link_route_and_no_default") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (pod, guest) = setup("d6b");
    let _served = serve(&pod, &guest, dir.path(), 0);
    let log = || std::fs::read_to_string(dir.path().join("dhcpcd.log")).unwrap_or_default();
    wait_for(
        &guest,
        &["-6", "addr", "show", "dev", "eth0"],
        "fd10:0:2::2",
        "DHCPv6 address",
        &log,
    );
    wait_for(
        &guest,
        &["-6", "route"],
        "fd10:0:2::/120",
        "on-link prefix route",
        &log,
    );
    let defaults =
        String::from_utf8_lossy(&guest.ip(&["-6", "route", "show", "default"]).stdout).into_owned();
    assert!(
        defaults.trim().is_empty(),
        "no default route expected: {defaults}"
    );
}
