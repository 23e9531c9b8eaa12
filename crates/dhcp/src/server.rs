//! The thin socket loop around [`crate::v4::reply`] and [`crate::v6::reply`].
//!
//! The caller creates the socket with [`bind_server_socket`] (or [`bind_server_socket_v6`]) on a
//! thread that has entered the pod's network namespace ([`bind_in_netns`] does exactly that;
//! sockets keep the namespace they were created in), then hands it to [`serve`]/[`spawn`] (or
//! [`serve_v6`]/[`spawn_v6`]) on any thread. Several servers, one per bridge, coexist in one
//! namespace: each socket is bound to its own device.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::{ConfigError, ServerConfig};
use crate::guard::{self, DropLog, Frame};
use crate::tap::{self, GuestSockets};
use crate::v4;
use crate::v6::{self, V6Config};

/// How often the loop checks its stop flag while no packet arrives.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Errors of the socket loop.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration cannot be served.
    #[error("invalid DHCP server config: {0}")]
    Config(#[from] ConfigError),
    /// A guest NIC's server needs the guest's MAC to know whom to answer.
    #[error("a guest NIC's DHCP server needs the guest MAC (client_mac)")]
    NoGuestMac,
    /// The socket failed.
    #[error("DHCP socket: {0}")]
    Io(#[from] io::Error),
}

/// SO_BINDTODEVICE `ifname`, naming the device in the error.
fn bind_device(socket: &Socket, ifname: &str) -> io::Result<()> {
    socket
        .bind_device(Some(ifname.as_bytes()))
        .map_err(|error| io::Error::new(error.kind(), format!("SO_BINDTODEVICE {ifname}: {error}")))
}

/// A UDP socket on `0.0.0.0:67` bound to device `ifname`, with SO_BROADCAST and SO_REUSEADDR, so
/// that one server per bridge can run in the same namespace. Call it inside the target netns.
pub fn bind_server_socket(ifname: &str) -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_address(true)?;
    socket.set_broadcast(true)?;
    bind_device(&socket, ifname)?;
    socket.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, dhcproto::v4::SERVER_PORT).into())?;
    Ok(socket.into())
}

/// A UDP socket on `[::]:547` bound to device `ifname`, joined to `ff02::1:2` there, for one
/// DHCPv6 server per bridge. Call it inside the target netns.
pub fn bind_server_socket_v6(ifname: &str) -> io::Result<UdpSocket> {
    let index = crate::tap::ifindex(ifname)?;
    let socket = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_only_v6(true)?;
    socket.set_reuse_address(true)?;
    bind_device(&socket, ifname)?;
    socket.bind(&SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, v6::SERVER_PORT, 0, 0).into())?;
    socket.join_multicast_v6(&v6::ALL_SERVERS, index)?;
    Ok(socket.into())
}

/// Runs `bind` on a short-lived thread that has entered the network namespace at `netns`
/// (e.g. `/run/netns/<name>`) and hands the socket (or [`crate::GuestSockets`]) back: sockets keep the namespace they were
/// created in, and no other thread ever changes namespace.
pub fn bind_in_netns<T: Send + 'static>(
    netns: &std::path::Path,
    bind: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(netns)
        .map_err(|error| io::Error::new(error.kind(), format!("{}: {error}", netns.display())))?;
    std::thread::Builder::new()
        .name("weft-dhcp-netns".into())
        .spawn(move || {
            // SAFETY: setns(2) on this dedicated thread only; `file` is open for the call.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            bind()
        })?
        .join()
        .map_err(|_| io::Error::other("netns thread panicked"))?
}

/// Counters of one server's traffic.
#[derive(Debug, Default)]
pub struct ServeStats {
    /// Datagrams received.
    pub received: AtomicU64,
    /// Replies sent.
    pub replied: AtomicU64,
    /// Datagrams that were not DHCP messages.
    pub malformed: AtomicU64,
    /// Requests dropped because they were not the guest's own (guest servers only).
    pub dropped: AtomicU64,
}

/// At most one "dropped" log line per interval and server.
const DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Serves `config` on `socket` until `stop` is set (checked at least every 100 ms). Replies are
/// broadcast to `255.255.255.255:68` on the socket's device: the guest has no address yet, and
/// the pod namespace may have no route to the leased one (bridge binding).
pub fn serve(socket: UdpSocket, config: ServerConfig, stop: Arc<AtomicBool>) -> Result<(), ServeError> {
    config.validate()?;
    run_loop(&socket, &stop, &ServeStats::default(), v4_handler(config))
}

