//! The local cluster's networks: an underlay bridge joining the nodes and a "remote" host, a
//! node namespace per node with the secondary L2 network (a bridge joined by VXLAN).

use std::net::IpAddr;
use std::process::Command;

use anyhow::Context;
use ipnet::IpNet;
use weft_host::{FLOOD_MAC, FdbEntry, Netlink, Netns, Vxlan};

use super::processes;
use super::topology::{
    DATA_BRIDGE, DATA_VNI, REMOTE_HTTP_PORT, Topology, UNDERLAY_PREFIX_LEN, UNDERLAY_PREFIX_LEN_V6,
};

const UNDERLAY_BRIDGE: &str = "ul0";
const VXLAN_DEV: &str = "vx-data";

fn ip_net(ip: std::net::Ipv4Addr, prefix: u8) -> anyhow::Result<IpNet> {
    Ok(IpNet::new(IpAddr::V4(ip), prefix)?)
}

fn write_sysctl(ns: &Netns, key: &str, value: &str) -> anyhow::Result<()> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    ns.run_in(|| std::fs::write(&path, value))?
        .with_context(|| format!("sysctl {key}={value} in {}", ns.label()))
}

/// Create the underlay, the remote host and every node (names from `topology`), on the blocking
/// pool (netns and netlink calls).
pub async fn create(topology: &Topology) -> anyhow::Result<()> {
    let topology = topology.clone();
    crate::sys::blocking(move || create_blocking(&topology)).await?
}

fn create_blocking(topology: &Topology) -> anyhow::Result<()> {
    let underlay = Netns::create_named(&topology.underlay_netns)?;
    let mut ul = Netlink::open_in(&underlay)?;
    ul.set_up("lo")?;
    ul.create_bridge(UNDERLAY_BRIDGE)?;
    ul.set_up(UNDERLAY_BRIDGE)?;

    let remote = Netns::create_named(&topology.remote_netns)?;
    ul.create_veth("remote", "eth0", Some(&remote))?;
    ul.set_master("remote", UNDERLAY_BRIDGE)?;
    ul.set_up("remote")?;
    let mut rn = Netlink::open_in(&remote)?;
    rn.set_up("lo")?;
    rn.add_address("eth0", ip_net(topology.remote_ip, UNDERLAY_PREFIX_LEN)?)?;
    if let Some(ip6) = topology.remote_ip6 {
        // No duplicate address detection on this private link: the address is usable at once.
        write_sysctl(&remote, "net.ipv6.conf.eth0.accept_dad", "0")?;
        rn.add_address("eth0", IpNet::new(IpAddr::V6(ip6), UNDERLAY_PREFIX_LEN_V6)?)?;
    }
    rn.set_up("eth0")?;
    let www = topology.state_dir.join("remote/www");
    std::fs::create_dir_all(&www)?;
    std::fs::write(www.join("index.html"), "hello from the weft remote host\n")?;
    let mut httpd = Command::new("busybox");
    httpd
        .args(["httpd", "-f", "-p", &REMOTE_HTTP_PORT.to_string(), "-h"])
        .arg(&www);
    processes::spawn_daemon(
        &topology.state_dir,
        "remote-httpd",
        Some(&remote),
        httpd,
        &topology.state_dir.join("remote/httpd.log"),
    )?;

    for node in &topology.nodes {
        let ns = Netns::create_named(&node.netns)?;
        ul.create_veth(&node.underlay_port, "ul", Some(&ns))?;
        ul.set_master(node.underlay_port.as_str(), UNDERLAY_BRIDGE)?;
        ul.set_up(node.underlay_port.as_str())?;
        let mut nl = Netlink::open_in(&ns)?;
        nl.set_up("lo")?;
        nl.add_address("ul", ip_net(node.underlay_ip, UNDERLAY_PREFIX_LEN)?)?;
        if let Some(ip6) = node.underlay_ip6 {
            write_sysctl(&ns, "net.ipv6.conf.ul.accept_dad", "0")?;
            nl.add_address("ul", IpNet::new(IpAddr::V6(ip6), UNDERLAY_PREFIX_LEN_V6)?)?;
            write_sysctl(&ns, "net.ipv6.conf.all.forwarding", "1")?;
        }
        nl.set_up("ul")?;
        write_sysctl(&ns, "net.ipv4.ip_forward", "1")?;
        nl.create_bridge(DATA_BRIDGE)?;
        nl.set_mtu(DATA_BRIDGE, 1450)?;
        nl.set_up(DATA_BRIDGE)?;
        let mut vxlan = Vxlan::new(DATA_VNI);
        vxlan.local = Some(IpAddr::V4(node.underlay_ip));
        vxlan.underlay = Some("ul".into());
        nl.create_vxlan(VXLAN_DEV, &vxlan)?;
        nl.set_master(VXLAN_DEV, DATA_BRIDGE)?;
        nl.set_up(VXLAN_DEV)?;
        // Head-end replication: flood unknown destinations to every other node's VTEP.
        for peer in topology.nodes.iter().filter(|p| p.name != node.name) {
            nl.append_fdb(
                VXLAN_DEV,
                FdbEntry {
                    mac: FLOOD_MAC,
                    remote: IpAddr::V4(peer.underlay_ip),
                },
            )?;
        }
    }
    Ok(())
}
