//! The lease one DHCPv4 server hands out, and how masquerade addressing derives it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::options;

/// KubeVirt's "infinite" lease: 999 days, in seconds (option 51 bytes `[5, 37, 10, 128]`).
pub const INFINITE_LEASE_SECONDS: u32 = 999 * 24 * 60 * 60;

/// The default masquerade VM network for IPv4 (`api.DefaultVMCIDR`).
pub const DEFAULT_VM_CIDR_V4: &str = "10.0.2.0/24";

/// The default masquerade VM network for IPv6 (`api.DefaultVMIpv6CIDR`).
pub const DEFAULT_VM_CIDR_V6: &str = "fd10:0:2::/120";

/// Errors in a server configuration or in the addressing it is derived from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A search domain does not match KubeVirt's validity rule.
    #[error("Search domain is not valid: {0:?}")]
    InvalidSearchDomain(String),
    /// The encoded search list (option 119) is longer than one option can carry.
    #[error("Search domains length exceeded allowable size: {0} bytes > 255")]
    SearchDomainsTooLong(usize),
    /// A private option code outside 224–254.
    #[error("private_options: code {0} is outside the private range 224-254")]
    PrivateOptionCode(u8),
    /// The client prefix length is larger than 32.
    #[error("prefix_len: {0} is not a valid IPv4 prefix length")]
    PrefixLength(u8),
    /// An MTU below the IPv4 minimum of 68.
    #[error("mtu: {0} is below the IPv4 minimum of 68")]
    Mtu(u16),
    /// A string option is longer than 255 bytes.
    #[error("{field}: {len} bytes is longer than a DHCP option (255)")]
    OptionTooLong {
        /// The configuration field.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// The masquerade VM network holds fewer than 4 addresses.
    #[error("vmNetworkCIDR {0}: less than 4 addresses on network")]
    NetworkTooSmall(IpNet),
}

/// A classless static route (option 121); `None` destination means the default route, `None`
/// gateway means on-link (`0.0.0.0`), exactly as KubeVirt's cached routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClasslessRoute {
    /// Destination network; `None` is the default route.
    pub destination: Option<Ipv4Net>,
    /// Next hop; `None` is encoded as `0.0.0.0`.
    pub gateway: Option<Ipv4Addr>,
}

/// Everything one DHCPv4 server needs: the single lease it hands out and the options it sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The server's own address (option 54, `siaddr`).
    pub server_ip: Ipv4Addr,
    /// The address leased to the guest (`yiaddr`).
    pub client_ip: Ipv4Addr,
    /// Prefix length of the guest's network (option 1); `None` sends no subnet mask.
    pub prefix_len: Option<u8>,
    /// Default gateway (option 3); `None` sends no router option.
    pub router: Option<Ipv4Addr>,
    /// Classless static routes (option 121), in the pod's order.
    pub routes: Vec<ClasslessRoute>,
    /// DNS servers (option 6), always sent, possibly empty.
    pub dns_servers: Vec<Ipv4Addr>,
    /// Search domains (option 119); option 15 is the longest of them.
    pub search_domains: Vec<String>,
    /// Host name (option 12), always sent.
    pub hostname: String,
    /// Interface MTU (option 26), always sent.
    pub mtu: u16,
    /// Lease time in seconds (option 51).
    pub lease_seconds: u32,
    /// Only this client hardware address is served, when set.
    pub client_mac: Option<[u8; 6]>,
    /// NTP servers (option 42).
    pub ntp_servers: Vec<Ipv4Addr>,
    /// TFTP server name (option 66).
    pub tftp_server: Option<String>,
    /// Boot file name (option 67).
    pub bootfile: Option<String>,
    /// Private options 224–254, sent as the raw bytes of the string.
    pub private_options: Vec<(u8, String)>,
}

