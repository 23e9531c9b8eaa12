//! Routes: add, delete and list (default routes, gateways, devices, metrics).

use std::net::IpAddr;

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};

use super::address::IpFamily;
use super::{Netlink, relabel};
use crate::error::{HostError, Result};

/// The main routing table (`ip route` without `table`).
pub const MAIN_TABLE: u32 = RouteHeader::RT_TABLE_MAIN as u32;

/// A unicast route: what to add or delete, and what [`Netlink::routes`]
/// returns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    /// Destination network; `0.0.0.0/0` or `::/0` for a default route.
    pub destination: IpNet,
    /// Next hop; `None` for an on-link route.
    pub gateway: Option<IpAddr>,
    /// Output link index.
    pub oif: Option<u32>,
    /// Metric (priority). The kernel reports none for IPv4 metric 0 and
    /// 1024 for IPv6 routes added without one.
    pub metric: Option<u32>,
    /// Preferred source address.
    pub source: Option<IpAddr>,
    /// Routing table ([`MAIN_TABLE`] by default).
    pub table: u32,
}

impl Route {
    /// An on-link route to `destination` in the main table.
    pub fn new(destination: IpNet) -> Self {
        Route {
            destination,
            gateway: None,
            oif: None,
            metric: None,
            source: None,
            table: MAIN_TABLE,
        }
    }

    /// A default route (`0.0.0.0/0` or `::/0`, matching the gateway's family) via `gateway`.
    pub fn default_via(gateway: IpAddr) -> Self {
        let destination = match gateway {
            IpAddr::V4(_) => IpNet::V4(Default::default()),
            IpAddr::V6(_) => IpNet::V6(Default::default()),
        };
        Route::new(destination).via(gateway)
    }

    /// Sets the next hop.
    pub fn via(mut self, gateway: IpAddr) -> Self {
        self.gateway = Some(gateway);
        self
    }

    /// Sets the output link index.
    pub fn dev(mut self, index: u32) -> Self {
        self.oif = Some(index);
        self
    }

    /// Sets the metric.
    pub fn with_metric(mut self, metric: u32) -> Self {
        self.metric = Some(metric);
        self
    }

    /// Sets the preferred source address.
    pub fn with_source(mut self, source: IpAddr) -> Self {
        self.source = Some(source);
        self
    }

    /// The IP version of the destination.
    pub fn family(&self) -> IpFamily {
        IpFamily::of(self.destination.addr())
    }

    /// Checks what the kernel would reject or silently misread: host bits in
    /// the destination, mixed address families, a route with no way out.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.destination.trunc() != self.destination {
            return Err(format!(
                "destination {} has host bits set (use {})",
                self.destination,
                self.destination.trunc()
            ));
        }
        for (what, address) in [("gateway", self.gateway), ("source", self.source)] {
            if let Some(address) = address
                && IpFamily::of(address) != self.family()
            {
                return Err(format!(
                    "{what} {address} is not in the family of {}",
                    self.destination
                ));
            }
        }
        if self.gateway.is_none() && self.oif.is_none() {
            return Err("a route needs a gateway or an output device".into());
        }
        Ok(())
    }
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.destination)?;
        if let Some(gateway) = self.gateway {
            write!(f, " via {gateway}")?;
        }
        if let Some(oif) = self.oif {
            write!(f, " dev ifindex {oif}")?;
        }
        if let Some(metric) = self.metric {
            write!(f, " metric {metric}")?;
        }
        if self.table != MAIN_TABLE {
            write!(f, " table {}", self.table)?;
        }
        Ok(())
    }
}

fn route_address(address: IpAddr) -> RouteAddress {
    match address {
        IpAddr::V4(v4) => RouteAddress::Inet(v4),
        IpAddr::V6(v6) => RouteAddress::Inet6(v6),
    }
}

