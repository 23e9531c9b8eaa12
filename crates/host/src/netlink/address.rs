//! IPv4/IPv6 addresses on links: add, delete, flush, list.

use std::net::IpAddr;

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::link::LinkId;
use super::{Netlink, relabel};
use crate::error::Result;

/// An IP version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpFamily {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl IpFamily {
    /// The family of `address`.
    pub fn of(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    pub(crate) fn netlink(self) -> AddressFamily {
        match self {
            IpFamily::V4 => AddressFamily::Inet,
            IpFamily::V6 => AddressFamily::Inet6,
        }
    }
}

/// An address assigned to a link.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Address {
    /// Index of the link it is assigned to.
    pub index: u32,
    /// The address with its prefix length, e.g. `10.0.0.2/24`.
    pub net: IpNet,
}

/// The attributes that identify `net` on a link: IPv4 needs `IFA_LOCAL`
/// (and gets a broadcast address like the CNI plugins set), IPv6 only
/// `IFA_ADDRESS`.
fn address_message(index: u32, net: IpNet) -> AddressMessage {
    let mut message = AddressMessage::default();
    message.header.family = IpFamily::of(net.addr()).netlink();
    message.header.prefix_len = net.prefix_len();
    message.header.index = index;
    message.attributes.push(AddressAttribute::Address(net.addr()));
    if let IpNet::V4(v4) = net {
        message
            .attributes
            .push(AddressAttribute::Local(IpAddr::V4(v4.addr())));
    }
    message
}

fn with_broadcast(mut message: AddressMessage, net: IpNet) -> AddressMessage {
    if let IpNet::V4(v4) = net
        && v4.prefix_len() < 31
    {
        message
            .attributes
            .push(AddressAttribute::Broadcast(v4.broadcast()));
    }
    message
}

impl Netlink {
    /// Adds `net` (address and prefix) to `link`; `EEXIST` if present.
    pub fn add_address(&mut self, link: impl Into<LinkId>, net: IpNet) -> Result<()> {
        const OP: &str = "add address";
        let link = link.into();
        let object = format!("{net} to {link}");
        let index = self.index_of(link).map_err(|e| relabel(e, OP, &object))?;
        let message = with_broadcast(address_message(index, net), net);
        self.execute(
            RouteNetlinkMessage::NewAddress(message),
            NLM_F_CREATE | NLM_F_EXCL,
            OP,
            &object,
        )
    }

    /// Adds `net` to `link` without duplicate address detection (`ip addr add
    /// ... nodad`): an IPv6 address is usable at once instead of staying
    /// tentative for about a second (e.g. for a DHCPv6 server binding it).
    pub fn add_address_without_dad(&mut self, link: impl Into<LinkId>, net: IpNet) -> Result<()> {
        const OP: &str = "add address";
        let link = link.into();
        let object = format!("{net} (nodad) to {link}");
        let index = self.index_of(link).map_err(|e| relabel(e, OP, &object))?;
        let mut message = with_broadcast(address_message(index, net), net);
        message.header.flags = AddressHeaderFlags::Nodad;
        message
            .attributes
            .push(AddressAttribute::Flags(AddressFlags::Nodad));
        self.execute(
            RouteNetlinkMessage::NewAddress(message),
            NLM_F_CREATE | NLM_F_EXCL,
            OP,
            &object,
        )
    }

    /// Removes `net` from `link`; `EADDRNOTAVAIL` if absent.
    pub fn delete_address(&mut self, link: impl Into<LinkId>, net: IpNet) -> Result<()> {
        const OP: &str = "delete address";
        let link = link.into();
        let object = format!("{net} from {link}");
        let index = self.index_of(link).map_err(|e| relabel(e, OP, &object))?;
        self.execute(
            RouteNetlinkMessage::DelAddress(address_message(index, net)),
            0,
            OP,
            &object,
        )
    }

    /// Every address of the namespace, optionally of one family.
    pub fn all_addresses(&mut self, family: Option<IpFamily>) -> Result<Vec<Address>> {
        let netns = self.netns.clone();
        self.dump_addresses(0, family, &netns)
    }

