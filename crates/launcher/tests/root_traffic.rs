//! Root tests: traffic through the masquerade and bridge wirings. A netns plays the guest (a veth on the
//! `k6t-eth0` bridge standing in for the TAP's far side), another plays the node behind the pod's
//! `eth0`. The node has no route to the VM network, so outbound traffic only works through the
//! masquerade, and inbound traffic to the pod IP only reaches the guest through the DNAT.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use weft_launcher::exec::{NetlinkBackend, NetnsBackend, apply, teardown};
use weft_launcher::lease::LeaseV4;
use weft_launcher::{
    Binding, NatOptions, TapOwner, TapSettings, VmNetworkCidrs, WiringPlan, WiringRequest, plan_wiring,
};
use weft_testing::{Netns, can_run_root_test};

/// A background process killed (by its pid) when dropped.
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn httpd(ns: &Netns, dir: &std::path::Path) -> Result<Background> {
    httpd_on(ns, dir, 80)
}

fn httpd_on(ns: &Netns, dir: &std::path::Path, port: u16) -> Result<Background> {
    let port = port.to_string();
    let child = ns
        .command(&["busybox", "httpd", "-f", "-p", &port, "-h"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    Ok(Background(child))
}

/// HTTP servers on port 80: the node answers `hello-from-node`, the guest `hello-from-guest`.
fn serve_node_and_guest(node: &Netns, guest: &Netns) -> Result<(tempfile::TempDir, Background, Background)> {
    let www = tempfile::tempdir()?;
    std::fs::write(www.path().join("index.html"), "hello-from-node\n")?;
    let node_httpd = httpd(node, www.path())?;
    let guest_www = www.path().join("guest");
    std::fs::create_dir_all(&guest_www)?;
    std::fs::write(guest_www.join("index.html"), "hello-from-guest\n")?;
    let guest_httpd = httpd(guest, &guest_www)?;
    Ok((www, node_httpd, guest_httpd))
}

/// One fetch of `url` from `ns` given `seconds`: the body, or wget's error output.
fn fetch(ns: &Netns, url: &str, seconds: &str) -> Result<String> {
    let out = ns
        .command(&["timeout", seconds, "busybox", "wget", "-q", "-O", "-", url])
        .output()?;
    if !out.status.success() {
        bail!("wget {url}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One fetch of `url` from `ns`, given 2 s (for what must not answer).
fn fetch_once(ns: &Netns, url: &str) -> Result<String> {
    fetch(ns, url, "2")
}

fn wget(ns: &Netns, url: &str) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match fetch(ns, url, "3") {
            Ok(body) => return Ok(body),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// A pod netns whose `eth0` (10.222.222.1/30, default route via the node) is a veth to a node
/// netns (`wt-node`, 10.222.222.2/30), and an empty netns for the guest.
fn pod_node_and_guest(role_prefix: &str) -> (Netns, Netns, Netns) {
    let pod = Netns::new(&format!("mqt-{role_prefix}pod-"));
    let node = Netns::new(&format!("mqt-{role_prefix}node-"));
    let guest = Netns::new(&format!("mqt-{role_prefix}guest-"));
    pod.add_veth("eth0", &node, "wt-node");
    pod.ip(&["addr", "add", "10.222.222.1/30", "dev", "eth0"]);
    pod.ip(&["link", "set", "eth0", "up"]);
    pod.ip(&["route", "add", "default", "via", "10.222.222.2"]);
    node.ip(&["addr", "add", "10.222.222.2/30", "dev", "wt-node"]);
    node.ip(&["link", "set", "wt-node", "up"]);
    (pod, node, guest)
}

/// The wiring of the pod's primary `eth0` with `binding`.
fn request(binding: Binding, pod_link: weft_launcher::PodLink) -> WiringRequest {
    WiringRequest {
        binding,
        pod_iface: "eth0".to_string(),
        primary: true,
        interface_index: 0,
        pod_link,
        guest_mac: None,
        vm_cidrs: VmNetworkCidrs::default(),
        tap: TapSettings {
            owner: TapOwner { uid: 0, gid: 0 },
            queues: 1,
        },
    }
}

/// Plan the wiring of the pod's `eth0` with `binding` and apply it in the pod netns.
fn wire(pod: &Netns, binding: Binding) -> Result<(NetlinkBackend, WiringPlan)> {
    let mut backend = NetlinkBackend::open(pod.path())?;
    let pod_link = backend.discover("eth0")?.context("eth0")?;
    let plan = plan_wiring(&request(binding, pod_link))?;
    apply(&mut backend, &plan)?;
    Ok((backend, plan))
}

/// The guest's NIC: a veth whose pod end (`wt-gport`) is a port of `bridge` and whose other end
/// is the guest netns's `eth0` (standing in for the TAP's far side).
fn guest_port(pod: &Netns, guest: &Netns, bridge: &str) {
    pod.add_veth("wt-gport", guest, "eth0");
    pod.ip(&["link", "set", "wt-gport", "master", bridge, "up"]);
}

/// Configures the guest's `eth0` as the IPv4 DHCP lease says: address, up, default route.
fn configure_guest_v4(guest: &Netns, lease: &LeaseV4) {
    guest.ip(&["addr", "add", &lease.address.to_string(), "dev", "eth0"]);
    guest.ip(&["link", "set", "eth0", "up"]);
    let router = lease.router.expect("the lease names a router").to_string();
    guest.ip(&["route", "add", "default", "via", &router]);
}

/// Removes the guest's port, then tears the wiring down.
fn unwire(pod: &Netns, backend: &mut NetlinkBackend, plan: &WiringPlan) -> Result<()> {
    pod.ip(&["link", "del", "wt-gport"]);
    teardown(backend, plan)?;
    Ok(())
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn masquerade_forwards_both_ways() -> Result<()> {
    if !can_run_root_test("masquerade_forwards_both_ways") {
        return Ok(());
    }
    let (pod, node, guest) = pod_node_and_guest("");
    pod.ip(&["addr", "add", "2001:db8::1/64", "dev", "eth0", "nodad"]);
    pod.ip(&["-6", "route", "add", "default", "via", "2001:db8::2"]);
    node.ip(&["addr", "add", "2001:db8::2/64", "dev", "wt-node", "nodad"]);

    let (mut backend, plan) = wire(&pod, Binding::Masquerade(NatOptions::default()))?;

    // The guest's NIC: a veth port on the bridge, configured as the DHCP lease says.
    let lease = plan.lease.as_ref().unwrap().ipv4.as_ref().unwrap();
    guest_port(&pod, &guest, &plan.names.bridge);
    configure_guest_v4(&guest, lease);
    let v6 = plan.lease.as_ref().unwrap().ipv6.as_ref().unwrap();
    guest.ip(&["addr", "add", &v6.address.to_string(), "dev", "eth0", "nodad"]);
    guest.ip(&["-6", "route", "add", "default", "via", "fd10:0:2::1"]);

    let _servers = serve_node_and_guest(&node, &guest)?;

    // IPv6 both ways (the bridge's fd10:0:2::1 may still be in DAD: wget retries).
    assert_eq!(
        wget(&guest, "http://[2001:db8::2]/index.html")?,
        "hello-from-node\n"
    );
    assert_eq!(
        wget(&node, "http://[2001:db8::1]/index.html")?,
        "hello-from-guest\n"
    );
    // Outbound: the node has no route to 10.0.2.0/24; only the masquerade makes this work.
    assert!(!node.exec(&["ip", "route"]).contains("10.0.2"));
    assert_eq!(
        wget(&guest, "http://10.222.222.2/index.html")?,
        "hello-from-node\n"
    );
    // Inbound: the pod IP, DNATed to the guest (no ports declared: everything is forwarded).
    assert_eq!(
        wget(&node, "http://10.222.222.1/index.html")?,
        "hello-from-guest\n"
    );

    unwire(&pod, &mut backend, &plan)?;
    let after = fetch_once(&node, "http://10.222.222.1/index.html");
    assert!(after.is_err(), "no DNAT after teardown: {after:?}");
    Ok(())
}

/// With declared ports only those reach the guest from outside (KubeVirt,
/// docs/upstream/kubevirt-network.md §8 step 8).
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn masquerade_forwards_only_declared_ports() -> Result<()> {
    if !can_run_root_test("masquerade_forwards_only_declared_ports") {
        return Ok(());
    }
    let (pod, node, guest) = pod_node_and_guest("p");
    let options = NatOptions {
        ports: vec![weft_launcher::nft::ForwardedPort {
            protocol: "TCP".to_string(),
            port: 80,
        }],
        ..NatOptions::default()
    };
    let (mut backend, plan) = wire(&pod, Binding::Masquerade(options))?;
    guest_port(&pod, &guest, &plan.names.bridge);
    configure_guest_v4(&guest, plan.lease.as_ref().unwrap().ipv4.as_ref().unwrap());
    let www = tempfile::tempdir()?;
    std::fs::write(www.path().join("index.html"), "hello-from-guest\n")?;
    let _on_80 = httpd_on(&guest, www.path(), 80)?;
    let _on_8080 = httpd_on(&guest, www.path(), 8080)?;

    assert_eq!(
        wget(&node, "http://10.222.222.1/index.html")?,
        "hello-from-guest\n"
    );
    let undeclared = fetch_once(&node, "http://10.222.222.1:8080/index.html");
    assert!(undeclared.is_err(), "port 8080 is not declared: {undeclared:?}");
    assert_eq!(
        wget(&guest, "http://10.0.2.2:8080/index.html")?,
        "hello-from-guest\n",
        "the guest does serve it"
    );

    unwire(&pod, &mut backend, &plan)?;
    Ok(())
}

/// The bridge binding: the guest (a netns with the original pod MAC, configured from the lease)
/// takes over the pod IP at L2 and talks to the node directly, both ways.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn bridge_binding_hands_the_pod_ip_to_the_guest() -> Result<()> {
    if !can_run_root_test("bridge_binding_hands_the_pod_ip_to_the_guest") {
        return Ok(());
    }
    let (pod, node, guest) = pod_node_and_guest("b");

    let (mut backend, plan) = wire(&pod, Binding::Bridge)?;

    let lease = plan.lease.as_ref().unwrap();
    let v4 = lease.ipv4.as_ref().unwrap();
    assert_eq!(v4.address.to_string(), "10.222.222.1/30");
    guest_port(&pod, &guest, &plan.names.bridge);
    guest.ip(&[
        "link",
        "set",
        "eth0",
        "address",
        &lease.client_mac.unwrap().to_string(),
    ]);
    configure_guest_v4(&guest, v4);

    let _servers = serve_node_and_guest(&node, &guest)?;

    assert_eq!(
        wget(&guest, "http://10.222.222.2/index.html")?,
        "hello-from-node\n"
    );
    assert_eq!(
        wget(&node, "http://10.222.222.1/index.html")?,
        "hello-from-guest\n"
    );

    unwire(&pod, &mut backend, &plan)?;
    assert!(
        pod.exec(&["ip", "addr", "show", "dev", "eth0"])
            .contains("10.222.222.1/30"),
        "pod IP restored"
    );
    Ok(())
}
