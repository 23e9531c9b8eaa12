//! The passt binding (KubeVirt's `passt` network binding plugin, and the core `passtBinding`):
//! the pod network reaches the guest through a user-mode `passt` process started in the pod
//! netns. No link, address, NAT rule or TAP is created: passt translates the guest's L2 frames
//! to L4 sockets of the pod and back, and its built-in DHCP/NDP/DHCPv6 hand the guest the pod's
//! own address and default route. QEMU connects to passt's Unix socket
//! (`-netdev stream,server=off,addr.type=unix`). This module only decides: the argv, the
//! socket and log paths, and which pod ports are forwarded to the guest.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::names::is_valid_link_name;
use crate::nft::ForwardedPort;

/// The KubeVirt plugin name the passt sidecar acts on (`PasstPluginName`): an interface with
/// `binding: {name: passt}`, the plugin registered under that key in the KubeVirt CR.
pub const PASST_PLUGIN_NAME: &str = "passt";

/// The program (Debian's `passt` package).
pub const PASST_PROGRAM: &str = "passt";

/// Longest Unix socket path (`sun_path` holds 108 bytes with the terminating NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// Where one passt's files live (a directory of its own, writable by [`PasstRequest::runas`]:
/// passt binds its socket only after dropping privileges).
pub fn socket_dir(pod_dir: &Path, interface: &str) -> PathBuf {
    pod_dir.join(format!("passt-{interface}"))
}

/// Which pod ports passt forwards to the guest, per protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PortSpec {
    /// Every port not bound in the pod (passt's `all`): the interface lists no ports.
    All,
    /// Only these (sorted, deduplicated).
    Only(Vec<u16>),
    /// None (the interface lists ports, none of this protocol).
    None,
}

impl PortSpec {
    /// The argument of passt's `-t` / `-u`.
    pub fn arg(&self) -> String {
        match self {
            PortSpec::All => "all".into(),
            PortSpec::None => "none".into(),
            PortSpec::Only(ports) => ports.iter().map(u16::to_string).collect::<Vec<_>>().join(","),
        }
    }
}

/// Everything a passt instance is planned from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PasstRequest {
    /// The VMI interface (= network) name.
    pub interface: String,
    /// The pod interface passt takes its addresses and routes from (`eth0`).
    pub pod_iface: String,
    /// The launcher pod's directory (socket and log go under it).
    pub pod_dir: PathBuf,
    /// The interface's `ports` (none: forward every port, as KubeVirt).
    pub ports: Vec<ForwardedPort>,
    /// The user passt drops to (`--runas uid:gid`); it must be able to write the socket dir.
    pub runas: (u32, u32),
}

/// One passt instance: how to run it and where QEMU finds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PasstPlan {
    /// The full argv, program first.
    pub argv: Vec<String>,
    /// Directory holding the socket (created owned by `runas`, mode 0700; removed on stop).
    pub dir: PathBuf,
    /// The Unix socket QEMU connects to.
    pub socket: PathBuf,
    /// passt's log file (opened before it drops privileges).
    pub log: PathBuf,
    /// TCP ports forwarded.
    pub tcp: PortSpec,
    /// UDP ports forwarded.
    pub udp: PortSpec,
    /// User and group passt runs as.
    pub runas: (u32, u32),
}

/// Errors planning a passt instance.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasstError {
    /// The pod interface name is not a Linux interface name.
    #[error("passt: pod interface {0:?} is not a valid interface name")]
    InvalidPodInterface(String),
    /// The interface name cannot be part of a file name.
    #[error("passt: interface name {0:?} cannot name a socket file")]
    InvalidInterfaceName(String),
    /// The socket path does not fit a Unix socket address.
    #[error("passt: socket path {path} is {len} bytes, more than a Unix socket path holds ({max})")]
    SocketPathTooLong {
        /// The path.
        path: String,
        /// Its length.
        len: usize,
        /// [`MAX_SOCKET_PATH`].
        max: usize,
    },
    /// A path is not UTF-8 or holds a `,` (QEMU's option separator).
    #[error("passt: path {0} must be UTF-8 without ','")]
    UnsafePath(String),
    /// A port's protocol is neither TCP nor UDP (admission rejects it first).
    #[error("passt: port {port}: protocol {protocol:?} is not TCP or UDP")]
    UnknownProtocol {
        /// The port.
        port: u16,
        /// The protocol given.
        protocol: String,
    },
    /// Port 0 cannot be forwarded.
    #[error("passt: port 0 cannot be forwarded")]
    PortZero,
}

