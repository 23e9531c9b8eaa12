//! The IPv6 servers of one guest NIC in its launcher pod: DHCPv6 for the lease's address and
//! router advertisements into the guest's tap (the on-link prefix with the managed flag and,
//! for masquerade, the bridge as default router). KubeVirt runs the DHCPv6 server for
//! masquerade only and sends no advertisement (kubevirt #19193, #7979).
//!
//! What to run is decided by [`weft_launcher::GuestLease::servers`] and [`ra_config`]; this
//! module only binds the sockets in the pod netns and starts the threads.

use anyhow::Context;
use weft_launcher::GuestLease;
use weft_launcher::lease::GuestServer;

/// The running IPv6 servers of one guest NIC; dropping it stops both.
// Held so that the servers run until the NIC goes (their Drop stops them).
#[derive(Debug)]
pub struct V6Servers {
    /// The DHCPv6 server.
    pub dhcp: weft_dhcp::ServerHandle,
    /// The router advertiser.
    pub ra: weft_dhcp::RaHandle,
}

/// The advertisement of `lease` for the guest NIC, if the lease has IPv6.
pub fn ra_config(lease: &GuestLease) -> Option<weft_dhcp::RaConfig> {
    let guest_mac = lease.client_mac?.0;
    let v6 = lease.ipv6?;
    lease.servers().into_iter().find_map(|server| match server {
        GuestServer::RouterAdvertisement {
            prefix,
            default_router,
        } => Some(weft_dhcp::RaConfig {
            router_mac: v6.server_mac.0,
            guest_mac,
            prefix,
            router_lifetime: if default_router {
                weft_dhcp::ra::DEFAULT_ROUTER_LIFETIME
            } else {
                0
            },
            mtu: Some(u32::from(lease.mtu)),
            interval: weft_dhcp::ra::DEFAULT_INTERVAL,
        }),
        _ => None,
    })
}

/// The DHCPv6 server config of `lease` (DNS from the pod's default network), if it has IPv6.
pub fn dhcp_config(lease: &GuestLease, dns: &[std::net::Ipv6Addr]) -> Option<weft_dhcp::V6Config> {
    let v6 = lease.ipv6?;
    let mut config = weft_dhcp::V6Config::new(v6.address.addr());
    config.server_mac = v6.server_mac.0;
    config.dns_servers = dns.to_vec();
    Some(config)
}

/// Start the IPv6 servers of `lease` for the guest behind `tap`, inside `netns`; `None` when
/// the lease has no IPv6.
pub fn serve(
    netns: &weft_host::Netns,
    tap: &str,
    lease: &GuestLease,
    statuses: &[weft_netconf::NetworkStatus],
) -> anyhow::Result<Option<V6Servers>> {
    let dns: Vec<std::net::Ipv6Addr> = statuses
        .iter()
        .find(|s| s.default)
        .map(|s| s.dns.nameservers.iter().filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_default();
    let (Some(config), Some(ra), Some(mac)) = (dhcp_config(lease, &dns), ra_config(lease), lease.client_mac)
    else {
        return Ok(None);
    };
    let (bridge, guest_tap) = (lease.server_interface.clone(), tap.to_string());
    let (sockets, ra_socket) = netns
        .run_in(move || -> std::io::Result<_> {
            Ok((
                weft_dhcp::bind_guest_v6(&bridge, &guest_tap)?,
                weft_dhcp::bind_ra(&guest_tap)?,
            ))
        })?
        .with_context(|| format!("DHCPv6/RA sockets on {} / {tap}", lease.server_interface))?;
    let dhcp = weft_dhcp::spawn_guest_v6(sockets, config, mac.0)
        .with_context(|| format!("DHCPv6 on {}", lease.server_interface))?;
    let ra = weft_dhcp::spawn_ra(ra_socket, ra).with_context(|| format!("router advertisements on {tap}"))?;
    Ok(Some(V6Servers { dhcp, ra }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_launcher::MacAddr;
    use weft_launcher::lease::LeaseV6;

    fn lease(default_router: bool) -> GuestLease {
        GuestLease {
            server_interface: "k6t-eth0".into(),
            client_mac: Some(MacAddr([2, 0, 0, 0, 0, 7])),
            mtu: 1400,
            ipv4: None,
            ipv6: Some(LeaseV6 {
                address: "fd10:0:2::2/120".parse().unwrap(),
                server_mac: MacAddr([2, 0, 0, 0, 0, 0]),
                default_router,
            }),
        }
    }

    #[test]
    fn masquerade_advertises_a_router_and_bridge_the_prefix_only() {
        let ra = ra_config(&lease(true)).unwrap();
        assert_eq!(ra.router_lifetime, weft_dhcp::ra::DEFAULT_ROUTER_LIFETIME);
        assert_eq!(ra.prefix, "fd10:0:2::/120".parse().unwrap());
        assert_eq!(ra.guest_mac, [2, 0, 0, 0, 0, 7]);
        assert_eq!(ra.mtu, Some(1400));
        assert_eq!(ra_config(&lease(false)).unwrap().router_lifetime, 0);
        let dhcp = dhcp_config(&lease(true), &["fd00::53".parse().unwrap()]).unwrap();
        assert_eq!(
            dhcp.client_ip,
            "fd10:0:2::2".parse::<std::net::Ipv6Addr>().unwrap()
        );
        assert_eq!(dhcp.dns_servers.len(), 1);
        let mut v4_only = lease(true);
        v4_only.ipv6 = None;
        assert!(ra_config(&v4_only).is_none() && dhcp_config(&v4_only, &[]).is_none());
    }
}
