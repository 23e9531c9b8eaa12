//! A [`NetnsBackend`] that runs `ip`, `nft` and `sysctl` inside the netns through `nsenter`.
//! It is the stand-in until the netlink-based host crate takes over the same trait.

use std::io::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use ipnet::IpNet;
use serde_json::Value;

use super::{BackendError, NetnsBackend};
use crate::mac::MacAddr;
use crate::nft::remove_script;
use crate::plan::Op;
use crate::pod_link::{PodLink, PodRoute};

/// Runs the primitives as commands inside the netns at `netns` (e.g. `/run/netns/NAME`).
#[derive(Debug, Clone)]
pub struct CommandBackend {
    netns: PathBuf,
}

impl CommandBackend {
    /// A backend for the network namespace bound at `netns`.
    pub fn new(netns: impl Into<PathBuf>) -> Self {
        CommandBackend { netns: netns.into() }
    }

    fn exec(&self, program: &str, args: &[&str], stdin: Option<&str>) -> Result<String, BackendError> {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net={}", self.netns.display()))
            .arg(program)
            .args(args);
        command.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let describe = || format!("{program} {}", args.join(" "));
        let mut child = command
            .spawn()
            .map_err(|e| BackendError::other(format!("{}: cannot run: {e}", describe())))?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes())
                .map_err(|e| BackendError::other(format!("{}: writing stdin: {e}", describe())))?;
        }
        let output = child
            .wait_with_output()
            .map_err(|e| BackendError::other(format!("{}: {e}", describe())))?;
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
        }
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        let not_found = [
            "Cannot find device",
            "does not exist",
            "No such device",
            "No such file or directory",
        ]
        .iter()
        .any(|needle| stderr.contains(needle));
        Err(BackendError {
            not_found,
            message: format!("{}: {stderr}", describe()),
        })
    }

    fn ip(&self, args: &[&str]) -> Result<String, BackendError> {
        self.exec("ip", args, None)
    }

    fn link_mac(&self, name: &str) -> Result<MacAddr, BackendError> {
        let out = self.ip(&["-j", "link", "show", "dev", name])?;
        let links: Value = parse_json(&out)?;
        links[0]["address"]
            .as_str()
            .and_then(|m| m.parse().ok())
            .ok_or_else(|| BackendError::other(format!("link {name}: no MAC address in ip output")))
    }
}

fn parse_json(text: &str) -> Result<Value, BackendError> {
    serde_json::from_str(text).map_err(|e| BackendError::other(format!("unexpected ip -j output: {e}")))
}

impl NetnsBackend for CommandBackend {
    fn run(&mut self, op: &Op) -> Result<(), BackendError> {
        match op {
            Op::CreateBridge { name, mac, mtu } => {
                let (mac, mtu) = (mac.map(|m| m.to_string()), mtu.map(|m| m.to_string()));
                let mut args = vec!["link", "add", "name", name.as_str()];
                if let Some(mac) = &mac {
                    args.extend(["address", mac.as_str()]);
                }
                if let Some(mtu) = &mtu {
                    args.extend(["mtu", mtu.as_str()]);
                }
                args.extend(["type", "bridge"]);
                self.ip(&args).map(drop)
            }
            Op::CreateTap {
                name,
                owner,
                queues,
                mtu,
            } => {
                let (uid, gid) = (owner.uid.to_string(), owner.gid.to_string());
                let mut args = vec![
                    "tuntap", "add", "dev", name, "mode", "tap", "user", &uid, "group", &gid,
                ];
                args.push("vnet_hdr");
                if *queues > 1 {
                    args.push("multi_queue");
                }
                self.ip(&args)?;
                if let Err(e) = self.ip(&["link", "set", "dev", name, "mtu", &mtu.to_string()]) {
                    let _ = self.ip(&["link", "del", "dev", name]);
                    return Err(e);
                }
                Ok(())
            }
            Op::DeleteLink { name } => self.ip(&["link", "del", "dev", name]).map(drop),
            Op::SetUp { name } => self.ip(&["link", "set", "dev", name, "up"]).map(drop),
            Op::SetDown { name } => self.ip(&["link", "set", "dev", name, "down"]).map(drop),
            Op::Rename { from, to } => self.ip(&["link", "set", "dev", from, "name", to]).map(drop),
            Op::SetMac { link, mac } => self
                .ip(&["link", "set", "dev", link, "address", &mac.to_string()])
                .map(drop),
            Op::CopyMac { link, from } => {
                let mac = self.link_mac(from)?;
                self.ip(&["link", "set", "dev", link, "address", &mac.to_string()])
                    .map(drop)
            }
            Op::SetMaster { link, master } => {
                self.ip(&["link", "set", "dev", link, "master", master]).map(drop)
            }
            Op::ClearMaster { link } => self.ip(&["link", "set", "dev", link, "nomaster"]).map(drop),
            Op::FlushAddresses { link } => self.ip(&["addr", "flush", "dev", link]).map(drop),
            Op::AddAddresses { link, addresses } => {
                for address in addresses {
                    self.ip(&["addr", "replace", &address.to_string(), "dev", link])?;
                }
                Ok(())
            }
            Op::AddRoutes { link, routes } => {
                // On-link routes first: a gateway may only be reachable through one of them.
                let (on_link, via): (Vec<&PodRoute>, Vec<&PodRoute>) =
                    routes.iter().partition(|r| r.gateway.is_none());
                for route in on_link.into_iter().chain(via) {
                    let destination = route.destination.to_string();
                    let gateway = route.gateway.map(|g| g.to_string());
                    let mut args = vec!["route", "replace", destination.as_str()];
                    if let Some(gateway) = &gateway {
                        args.extend(["via", gateway.as_str()]);
                    }
                    args.extend(["dev", link.as_str()]);
                    self.ip(&args)?;
                }
                Ok(())
            }
            Op::SetLearning { link, enabled } => {
                let state = if *enabled { "on" } else { "off" };
                self.ip(&[
                    "link",
                    "set",
                    "dev",
                    link,
                    "type",
                    "bridge_slave",
                    "learning",
                    state,
                ])
                .map(drop)
            }
            Op::Sysctl { key, value } => self
                .exec("sysctl", &["-q", "-w", &format!("{key}={value}")], None)
                .map(drop),
            Op::InstallNat { rules } => self
                .exec("nft", &["-f", "-"], Some(&rules.install_script()))
                .map(drop),
            Op::RemoveNat { families } => self
                .exec("nft", &["-f", "-"], Some(&remove_script(families)))
                .map(drop),
        }
    }