/// The request for `route`; `for_delete` matches any scope, type and
/// protocol, like `ip route del`.
fn route_message(route: &Route, for_delete: bool) -> RouteMessage {
    let mut message = RouteMessage::default();
    let header = &mut message.header;
    header.address_family = route.family().netlink();
    header.destination_prefix_length = route.destination.prefix_len();
    header.table = u8::try_from(route.table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
    if for_delete {
        header.scope = RouteScope::NoWhere;
    } else {
        header.protocol = RouteProtocol::Boot;
        header.kind = RouteType::Unicast;
        header.scope = if route.gateway.is_some() {
            RouteScope::Universe
        } else {
            RouteScope::Link
        };
    }
    let attributes = &mut message.attributes;
    attributes.push(RouteAttribute::Table(route.table));
    if route.destination.prefix_len() > 0 {
        attributes.push(RouteAttribute::Destination(route_address(
            route.destination.addr(),
        )));
    }
    if let Some(gateway) = route.gateway {
        attributes.push(RouteAttribute::Gateway(route_address(gateway)));
    }
    if let Some(oif) = route.oif {
        attributes.push(RouteAttribute::Oif(oif));
    }
    if let Some(metric) = route.metric {
        attributes.push(RouteAttribute::Priority(metric));
    }
    if let Some(source) = route.source {
        attributes.push(RouteAttribute::PrefSource(route_address(source)));
    }
    message
}

impl Netlink {
    /// Adds `route`; `EEXIST` if an identical one exists.
    pub fn add_route(&mut self, route: &Route) -> Result<()> {
        self.new_route("add route", route, NLM_F_CREATE | NLM_F_EXCL)
    }

    /// Adds `route` or replaces the route with the same destination, table,
    /// type of service and metric (`ip route replace`): idempotent.
    pub fn replace_route(&mut self, route: &Route) -> Result<()> {
        self.new_route("replace route", route, NLM_F_CREATE | NLM_F_REPLACE)
    }

    fn new_route(&mut self, op: &'static str, route: &Route, flags: u16) -> Result<()> {
        route
            .validate()
            .map_err(|reason| HostError::invalid(op, route.to_string(), reason))?;
        let message = route_message(route, false);
        self.execute(RouteNetlinkMessage::NewRoute(message), flags, op, route)
    }

    /// Deletes the route matching `route`'s destination, table and whichever
    /// of gateway, device and metric are set; `ESRCH` if none matches.
    pub fn delete_route(&mut self, route: &Route) -> Result<()> {
        const OP: &str = "delete route";
        if route.destination.trunc() != route.destination {
            return Err(HostError::invalid(
                OP,
                route.to_string(),
                "destination has host bits set",
            ));
        }
        self.execute(
            RouteNetlinkMessage::DelRoute(route_message(route, true)),
            0,
            OP,
            route,
        )
    }

    /// The unicast routes of the main table for `family`.
    pub fn routes(&mut self, family: IpFamily) -> Result<Vec<Route>> {
        self.routes_in_table(family, MAIN_TABLE)
    }

    /// The unicast routes of `table` for `family`.
    pub fn routes_in_table(&mut self, family: IpFamily, table: u32) -> Result<Vec<Route>> {
        let mut request = RouteMessage::default();
        request.header.address_family = family.netlink();
        let replies = self.dump(
            RouteNetlinkMessage::GetRoute(request),
            "list routes",
            &format!("table {table} {}", self.netns),
        )?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewRoute(message) => route_from_message(message),
                _ => None,
            })
            .filter(|route| route.table == table && route.family() == family)
            .collect())
    }

    /// The output link index of `link` for use in a [`Route`].
    pub fn route_dev(&mut self, link: impl Into<super::link::LinkId>) -> Result<u32> {
        let link = link.into();
        self.index_of(link.clone())
            .map_err(|e| relabel(e, "resolve route device", &link.to_string()))
    }
}

fn ip_of(address: RouteAddress) -> Option<IpAddr> {
    match address {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(v6)),
        _ => None,
    }
}