    /// The addresses of `link`, optionally of one family.
    pub fn addresses(&mut self, link: impl Into<LinkId>, family: Option<IpFamily>) -> Result<Vec<IpNet>> {
        let link = link.into();
        let index = self
            .index_of(link.clone())
            .map_err(|e| relabel(e, "list addresses", &link.to_string()))?;
        Ok(self
            .dump_addresses(index, family, &link)?
            .into_iter()
            .map(|address| address.net)
            .collect())
    }

    /// Removes every address of `link` (of one family, if given), including
    /// IPv6 link-local ones, like `ip addr flush dev LINK`.
    pub fn flush_addresses(&mut self, link: impl Into<LinkId>, family: Option<IpFamily>) -> Result<()> {
        let link = link.into();
        let index = self
            .index_of(link.clone())
            .map_err(|e| relabel(e, "flush addresses", &link.to_string()))?;
        for address in self.dump_addresses(index, family, &link)? {
            match self.delete_address(index, address.net) {
                // Deleting a primary IPv4 address also removes its secondaries.
                Err(e) if e.is_not_found() => {}
                other => other?,
            }
        }
        Ok(())
    }

    fn dump_addresses(
        &mut self,
        index: u32,
        family: Option<IpFamily>,
        object: &dyn std::fmt::Display,
    ) -> Result<Vec<Address>> {
        let mut request = AddressMessage::default();
        request.header.index = index;
        if let Some(family) = family {
            request.header.family = family.netlink();
        }
        let replies = self.dump(RouteNetlinkMessage::GetAddress(request), "list addresses", object)?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewAddress(message) => address_from_message(message),
                _ => None,
            })
            .filter(|address| index == 0 || address.index == index)
            .filter(|address| family.is_none_or(|family| IpFamily::of(address.net.addr()) == family))
            .collect())
    }
}

fn address_from_message(message: AddressMessage) -> Option<Address> {
    let mut local = None;
    let mut address = None;
    for attribute in message.attributes {
        match attribute {
            AddressAttribute::Local(ip) => local = Some(ip),
            AddressAttribute::Address(ip) => address = Some(ip),
            _ => {}
        }
    }
    let ip = local.or(address)?;
    let net = IpNet::new(ip, message.header.prefix_len).ok()?;
    Some(Address {
        index: message.header.index,
        net,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_addresses_carry_local_and_broadcast() {
        let net: IpNet = "10.0.0.2/24".parse().unwrap();
        let message = with_broadcast(address_message(3, net), net);
        assert_eq!(message.header.prefix_len, 24);
        assert_eq!(message.header.index, 3);
        assert!(
            message
                .attributes
                .contains(&AddressAttribute::Local("10.0.0.2".parse().unwrap()))
        );
        assert!(
            message
                .attributes
                .contains(&AddressAttribute::Broadcast("10.0.0.255".parse().unwrap()))
        );
    }

    #[test]
    fn point_to_point_and_ipv6_addresses_have_no_broadcast() {
        for text in ["10.0.0.2/31", "10.0.0.2/32", "fd00::2/64"] {
            let net: IpNet = text.parse().unwrap();
            let message = with_broadcast(address_message(1, net), net);
            assert!(
                !message
                    .attributes
                    .iter()
                    .any(|a| matches!(a, AddressAttribute::Broadcast(_))),
                "{text} got a broadcast address"
            );
        }
    }

    #[test]
    fn replies_prefer_the_local_address() {
        let mut message = AddressMessage::default();
        message.header.prefix_len = 24;
        message.header.index = 9;
        message
            .attributes
            .push(AddressAttribute::Address("10.0.0.1".parse().unwrap()));
        message
            .attributes
            .push(AddressAttribute::Local("10.0.0.2".parse().unwrap()));
        let address = address_from_message(message).unwrap();
        assert_eq!(
            address,
            Address {
                index: 9,
                net: "10.0.0.2/24".parse().unwrap()
            }
        );
    }
}
