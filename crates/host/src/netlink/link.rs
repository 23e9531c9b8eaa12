//! Links: list and look up; create bridges, veth pairs, VXLAN and macvlan
//! devices; rename, delete, set MAC/MTU/state/master, move between
//! namespaces, and bridge-port options.

use std::fmt;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::link::{
    InfoBridgePort, InfoData, InfoKind, InfoMacVlan, InfoPortData, InfoPortKind, InfoVeth, InfoVxlan,
    LinkAttribute, LinkFlags, LinkInfo, LinkMessage, MacVlanMode, State,
};

use super::{Netlink, relabel};
use crate::error::{HostError, Result};
use crate::mac::MacAddr;
use crate::netns::Netns;

/// Names a link: by interface index or by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LinkId {
    /// The interface index (`ifindex`).
    Index(u32),
    /// The interface name.
    Name(String),
}

impl fmt::Display for LinkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkId::Index(index) => write!(f, "ifindex {index}"),
            LinkId::Name(name) => f.write_str(name),
        }
    }
}

impl From<u32> for LinkId {
    fn from(index: u32) -> Self {
        LinkId::Index(index)
    }
}

impl From<&str> for LinkId {
    fn from(name: &str) -> Self {
        LinkId::Name(name.to_owned())
    }
}

impl From<String> for LinkId {
    fn from(name: String) -> Self {
        LinkId::Name(name)
    }
}

impl From<&String> for LinkId {
    fn from(name: &String) -> Self {
        LinkId::Name(name.clone())
    }
}

impl From<&Link> for LinkId {
    fn from(link: &Link) -> Self {
        LinkId::Index(link.index)
    }
}

/// Operational state (RFC 2863), as `ip link` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperState {
    /// `UP`: ready to pass packets.
    Up,
    /// `DOWN`.
    Down,
    /// `LOWERLAYERDOWN`: e.g. a veth whose peer is down.
    LowerLayerDown,
    /// `UNKNOWN`: the driver does not report it (e.g. loopback, TAP).
    Unknown,
    /// Any other state (`DORMANT`, `TESTING`, `NOTPRESENT`).
    Other,
}

/// A link as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// Kind (`bridge`, `veth`, `vxlan`, `macvlan`, `tun`, …); `None` for
    /// plain devices such as loopback.
    pub kind: Option<String>,
    /// Hardware address (only for Ethernet-like links).
    pub mac: Option<MacAddr>,
    /// MTU in bytes.
    pub mtu: u32,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Operational state.
    pub oper_state: OperState,
    /// Index of the master (bridge) this link is a port of.
    pub master: Option<u32>,
    /// Index of the parent/peer link (`IFLA_LINK`): a veth's peer, a
    /// macvlan's parent. It lives in [`Link::link_netnsid`]'s namespace if set.
    pub parent: Option<u32>,
    /// The namespace id (as seen from this namespace) of the peer/parent
    /// when it lives in another namespace.
    pub link_netnsid: Option<i32>,
    /// MAC learning on this bridge port; `None` when not a bridge port.
    pub bridge_port_learning: Option<bool>,
    /// Device group (0 unless set with [`Netlink::set_group`]).
    pub group: u32,
}

/// Settings of a VXLAN device ([`Netlink::create_vxlan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vxlan {
    /// VXLAN network identifier (24 bits).
    pub vni: u32,
    /// Source address of the encapsulated packets.
    pub local: Option<IpAddr>,
    /// Remote VTEP (unicast) or multicast group; `None` when the forwarding
    /// database is filled explicitly (head-end replication).
    pub remote: Option<IpAddr>,
    /// UDP destination port (IANA 4789 by default; Linux' own default would be 8472).
    pub port: u16,
    /// The underlay device.
    pub underlay: Option<LinkId>,
    /// Learn remote MACs from received packets.
    pub learning: bool,
}

impl Vxlan {
    /// VNI `vni` on port 4789 with learning on and nothing else set.
    pub fn new(vni: u32) -> Self {
        Vxlan {
            vni,
            local: None,
            remote: None,
            port: 4789,
            underlay: None,
            learning: true,
        }
    }
}