fn route_from_message(message: RouteMessage) -> Option<Route> {
    if message.header.kind != RouteType::Unicast {
        return None;
    }
    let family = match message.header.address_family {
        netlink_packet_route::AddressFamily::Inet => IpFamily::V4,
        netlink_packet_route::AddressFamily::Inet6 => IpFamily::V6,
        _ => return None,
    };
    let unspecified = match family {
        IpFamily::V4 => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpFamily::V6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    };
    let mut destination = unspecified;
    let mut route = Route::new(IpNet::new(unspecified, 0).ok()?);
    route.table = u32::from(message.header.table);
    for attribute in message.attributes {
        match attribute {
            RouteAttribute::Destination(address) => destination = ip_of(address)?,
            RouteAttribute::Gateway(address) => route.gateway = ip_of(address),
            RouteAttribute::Oif(oif) => route.oif = Some(oif),
            RouteAttribute::Priority(metric) => route.metric = Some(metric),
            RouteAttribute::PrefSource(address) => route.source = ip_of(address),
            RouteAttribute::Table(table) => route.table = table,
            _ => {}
        }
    }
    route.destination = IpNet::new(destination, message.header.destination_prefix_length).ok()?;
    Some(route)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn family_address(v4: bool, bits: u128) -> IpAddr {
        if v4 {
            IpAddr::V4(std::net::Ipv4Addr::from(bits as u32))
        } else {
            IpAddr::V6(std::net::Ipv6Addr::from(bits))
        }
    }

    proptest! {
        #[test]
        fn any_valid_route_survives_the_wire_format(
            v4 in any::<bool>(),
            destination in any::<u128>(),
            prefix in 0u8..=128,
            gateway in proptest::option::of(any::<u128>()),
            source in proptest::option::of(any::<u128>()),
            oif in proptest::option::of(1u32..100_000),
            metric in proptest::option::of(any::<u32>()),
            table in prop_oneof![Just(MAIN_TABLE), 1u32..100_000],
        ) {
            let prefix = if v4 { prefix % 33 } else { prefix };
            let mut route = Route::new(IpNet::new(family_address(v4, destination), prefix).unwrap().trunc());
            route.gateway = gateway.map(|bits| family_address(v4, bits));
            route.source = source.map(|bits| family_address(v4, bits));
            route.oif = oif;
            route.metric = metric;
            route.table = table;
            prop_assert_eq!(route_from_message(route_message(&route, false)), Some(route));
        }
    }

    #[test]
    fn default_routes_match_the_gateway_family() {
        let v4 = Route::default_via("10.0.0.1".parse().unwrap());
        assert_eq!(v4.destination.to_string(), "0.0.0.0/0");
        let v6 = Route::default_via("fd00::1".parse().unwrap());
        assert_eq!(v6.destination.to_string(), "::/0");
        assert!(v4.validate().is_ok() && v6.validate().is_ok());
    }

    #[test]
    fn validation_names_the_problem() {
        let host_bits = Route::new("10.0.0.5/24".parse().unwrap()).dev(2);
        assert!(host_bits.validate().unwrap_err().contains("host bits"));
        let mixed = Route::new("10.0.0.0/24".parse().unwrap()).via("fd00::1".parse().unwrap());
        assert!(mixed.validate().unwrap_err().contains("gateway fd00::1"));
        let nowhere = Route::new("10.0.0.0/24".parse().unwrap());
        assert!(
            nowhere
                .validate()
                .unwrap_err()
                .contains("gateway or an output device")
        );
    }

    #[test]
    fn on_link_routes_get_link_scope_and_deletes_match_any_scope() {
        let route = Route::new("10.1.0.0/16".parse().unwrap()).dev(4).with_metric(100);
        let add = route_message(&route, false);
        assert_eq!(add.header.scope, RouteScope::Link);
        assert_eq!(add.header.kind, RouteType::Unicast);
        assert!(add.attributes.contains(&RouteAttribute::Priority(100)));
        let delete = route_message(&route, true);
        assert_eq!(delete.header.scope, RouteScope::NoWhere);
        let gateway = route_message(&Route::default_via("10.0.0.1".parse().unwrap()), false);
        assert_eq!(gateway.header.scope, RouteScope::Universe);
        assert!(
            !gateway
                .attributes
                .iter()
                .any(|a| matches!(a, RouteAttribute::Destination(_)))
        );
    }

    #[test]
    fn messages_round_trip_through_the_parser() {
        let route = Route::new("10.1.0.0/16".parse().unwrap())
            .via("10.0.0.1".parse().unwrap())
            .dev(4)
            .with_metric(7)
            .with_source("10.0.0.2".parse().unwrap());
        assert_eq!(route_from_message(route_message(&route, false)), Some(route));
    }
}