/// The forwarded ports, as KubeVirt's passt sidecar renders `<portForward>`: no ports at all →
/// TCP and UDP `all`; otherwise the listed TCP (protocol empty or `tcp`, any case) and UDP
/// ports, and `none` for a protocol without any.
pub fn port_specs(ports: &[ForwardedPort]) -> Result<(PortSpec, PortSpec), PasstError> {
    if ports.is_empty() {
        return Ok((PortSpec::All, PortSpec::All));
    }
    let (mut tcp, mut udp) = (Vec::new(), Vec::new());
    for p in ports {
        if p.port == 0 {
            return Err(PasstError::PortZero);
        }
        if p.protocol.is_empty() || p.protocol.eq_ignore_ascii_case("tcp") {
            tcp.push(p.port);
        } else if p.protocol.eq_ignore_ascii_case("udp") {
            udp.push(p.port);
        } else {
            return Err(PasstError::UnknownProtocol {
                port: p.port,
                protocol: p.protocol.clone(),
            });
        }
    }
    let spec = |mut ports: Vec<u16>| {
        ports.sort_unstable();
        ports.dedup();
        if ports.is_empty() {
            PortSpec::None
        } else {
            PortSpec::Only(ports)
        }
    };
    Ok((spec(tcp), spec(udp)))
}

fn utf8_without_comma(path: &Path) -> Result<String, PasstError> {
    match path.to_str() {
        Some(text) if !text.contains(',') => Ok(text.to_string()),
        _ => Err(PasstError::UnsafePath(path.display().to_string())),
    }
}

/// Plan one passt: foreground (the launcher supervises it), its socket in a directory of its
/// own, addresses and routes from the pod interface (`-i`), the port forwards, a log file.
pub fn plan_passt(request: &PasstRequest) -> Result<PasstPlan, PasstError> {
    if !is_valid_link_name(&request.pod_iface) {
        return Err(PasstError::InvalidPodInterface(request.pod_iface.clone()));
    }
    let name_ok = !request.interface.is_empty()
        && request
            .interface
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
    if !name_ok {
        return Err(PasstError::InvalidInterfaceName(request.interface.clone()));
    }
    let dir = socket_dir(&request.pod_dir, &request.interface);
    let socket = dir.join("passt.sock");
    let log = request.pod_dir.join(format!("passt-{}.log", request.interface));
    let socket_text = utf8_without_comma(&socket)?;
    let log_text = utf8_without_comma(&log)?;
    if socket_text.len() > MAX_SOCKET_PATH {
        return Err(PasstError::SocketPathTooLong {
            len: socket_text.len(),
            path: socket_text,
            max: MAX_SOCKET_PATH,
        });
    }
    let (tcp, udp) = port_specs(&request.ports)?;
    let (uid, gid) = request.runas;
    let argv = vec![
        PASST_PROGRAM.to_string(),
        "--foreground".into(),
        "--runas".into(),
        format!("{uid}:{gid}"),
        "--socket".into(),
        socket_text,
        "--log-file".into(),
        log_text,
        "--interface".into(),
        request.pod_iface.clone(),
        "--tcp-ports".into(),
        tcp.arg(),
        "--udp-ports".into(),
        udp.arg(),
    ];
    Ok(PasstPlan {
        argv,
        dir,
        socket,
        log,
        tcp,
        udp,
        runas: request.runas,
    })
}

/// The guest MAC of a passt NIC without a spec `macAddress`: libvirt's `52:54:00` prefix and
/// three bytes of an FNV-1a hash of `seed` (the VMI uid and interface), so it is stable for
/// one VMI and never the pod interface's own MAC, which passt uses for its end of the link.
pub fn generated_mac(seed: &str) -> String {
    let hash = seed.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let [a, b, c, ..] = hash.to_be_bytes();
    format!("52:54:00:{a:02x}:{b:02x}:{c:02x}")
}

