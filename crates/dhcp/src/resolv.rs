//! DNS settings for the guest, derived from the launcher's `/etc/resolv.conf` as KubeVirt does
//! (`pkg/network/dns/resolveconf.go`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Used when resolv.conf names no valid nameserver at all.
pub const FALLBACK_NAMESERVER: Ipv4Addr = Ipv4Addr::new(8, 8, 8, 8);

/// Used when resolv.conf has no `search` line.
pub const DEFAULT_SEARCH_DOMAIN: &str = "cluster.local";

/// The nameservers and search domains a guest gets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DnsSettings {
    /// IPv4 nameservers (DHCPv4 option 6).
    pub ipv4_nameservers: Vec<Ipv4Addr>,
    /// IPv6 nameservers (DHCPv6 DNS option).
    pub ipv6_nameservers: Vec<Ipv6Addr>,
    /// Search domains, lowercased (DHCPv4 option 119).
    pub search_domains: Vec<String>,
}

/// Parses resolv.conf text. No valid nameserver at all gives `8.8.8.8`; no `search` line gives
/// `cluster.local`. With a `subdomain` (VMI `spec.subdomain`), the longest `*.svc.*` domain gets
/// `<subdomain>.<domain>` prepended unless it already starts with `<subdomain>.`.
pub fn parse_resolv_conf(text: &str, subdomain: Option<&str>) -> DnsSettings {
    let mut settings = DnsSettings::default();
    let mut saw_search = false;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("nameserver") => match fields.next().and_then(|ip| ip.parse::<IpAddr>().ok()) {
                Some(IpAddr::V4(ip)) => settings.ipv4_nameservers.push(ip),
                Some(IpAddr::V6(ip)) => settings.ipv6_nameservers.push(ip),
                None => {}
            },
            Some("search") => {
                saw_search = true;
                settings.search_domains = fields.map(str::to_lowercase).collect();
            }
            _ => {}
        }
    }
    if settings.ipv4_nameservers.is_empty() && settings.ipv6_nameservers.is_empty() {
        settings.ipv4_nameservers.push(FALLBACK_NAMESERVER);
    }
    if !saw_search || settings.search_domains.is_empty() {
        settings.search_domains = vec![DEFAULT_SEARCH_DOMAIN.to_string()];
    }
    if let Some(subdomain) = subdomain.filter(|s| !s.is_empty()) {
        let longest_svc = settings
            .search_domains
            .iter()
            .filter(|domain| domain.contains(".svc."))
            .fold(None::<&String>, |best, domain| match best {
                Some(best) if best.len() >= domain.len() => Some(best),
                _ => Some(domain),
            });
        if let Some(domain) = longest_svc
            && !domain.starts_with(&format!("{subdomain}."))
        {
            let prefixed = format!("{subdomain}.{domain}");
            settings.search_domains.insert(0, prefixed);
        }
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_pod_resolv_conf() {
        let text = "search default.svc.cluster.local svc.cluster.local cluster.local\n\
                    nameserver 10.96.0.10\nnameserver fd00::10\noptions ndots:5\n";
        let dns = parse_resolv_conf(text, Some("sub"));
        assert_eq!(dns.ipv4_nameservers, vec![Ipv4Addr::new(10, 96, 0, 10)]);
        assert_eq!(
            dns.ipv6_nameservers,
            vec!["fd00::10".parse::<Ipv6Addr>().unwrap()]
        );
        assert_eq!(
            dns.search_domains,
            vec![
                "sub.default.svc.cluster.local",
                "default.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local"
            ]
        );
    }

    #[test]
    fn empty_resolv_conf_falls_back() {
        let dns = parse_resolv_conf("nameserver bogus\n", None);
        assert_eq!(dns.ipv4_nameservers, vec![FALLBACK_NAMESERVER]);
        assert_eq!(dns.search_domains, vec![DEFAULT_SEARCH_DOMAIN]);
    }
}
