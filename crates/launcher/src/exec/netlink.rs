//! The [`NetnsBackend`] on weft-host: one rtnetlink socket opened inside the pod netns, TAPs and
//! sysctls on a short-lived thread inside it, `nft -f -` spawned into it.

use std::io::Write as _;
use std::net::IpAddr;
use std::path::Path;
use std::process::{Command, Stdio};

use ipnet::IpNet;
use weft_host::{HostError, IpFamily, MacAddr, Netlink, Netns, Route, TapOptions};

use super::{BackendError, NetnsBackend};
use crate::nft::remove_script;
use crate::plan::Op;
use crate::pod_link::{PodLink, PodRoute};

/// Performs the primitives with netlink and ioctls inside one netns.
#[derive(Debug)]
pub struct NetlinkBackend {
    netns: Netns,
    netlink: Netlink,
}

impl From<HostError> for BackendError {
    fn from(error: HostError) -> Self {
        BackendError {
            not_found: error.is_not_found(),
            message: error.to_string(),
        }
    }
}

impl NetlinkBackend {
    /// A backend for the netns bound at `path` (e.g. `/run/netns/NAME`, `/proc/PID/ns/net`).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, BackendError> {
        let netns = Netns::open(path)?;
        let netlink = Netlink::open_in(&netns)?;
        Ok(NetlinkBackend { netns, netlink })
    }

    fn nft(&self, script: &str) -> Result<(), BackendError> {
        let mut command = Command::new("nft");
        command
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = self.netns.spawn(&mut command)?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(script.as_bytes())
                .map_err(|e| BackendError::other(format!("nft -f -: stdin: {e}")))?;
        }
        let output = child
            .wait_with_output()
            .map_err(|e| BackendError::other(format!("nft -f -: {e}")))?;
        if output.status.success() {
            Ok(())
        } else {
            let stderr = String::from_utf8_lossy(&output.stderr);
            Err(BackendError::other(format!("nft -f -: {}", stderr.trim())))
        }
    }

    /// Undo a half-done creation, keeping the original error.
    fn created_or_delete(&mut self, name: &str, result: Result<(), HostError>) -> Result<(), BackendError> {
        if let Err(error) = result {
            let _ = self.netlink.delete_link(name);
            return Err(error.into());
        }
        Ok(())
    }
}

impl NetlinkBackend {
    fn configure_bridge(
        &mut self,
        name: &str,
        mac: Option<MacAddr>,
        mtu: Option<u32>,
    ) -> Result<(), HostError> {
        if let Some(mac) = mac {
            self.netlink.set_mac(name, mac)?;
        }
        if let Some(mtu) = mtu {
            self.netlink.set_mtu(name, mtu)?;
        }
        Ok(())
    }
}

fn ignore_exists(result: Result<(), HostError>) -> Result<(), BackendError> {
    match result {
        Err(e) if e.is_already_exists() => Ok(()),
        other => other.map_err(BackendError::from),
    }
}

impl NetnsBackend for NetlinkBackend {
    fn run(&mut self, op: &Op) -> Result<(), BackendError> {
        let nl = &mut self.netlink;
        match op {
            Op::CreateBridge { name, mac, mtu } => {
                nl.create_bridge(name)?;
                let result = self.configure_bridge(name, *mac, *mtu);
                self.created_or_delete(name, result)
            }
            Op::CreateTap {
                name,
                owner,
                queues,
                mtu,
            } => {
                let options = TapOptions {
                    multi_queue: *queues > 1,
                    vnet_hdr: true,
                    owner: Some(owner.uid),
                    group: Some(owner.gid),
                };
                self.netns.run_in(|| weft_host::create_tap(name, &options))??;
                let result = self.netlink.set_mtu(name, *mtu);
                self.created_or_delete(name, result)
            }
            Op::DeleteLink { name } => Ok(nl.delete_link(name)?),
            Op::SetUp { name } => Ok(nl.set_up(name)?),
            Op::SetDown { name } => Ok(nl.set_down(name)?),
            Op::Rename { from, to } => Ok(nl.rename_link(from, to)?),
            Op::SetMac { link, mac } => Ok(nl.set_mac(link, *mac)?),
            Op::CopyMac { link, from } => {
                let source = nl.link(from)?;
                let mac = source.mac.ok_or_else(|| {
                    BackendError::other(format!("copy mac: link {from} has no MAC address"))
                })?;
                Ok(nl.set_mac(link, mac)?)
            }
            Op::SetMaster { link, master } => Ok(nl.set_master(link, master)?),
            Op::ClearMaster { link } => Ok(nl.set_nomaster(link)?),
            Op::FlushAddresses { link } => Ok(nl.flush_addresses(link, None)?),
            Op::AddAddresses { link, addresses } => {
                for address in addresses {
                    ignore_exists(nl.add_address(link, *address))?;
                }
                Ok(())
            }
            Op::AddRoutes { link, routes } => {
                let index = nl.route_dev(link)?;
                // On-link routes first: a gateway may only be reachable through one of them.
                let (on_link, via): (Vec<&PodRoute>, Vec<&PodRoute>) =
                    routes.iter().partition(|r| r.gateway.is_none());
                for route in on_link.into_iter().chain(via) {
                    let mut wanted = Route::new(route.destination).dev(index);
                    if let Some(gateway) = route.gateway {
                        wanted = wanted.via(gateway);
                    }
                    ignore_exists(nl.add_route(&wanted))?;
                }
                Ok(())
            }
            Op::SetLearning { link, enabled } => Ok(nl.set_bridge_port_learning(link, *enabled)?),
            Op::Sysctl { key, value } => Ok(self.netns.run_in(|| weft_host::write_sysctl(key, value))??),
            Op::InstallNat { rules } => self.nft(&rules.install_script()),
            Op::RemoveNat { families } => self.nft(&remove_script(families)),
        }
    }

    fn read_sysctl(&mut self, key: &str) -> Result<String, BackendError> {
        Ok(self.netns.run_in(|| weft_host::read_sysctl(key))??)
    }

    fn discover(&mut self, name: &str) -> Result<Option<PodLink>, BackendError> {
        let Some(link) = self.netlink.find_link(name)? else {
            return Ok(None);
        };
        let mac = link
            .mac
            .ok_or_else(|| BackendError::other(format!("pod link {name} has no MAC address")))?;
        let addresses: Vec<IpNet> = self
            .netlink
            .addresses(link.index, None)?
            .into_iter()
            .filter(|a| !is_link_local(a.addr()))
            .collect();
        let mut routes = Vec::new();
        for family in [IpFamily::V4, IpFamily::V6] {
            for route in self.netlink.routes(family)? {
                // The kernel's own connected and link-local routes come back with the addresses.
                let connected = route.gateway.is_none()
                    && (addresses.iter().any(|a| a.trunc() == route.destination)
                        || is_link_local(route.destination.addr()));
                if route.oif == Some(link.index) && !connected {
                    routes.push(PodRoute {
                        destination: route.destination,
                        gateway: route.gateway,
                    });
                }
            }
        }
        Ok(Some(PodLink {
            name: link.name,
            index: link.index,
            mac,
            mtu: link.mtu,
            addresses,
            routes,
        }))
    }
}

fn is_link_local(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
    }
}
