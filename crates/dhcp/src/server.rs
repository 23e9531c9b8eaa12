//! The thin socket loop around [`crate::v4::reply`].
//!
//! The caller creates the socket with [`bind_server_socket`] on a thread that has entered the
//! pod's network namespace (sockets keep the namespace they were created in), then hands it to
//! [`serve`] or [`spawn`] on any thread. Several servers, one per bridge, coexist in one
//! namespace: each socket is bound to its own device.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::{ConfigError, ServerConfig};
use crate::v4;

/// How often the loop checks its stop flag while no packet arrives.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Errors of the socket loop.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration cannot be served.
    #[error("invalid DHCP server config: {0}")]
    Config(#[from] ConfigError),
    /// The socket failed.
    #[error("DHCP socket: {0}")]
    Io(#[from] io::Error),
}

/// A UDP socket on `0.0.0.0:67` bound to device `ifname`, with SO_BROADCAST and SO_REUSEADDR, so
/// that one server per bridge can run in the same namespace. Call it inside the target netns.
pub fn bind_server_socket(ifname: &str) -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_address(true)?;
    socket.set_broadcast(true)?;
    socket
        .bind_device(Some(ifname.as_bytes()))
        .map_err(|error| io::Error::new(error.kind(), format!("SO_BINDTODEVICE {ifname}: {error}")))?;
    socket.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, dhcproto::v4::SERVER_PORT).into())?;
    Ok(socket.into())
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
}

/// Serves `config` on `socket` until `stop` is set (checked at least every 100 ms). Replies are
/// broadcast to `255.255.255.255:68` on the socket's device: the guest has no address yet, and
/// the pod namespace may have no route to the leased one (bridge binding).
pub fn serve(socket: UdpSocket, config: ServerConfig, stop: Arc<AtomicBool>) -> Result<(), ServeError> {
    serve_counting(socket, config, stop, &ServeStats::default())
}

fn serve_counting(
    socket: UdpSocket,
    config: ServerConfig,
    stop: Arc<AtomicBool>,
    stats: &ServeStats,
) -> Result<(), ServeError> {
    config.validate()?;
    socket.set_read_timeout(Some(POLL_INTERVAL))?;
    let client = SocketAddrV4::new(Ipv4Addr::BROADCAST, dhcproto::v4::CLIENT_PORT);
    let mut buffer = vec![0u8; 1500];
    while !stop.load(Ordering::Relaxed) {
        let len = match socket.recv_from(&mut buffer) {
            Ok((len, _)) => len,
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
        let Ok(request) = v4::decode(&buffer[..len]) else {
            stats.malformed.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let Some(response) = v4::reply(&request, &config) else {
            continue;
        };
        match v4::encode(&response) {
            Ok(bytes) => {
                socket.send_to(&bytes, client)?;
                stats.replied.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => tracing::warn!(%error, "cannot encode DHCP reply"),
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

/// Validates `config`, then serves it on `socket` from a new thread.
pub fn spawn(socket: UdpSocket, config: ServerConfig) -> Result<ServerHandle, ServeError> {
    config.validate()?;
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(ServeStats::default());
    let thread = std::thread::Builder::new().name("weft-dhcp".into()).spawn({
        let stop = stop.clone();
        let stats = stats.clone();
        move || serve_counting(socket, config, stop, &stats)
    })?;
    Ok(ServerHandle {
        stop,
        stats,
        thread: Some(thread),
    })
}