/// How a macvlan device forwards between siblings ([`Netlink::create_macvlan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacvlanMode {
    /// Siblings talk directly (the CNI default).
    Bridge,
    /// No traffic between siblings.
    Private,
    /// Sibling traffic goes through the external switch.
    Vepa,
    /// One macvlan takes over the parent.
    Passthru,
}

/// Checks a link name the way the kernel does (`dev_valid_name`): 1–15
/// bytes, not `.`/`..`, no `/`, `:` or whitespace.
pub fn validate_link_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("name is empty".into());
    }
    if name.len() > 15 {
        return Err(format!(
            "name is {} bytes long, the kernel allows at most 15",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err("name must not be '.' or '..'".into());
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c == '\0' || c.is_whitespace())
    {
        return Err("name must not contain '/', ':', NUL or whitespace".into());
    }
    Ok(())
}

fn checked_name(op: &'static str, name: &str) -> Result<()> {
    validate_link_name(name).map_err(|reason| HostError::invalid(op, name, reason))
}

fn message_for(link: &LinkId) -> LinkMessage {
    let mut message = LinkMessage::default();
    match link {
        LinkId::Index(index) => message.header.index = *index,
        LinkId::Name(name) => message.attributes.push(LinkAttribute::IfName(name.clone())),
    }
    message
}

fn new_link_message(name: &str, info: Vec<LinkInfo>) -> LinkMessage {
    let mut message = LinkMessage::default();
    message.attributes.push(LinkAttribute::IfName(name.to_owned()));
    message.attributes.push(LinkAttribute::LinkInfo(info));
    message
}

impl Netlink {
    /// Every link of the namespace.
    pub fn links(&mut self) -> Result<Vec<Link>> {
        let replies = self.dump(
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            "list links",
            &"",
        )?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewLink(message) => Some(link_from_message(message)),
                _ => None,
            })
            .collect())
    }

    /// The link `link`; fails with `ENODEV` if it does not exist (see
    /// [`HostError::is_not_found`]).
    pub fn link(&mut self, link: impl Into<LinkId>) -> Result<Link> {
        let link = link.into();
        let replies = self.query(
            RouteNetlinkMessage::GetLink(message_for(&link)),
            "get link",
            &link,
        )?;
        replies
            .into_iter()
            .find_map(|reply| match reply {
                RouteNetlinkMessage::NewLink(message) => Some(link_from_message(message)),
                _ => None,
            })
            .ok_or_else(|| HostError::Protocol {
                op: "get link",
                object: link.to_string(),
                reason: "no link in the reply".into(),
            })
    }

    /// The link `link`, or `None` if it does not exist.
    pub fn find_link(&mut self, link: impl Into<LinkId>) -> Result<Option<Link>> {
        match self.link(link) {
            Ok(found) => Ok(Some(found)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The interface index of `link` (no request if it is already an index).
    pub fn index_of(&mut self, link: impl Into<LinkId>) -> Result<u32> {
        match link.into() {
            LinkId::Index(index) => Ok(index),
            name @ LinkId::Name(_) => Ok(self.link(name)?.index),
        }
    }

    /// Creates a bridge `name` (down, like `ip link add NAME type bridge`).
    pub fn create_bridge(&mut self, name: &str) -> Result<()> {
        const OP: &str = "create bridge";
        checked_name(OP, name)?;
        let message = new_link_message(name, vec![LinkInfo::Kind(InfoKind::Bridge)]);
        self.execute(
            RouteNetlinkMessage::NewLink(message),
            NLM_F_CREATE | NLM_F_EXCL,
            OP,
            &name,
        )
    }

    /// Creates a veth pair `name` ↔ `peer`. The peer is created directly in
    /// `peer_netns` when given (so names may clash only within a namespace).
    pub fn create_veth(&mut self, name: &str, peer: &str, peer_netns: Option<&Netns>) -> Result<()> {
        const OP: &str = "create veth";
        checked_name(OP, name)?;
        checked_name(OP, peer)?;
        let mut peer_message = LinkMessage::default();
        peer_message
            .attributes
            .push(LinkAttribute::IfName(peer.to_owned()));
        if let Some(ns) = peer_netns {
            peer_message
                .attributes
                .push(LinkAttribute::NetNsFd(ns.as_fd().as_raw_fd()));
        }
        let message = new_link_message(
            name,
            vec![
                LinkInfo::Kind(InfoKind::Veth),
                LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_message))),
            ],
        );
        let object = match peer_netns {
            Some(ns) => format!("{name} (peer {peer} in netns {})", ns.label()),
            None => format!("{name} (peer {peer})"),
        };
        self.execute(
            RouteNetlinkMessage::NewLink(message),
            NLM_F_CREATE | NLM_F_EXCL,
            OP,
            &object,
        )
    }

    /// Creates a VXLAN device `name`.
    pub fn create_vxlan(&mut self, name: &str, vxlan: &Vxlan) -> Result<()> {
        const OP: &str = "create vxlan";
        checked_name(OP, name)?;
        if vxlan.vni >= 1 << 24 {
            return Err(HostError::invalid(
                OP,
                name,
                format!("vni {} does not fit in 24 bits", vxlan.vni),
            ));
        }
        let mut settings = vec![
            InfoVxlan::Id(vxlan.vni),
            InfoVxlan::Port(vxlan.port),
            InfoVxlan::Learning(vxlan.learning),
        ];
        match vxlan.local {
            Some(IpAddr::V4(local)) => settings.push(InfoVxlan::Local(local)),
            Some(IpAddr::V6(local)) => settings.push(InfoVxlan::Local6(local)),
            None => {}
        }
        match vxlan.remote {
            Some(IpAddr::V4(remote)) => settings.push(InfoVxlan::Group(remote)),
            Some(IpAddr::V6(remote)) => settings.push(InfoVxlan::Group6(remote)),
            None => {}
        }
        if let Some(underlay) = &vxlan.underlay {
            let index = self
                .index_of(underlay.clone())
                .map_err(|e| relabel(e, OP, name))?;
            settings.push(InfoVxlan::Link(index));
        }
        let message = new_link_message(
            name,
            vec![
                LinkInfo::Kind(InfoKind::Vxlan),
                LinkInfo::Data(InfoData::Vxlan(settings)),
            ],
        );
        self.execute(
            RouteNetlinkMessage::NewLink(message),
            NLM_F_CREATE | NLM_F_EXCL,
            OP,
            &name,
        )
    }

    /// Creates a macvlan device `name` on top of `parent`.
    pub fn create_macvlan(&mut self, name: &str, parent: impl Into<LinkId>, mode: MacvlanMode) -> Result<()> {
        const OP: &str = "create macvlan";
        checked_name(OP, name)?;
        let parent_index = self.index_of(parent).map_err(|e| relabel(e, OP, name))?;
        let mode = match mode {
            MacvlanMode::Bridge => MacVlanMode::Bridge,
            MacvlanMode::Private => MacVlanMode::Private,
            MacvlanMode::Vepa => MacVlanMode::Vepa,
            MacvlanMode::Passthru => MacVlanMode::Passthrough,
        };
        let mut message = new_link_message(
            name,
            vec![
                LinkInfo::Kind(InfoKind::MacVlan),
                LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(mode)])),
            ],
        );
        message.attributes.push(LinkAttribute::Link(parent_index));
        self.execute(
            RouteNetlinkMessage::NewLink(message),
            NLM_F_CREATE | NLM_F_EXCL,
            OP,
            &name,
        )
    }

    /// Deletes `link` (for a veth, both ends). Fails with `ENODEV` if it is
    /// missing; see [`Netlink::delete_link_if_exists`].
    pub fn delete_link(&mut self, link: impl Into<LinkId>) -> Result<()> {
        let link = link.into();
        self.execute(
            RouteNetlinkMessage::DelLink(message_for(&link)),
            0,
            "delete link",
            &link,
        )
    }

    /// Deletes `link`; a missing link is not an error (for teardown).
    pub fn delete_link_if_exists(&mut self, link: impl Into<LinkId>) -> Result<()> {
        match self.delete_link(link) {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    /// Puts `link` in the device group `group` (see
    /// [`Netlink::delete_links_in_group`]).
    pub fn set_group(&mut self, link: impl Into<LinkId>, group: u32) -> Result<()> {
        let link = link.into();
        let mut message = message_for(&link);
        message.attributes.push(LinkAttribute::Group(group));
        self.execute(
            RouteNetlinkMessage::SetLink(message),
            0,
            "set group",
            &format!("{link} to {group}"),
        )
    }

    /// Deletes every link of the device group `group` at once
    /// (`ip link del group N`): the kernel unregisters them in one batch,
    /// which is several times faster than deleting them one by one. Group 0
    /// (the default group of every link) is refused.
    pub fn delete_links_in_group(&mut self, group: u32) -> Result<()> {
        const OP: &str = "delete links in group";
        if group == 0 {
            return Err(HostError::invalid(
                OP,
                "0",
                "group 0 is the default group of every link",
            ));
        }
        let mut message = LinkMessage::default();
        message.attributes.push(LinkAttribute::Group(group));
        self.execute(RouteNetlinkMessage::DelLink(message), 0, OP, &group)
    }

    /// Renames `link` to `new_name` (bring it down first: not every driver
    /// allows renaming a running link).
    pub fn rename_link(&mut self, link: impl Into<LinkId>, new_name: &str) -> Result<()> {
        const OP: &str = "rename link";
        let link = link.into();
        checked_name(OP, new_name)?;
        let index = self
            .index_of(link.clone())
            .map_err(|e| relabel(e, OP, &link.to_string()))?;
        let mut message = message_for(&LinkId::Index(index));
        message
            .attributes
            .push(LinkAttribute::IfName(new_name.to_owned()));
        self.execute(
            RouteNetlinkMessage::SetLink(message),
            0,
            OP,
            &format!("{link} to {new_name}"),
        )
    }

    /// Sets the hardware address of `link`.
    pub fn set_mac(&mut self, link: impl Into<LinkId>, mac: MacAddr) -> Result<()> {
        let link = link.into();
        let mut message = message_for(&link);
        message
            .attributes
            .push(LinkAttribute::Address(mac.octets().to_vec()));
        self.execute(
            RouteNetlinkMessage::SetLink(message),
            0,
            "set mac",
            &format!("{link} to {mac}"),
        )
    }

    /// Sets the MTU of `link`.
    pub fn set_mtu(&mut self, link: impl Into<LinkId>, mtu: u32) -> Result<()> {
        let link = link.into();
        let mut message = message_for(&link);
        message.attributes.push(LinkAttribute::Mtu(mtu));
        self.execute(
            RouteNetlinkMessage::SetLink(message),
            0,
            "set mtu",
            &format!("{link} to {mtu}"),
        )
    }

    /// Brings `link` administratively up.
    pub fn set_up(&mut self, link: impl Into<LinkId>) -> Result<()> {
        self.set_admin_state(link.into(), true)
    }

    /// Brings `link` administratively down.
    pub fn set_down(&mut self, link: impl Into<LinkId>) -> Result<()> {
        self.set_admin_state(link.into(), false)
    }

    fn set_admin_state(&mut self, link: LinkId, up: bool) -> Result<()> {
        let mut message = message_for(&link);
        message.header.change_mask = LinkFlags::Up;
        if up {
            message.header.flags = LinkFlags::Up;
        }
        let op = if up { "set link up" } else { "set link down" };
        self.execute(RouteNetlinkMessage::SetLink(message), 0, op, &link)
    }

    /// Makes `link` a port of the bridge `master`.
    pub fn set_master(&mut self, link: impl Into<LinkId>, master: impl Into<LinkId>) -> Result<()> {
        const OP: &str = "set master";
        let (link, master) = (link.into(), master.into());
        let object = format!("{link} to {master}");
        let master_index = self.index_of(master).map_err(|e| relabel(e, OP, &object))?;
        let mut message = message_for(&link);
        message.attributes.push(LinkAttribute::Controller(master_index));
        self.execute(RouteNetlinkMessage::SetLink(message), 0, OP, &object)
    }

    /// Releases `link` from its master (`ip link set LINK nomaster`).
    pub fn set_nomaster(&mut self, link: impl Into<LinkId>) -> Result<()> {
        let link = link.into();
        let mut message = message_for(&link);
        message.attributes.push(LinkAttribute::Controller(0));
        self.execute(RouteNetlinkMessage::SetLink(message), 0, "set nomaster", &link)
    }

    /// Moves `link` into the namespace `ns`, renaming it to `new_name` on
    /// the way if given (e.g. a veth end becoming `eth0` in a pod).
    pub fn move_to_netns(
        &mut self,
        link: impl Into<LinkId>,
        ns: &Netns,
        new_name: Option<&str>,
    ) -> Result<()> {
        const OP: &str = "move link";
        let link = link.into();
        let object = match new_name {
            Some(new_name) => format!("{link} to netns {} as {new_name}", ns.label()),
            None => format!("{link} to netns {}", ns.label()),
        };
        let mut message = match new_name {
            Some(new_name) => {
                checked_name(OP, new_name)?;
                let index = self.index_of(link).map_err(|e| relabel(e, OP, &object))?;
                let mut message = message_for(&LinkId::Index(index));
                message
                    .attributes
                    .push(LinkAttribute::IfName(new_name.to_owned()));
                message
            }
            None => message_for(&link),
        };
        message
            .attributes
            .push(LinkAttribute::NetNsFd(ns.as_fd().as_raw_fd()));
        self.execute(RouteNetlinkMessage::SetLink(message), 0, OP, &object)
    }

    /// Turns MAC learning on or off on the bridge port `link`
    /// (`ip link set LINK type bridge_slave learning on|off`).
    pub fn set_bridge_port_learning(&mut self, link: impl Into<LinkId>, learning: bool) -> Result<()> {
        let link = link.into();
        let mut message = message_for(&link);
        message.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::PortKind(InfoPortKind::Bridge),
            LinkInfo::PortData(InfoPortData::BridgePort(vec![InfoBridgePort::Learning(learning)])),
        ]));
        let op = if learning {
            "set bridge port learning on"
        } else {
            "set bridge port learning off"
        };
        self.execute(RouteNetlinkMessage::NewLink(message), 0, op, &link)
    }
}