impl ServerConfig {
    /// A lease of `client` (address and prefix) from `server_ip`, with KubeVirt's defaults: no
    /// router, no routes, no DNS, no search domains, empty host name, MTU 1500, 999-day lease,
    /// any client MAC.
    pub fn new(client: Ipv4Net, server_ip: Ipv4Addr) -> Self {
        Self {
            server_ip,
            client_ip: client.addr(),
            prefix_len: Some(client.prefix_len()),
            router: None,
            routes: Vec::new(),
            dns_servers: Vec::new(),
            search_domains: Vec::new(),
            hostname: String::new(),
            mtu: 1500,
            lease_seconds: INFINITE_LEASE_SECONDS,
            client_mac: None,
            ntp_servers: Vec::new(),
            tftp_server: None,
            bootfile: None,
            private_options: Vec::new(),
        }
    }

    /// Checks every field that could make an option unencodable; the error names the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(prefix) = self.prefix_len
            && prefix > 32
        {
            return Err(ConfigError::PrefixLength(prefix));
        }
        if self.mtu < 68 {
            return Err(ConfigError::Mtu(self.mtu));
        }
        options::search_domains(&self.search_domains)?;
        for (field, value) in [
            ("hostname", Some(&self.hostname)),
            ("tftp_server", self.tftp_server.as_ref()),
            ("bootfile", self.bootfile.as_ref()),
        ] {
            if let Some(value) = value
                && value.len() > 255
            {
                return Err(ConfigError::OptionTooLong {
                    field,
                    len: value.len(),
                });
            }
        }
        for (code, value) in &self.private_options {
            if !(224..=254).contains(code) {
                return Err(ConfigError::PrivateOptionCode(*code));
            }
            if value.len() > 255 {
                return Err(ConfigError::OptionTooLong {
                    field: "private_options",
                    len: value.len(),
                });
            }
        }
        Ok(())
    }

    /// The subnet mask for option 1, if a prefix is configured.
    pub fn subnet_mask(&self) -> Option<Ipv4Addr> {
        self.prefix_len
            .and_then(|prefix| Ipv4Net::new(self.client_ip, prefix).ok())
            .map(|net| net.netmask())
    }
}

/// Masquerade addressing (`GenerateMasqueradeGatewayAndVmIPAddrs`): in the VM network, the
/// gateway (launcher bridge) is the 2nd address and the guest the 3rd, both with the network's
/// prefix. The network needs at least 4 addresses.
pub fn masquerade_addresses(network: IpNet) -> Result<(IpNet, IpNet), ConfigError> {
    let network = network.trunc();
    let host_bits = network.max_prefix_len() - network.prefix_len();
    if host_bits < 2 {
        return Err(ConfigError::NetworkTooSmall(network));
    }
    let nth = |n: u8| -> IpNet {
        let addr = match network.addr() {
            IpAddr::V4(base) => IpAddr::V4(Ipv4Addr::from(u32::from(base) + u32::from(n))),
            IpAddr::V6(base) => IpAddr::V6(Ipv6Addr::from(u128::from(base) + u128::from(n))),
        };
        match addr {
            IpAddr::V4(a) => IpNet::V4(Ipv4Net::new(a, network.prefix_len()).expect("same prefix")),
            IpAddr::V6(a) => IpNet::V6(Ipv6Net::new(a, network.prefix_len()).expect("same prefix")),
        }
    };
    Ok((nth(1), nth(2)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_time_is_999_days() {
        assert_eq!(INFINITE_LEASE_SECONDS, 86_313_600);
        assert_eq!(INFINITE_LEASE_SECONDS.to_be_bytes(), [5, 37, 10, 128]);
    }

    #[test]
    fn validate_names_the_field() {
        let mut config = ServerConfig::new("10.0.2.2/24".parse().unwrap(), Ipv4Addr::new(10, 0, 2, 1));
        assert_eq!(config.validate(), Ok(()));
        config.private_options.push((200, "x".into()));
        assert_eq!(config.validate(), Err(ConfigError::PrivateOptionCode(200)));
        config.private_options.clear();
        config.search_domains.push("foo,com".into());
        assert!(
            config
                .validate()
                .unwrap_err()
                .to_string()
                .starts_with("Search domain is not valid")
        );
    }
}
