//! A client of qemu-guest-agent over the Unix socket QEMU bridges to the guest's virtio-serial
//! port ([`crate::qemu::GuestSpec::qga_socket`]): JSON lines, one command at a time.
//!
//! A session starts with QGA's `guest-sync-delimited` handshake: the client sends a 0xFF byte
//! (the agent then drops any half-read input a previous client left) and the command with a
//! random id; the agent answers with a 0xFF byte and `{"return": id}`, and everything before
//! that byte is a stale reply to someone else and is skipped. Every read has a deadline: a
//! guest without an agent (QEMU accepts the connection anyway) is a timeout, never a hang.
//! Parsing the replies is pure ([`parse_reply`], [`GuestInfo::parse`], …).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The delimiter QGA puts before the `guest-sync-delimited` reply.
pub const DELIMITER: u8 = 0xFF;

/// Longest reply accepted (a guest with many interfaces stays far below).
pub const MAX_REPLY: usize = 1 << 20;

/// Errors talking to the guest agent.
#[derive(Debug, thiserror::Error)]
pub enum QgaError {
    /// The socket could not be connected, read or written.
    #[error("guest agent socket {path}: {source}")]
    Io {
        /// The socket.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// No (complete) reply before the deadline: the agent is not running or not answering.
    #[error("guest agent: no reply to {command} within {timeout:?}")]
    Timeout {
        /// The command waited on.
        command: String,
        /// The deadline.
        timeout: Duration,
    },
    /// The other end closed the connection.
    #[error("guest agent: the connection closed during {0}")]
    Closed(String),
    /// A reply longer than [`MAX_REPLY`].
    #[error("guest agent: reply to {0} longer than {MAX_REPLY} bytes")]
    TooLong(String),
    /// A reply that is not the JSON QGA sends.
    #[error("guest agent: malformed reply to {command}: {message}")]
    Malformed {
        /// The command.
        command: String,
        /// What is wrong.
        message: String,
    },
    /// The agent answered with an error.
    #[error("guest agent: {command}: {class}: {desc}")]
    Agent {
        /// The command.
        command: String,
        /// QGA's error class (`CommandNotFound`, `GenericError`, …).
        class: String,
        /// QGA's description.
        desc: String,
    },
    /// The sync reply carried another id.
    #[error("guest agent: guest-sync-delimited answered {got}, expected {expected}")]
    SyncMismatch {
        /// The id sent.
        expected: u64,
        /// The reply.
        got: String,
    },
}

fn malformed(command: &str, message: impl Into<String>) -> QgaError {
    QgaError::Malformed {
        command: command.into(),
        message: message.into(),
    }
}

/// The `return` value of a reply line, or the agent's `error` as [`QgaError::Agent`].
pub fn parse_reply(command: &str, line: &[u8]) -> Result<Value, QgaError> {
    let value: Value = serde_json::from_slice(line).map_err(|e| malformed(command, e.to_string()))?;
    if let Some(result) = value.get("return") {
        return Ok(result.clone());
    }
    if let Some(error) = value.get("error") {
        let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        return Err(QgaError::Agent {
            command: command.into(),
            class: text("class"),
            desc: text("desc"),
        });
    }
    Err(malformed(command, "neither \"return\" nor \"error\""))
}

/// `guest-info`: the agent's version and the commands it has enabled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestInfo {
    /// The agent's version, e.g. `7.2.19`.
    pub version: String,
    /// Enabled commands.
    pub commands: Vec<String>,
}

impl GuestInfo {
    /// From `guest-info`'s return value.
    pub fn parse(value: &Value) -> Result<Self, QgaError> {
        #[derive(Deserialize)]
        struct Raw {
            version: String,
            supported_commands: Vec<RawCommand>,
        }
        #[derive(Deserialize)]
        struct RawCommand {
            name: String,
            enabled: bool,
        }
        let raw: Raw =
            serde_json::from_value(value.clone()).map_err(|e| malformed("guest-info", e.to_string()))?;
        Ok(Self {
            version: raw.version,
            commands: raw
                .supported_commands
                .into_iter()
                .filter(|c| c.enabled)
                .map(|c| c.name)
                .collect(),
        })
    }
}

