//! The guest's IPv6 reports: `WEFT-LEASE6` (a DHCPv6 lease dhcpcd applied, with the default
//! router the advertisement gave) and `WEFT-ROUTE6` (the IPv6 routing table once the leases
//! are in), parsed into [`crate::GuestReport`].

use std::net::Ipv6Addr;

use ipnet::Ipv6Net;
use serde::Serialize;

/// One DHCPv6 lease the guest obtained (`WEFT-LEASE6`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease6 {
    /// Guest interface, e.g. `eth0`.
    pub interface: String,
    /// The leased address with the prefix length it was installed with (dhcpcd installs an
    /// IA_NA address as /128; the on-link prefix comes from the router advertisement).
    pub address: Ipv6Net,
    /// The interface's IPv6 default router, if an advertisement made one (link-local).
    pub router: Option<Ipv6Addr>,
    /// DNS servers (DHCPv6 option 23).
    pub dns: Vec<Ipv6Addr>,
}

/// `eth0 fd10:0:2::2/128 router=fe80::ff:fe00:0 dns=fd00::53,fd00::54`; `-` is "absent",
/// unknown `key=value` words are skipped.
pub fn parse_lease6<'a>(mut words: impl Iterator<Item = &'a str>) -> Option<Lease6> {
    let interface = words.next()?.to_string();
    let address = words.next()?.parse().ok()?;
    let mut lease = Lease6 {
        interface,
        address,
        router: None,
        dns: Vec::new(),
    };
    for word in words {
        let (key, value) = word.split_once('=')?;
        if value == "-" || value.is_empty() {
            continue;
        }
        match key {
            "router" => lease.router = Some(value.parse().ok()?),
            "dns" => {
                lease.dns = value
                    .split(',')
                    .filter(|v| !v.is_empty())
                    .map(|v| v.parse().ok())
                    .collect::<Option<_>>()?
            }
            _ => {}
        }
    }
    Some(lease)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::parse_serial_log;

    #[test]
    fn lease6_and_route6_lines_parse() {
        let log = "WEFT-LEASE6 eth0 fd10:0:2::2/128 router=fe80::ff:fe00:0 dns=fd00::53,fd00::54\r\n\
                   [ 4.2] noise WEFT-LEASE6 eth1 fd00:100::10/128 router=- dns=-\n\
                   WEFT-ROUTE6 default via fe80::ff:fe00:0 dev eth0 proto ra metric 1002 \n\
                   WEFT-LEASE6 eth2 not-an-address router=-\n\
                   WEFT-LEASE6 eth3 fd00::1/128 router=bogus\n";
        let report = parse_serial_log(log.as_bytes());
        let eth0 = report.lease6("eth0").unwrap();
        assert_eq!(eth0.address, "fd10:0:2::2/128".parse::<Ipv6Net>().unwrap());
        assert_eq!(eth0.router, Some("fe80::ff:fe00:0".parse().unwrap()));
        assert_eq!(eth0.dns.len(), 2);
        let eth1 = report.lease6("eth1").unwrap();
        assert_eq!((eth1.router, eth1.dns.len()), (None, 0));
        assert_eq!(
            report.routes6,
            ["default via fe80::ff:fe00:0 dev eth0 proto ra metric 1002"]
        );
        assert!(report.lease6("eth2").is_none() && report.lease6("eth3").is_none());
        assert_eq!(report.unparsed.len(), 2, "{:?}", report.unparsed);
        // An IPv6 lease is not an IPv4 one.
        assert!(report.lease("eth0").is_none());
    }
}
