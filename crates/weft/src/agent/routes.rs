//! Default-route edits the meta-plugin asks for (`default-route` in a selection element),
//! applied inside the pod's network namespace over netlink.

use ipnet::IpNet;
use weft_host::{IpFamily, Netlink, Netns, Route};
use weft_meta::{RouteAction, RouteEditor};

/// Applies route actions in the pod netns named by the request's `CNI_NETNS`.
pub struct NetnsRouteEditor;

fn default_destination(family: IpFamily) -> IpNet {
    match family {
        IpFamily::V4 => "0.0.0.0/0".parse().expect("valid"),
        IpFamily::V6 => "::/0".parse().expect("valid"),
    }
}

impl RouteEditor for NetnsRouteEditor {
    fn apply(&self, netns: &str, ifname: &str, action: &RouteAction) -> Result<(), String> {
        let ns = Netns::open(netns).map_err(|e| e.to_string())?;
        let mut nl = Netlink::open_in(&ns).map_err(|e| e.to_string())?;
        let index = nl.index_of(ifname).map_err(|e| e.to_string())?;
        for (delete, family) in [
            (action.delete_v4_default, IpFamily::V4),
            (action.delete_v6_default, IpFamily::V6),
        ] {
            if !delete {
                continue;
            }
            let defaults = nl.routes(family).map_err(|e| e.to_string())?;
            for route in defaults
                .iter()
                .filter(|r| r.destination == default_destination(family) && r.oif == Some(index))
            {
                nl.delete_route(route).map_err(|e| e.to_string())?;
            }
        }
        for gateway in &action.add_gateways {
            let route = Route::default_via(*gateway).dev(index);
            nl.replace_route(&route)
                .map_err(|e| format!("default via {gateway} dev {ifname}: {e}"))?;
        }
        Ok(())
    }
}