    fn read_sysctl(&mut self, key: &str) -> Result<String, BackendError> {
        self.exec("sysctl", &["-n", key], None)
            .map(|v| v.trim().to_string())
    }

    fn discover(&mut self, name: &str) -> Result<Option<PodLink>, BackendError> {
        let out = match self.ip(&["-j", "addr", "show", "dev", name]) {
            Ok(out) => out,
            Err(e) if e.not_found => return Ok(None),
            Err(e) => return Err(e),
        };
        let links = parse_json(&out)?;
        let Some(link) = links.get(0) else { return Ok(None) };
        let bad = |field: &str| {
            BackendError::other(format!("link {name}: missing or invalid {field} in ip output"))
        };
        let index = link["ifindex"].as_u64().ok_or_else(|| bad("ifindex"))? as u32;
        let mac: MacAddr = link["address"]
            .as_str()
            .and_then(|m| m.parse().ok())
            .ok_or_else(|| bad("address"))?;
        let mtu = link["mtu"].as_u64().ok_or_else(|| bad("mtu"))? as u32;
        let mut addresses = Vec::new();
        for info in link["addr_info"].as_array().into_iter().flatten() {
            if info["scope"].as_str() == Some("link") {
                continue;
            }
            let local: IpAddr = info["local"]
                .as_str()
                .and_then(|a| a.parse().ok())
                .ok_or_else(|| bad("local"))?;
            let prefix = info["prefixlen"].as_u64().ok_or_else(|| bad("prefixlen"))? as u8;
            addresses.push(IpNet::new(local, prefix).map_err(|_| bad("prefixlen"))?);
        }
        let mut routes = Vec::new();
        for family in ["-4", "-6"] {
            let out = self.ip(&["-j", family, "route", "show", "dev", name])?;
            for route in parse_json(&out)?.as_array().into_iter().flatten() {
                if route["protocol"].as_str() == Some("kernel") {
                    continue;
                }
                let destination = match route["dst"].as_str() {
                    Some("default") if family == "-4" => "0.0.0.0/0".parse().ok(),
                    Some("default") => "::/0".parse().ok(),
                    Some(dst) => dst
                        .parse()
                        .ok()
                        .or_else(|| dst.parse::<IpAddr>().ok().map(IpNet::from)),
                    None => None,
                };
                let destination = destination.ok_or_else(|| bad("route dst"))?;
                let gateway = route["gateway"].as_str().and_then(|g| g.parse().ok());
                routes.push(PodRoute { destination, gateway });
            }
        }
        Ok(Some(PodLink {
            name: name.to_string(),
            index,
            mac,
            mtu,
            addresses,
            routes,
        }))
    }
}
