//! The migration stream between nodes, as KubeVirt's virt-handler proxies carry it: the
//! source QEMU writes to a Unix socket in its pod directory, the source node's agent relays it
//! over TCP between the node namespaces (the underlay) to the target node's agent, which
//! relays it to the Unix socket the target QEMU listens on. The guest side needs no routable
//! address; each proxy carries one connection, counts what it relayed and, when closed (or
//! dropped), shuts both ends and joins its threads.

use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Errors setting a proxy up.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// Binding the listening socket failed.
    #[error("listen on {what}: {source}")]
    Listen {
        /// The address or path.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// How long the source proxy waits for its QEMU to connect, and a relay for its peer.
const ACCEPT_DEADLINE: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(10);

/// One end of a relay.
enum End {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl End {
    fn try_clone(&self) -> std::io::Result<Self> {
        Ok(match self {
            Self::Unix(s) => Self::Unix(s.try_clone()?),
            Self::Tcp(s) => Self::Tcp(s.try_clone()?),
        })
    }
    fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Self::Unix(s) => s.shutdown(how),
            Self::Tcp(s) => s.shutdown(how),
        };
    }
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Unix(s) => s.read(buf),
            Self::Tcp(s) => s.read(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Self::Unix(s) => s.write_all(buf),
            Self::Tcp(s) => s.write_all(buf),
        }
    }
}

/// A running relay of one migration connection.
pub struct Proxy {
    stop: Arc<AtomicBool>,
    ends: Arc<Mutex<Vec<End>>>,
    threads: Vec<JoinHandle<()>>,
    relayed: Arc<AtomicU64>,
    /// Whether a connection was accepted and relayed (and how it ended).
    connected: Arc<AtomicBool>,
    socket_file: Option<PathBuf>,
}

impl Proxy {
    /// The source side: listen on Unix socket `path` (for the source QEMU's `migrate`) and
    /// relay its one connection to the target node's proxy at `target`.
    pub fn source(path: &Path, target: SocketAddr) -> Result<Self, ProxyError> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(|source| ProxyError::Listen {
            what: path.display().to_string(),
            source,
        })?;
        let mut proxy = Self::new(Some(path.to_path_buf()));
        let (stop, ends, relayed, connected) = proxy.shared();
        let handle = std::thread::Builder::new()
            .name("weft-migrate-src".into())
            .spawn(move || {
                let Some(qemu) = accept_unix(&listener, &stop) else {
                    return;
                };
                let peer = match TcpStream::connect_timeout(&target, CONNECT_TIMEOUT) {
                    Ok(peer) => peer,
                    Err(e) => {
                        tracing::warn!(%target, "migration proxy: connect the target node: {e}");
                        qemu.shutdown(Shutdown::Both).ok();
                        return;
                    }
                };
                let _ = peer.set_nodelay(true);
                connected.store(true, Ordering::SeqCst);
                relay(End::Unix(qemu), End::Tcp(peer), &ends, &relayed);
            })
            .expect("spawn a thread");
        proxy.threads.push(handle);
        Ok(proxy)
    }

    /// The target side: listen on TCP `bind` (the node's underlay address), accept a
    /// connection from `allowed_peer` only (others are closed at once) and relay it to the
    /// target QEMU's incoming Unix socket `qemu`. Returns the proxy and the address it listens on.
    pub fn target(
        bind: SocketAddr,
        allowed_peer: IpAddr,
        qemu: &Path,
    ) -> Result<(Self, SocketAddr), ProxyError> {
        let listener = TcpListener::bind(bind).map_err(|source| ProxyError::Listen {
            what: bind.to_string(),
            source,
        })?;
        let local = listener.local_addr().map_err(|source| ProxyError::Listen {
            what: bind.to_string(),
            source,
        })?;
        let mut proxy = Self::new(None);
        let (stop, ends, relayed, connected) = proxy.shared();
        let qemu = qemu.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("weft-migrate-dst".into())
            .spawn(move || {
                if listener.set_nonblocking(true).is_err() {
                    return;
                }
                let peer = loop {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    match listener.accept() {
                        Ok((peer, from)) if from.ip() == allowed_peer => break peer,
                        Ok((peer, from)) => {
                            tracing::warn!(%from, "migration proxy: refused a connection not from the source node");
                            let _ = peer.shutdown(Shutdown::Both);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
                        Err(e) => {
                            tracing::warn!("migration proxy: accept: {e}");
                            return;
                        }
                    }
                };
                let _ = peer.set_nonblocking(false);
                let _ = peer.set_nodelay(true);
                let target = match UnixStream::connect(&qemu) {
                    Ok(target) => target,
                    Err(e) => {
                        tracing::warn!(socket = %qemu.display(), "migration proxy: connect the target QEMU: {e}");
                        let _ = peer.shutdown(Shutdown::Both);
                        return;
                    }
                };
                connected.store(true, Ordering::SeqCst);
                relay(End::Tcp(peer), End::Unix(target), &ends, &relayed);
            })
            .expect("spawn a thread");
        proxy.threads.push(handle);
        Ok((proxy, local))
    }

    fn new(socket_file: Option<PathBuf>) -> Self {
        Self {
            stop: Arc::new(AtomicBool::new(false)),
            ends: Arc::new(Mutex::new(Vec::new())),
            threads: Vec::new(),
            relayed: Arc::new(AtomicU64::new(0)),
            connected: Arc::new(AtomicBool::new(false)),
            socket_file,
        }
    }

    #[allow(clippy::type_complexity)]
    fn shared(
        &self,
    ) -> (
        Arc<AtomicBool>,
        Arc<Mutex<Vec<End>>>,
        Arc<AtomicU64>,
        Arc<AtomicBool>,
    ) {
        (
            self.stop.clone(),
            self.ends.clone(),
            self.relayed.clone(),
            self.connected.clone(),
        )
    }

    /// Bytes relayed so far (both directions).
    pub fn relayed(&self) -> u64 {
        self.relayed.load(Ordering::SeqCst)
    }

    /// Whether its relay ended on its own (both directions closed) or never started.
    pub fn finished(&self) -> bool {
        self.threads.iter().all(JoinHandle::is_finished)
    }

    /// Whether a connection was accepted and relayed.
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::SeqCst)
    }

    /// Stop: shut both ends of the relay (which ends its threads) and join them.
    pub fn close(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Ok(ends) = self.ends.lock() {
            for end in ends.iter() {
                end.shutdown(Shutdown::Both);
            }
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        if let Some(file) = self.socket_file.take() {
            let _ = std::fs::remove_file(file);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shut();
    }
}

fn accept_unix(listener: &UnixListener, stop: &AtomicBool) -> Option<UnixStream> {
    listener.set_nonblocking(true).ok()?;
    let deadline = Instant::now() + ACCEPT_DEADLINE;
    while Instant::now() < deadline && !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).ok()?;
                return Some(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) => {
                tracing::warn!("migration proxy: accept: {e}");
                return None;
            }
        }
    }
    None
}

