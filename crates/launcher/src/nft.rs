//! The masquerade binding's nftables NAT rule set (`pkg/network/setup/netpod/masquerade/masquerade.go`),
//! rule for rule as KubeVirt issues them, and its rendering as an `nft -f -` script.
//!
//! KubeVirt runs one `nft add …` command per table, chain and rule; weft renders the same commands
//! into one script so that the kernel applies the whole rule set in one transaction.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// The NAT table name in each family.
pub const NAT_TABLE: &str = "nat";
/// The regular chain that DNATs inbound traffic to the guest.
pub const PREINBOUND: &str = "KUBEVIRT_PREINBOUND";
/// The regular chain that SNATs loopback-sourced traffic to the gateway.
pub const POSTINBOUND: &str = "KUBEVIRT_POSTINBOUND";
/// Ports used by the legacy (non-Unix-socket) migration transport.
pub const LEGACY_MIGRATION_PORTS: [u16; 2] = [49152, 49153];
/// Ports Envoy listens on inside an Istio-injected pod: never forwarded to the guest.
pub const ISTIO_RESERVED_PORTS: [u16; 10] = [
    15000, 15001, 15004, 15006, 15008, 15009, 15020, 15021, 15053, 15090,
];
/// The one port Istio leaves unproxied, so it is DNATed to the guest directly.
pub const ISTIO_NON_PROXIED_PORT: u16 = 22;
/// The source address Envoy uses towards local workloads.
pub const ISTIO_ENVOY_SOURCE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 6);

/// The base chains of the NAT table, with their chain specs, in creation order.
pub const BASE_CHAINS: [(&str, &str); 4] = [
    ("prerouting", "{ type nat hook prerouting priority -100; }"),
    ("input", "{ type nat hook input priority 100; }"),
    ("output", "{ type nat hook output priority -100; }"),
    ("postrouting", "{ type nat hook postrouting priority 100; }"),
];

/// An nftables address family used by the masquerade rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NftFamily {
    /// IPv4 (`ip`).
    Ip,
    /// IPv6 (`ip6`).
    Ip6,
}

impl NftFamily {
    /// The family keyword, also the address match keyword (`ip saddr`, `ip6 saddr`).
    pub fn keyword(self) -> &'static str {
        match self {
            NftFamily::Ip => "ip",
            NftFamily::Ip6 => "ip6",
        }
    }

    fn loopback(self) -> IpAddr {
        match self {
            NftFamily::Ip => IpAddr::V4(Ipv4Addr::LOCALHOST),
            NftFamily::Ip6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
        }
    }
}

/// A port the VMI declares on the masquerade interface (`spec.domain.devices.interfaces[].ports[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForwardedPort {
    /// `tcp`, `udp` (any case); empty means `tcp`.
    pub protocol: String,
    /// The port number.
    pub port: u16,
}

/// A port range the VMI declares (`portRanges`, behind the `PortRangesSpec` gate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForwardedPortRange {
    /// `tcp`, `udp` (any case); empty means `tcp`.
    pub protocol: String,
    /// First port, inclusive.
    pub start: u16,
    /// Last port, inclusive.
    pub end: u16,
}

/// What the VMI asks of the masquerade NAT besides addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NatOptions {
    /// Declared ports; empty (with no effective ranges) forwards everything.
    pub ports: Vec<ForwardedPort>,
    /// Declared port ranges; only used when `port_ranges_enabled`.
    pub port_ranges: Vec<ForwardedPortRange>,
    /// The `PortRangesSpec` feature gate.
    pub port_ranges_enabled: bool,
    /// The VMI has `sidecar.istio.io/inject: "true"` (case-insensitive).
    pub istio: bool,
    /// `status.migrationTransport != "Unix"`: keep the legacy migration ports out of the NAT.
    pub legacy_migration_ports: bool,
}

/// The addresses of one family the NAT rules use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NatAddresses {
    /// The gateway on the bridge (SNAT target), e.g. `10.0.2.1`.
    pub gateway: IpAddr,
    /// The guest (DNAT target), e.g. `10.0.2.2`.
    pub guest: IpAddr,
    /// The pod interface's own address of this family (Istio DNATs traffic to it too).
    pub pod: Option<IpAddr>,
}

