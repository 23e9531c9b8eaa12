//! Reading the guest's serial console back into typed reports.
//!
//! The guest prints one `WEFT-*` line per event (see [`crate::init`]). Only complete lines count
//! (a line still being written is ignored until its newline arrives), a marker may be preceded by
//! kernel noise on the same line, and a line that does not parse is kept in
//! [`GuestReport::unparsed`] instead of failing the whole log.

use std::net::Ipv4Addr;

use ipnet::{IpNet, Ipv4Net};
use serde::Serialize;

/// One DHCP lease the guest obtained (`WEFT-LEASE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    /// Guest interface, e.g. `eth0`.
    pub interface: String,
    /// Leased address with prefix.
    pub address: Ipv4Net,
    /// Default gateway (option 3).
    pub router: Option<Ipv4Addr>,
    /// DNS servers (option 6).
    pub dns: Vec<Ipv4Addr>,
    /// Interface MTU (option 26).
    pub mtu: Option<u16>,
    /// Search domains (option 119).
    pub search: Vec<String>,
    /// Domain name (option 15).
    pub domain: Option<String>,
    /// Host name (option 12).
    pub hostname: Option<String>,
    /// Classless static routes (option 121) as (destination, gateway).
    pub static_routes: Vec<(Ipv4Net, Ipv4Addr)>,
    /// Lease time in seconds (option 51).
    pub lease_seconds: Option<u32>,
    /// The DHCP server that answered (option 54).
    pub server: Option<Ipv4Addr>,
}

/// One interface as the guest agent last reported it (`WEFT-GA`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentInterface {
    /// Interface name.
    pub name: String,
    /// MAC address, lowercase as the kernel prints it.
    pub mac: String,
    /// Addresses with prefix (IPv4 and IPv6).
    pub addresses: Vec<IpNet>,
}

impl AgentInterface {
    /// The addresses without prefix, in the guest's order (the form of VMI
    /// `status.interfaces[].ipAddresses`).
    pub fn ips(&self) -> Vec<std::net::IpAddr> {
        self.addresses.iter().map(IpNet::addr).collect()
    }

    /// [`AgentInterface::ips`] without IPv6 link-local addresses.
    pub fn global_ips(&self) -> Vec<std::net::IpAddr> {
        self.ips()
            .into_iter()
            .filter(|ip| match ip {
                std::net::IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
                std::net::IpAddr::V4(_) => true,
            })
            .collect()
    }
}

/// The result of one check requested on the kernel command line (`WEFT-CHECK`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// `ping`, `wget` or `httpd`.
    pub kind: String,
    /// What was checked: an IP, a URL or a port.
    pub target: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// Extra output (the first line of a fetched page).
    pub detail: String,
}

/// Everything the guest has reported so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GuestReport {
    /// `/init` started (`WEFT-BOOT`).
    pub booted: bool,
    /// Every NIC's DHCP attempt has finished (`WEFT-READY`).
    pub ready: bool,
    /// Leases, in the order they were obtained.
    pub leases: Vec<Lease>,
    /// Interfaces whose DHCP failed (`WEFT-LEASEFAIL`).
    pub lease_failures: Vec<String>,
    /// The latest guest-agent line per interface, by interface name.
    pub agent_interfaces: Vec<AgentInterface>,
    /// Check results, in order.
    pub checks: Vec<Check>,
    /// The guest's routing table once every boot-time NIC had its DHCP attempt (`ip route`
    /// lines, e.g. `default via 10.0.2.1 dev eth0 metric 100`).
    pub routes: Vec<String>,
    /// Errors the guest printed (`WEFT-ERROR`).
    pub errors: Vec<String>,
    /// `WEFT-` lines that did not parse.
    pub unparsed: Vec<String>,
    /// DHCPv6 leases, in the order they were obtained (`WEFT-LEASE6`).
    pub leases6: Vec<crate::lease6::Lease6>,
    /// The guest's IPv6 routing table once its IPv6 leases were in (`WEFT-ROUTE6`).
    pub routes6: Vec<String>,
}