fn link_from_message(message: LinkMessage) -> Link {
    let mut link = Link {
        index: message.header.index,
        name: String::new(),
        kind: None,
        mac: None,
        mtu: 0,
        up: message.header.flags.contains(LinkFlags::Up),
        oper_state: OperState::Unknown,
        master: None,
        parent: None,
        link_netnsid: None,
        bridge_port_learning: None,
        group: 0,
    };
    for attribute in message.attributes {
        match attribute {
            LinkAttribute::IfName(name) => link.name = name,
            LinkAttribute::Address(bytes) => link.mac = MacAddr::try_from(bytes.as_slice()).ok(),
            LinkAttribute::Mtu(mtu) => link.mtu = mtu,
            LinkAttribute::Controller(master) if master != 0 => link.master = Some(master),
            LinkAttribute::Link(parent) => link.parent = Some(parent),
            LinkAttribute::LinkNetNsId(id) => link.link_netnsid = Some(id),
            LinkAttribute::Group(group) => link.group = group,
            LinkAttribute::OperState(state) => {
                link.oper_state = match state {
                    State::Up => OperState::Up,
                    State::Down => OperState::Down,
                    State::LowerLayerDown => OperState::LowerLayerDown,
                    State::Unknown => OperState::Unknown,
                    _ => OperState::Other,
                }
            }
            LinkAttribute::LinkInfo(infos) => {
                for info in infos {
                    match info {
                        LinkInfo::Kind(kind) => link.kind = Some(kind.to_string()),
                        LinkInfo::PortData(InfoPortData::BridgePort(options)) => {
                            link.bridge_port_learning = options.iter().find_map(|option| match option {
                                InfoBridgePort::Learning(learning) => Some(*learning),
                                _ => None,
                            });
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    link
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_names_follow_the_kernel_rules() {
        for good in ["eth0", "k6t-eth0", "tap0", "a", "123456789012345"] {
            assert!(validate_link_name(good).is_ok(), "{good:?} rejected");
        }
        for bad in ["", ".", "..", "1234567890123456", "a/b", "a:b", "a b", "a\tb"] {
            assert!(validate_link_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn invalid_names_fail_before_any_request() {
        let reason = validate_link_name("this-name-is-too-long").unwrap_err();
        let err = HostError::invalid("create bridge", "this-name-is-too-long", reason);
        assert_eq!(
            err.to_string(),
            "create bridge this-name-is-too-long: name is 21 bytes long, the kernel allows at most 15"
        );
    }

    #[test]
    fn link_ids_display_as_names_or_indexes() {
        assert_eq!(LinkId::from("eth0").to_string(), "eth0");
        assert_eq!(LinkId::from(7u32).to_string(), "ifindex 7");
    }
}