/// Serves DHCPv6 `config` on `socket` (from [`bind_server_socket_v6`]) until `stop` is set.
/// Replies go to the client's link-local source address, port 546.
pub fn serve_v6(socket: UdpSocket, config: V6Config, stop: Arc<AtomicBool>) -> Result<(), ServeError> {
    run_loop(&socket, &stop, &ServeStats::default(), v6_handler(config))
}

/// A reply decision over raw datagrams: request bytes and source in, reply bytes and
/// destination out.
type Handler = Box<dyn Fn(&[u8], SocketAddr) -> Handled + Send>;

/// What a handler made of one datagram.
enum Handled {
    Malformed,
    Ignored,
    Reply(Vec<u8>, SocketAddr),
}

fn v4_handler(config: ServerConfig) -> Handler {
    let client = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::BROADCAST, dhcproto::v4::CLIENT_PORT));
    Box::new(move |bytes, _| {
        let Ok(request) = v4::decode(bytes) else {
            return Handled::Malformed;
        };
        match v4::reply(&request, &config).map(|reply| v4::encode(&reply)) {
            Some(Ok(bytes)) => Handled::Reply(bytes, client),
            Some(Err(error)) => {
                tracing::warn!(%error, "cannot encode DHCP reply");
                Handled::Ignored
            }
            None => Handled::Ignored,
        }
    })
}

fn v6_handler(config: V6Config) -> Handler {
    Box::new(move |bytes, source| {
        let Ok(request) = v6::decode(bytes) else {
            return Handled::Malformed;
        };
        match v6::reply(&request, &config).map(|reply| v6::encode(&reply)) {
            Some(Ok(bytes)) => Handled::Reply(bytes, source),
            Some(Err(error)) => {
                tracing::warn!(%error, "cannot encode DHCPv6 reply");
                Handled::Ignored
            }
            None => Handled::Ignored,
        }
    })
}