impl GuestReport {
    /// The lease of `interface`, if any (the latest one).
    pub fn lease(&self, interface: &str) -> Option<&Lease> {
        self.leases
            .iter()
            .rev()
            .find(|lease| lease.interface == interface)
    }

    /// The DHCPv6 lease of `interface`, if any (the latest one).
    pub fn lease6(&self, interface: &str) -> Option<&crate::lease6::Lease6> {
        self.leases6
            .iter()
            .rev()
            .find(|lease| lease.interface == interface)
    }

    /// The latest result of check `kind` on `target`.
    pub fn check(&self, kind: &str, target: &str) -> Option<&Check> {
        self.checks
            .iter()
            .rev()
            .find(|c| c.kind == kind && c.target == target)
    }

    /// The agent's view of `interface`.
    pub fn agent_interface(&self, interface: &str) -> Option<&AgentInterface> {
        self.agent_interfaces.iter().find(|i| i.name == interface)
    }
}

/// Parses a serial log (raw bytes, possibly invalid UTF-8 and `\r\n` line ends).
pub fn parse_serial_log(log: &[u8]) -> GuestReport {
    let mut report = GuestReport::default();
    report.apply(log);
    report
}

impl GuestReport {
    /// Folds the complete lines at the start of `chunk` into the report and returns how many
    /// bytes that consumed (everything up to the last newline); the rest is a line still being
    /// written.
    pub fn apply(&mut self, chunk: &[u8]) -> usize {
        let Some(end) = chunk.iter().rposition(|b| *b == b'\n') else {
            return 0;
        };
        let text = String::from_utf8_lossy(&chunk[..end]);
        for line in text.lines() {
            let Some(start) = line.find("WEFT-") else { continue };
            let line = line[start..].trim_end_matches('\r').trim_end();
            if parse_line(line, self).is_none() {
                self.unparsed.push(line.to_string());
            }
        }
        self.agent_interfaces.sort_by(|a, b| a.name.cmp(&b.name));
        end + 1
    }
}

/// Follows a growing serial log, reading only what was appended since the last call, so that
/// polling a long-running guest costs nothing more than its new lines.
#[derive(Debug, Clone)]
pub struct LogFollower {
    path: std::path::PathBuf,
    offset: u64,
    report: GuestReport,
}

impl LogFollower {
    /// Follows the log at `path` from its beginning.
    pub fn new(path: &std::path::Path) -> Self {
        Self {
            path: path.to_path_buf(),
            offset: 0,
            report: GuestReport::default(),
        }
    }

    /// Reads what was appended and returns the updated report.
    pub fn poll(&mut self) -> std::io::Result<&GuestReport> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = std::fs::File::open(&self.path)?;
        file.seek(SeekFrom::Start(self.offset))?;
        let mut appended = Vec::new();
        file.read_to_end(&mut appended)?;
        self.offset += self.report.apply(&appended) as u64;
        Ok(&self.report)
    }

    /// The report so far.
    pub fn report(&self) -> &GuestReport {
        &self.report
    }
}