/// Everything the masquerade rule set is computed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NatInput {
    /// The pod interface (`eth0`): inbound traffic arrives there.
    pub pod_iface: String,
    /// The masquerade bridge (`k6t-eth0`).
    pub bridge: String,
    /// IPv4 addresses, `None` when the bridge has no IPv4.
    pub ipv4: Option<NatAddresses>,
    /// IPv6 addresses, `None` when the bridge has no IPv6.
    pub ipv6: Option<NatAddresses>,
    /// Ports, ranges, Istio, migration.
    pub options: NatOptions,
}

/// One rule, in the chain it is appended to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NatRule {
    /// The chain name.
    pub chain: String,
    /// The rule text as given to `nft add rule <family> nat <chain> …`.
    pub rule: String,
}

/// The NAT table of one family with its rules in the order they are appended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FamilyRules {
    /// The family of the table.
    pub family: NftFamily,
    /// Rules in order.
    pub rules: Vec<NatRule>,
}

/// The complete masquerade NAT: one `nat` table per enabled family (`ip` before `ip6`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NatRuleSet {
    /// The tables, `ip` first.
    pub families: Vec<FamilyRules>,
}

/// Compute the masquerade NAT rule set.
pub fn masquerade_rules(input: &NatInput) -> NatRuleSet {
    let mut families = Vec::new();
    for (family, addresses) in [(NftFamily::Ip, input.ipv4), (NftFamily::Ip6, input.ipv6)] {
        if let Some(addresses) = addresses {
            families.push(FamilyRules {
                family,
                rules: family_rules(input, family, addresses),
            });
        }
    }
    NatRuleSet { families }
}

fn family_rules(input: &NatInput, family: NftFamily, addrs: NatAddresses) -> Vec<NatRule> {
    let fam = family.keyword();
    let lo = family.loopback();
    let opts = &input.options;
    let (guest, gateway) = (addrs.guest, addrs.gateway);
    let mut rules = Vec::new();
    let mut push = |chain: &str, rule: String| {
        rules.push(NatRule {
            chain: chain.to_string(),
            rule,
        })
    };

    push("postrouting", format!("{fam} saddr {guest} counter masquerade"));
    push(
        "prerouting",
        format!("iifname {} counter jump {PREINBOUND}", input.pod_iface),
    );
    push(
        "postrouting",
        format!("oifname {} counter jump {POSTINBOUND}", input.bridge),
    );

    if opts.legacy_migration_ports {
        let ports = brace(LEGACY_MIGRATION_PORTS.iter());
        for chain in ["output", POSTINBOUND] {
            push(
                chain,
                format!("tcp dport {ports} {fam} saddr {lo} counter return"),
            );
        }
    }

    let istio_v4 = opts.istio && family == NftFamily::Ip;
    let mut dnat_sources = vec![lo];
    let mut snat_sources = vec![lo];
    if istio_v4 {
        dnat_sources.extend(addrs.pod);
        snat_sources.push(IpAddr::V4(ISTIO_ENVOY_SOURCE));
    }
    let (dnat_sources, snat_sources) = (brace(dnat_sources.iter()), brace(snat_sources.iter()));
    let istio_dnat = format!("tcp dport {{ {ISTIO_NON_PROXIED_PORT} }} counter dnat to {guest}");

    let ranges: &[ForwardedPortRange] = if opts.port_ranges_enabled {
        &opts.port_ranges
    } else {
        &[]
    };
    // A single port is braced in PREINBOUND (`{ 80 }`), a range is not (`80-81`).
    let declared = opts.ports.iter().map(|p| {
        (
            protocol(&p.protocol),
            p.port.to_string(),
            format!("{{ {} }}", p.port),
            p.port,
            p.port,
        )
    });
    let ranged = ranges.iter().map(|r| {
        let range = format!("{}-{}", r.start, r.end);
        (protocol(&r.protocol), range.clone(), range, r.start, r.end)
    });
    let mut any_port = false;
    for (proto, ports, inbound_ports, start, end) in declared.chain(ranged) {
        any_port = true;
        if !opts.istio {
            push(
                PREINBOUND,
                format!("{proto} dport {inbound_ports} counter dnat to {guest}"),
            );
        } else if (start..=end).contains(&ISTIO_NON_PROXIED_PORT) {
            push(PREINBOUND, istio_dnat.clone());
        }
        push(
            POSTINBOUND,
            format!("{proto} dport {ports} {fam} saddr {snat_sources} counter snat to {gateway}"),
        );
        push(
            "output",
            format!("{fam} daddr {dnat_sources} {proto} dport {ports} counter dnat to {guest}"),
        );
    }

    if !any_port {
        if opts.istio {
            let reserved = brace(ISTIO_RESERVED_PORTS.iter());
            for chain in ["output", POSTINBOUND] {
                push(
                    chain,
                    format!("tcp dport {reserved} {fam} saddr {lo} counter return"),
                );
            }
            push(PREINBOUND, istio_dnat);
        } else {
            push(PREINBOUND, format!("counter dnat to {guest}"));
        }
        push(
            POSTINBOUND,
            format!("{fam} saddr {snat_sources} counter snat to {gateway}"),
        );
        push(
            "output",
            format!("{fam} daddr {dnat_sources} counter dnat to {guest}"),
        );
    }
    rules
}