/// Copy `a` ↔ `b` until both directions end; an end that finishes shuts the other's write side
/// (the EOF travels on), an error shuts both.
fn relay(a: End, b: End, ends: &Mutex<Vec<End>>, relayed: &Arc<AtomicU64>) {
    let clones = (a.try_clone(), b.try_clone(), a.try_clone(), b.try_clone());
    let (Ok(a2), Ok(b2), Ok(a3), Ok(b3)) = clones else {
        a.shutdown(Shutdown::Both);
        b.shutdown(Shutdown::Both);
        return;
    };
    if let Ok(mut list) = ends.lock() {
        list.push(a3);
        list.push(b3);
    }
    let counter = relayed.clone();
    let back = std::thread::Builder::new()
        .name("weft-migrate-back".into())
        .spawn(move || pump(b2, a2, &counter));
    pump(a, b, relayed);
    if let Ok(back) = back {
        let _ = back.join();
    }
}

fn pump(mut from: End, mut to: End, relayed: &AtomicU64) {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => {
                to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    from.shutdown(Shutdown::Both);
                    to.shutdown(Shutdown::Both);
                    return;
                }
                relayed.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => {
                from.shutdown(Shutdown::Both);
                to.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU's side of both ends as plain sockets: bytes written into the source socket come
    /// out of the target socket, through a TCP hop, and the EOF travels on.
    #[test]
    fn relays_one_stream_from_unix_over_tcp_to_unix_and_closes() {
        let dir = tempfile::tempdir().unwrap();
        let incoming = dir.path().join("incoming.sock");
        let qemu_target = UnixListener::bind(&incoming).unwrap();
        let (target, addr) = Proxy::target(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1".parse().unwrap(),
            &incoming,
        )
        .unwrap();
        let outgoing = dir.path().join("migration.sock");
        let source = Proxy::source(&outgoing, addr).unwrap();
        let mut qemu_source = UnixStream::connect(&outgoing).unwrap();
        let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let sent = payload.clone();
        let writer = std::thread::spawn(move || {
            qemu_source.write_all(&sent).unwrap();
            qemu_source.shutdown(Shutdown::Write).unwrap();
        });
        let (mut accepted, _) = qemu_target.accept().unwrap();
        let mut got = Vec::new();
        accepted.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        assert_eq!(got.len(), payload.len());
        assert!(got == payload, "the stream arrives unchanged");
        assert!(source.connected() && target.connected());
        assert!(source.relayed() >= payload.len() as u64);
        source.close();
        target.close();
        assert!(!outgoing.exists(), "the source socket is removed on close");
    }

    /// A peer that is not the source node is refused; closing a proxy that never relayed
    /// anything returns at once.
    #[test]
    fn refuses_other_peers_and_closes_when_idle() {
        let dir = tempfile::tempdir().unwrap();
        let incoming = dir.path().join("incoming.sock");
        let _qemu = UnixListener::bind(&incoming).unwrap();
        let (target, addr) = Proxy::target(
            "127.0.0.1:0".parse().unwrap(),
            "192.0.2.1".parse().unwrap(),
            &incoming,
        )
        .unwrap();
        let mut stranger = TcpStream::connect(addr).unwrap();
        stranger.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(stranger.read(&mut buf).unwrap_or(0), 0, "closed at once");
        assert!(!target.connected());
        let started = Instant::now();
        target.close();
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