fn parse_line(line: &str, report: &mut GuestReport) -> Option<()> {
    let mut words = line.split(' ').filter(|w| !w.is_empty());
    match words.next()? {
        "WEFT-BOOT" => report.booted = true,
        "WEFT-READY" => report.ready = true,
        "WEFT-LEASE" => report.leases.push(parse_lease(words)?),
        "WEFT-LEASE6" => report.leases6.push(crate::lease6::parse_lease6(words)?),
        "WEFT-ROUTE6" => report.routes6.push(words.collect::<Vec<_>>().join(" ")),
        "WEFT-LEASEFAIL" => report.lease_failures.push(words.next()?.to_string()),
        "WEFT-ERROR" => report.errors.push(words.collect::<Vec<_>>().join(" ")),
        "WEFT-ROUTE" => report.routes.push(words.collect::<Vec<_>>().join(" ")),
        "WEFT-CHECK" => {
            let kind = words.next()?.to_string();
            let target = words.next()?.to_string();
            let ok = match words.next()? {
                "ok" => true,
                "fail" => false,
                _ => return None,
            };
            let detail = words.collect::<Vec<_>>().join(" ");
            report.checks.push(Check {
                kind,
                target,
                ok,
                detail,
            });
        }
        "WEFT-GA" => {
            let name = words.next()?.to_string();
            let mac = words.next()?.to_string();
            let addresses = words.map(|w| w.parse().ok()).collect::<Option<Vec<IpNet>>>()?;
            let interface = AgentInterface { name, mac, addresses };
            match report
                .agent_interfaces
                .iter_mut()
                .find(|i| i.name == interface.name)
            {
                Some(existing) => *existing = interface,
                None => report.agent_interfaces.push(interface),
            }
        }
        _ => return None,
    }
    Some(())
}