fn run_loop(
    socket: &UdpSocket,
    stop: &AtomicBool,
    stats: &ServeStats,
    handler: Handler,
) -> Result<(), ServeError> {
    socket.set_read_timeout(Some(POLL_INTERVAL))?;
    let mut buffer = vec![0u8; 1500];
    while !stop.load(Ordering::Relaxed) {
        let (len, source) = match socket.recv_from(&mut buffer) {
            Ok(received) => received,
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(error) => return Err(error.into()),
        };
        stats.received.fetch_add(1, Ordering::Relaxed);
        match handler(&buffer[..len], source) {
            Handled::Malformed => {
                stats.malformed.fetch_add(1, Ordering::Relaxed);
            }
            Handled::Ignored => {}
            Handled::Reply(bytes, destination) => {
                socket.send_to(&bytes, destination)?;
                stats.replied.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// A server running on its own thread; dropping it stops the server.
#[derive(Debug)]
pub struct ServerHandle {
    stop: Arc<AtomicBool>,
    stats: Arc<ServeStats>,
    thread: Option<JoinHandle<Result<(), ServeError>>>,
}

impl ServerHandle {
    /// The server's traffic counters.
    pub fn stats(&self) -> &ServeStats {
        &self.stats
    }

    /// Stops the server and returns how its loop ended.
    pub fn stop(mut self) -> Result<(), ServeError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), ServeError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("DHCP server thread panicked").into())),
            None => Ok(()),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Which family a guest server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

/// Serves `config` to the guest behind the tap of `sockets` (from [`tap::bind_guest_v4`]) from a
/// new thread, answering only requests that arrive on that tap from `config.client_mac` and
/// name it as chaddr ([`guard::admit_v4`]); everything else is dropped and counted in
/// [`ServeStats::dropped`], logged at most once per 10 s.
pub fn spawn_guest(sockets: GuestSockets, config: ServerConfig) -> Result<ServerHandle, ServeError> {
    config.validate()?;
    let mac = config.client_mac.ok_or(ServeError::NoGuestMac)?;
    spawn_guest_loop(sockets, mac, Family::V4, v4_handler(config))
}

/// Serves DHCPv6 `config` to the guest `guest_mac` behind the tap of `sockets` (from
/// [`tap::bind_guest_v6`]) from a new thread, with [`guard::admit_v6`] in front.
pub fn spawn_guest_v6(
    sockets: GuestSockets,
    config: V6Config,
    guest_mac: [u8; 6],
) -> Result<ServerHandle, ServeError> {
    spawn_guest_loop(sockets, guest_mac, Family::V6, v6_handler(config))
}

fn spawn_guest_loop(
    sockets: GuestSockets,
    mac: [u8; 6],
    family: Family,
    handler: Handler,
) -> Result<ServerHandle, ServeError> {
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(ServeStats::default());
    let thread = std::thread::Builder::new()
        .name("weft-dhcp-guest".into())
        .spawn({
            let stop = stop.clone();
            let stats = stats.clone();
            move || run_guest_loop(&sockets, mac, family, &stop, &stats, handler)
        })?;
    Ok(ServerHandle {
        stop,
        stats,
        thread: Some(thread),
    })
}

/// The client's address of an admitted DHCPv6 frame (IPv6 source, UDP source port), scoped to
/// the bridge the reply leaves on.
fn v6_client(frame: &Frame<'_>, scope: u32) -> Option<SocketAddr> {
    let ip: [u8; 16] = frame.bytes.get(22..38)?.try_into().ok()?;
    let port = u16::from_be_bytes(frame.bytes.get(54..56)?.try_into().ok()?);
    Some(SocketAddr::V6(SocketAddrV6::new(
        Ipv6Addr::from(ip),
        port,
        0,
        scope,
    )))
}

fn run_guest_loop(
    sockets: &GuestSockets,
    mac: [u8; 6],
    family: Family,
    stop: &AtomicBool,
    stats: &ServeStats,
    handler: Handler,
) -> Result<(), ServeError> {
    let mut buffer = vec![0u8; 2048];
    let mut log = DropLog::new(DROP_LOG_INTERVAL);
    let unspecified = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
    while !stop.load(Ordering::Relaxed) {
        let Some(frame) = tap::recv_frame(&sockets.frames, &mut buffer)? else {
            continue;
        };
        stats.received.fetch_add(1, Ordering::Relaxed);
        let admitted = match family {
            Family::V4 => guard::admit_v4(&frame, sockets.tap_ifindex, mac).map(|m| (m, unspecified)),
            Family::V6 => guard::admit_v6(&frame, sockets.tap_ifindex, mac).and_then(|m| {
                v6_client(&frame, sockets.bridge_ifindex)
                    .map(|source| (m, source))
                    .ok_or(guard::Dropped::NotDhcp)
            }),
        };
        let (message, source) = match admitted {
            Ok(admitted) => admitted,
            Err(reason) => {
                stats.dropped.fetch_add(1, Ordering::Relaxed);
                if let Some(count) = log.record(std::time::Instant::now()) {
                    tracing::warn!(%reason, count, tap = sockets.tap_ifindex, "DHCP requests dropped: not the guest's");
                }
                continue;
            }
        };
        match handler(message, source) {
            Handled::Malformed => {
                stats.malformed.fetch_add(1, Ordering::Relaxed);
            }
            Handled::Ignored => {}
            Handled::Reply(bytes, destination) => {
                sockets.udp.send_to(&bytes, destination)?;
                stats.replied.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// Validates `config`, then serves it on `socket` from a new thread.
///
/// Without the guest guard: it answers whatever reaches the bridge (filtered by chaddr only, as
/// KubeVirt). A guest NIC's server is [`spawn_guest`]/[`spawn_guest_v6`].
pub fn spawn(socket: UdpSocket, config: ServerConfig) -> Result<ServerHandle, ServeError> {
    config.validate()?;
    spawn_loop(socket, v4_handler(config))
}

/// Serves DHCPv6 `config` on `socket` (from [`bind_server_socket_v6`]) from a new thread.
///
/// Without the guest guard: it answers any client that reaches the bridge, as KubeVirt. A guest NIC's server is [`spawn_guest`]/[`spawn_guest_v6`].
pub fn spawn_v6(socket: UdpSocket, config: V6Config) -> Result<ServerHandle, ServeError> {
    spawn_loop(socket, v6_handler(config))
}

fn spawn_loop(socket: UdpSocket, handler: Handler) -> Result<ServerHandle, ServeError> {
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(ServeStats::default());
    let thread = std::thread::Builder::new().name("weft-dhcp".into()).spawn({
        let stop = stop.clone();
        let stats = stats.clone();
        move || run_loop(&socket, &stop, &stats, handler)
    })?;
    Ok(ServerHandle {
        stop,
        stats,
        thread: Some(thread),
    })
}