/// `guest-get-osinfo`, with KubeVirt's `status.guestOSInfo` field names when serialized.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestOsInfo {
    /// `ID` of os-release.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// `NAME`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `PRETTY_NAME`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pretty_name: String,
    /// `VERSION`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// `VERSION_ID`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version_id: String,
    /// `uname -r`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kernel_release: String,
    /// `uname -v`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kernel_version: String,
    /// `uname -m`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub machine: String,
}

impl GuestOsInfo {
    /// From `guest-get-osinfo`'s return value (every field optional, as in QGA's schema).
    pub fn parse(value: &Value) -> Result<Self, QgaError> {
        let object = value
            .as_object()
            .ok_or_else(|| malformed("guest-get-osinfo", "not an object"))?;
        let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        Ok(Self {
            id: text("id"),
            name: text("name"),
            pretty_name: text("pretty-name"),
            version: text("version"),
            version_id: text("version-id"),
            kernel_release: text("kernel-release"),
            kernel_version: text("kernel-version"),
            machine: text("machine"),
        })
    }
}

/// One address of a guest interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestAddress {
    /// The address, without prefix.
    pub address: std::net::IpAddr,
    /// The prefix length.
    pub prefix: u8,
}

/// One interface of `guest-network-get-interfaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestInterface {
    /// Name inside the guest (`eth0`).
    pub name: String,
    /// MAC address, lower case (empty if the agent gave none).
    pub mac: String,
    /// Addresses, in the agent's order.
    pub addresses: Vec<GuestAddress>,
}

/// `guest-network-get-interfaces`' return value: every interface but the loopback (as
/// KubeVirt's agent poller), in the agent's order.
pub fn parse_interfaces(value: &Value) -> Result<Vec<GuestInterface>, QgaError> {
    const COMMAND: &str = "guest-network-get-interfaces";
    let list = value.as_array().ok_or_else(|| malformed(COMMAND, "not a list"))?;
    let mut out = Vec::new();
    for item in list {
        let name = item
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed(COMMAND, "an interface without a name"))?;
        if name == "lo" {
            continue;
        }
        let mac = item
            .get("hardware-address")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_ascii_lowercase();
        let mut addresses = Vec::new();
        for address in item
            .get("ip-addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ip = address
                .get("ip-address")
                .and_then(Value::as_str)
                .ok_or_else(|| malformed(COMMAND, format!("{name}: an address without ip-address")))?;
            // IPv6 link-local addresses may carry a zone (`fe80::1%eth0`).
            let ip = ip.split('%').next().unwrap_or(ip);
            let address_value = ip
                .parse()
                .map_err(|_| malformed(COMMAND, format!("{name}: {ip:?} is not an IP address")))?;
            let prefix = address
                .get("prefix")
                .and_then(Value::as_u64)
                .and_then(|p| u8::try_from(p).ok())
                .ok_or_else(|| malformed(COMMAND, format!("{name}: {ip} has no prefix")))?;
            addresses.push(GuestAddress {
                address: address_value,
                prefix,
            });
        }
        out.push(GuestInterface {
            name: name.into(),
            mac,
            addresses,
        });
    }
    Ok(out)
}

/// `guest-get-host-name`'s return value.
pub fn parse_host_name(value: &Value) -> Result<String, QgaError> {
    value
        .get("host-name")
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| malformed("guest-get-host-name", "no host-name"))
}

/// Everything weft asks the agent in one session.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentReport {
    /// `guest-info`.
    pub info: GuestInfo,
    /// `guest-get-osinfo`.
    pub os: GuestOsInfo,
    /// `guest-network-get-interfaces`.
    pub interfaces: Vec<GuestInterface>,
    /// `guest-get-host-name`.
    pub host_name: String,
}

/// One connection to the agent; every read ends by `timeout` after it starts.
pub struct QgaClient {
    stream: UnixStream,
    path: String,
    buffer: Vec<u8>,
    timeout: Duration,
}

impl QgaClient {
    /// Connects to `socket` and runs the `guest-sync-delimited` handshake.
    pub fn connect(socket: &Path, timeout: Duration) -> Result<Self, QgaError> {
        let path = socket.display().to_string();
        let io = |source| QgaError::Io {
            path: path.clone(),
            source,
        };
        let stream = UnixStream::connect(socket).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        let mut client = Self {
            stream,
            path: path.clone(),
            buffer: Vec::new(),
            timeout,
        };
        client.sync(random_id())?;
        Ok(client)
    }