/// `eth0 10.0.2.2/24 router=10.0.2.1 dns=a,b mtu=1400 search=x,y domain=x hostname=h
/// staticroutes=net/len,gw,... lease=86313600 server=10.0.2.1`; `-` is "absent".
fn parse_lease<'a>(mut words: impl Iterator<Item = &'a str>) -> Option<Lease> {
    let interface = words.next()?.to_string();
    let address = words.next()?.parse().ok()?;
    let mut lease = Lease {
        interface,
        address,
        router: None,
        dns: Vec::new(),
        mtu: None,
        search: Vec::new(),
        domain: None,
        hostname: None,
        static_routes: Vec::new(),
        lease_seconds: None,
        server: None,
    };
    for word in words {
        let (key, value) = word.split_once('=')?;
        if value == "-" || value.is_empty() {
            continue;
        }
        let list = || value.split(',').filter(|v| !v.is_empty());
        match key {
            // udhcpc may list several routers; the first is the default gateway.
            "router" => lease.router = Some(list().next()?.parse().ok()?),
            "dns" => lease.dns = list().map(|v| v.parse().ok()).collect::<Option<_>>()?,
            "mtu" => lease.mtu = Some(value.parse().ok()?),
            "search" => lease.search = list().map(String::from).collect(),
            "domain" => lease.domain = Some(value.to_string()),
            "hostname" => lease.hostname = Some(value.to_string()),
            "staticroutes" => {
                let items: Vec<&str> = list().collect();
                if !items.len().is_multiple_of(2) {
                    return None;
                }
                lease.static_routes = items
                    .chunks(2)
                    .map(|pair| Some((pair[0].parse().ok()?, pair[1].parse().ok()?)))
                    .collect::<Option<_>>()?;
            }
            "lease" => lease.lease_seconds = Some(value.parse().ok()?),
            "server" => lease.server = Some(value.parse().ok()?),
            _ => {}
        }
    }
    Some(lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
[    2.1] random kernel line\r
WEFT-BOOT uptime=2.31 kernel=6.1.0-56-amd64\r
WEFT-LEASE eth0 10.0.2.2/24 router=10.0.2.1 dns=10.96.0.10,10.96.0.11 mtu=1400 search=default.svc.cluster.local,cluster.local domain=default.svc.cluster.local hostname=vm1 staticroutes=- lease=86313600 server=10.0.2.1\r
[    3.0] noise WEFT-LEASE eth1 192.168.10.5/24 router=- dns=- mtu=1500 search=- domain=- hostname=- staticroutes=198.51.100.0/24,192.168.10.1,10.0.0.0/8,0.0.0.0 lease=86313600 server=169.254.75.11\r
WEFT-LEASEFAIL eth2 leasefail\r
WEFT-ROUTE default via 10.0.2.1 dev eth0 metric 100 \r
WEFT-READY uptime=3.4 nics=eth0,eth1,eth2\r
WEFT-CHECK ping 10.0.2.1 ok\r
WEFT-CHECK ping 192.0.2.10 fail\r
WEFT-CHECK wget http://192.0.2.10/ ok hello from remote\r
WEFT-GA eth0 52:54:00:00:00:01 \r
WEFT-GA eth0 52:54:00:00:00:01 10.0.2.2/24 fe80::5054:ff:fe00:1/64 \r
WEFT-GA eth1 52:54:00:00:00:02 192.168.10.5/24\r
WEFT-BOGUS what\r
WEFT-CHECK ping 10.0.3.1 o";

    #[test]
    fn parses_every_report_kind() {
        let report = parse_serial_log(LOG.as_bytes());
        assert!(report.booted && report.ready);
        let eth0 = report.lease("eth0").unwrap();
        assert_eq!(eth0.address, "10.0.2.2/24".parse().unwrap());
        assert_eq!(eth0.router, Some(Ipv4Addr::new(10, 0, 2, 1)));
        assert_eq!(eth0.dns.len(), 2);
        assert_eq!(eth0.mtu, Some(1400));
        assert_eq!(eth0.search, vec!["default.svc.cluster.local", "cluster.local"]);
        assert_eq!(eth0.hostname.as_deref(), Some("vm1"));
        assert_eq!(eth0.lease_seconds, Some(86_313_600));
        let eth1 = report.lease("eth1").unwrap();
        assert_eq!(eth1.router, None);
        assert_eq!(
            eth1.static_routes,
            vec![
                ("198.51.100.0/24".parse().unwrap(), Ipv4Addr::new(192, 168, 10, 1)),
                ("10.0.0.0/8".parse().unwrap(), Ipv4Addr::UNSPECIFIED),
            ]
        );
        assert_eq!(report.lease_failures, vec!["eth2"]);
        assert_eq!(report.routes, vec!["default via 10.0.2.1 dev eth0 metric 100"]);
        assert!(report.check("ping", "10.0.2.1").unwrap().ok);
        assert!(!report.check("ping", "192.0.2.10").unwrap().ok);
        assert_eq!(
            report.check("wget", "http://192.0.2.10/").unwrap().detail,
            "hello from remote"
        );
        // The incomplete last line is not read yet.
        assert!(report.check("ping", "10.0.3.1").is_none());
        let ga = report.agent_interface("eth0").unwrap();
        assert_eq!(ga.mac, "52:54:00:00:00:01");
        assert_eq!(ga.addresses.len(), 2, "the latest agent line wins");
        assert_eq!(ga.ips()[1].to_string(), "fe80::5054:ff:fe00:1");
        assert_eq!(ga.global_ips(), vec![std::net::IpAddr::from([10, 0, 2, 2])]);
        assert_eq!(report.agent_interfaces.len(), 2);
        assert_eq!(report.unparsed, vec!["WEFT-BOGUS what"]);
    }

    #[test]
    fn follower_reads_only_complete_appended_lines() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serial.log");
        let mut file = std::fs::File::create(&path).unwrap();
        let mut follower = LogFollower::new(&path);
        file.write_all(b"WEFT-BOOT uptime=1\nWEFT-CHECK ping 10.0.0.1 o")
            .unwrap();
        assert!(follower.poll().unwrap().booted);
        assert!(follower.report().checks.is_empty());
        file.write_all(b"k\n").unwrap();
        assert!(follower.poll().unwrap().check("ping", "10.0.0.1").unwrap().ok);
        assert_eq!(follower.poll().unwrap().checks.len(), 1, "nothing is read twice");
        let whole = std::fs::read(&path).unwrap();
        assert_eq!(&parse_serial_log(&whole), follower.report());
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_logs(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = parse_serial_log(&bytes);
        }

        #[test]
        fn never_panics_on_mangled_report_lines(cut in 0usize..2000, junk in "[ -~]{0,20}") {
            let mut log = LOG.to_string();
            // LOG is ASCII: every index is a char boundary.
            log.insert_str(cut % log.len(), &junk);
            let _ = parse_serial_log(log.as_bytes());
        }
    }
}
