//! Forwarding-database entries of VXLAN devices (`bridge fdb ... dev vxlan0
//! self`): which remote VTEP receives frames for a MAC. The all-zero MAC
//! entries form the flood list (head-end replication to every peer node).

use std::net::IpAddr;

use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::link::LinkId;
use super::{Netlink, relabel};
use crate::error::Result;
use crate::mac::MacAddr;

/// The MAC of flood entries: broadcast, multicast and unknown unicast go
/// to every remote listed with it.
pub const FLOOD_MAC: MacAddr = MacAddr([0; 6]);

/// One forwarding entry of a VXLAN device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FdbEntry {
    /// Destination MAC ([`FLOOD_MAC`] for the flood list).
    pub mac: MacAddr,
    /// The remote VTEP's underlay address.
    pub remote: IpAddr,
}

fn fdb_message(index: u32, entry: FdbEntry) -> NeighbourMessage {
    let mut message = NeighbourMessage::default();
    message.header.family = AddressFamily::Bridge;
    message.header.ifindex = index;
    message.header.state = NeighbourState::Permanent;
    message.header.flags = NeighbourFlags::Own;
    message
        .attributes
        .push(NeighbourAttribute::LinkLayerAddress(entry.mac.octets().to_vec()));
    message
        .attributes
        .push(NeighbourAttribute::Destination(NeighbourAddress::from(
            entry.remote,
        )));
    message
}

impl Netlink {
    /// Adds `entry` to the VXLAN device `vxlan`, keeping other entries for
    /// the same MAC (`bridge fdb append MAC dst REMOTE dev VXLAN self permanent`).
    pub fn append_fdb(&mut self, vxlan: impl Into<LinkId>, entry: FdbEntry) -> Result<()> {
        const OP: &str = "append fdb entry";
        let vxlan = vxlan.into();
        let object = format!("{} dst {} dev {vxlan}", entry.mac, entry.remote);
        let index = self.index_of(vxlan).map_err(|e| relabel(e, OP, &object))?;
        let message = fdb_message(index, entry);
        self.execute(
            RouteNetlinkMessage::NewNeighbour(message),
            NLM_F_CREATE | NLM_F_APPEND,
            OP,
            &object,
        )
    }

    /// Removes `entry` from the VXLAN device `vxlan`; `ENOENT` if absent.
    pub fn delete_fdb(&mut self, vxlan: impl Into<LinkId>, entry: FdbEntry) -> Result<()> {
        const OP: &str = "delete fdb entry";
        let vxlan = vxlan.into();
        let object = format!("{} dst {} dev {vxlan}", entry.mac, entry.remote);
        let index = self.index_of(vxlan).map_err(|e| relabel(e, OP, &object))?;
        self.execute(
            RouteNetlinkMessage::DelNeighbour(fdb_message(index, entry)),
            0,
            OP,
            &object,
        )
    }

    /// The entries with a remote of the VXLAN device `vxlan` (learned and static).
    pub fn fdb(&mut self, vxlan: impl Into<LinkId>) -> Result<Vec<FdbEntry>> {
        const OP: &str = "list fdb";
        let vxlan = vxlan.into();
        let index = self
            .index_of(vxlan.clone())
            .map_err(|e| relabel(e, OP, &vxlan.to_string()))?;
        let mut request = NeighbourMessage::default();
        request.header.family = AddressFamily::Bridge;
        request.header.ifindex = index;
        let replies = self.dump(RouteNetlinkMessage::GetNeighbour(request), OP, &vxlan)?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewNeighbour(message) if message.header.ifindex == index => {
                    fdb_entry_from_message(message)
                }
                _ => None,
            })
            .collect())
    }
}

fn fdb_entry_from_message(message: NeighbourMessage) -> Option<FdbEntry> {
    let mut mac = None;
    let mut remote = None;
    for attribute in message.attributes {
        match attribute {
            NeighbourAttribute::LinkLayerAddress(bytes) => mac = MacAddr::try_from(bytes.as_slice()).ok(),
            NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => remote = Some(IpAddr::V4(v4)),
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => remote = Some(IpAddr::V6(v6)),
            // AF_BRIDGE replies carry the VTEP address without a family.
            NeighbourAttribute::Destination(NeighbourAddress::Other(bytes)) => {
                remote = match bytes.len() {
                    4 => <[u8; 4]>::try_from(bytes.as_slice()).ok().map(IpAddr::from),
                    16 => <[u8; 16]>::try_from(bytes.as_slice()).ok().map(IpAddr::from),
                    _ => None,
                }
            }
            _ => {}
        }
    }
    Some(FdbEntry {
        mac: mac?,
        remote: remote?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_through_the_message() {
        let entry = FdbEntry {
            mac: FLOOD_MAC,
            remote: "10.255.0.2".parse().unwrap(),
        };
        let message = fdb_message(5, entry);
        assert_eq!(message.header.family, AddressFamily::Bridge);
        assert_eq!(message.header.state, NeighbourState::Permanent);
        assert_eq!(fdb_entry_from_message(message), Some(entry));
    }

    #[test]
    fn bridge_family_replies_with_raw_addresses_are_understood() {
        let mut message = NeighbourMessage::default();
        message
            .attributes
            .push(NeighbourAttribute::LinkLayerAddress(vec![0; 6]));
        message
            .attributes
            .push(NeighbourAttribute::Destination(NeighbourAddress::Other(vec![
                10, 255, 0, 2,
            ])));
        let entry = fdb_entry_from_message(message).unwrap();
        assert_eq!(entry.remote, "10.255.0.2".parse::<IpAddr>().unwrap());
    }
}