    fn io(&self, source: std::io::Error) -> QgaError {
        QgaError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// `guest-sync-delimited` with `id`: skips everything up to the agent's 0xFF.
    fn sync(&mut self, id: u64) -> Result<(), QgaError> {
        const COMMAND: &str = "guest-sync-delimited";
        let mut request = vec![DELIMITER];
        request.extend(
            serde_json::json!({"execute": COMMAND, "arguments": {"id": id}})
                .to_string()
                .bytes(),
        );
        request.push(b'\n');
        self.stream.write_all(&request).map_err(|e| self.io(e))?;
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(at) = self.buffer.iter().position(|b| *b == DELIMITER) {
                self.buffer.drain(..=at);
                break;
            }
            self.buffer.clear();
            self.fill(COMMAND, deadline)?;
        }
        let line = self.read_line(COMMAND, deadline)?;
        let value = parse_reply(COMMAND, &line)?;
        if value.as_u64() != Some(id) {
            return Err(QgaError::SyncMismatch {
                expected: id,
                got: value.to_string(),
            });
        }
        Ok(())
    }

    /// Runs `command` (no arguments) and returns its `return` value.
    pub fn execute(&mut self, command: &str) -> Result<Value, QgaError> {
        let mut request = serde_json::json!({"execute": command}).to_string().into_bytes();
        request.push(b'\n');
        self.stream.write_all(&request).map_err(|e| self.io(e))?;
        let deadline = Instant::now() + self.timeout;
        let line = self.read_line(command, deadline)?;
        parse_reply(command, &line)
    }

    /// The next non-empty line (without its newline).
    fn read_line(&mut self, command: &str, deadline: Instant) -> Result<Vec<u8>, QgaError> {
        loop {
            if let Some(at) = self.buffer.iter().position(|b| *b == b'\n') {
                let mut line: Vec<u8> = self.buffer.drain(..=at).collect();
                line.pop();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(line);
            }
            if self.buffer.len() > MAX_REPLY {
                return Err(QgaError::TooLong(command.into()));
            }
            self.fill(command, deadline)?;
        }
    }

    /// Reads what is available into the buffer, waiting until `deadline` at most.
    fn fill(&mut self, command: &str, deadline: Instant) -> Result<(), QgaError> {
        let timeout = || QgaError::Timeout {
            command: command.into(),
            timeout: self.timeout,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timeout());
        }
        self.stream.set_read_timeout(Some(left)).map_err(|e| self.io(e))?;
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(QgaError::Closed(command.into())),
            Ok(n) => {
                self.buffer.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(timeout())
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(self.io(e)),
        }
    }

    /// `guest-info`, `guest-get-osinfo`, `guest-network-get-interfaces` and
    /// `guest-get-host-name`.
    pub fn report(&mut self) -> Result<AgentReport, QgaError> {
        let info = GuestInfo::parse(&self.execute("guest-info")?)?;
        let os = GuestOsInfo::parse(&self.execute("guest-get-osinfo")?)?;
        let interfaces = parse_interfaces(&self.execute("guest-network-get-interfaces")?)?;
        let host_name = parse_host_name(&self.execute("guest-get-host-name")?)?;
        Ok(AgentReport {
            info,
            os,
            interfaces,
            host_name,
        })
    }
}

/// One session: connect, sync, [`QgaClient::report`]. Blocking (bounded by a few `timeout`s):
/// call it from a thread or `spawn_blocking`.
pub fn query(socket: &Path, timeout: Duration) -> Result<AgentReport, QgaError> {
    QgaClient::connect(socket, timeout)?.report()
}

/// A sync id no earlier session used: from the kernel's random pool (31 bits, so that any JSON
/// reader keeps it exact), or the clock if that fails.
fn random_id() -> u64 {
    let mut bytes = [0u8; 4];
    // SAFETY: getrandom(2) writes at most `bytes.len()` bytes into the buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    let raw = if n == 4 {
        u32::from_ne_bytes(bytes)
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(1)
    };
    u64::from(raw & 0x7fff_ffff)
}

/// How long to wait before asking the agent again after `failures` sessions in a row failed:
/// `period` while it answers, then doubling up to `max` (a guest without an agent is asked
/// rarely, not at the poll rate).
pub fn next_poll(failures: u32, period: Duration, max: Duration) -> Duration {
    if failures == 0 {
        return period;
    }
    let factor = 1u32 << failures.min(16);
    period.saturating_mul(factor).min(max)
}

#[cfg(test)]
#[path = "qga_tests.rs"]
mod tests;