/// Whether `/proc/<pid>/net/unix` text lists `socket` as a listening socket (flag
/// `__SO_ACCEPTCON`, 0x10000): passt is ready for QEMU once it does.
pub fn listening_in(proc_net_unix: &str, socket: &Path) -> bool {
    let Some(wanted) = socket.to_str() else {
        return false;
    };
    proc_net_unix.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() >= 8
            && fields[7] == wanted
            && u32::from_str_radix(fields[3], 16).is_ok_and(|flags| flags & 0x10000 != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(protocol: &str, port: u16) -> ForwardedPort {
        ForwardedPort {
            protocol: protocol.into(),
            port,
        }
    }

    fn request(ports: Vec<ForwardedPort>) -> PasstRequest {
        PasstRequest {
            interface: "default".into(),
            pod_iface: "eth0".into(),
            pod_dir: "/var/lib/weft/pods/default_virt-launcher-vm1-abcde".into(),
            ports,
            runas: (65534, 65534),
        }
    }

    #[test]
    fn no_ports_forward_everything_as_kubevirt() {
        let plan = plan_passt(&request(Vec::new())).unwrap();
        assert_eq!(
            plan.argv,
            [
                "passt",
                "--foreground",
                "--runas",
                "65534:65534",
                "--socket",
                "/var/lib/weft/pods/default_virt-launcher-vm1-abcde/passt-default/passt.sock",
                "--log-file",
                "/var/lib/weft/pods/default_virt-launcher-vm1-abcde/passt-default.log",
                "--interface",
                "eth0",
                "--tcp-ports",
                "all",
                "--udp-ports",
                "all",
            ]
        );
        assert_eq!(plan.socket.parent(), Some(plan.dir.as_path()));
    }

    #[test]
    fn listed_ports_split_by_protocol_sorted_and_deduplicated() {
        let (tcp, udp) = port_specs(&[port("", 8080), port("TCP", 22), port("tcp", 8080)]).unwrap();
        assert_eq!(tcp, PortSpec::Only(vec![22, 8080]));
        assert_eq!(
            udp,
            PortSpec::None,
            "ports listed, none UDP: UDP forwards nothing"
        );
        assert_eq!(tcp.arg(), "22,8080");
        assert_eq!(udp.arg(), "none");
        let (tcp, udp) = port_specs(&[port("udp", 53), port("UDP", 5353)]).unwrap();
        assert_eq!((tcp.arg(), udp.arg()), ("none".into(), "53,5353".into()));
    }

    #[test]
    fn bad_ports_names_and_paths_are_refused() {
        assert_eq!(
            port_specs(&[port("sctp", 9)]),
            Err(PasstError::UnknownProtocol {
                port: 9,
                protocol: "sctp".into()
            })
        );
        assert_eq!(port_specs(&[port("tcp", 0)]), Err(PasstError::PortZero));
        let mut r = request(Vec::new());
        r.pod_iface = "a-name-of-16-chr".into();
        assert!(matches!(plan_passt(&r), Err(PasstError::InvalidPodInterface(_))));
        let mut r = request(Vec::new());
        r.interface = "../x".into();
        assert!(matches!(plan_passt(&r), Err(PasstError::InvalidInterfaceName(_))));
        let mut r = request(Vec::new());
        r.pod_dir = "/a,b".into();
        assert!(matches!(plan_passt(&r), Err(PasstError::UnsafePath(_))));
        let mut r = request(Vec::new());
        r.pod_dir = PathBuf::from("/").join("d".repeat(100));
        let err = plan_passt(&r).unwrap_err();
        assert!(matches!(err, PasstError::SocketPathTooLong { .. }), "{err}");
    }

    #[test]
    fn generated_macs_are_stable_per_seed_and_libvirt_prefixed() {
        let a = generated_mac("uid-1/default");
        assert_eq!(a, generated_mac("uid-1/default"));
        assert_ne!(a, generated_mac("uid-2/default"));
        assert!(a.starts_with("52:54:00:") && a.len() == 17, "{a}");
    }

    #[test]
    fn readiness_needs_the_listening_flag_on_that_path() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                     00000000a394bbb7: 00000002 00000000 00010000 0001 01 1609639 /run/p/passt.sock\n\
                     00000000d8256bdd: 00000002 00000000 00000000 0001 01 1612954 /run/q/passt.sock\n\
                     00000000d8256bde: 00000002 00000000 00000000 0001 01 1612955\n";
        assert!(listening_in(table, Path::new("/run/p/passt.sock")));
        assert!(
            !listening_in(table, Path::new("/run/q/passt.sock")),
            "bound, not listening"
        );
        assert!(!listening_in(table, Path::new("/run/r/passt.sock")));
        assert!(!listening_in("", Path::new("/run/p/passt.sock")));
    }
}