fn protocol(declared: &str) -> String {
    if declared.is_empty() {
        "tcp".to_string()
    } else {
        declared.to_lowercase()
    }
}

/// nft anonymous set syntax: `{ a, b }`.
fn brace<T: std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    let items: Vec<String> = items.map(|i| i.to_string()).collect();
    format!("{{ {} }}", items.join(", "))
}

impl NatRuleSet {
    /// Whether there is nothing to install (neither family enabled).
    pub fn is_empty(&self) -> bool {
        self.families.is_empty()
    }

    /// The families that have a table.
    pub fn table_families(&self) -> Vec<NftFamily> {
        self.families.iter().map(|f| f.family).collect()
    }

    /// The tables in KubeVirt's test-stub notation (`family ip name nat`).
    pub fn table_lines(&self) -> Vec<String> {
        self.families
            .iter()
            .map(|f| format!("family {} name {NAT_TABLE}", f.family.keyword()))
            .collect()
    }

    /// The chains in KubeVirt's test-stub notation
    /// (`family ip table nat name prerouting chainspec [{ … }]`).
    pub fn chain_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for f in &self.families {
            for (name, spec) in chains() {
                let fam = f.family.keyword();
                lines.push(format!(
                    "family {fam} table {NAT_TABLE} name {name} chainspec [{spec}]"
                ));
            }
        }
        lines
    }

    /// The rules in KubeVirt's test-stub notation
    /// (`family ip table nat chain postrouting rulespec [ip saddr 10.0.2.2 counter masquerade]`).
    pub fn rule_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for f in &self.families {
            for r in &f.rules {
                let fam = f.family.keyword();
                lines.push(format!(
                    "family {fam} table {NAT_TABLE} chain {} rulespec [{}]",
                    r.chain, r.rule
                ));
            }
        }
        lines
    }

    /// The `nft -f -` script that installs the rule set in one transaction. Re-applying it
    /// replaces the rules (the table is flushed first), it never duplicates them.
    pub fn install_script(&self) -> String {
        let mut script = String::new();
        for f in &self.families {
            let fam = f.family.keyword();
            let _ = writeln!(script, "add table {fam} {NAT_TABLE}");
            let _ = writeln!(script, "flush table {fam} {NAT_TABLE}");
            for (name, spec) in chains() {
                let spec = if spec.is_empty() {
                    String::new()
                } else {
                    format!(" {spec}")
                };
                let _ = writeln!(script, "add chain {fam} {NAT_TABLE} {name}{spec}");
            }
            for r in &f.rules {
                let _ = writeln!(script, "add rule {fam} {NAT_TABLE} {} {}", r.chain, r.rule);
            }
        }
        script
    }
}

/// The `nft -f -` script that removes the NAT tables of `families` as a whole. Declaring the
/// table first makes the deletion succeed when it is already gone.
pub fn remove_script(families: &[NftFamily]) -> String {
    let mut script = String::new();
    for family in families {
        let fam = family.keyword();
        let _ = writeln!(script, "add table {fam} {NAT_TABLE}");
        let _ = writeln!(script, "delete table {fam} {NAT_TABLE}");
    }
    script
}

fn chains() -> impl Iterator<Item = (&'static str, &'static str)> {
    BASE_CHAINS
        .into_iter()
        .chain([(PREINBOUND, ""), (POSTINBOUND, "")])
}
