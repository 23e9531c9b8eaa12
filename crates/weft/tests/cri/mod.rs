//! A small CRI client for tests: the subset of Kubernetes' CRI `runtime.v1` API that kubelet
//! uses to start and stop a pod sandbox, spoken as gRPC over HTTP/2 (h2c) on a Unix socket.
//!
//! The messages are hand-written from upstream's
//! `k8s.io/cri-api/pkg/apis/runtime/v1/api.proto` (package `runtime.v1`, service
//! `RuntimeService`) with the exact field numbers there, so they are wire compatible; fields the
//! tests do not need are left out (protobuf skips unknown fields).
//!
//! No crate dependency on purpose: it is a blocking client on `std` only, with just enough HTTP/2
//! (RFC 9113) for one unary call at a time: the connection preface, SETTINGS with large flow
//! control windows (so no WINDOW_UPDATE is ever owed), header blocks sent as HPACK literals
//! without indexing and without Huffman coding (RFC 7541 §6.2.2, always valid for a decoder),
//! PING and SETTINGS acknowledged, requests up to the peer's initial 64 KiB window. Responses
//! are judged by their frames: a call succeeded when its stream carried a complete gRPC
//! message; a trailers-only answer is an error whose HPACK block is reported as is (the
//! runtime's log has the text).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Why a CRI call failed.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The socket could not be reached or the connection broke.
    #[error("CRI socket I/O")]
    Io(#[from] std::io::Error),
    /// The peer spoke HTTP/2 in a way this client does not follow.
    #[error("HTTP/2 protocol: {0}")]
    Protocol(String),
    /// The call ended without a response message (a gRPC error status).
    #[error("{method} failed (gRPC trailers-only answer; HPACK block {trailers:02x?})")]
    Status {
        /// The full method path.
        method: String,
        /// The raw header block of the answer.
        trailers: Vec<u8>,
    },
    /// The response message did not decode.
    #[error("bad protobuf in the response: {0}")]
    Decode(String),
}

// ------------------------------------------------------------------ protobuf wire format

/// A protobuf message being encoded (fields appended in any order).
#[derive(Default)]
pub struct Enc(Vec<u8>);

impl Enc {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn tag(&mut self, field: u32, wire: u8) {
        self.varint(((field as u64) << 3) | wire as u64);
    }
    /// A `string` or `bytes` field (omitted when empty, as proto3 does).
    pub fn bytes(mut self, field: u32, value: &[u8]) -> Self {
        if !value.is_empty() {
            self.tag(field, 2);
            self.varint(value.len() as u64);
            self.0.extend_from_slice(value);
        }
        self
    }
    /// A `string` field.
    pub fn string(self, field: u32, value: &str) -> Self {
        self.bytes(field, value.as_bytes())
    }
    /// A varint field (`uint32`, `int32`, `int64`, `bool`; omitted when zero).
    pub fn uint(mut self, field: u32, value: u64) -> Self {
        if value != 0 {
            self.tag(field, 0);
            self.varint(value);
        }
        self
    }
    /// An embedded message field (always present, even when empty).
    pub fn message(mut self, field: u32, value: Enc) -> Self {
        self.tag(field, 2);
        self.varint(value.0.len() as u64);
        self.0.extend_from_slice(&value.0);
        self
    }
    /// A `map<string, string>` field: one entry message `{1: key, 2: value}` per pair.
    pub fn map(mut self, field: u32, pairs: &[(&str, &str)]) -> Self {
        for (key, value) in pairs {
            let entry = Enc::default().string(1, key).string(2, value);
            self = self.message(field, entry);
        }
        self
    }
    /// The encoded bytes.
    pub fn finish(self) -> Vec<u8> {
        self.0
    }
}

/// One decoded field value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 2: a string, bytes or an embedded message.
    Bytes(Vec<u8>),
    /// Wire types 1 and 5 (unused by these messages, kept so they skip cleanly).
    Fixed(u64),
}

fn read_varint(buf: &[u8], at: &mut usize) -> Result<u64, CriError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf
            .get(*at)
            .ok_or_else(|| CriError::Decode("truncated varint".into()))?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(CriError::Decode("varint too long".into()))
}

/// Every `(field number, value)` of a message, in wire order.
pub fn fields(buf: &[u8]) -> Result<Vec<(u32, Value)>, CriError> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < buf.len() {
        let key = read_varint(buf, &mut at)?;
        let field = (key >> 3) as u32;
        let value = match key & 7 {
            0 => Value::Varint(read_varint(buf, &mut at)?),
            2 => {
                let len = read_varint(buf, &mut at)? as usize;
                let end = at
                    .checked_add(len)
                    .filter(|end| *end <= buf.len())
                    .ok_or_else(|| CriError::Decode("truncated field".into()))?;
                let bytes = buf[at..end].to_vec();
                at = end;
                Value::Bytes(bytes)
            }
            wire @ (1 | 5) => {
                let width = if wire == 1 { 8 } else { 4 };
                let raw = buf
                    .get(at..at + width)
                    .ok_or_else(|| CriError::Decode("truncated fixed field".into()))?;
                at += width;
                let mut value = 0u64;
                for (i, b) in raw.iter().enumerate() {
                    value |= u64::from(*b) << (8 * i);
                }
                Value::Fixed(value)
            }
            wire => return Err(CriError::Decode(format!("wire type {wire}"))),
        };
        out.push((field, value));
    }
    Ok(out)
}

/// The last occurrence of a length-delimited field (proto3: last one wins), empty if absent.
pub fn bytes_field(buf: &[u8], field: u32) -> Result<Vec<u8>, CriError> {
    Ok(fields(buf)?
        .into_iter()
        .rev()
        .find_map(|(f, v)| match v {
            Value::Bytes(b) if f == field => Some(b),
            _ => None,
        })
        .unwrap_or_default())
}

/// A `string` field, empty if absent.
pub fn string_field(buf: &[u8], field: u32) -> Result<String, CriError> {
    String::from_utf8(bytes_field(buf, field)?).map_err(|e| CriError::Decode(e.to_string()))
}

/// A varint field, 0 if absent.
pub fn uint_field(buf: &[u8], field: u32) -> Result<u64, CriError> {
    Ok(fields(buf)?
        .into_iter()
        .rev()
        .find_map(|(f, v)| match v {
            Value::Varint(n) if f == field => Some(n),
            _ => None,
        })
        .unwrap_or_default())
}

/// Every occurrence of a repeated length-delimited field.
pub fn repeated_field(buf: &[u8], field: u32) -> Result<Vec<Vec<u8>>, CriError> {
    Ok(fields(buf)?
        .into_iter()
        .filter_map(|(f, v)| match v {
            Value::Bytes(b) if f == field => Some(b),
            _ => None,
        })
        .collect())
}

/// A `map<string, string>` field.
pub fn map_field(buf: &[u8], field: u32) -> Result<Vec<(String, String)>, CriError> {
    repeated_field(buf, field)?
        .iter()
        .map(|entry| Ok((string_field(entry, 1)?, string_field(entry, 2)?)))
        .collect()
}

// ------------------------------------------------------------------ the CRI messages

/// `PodSandboxMetadata` (api.proto): name = 1, uid = 2, namespace = 3, attempt = 4.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSandboxMetadata {
    pub name: String,
    pub uid: String,
    pub namespace: String,
    pub attempt: u32,
}

impl PodSandboxMetadata {
    fn encode(&self) -> Enc {
        Enc::default()
            .string(1, &self.name)
            .string(2, &self.uid)
            .string(3, &self.namespace)
            .uint(4, self.attempt.into())
    }
    fn decode(buf: &[u8]) -> Result<Self, CriError> {
        Ok(Self {
            name: string_field(buf, 1)?,
            uid: string_field(buf, 2)?,
            namespace: string_field(buf, 3)?,
            attempt: uint_field(buf, 4)? as u32,
        })
    }
}

/// `PodSandboxConfig` (api.proto): metadata = 1, hostname = 2, log_directory = 3, labels = 6,
/// annotations = 7, linux = 8 (`LinuxPodSandboxConfig`, sent empty: cgroup_parent = 1 unset).
#[derive(Debug, Clone, Default)]
pub struct PodSandboxConfig {
    pub metadata: PodSandboxMetadata,
    pub hostname: String,
    pub log_directory: String,
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
}

/// Borrowed `(key, value)` pairs for [`Enc::map`].
fn borrow(pairs: &[(String, String)]) -> Vec<(&str, &str)> {
    pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

impl PodSandboxConfig {
    fn encode(&self) -> Enc {
        Enc::default()
            .message(1, self.metadata.encode())
            .string(2, &self.hostname)
            .string(3, &self.log_directory)
            .map(6, &borrow(&self.labels))
            .map(7, &borrow(&self.annotations))
            .message(8, Enc::default())
    }
}

/// `PodSandboxState` (api.proto): SANDBOX_READY = 0, SANDBOX_NOTREADY = 1.
pub const SANDBOX_READY: u64 = 0;
/// See [`SANDBOX_READY`].
pub const SANDBOX_NOTREADY: u64 = 1;

/// `PodSandboxStatus` (api.proto): id = 1, metadata = 2, state = 3, network = 5
/// (`PodSandboxNetworkStatus`: ip = 1, additional_ips = 2 of `PodIP { ip = 1 }`).
#[derive(Debug, Clone, Default)]
pub struct PodSandboxStatus {
    pub id: String,
    pub metadata: PodSandboxMetadata,
    pub state: u64,
    pub ip: String,
    pub additional_ips: Vec<String>,
    /// `PodSandboxStatusResponse.info` (field 2), filled when asked for verbose status.
    pub info: Vec<(String, String)>,
}

/// `PodSandbox` as `ListPodSandboxResponse.items` (field 1) has it: id = 1, metadata = 2,
/// state = 3.
#[derive(Debug, Clone, Default)]
pub struct PodSandbox {
    pub id: String,
    pub metadata: PodSandboxMetadata,
    pub state: u64,
}

// ------------------------------------------------------------------ HTTP/2 + gRPC

const FRAME_DATA: u8 = 0x0;
const FRAME_HEADERS: u8 = 0x1;
const FRAME_RST_STREAM: u8 = 0x3;
const FRAME_SETTINGS: u8 = 0x4;
const FRAME_PING: u8 = 0x6;
const FRAME_GOAWAY: u8 = 0x7;
const FRAME_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_ACK: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// The largest flow-control window (RFC 9113 §6.9.1).
const MAX_WINDOW: u32 = (1 << 31) - 1;

/// HPACK integer with an `n`-bit prefix whose high bits are `first` (RFC 7541 §5.1).
fn hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A header block of literal fields without indexing, new names, no Huffman (RFC 7541 §6.2.2).
pub fn hpack_literals(headers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.push(0x00);
        hpack_int(&mut out, 0x00, 7, name.len());
        out.extend_from_slice(name.as_bytes());
        hpack_int(&mut out, 0x00, 7, value.len());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// A gRPC message frame: compressed flag 0, big-endian length, the message (gRPC over HTTP/2).
pub fn grpc_frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// A connection to a CRI runtime's socket; one call at a time.
pub struct CriClient {
    sock: UnixStream,
    next_stream: u32,
}

impl CriClient {
    /// Connect to `socket` and open the HTTP/2 connection; every read and write is bounded by
    /// `timeout` (a call that hangs fails instead of hanging the test).
    pub fn connect(socket: &Path, timeout: Duration) -> Result<Self, CriError> {
        let sock = UnixStream::connect(socket)?;
        sock.set_read_timeout(Some(timeout))?;
        sock.set_write_timeout(Some(timeout))?;
        let mut client = Self { sock, next_stream: 1 };
        client.sock.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")?;
        // SETTINGS_ENABLE_PUSH (0x2) = 0, SETTINGS_INITIAL_WINDOW_SIZE (0x4) = max.
        let mut settings = Vec::new();
        settings.extend_from_slice(&2u16.to_be_bytes());
        settings.extend_from_slice(&0u32.to_be_bytes());
        settings.extend_from_slice(&4u16.to_be_bytes());
        settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
        client.frame(FRAME_SETTINGS, 0, 0, &settings)?;
        // The connection window starts at 65,535 whatever SETTINGS say: open it fully.
        client.frame(0x8, 0, 0, &(MAX_WINDOW - 65_535).to_be_bytes())?;
        Ok(client)
    }

    fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Result<(), CriError> {
        let len = payload.len() as u32;
        let mut head = [0u8; 9];
        head[..3].copy_from_slice(&len.to_be_bytes()[1..]);
        head[3] = kind;
        head[4] = flags;
        head[5..].copy_from_slice(&stream.to_be_bytes());
        self.sock.write_all(&head)?;
        self.sock.write_all(payload)?;
        Ok(())
    }

    fn read_frame(&mut self) -> Result<(u8, u8, u32, Vec<u8>), CriError> {
        let mut head = [0u8; 9];
        self.sock.read_exact(&mut head)?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & MAX_WINDOW;
        let mut payload = vec![0u8; len];
        self.sock.read_exact(&mut payload)?;
        Ok((head[3], head[4], stream, payload))
    }

    /// One unary call of `runtime.v1.RuntimeService/<method>`; returns the response message.
    pub fn call(&mut self, method: &str, request: &[u8]) -> Result<Vec<u8>, CriError> {
        let path = format!("/runtime.v1.RuntimeService/{method}");
        // The peer's stream and connection windows start at 65,535 bytes and this client never
        // waits for WINDOW_UPDATE: a larger request would break flow control.
        if request.len() + 5 > 65_535 {
            return Err(CriError::Protocol(format!(
                "{method}: a {}-byte request does not fit the initial flow-control window",
                request.len()
            )));
        }
        let stream = self.next_stream;
        self.next_stream += 2;
        let block = hpack_literals(&[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", &path),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]);
        self.frame(FRAME_HEADERS, FLAG_END_HEADERS, stream, &block)?;
        // Default SETTINGS_MAX_FRAME_SIZE is 16,384: split larger bodies.
        let body = grpc_frame(request);
        let chunks: Vec<&[u8]> = body.chunks(16_384).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            self.frame(FRAME_DATA, if last { FLAG_END_STREAM } else { 0 }, stream, chunk)?;
        }

        let mut data = Vec::new();
        let mut blocks = Vec::new();
        loop {
            let (kind, flags, on, mut payload) = self.read_frame()?;
            match kind {
                FRAME_SETTINGS if flags & FLAG_ACK == 0 => self.frame(FRAME_SETTINGS, FLAG_ACK, 0, &[])?,
                FRAME_PING if flags & FLAG_ACK == 0 => self.frame(FRAME_PING, FLAG_ACK, 0, &payload)?,
                FRAME_GOAWAY => {
                    return Err(CriError::Protocol(format!("GOAWAY {payload:02x?}")));
                }
                FRAME_RST_STREAM if on == stream => {
                    return Err(CriError::Protocol(format!("RST_STREAM {payload:02x?}")));
                }
                FRAME_DATA | FRAME_HEADERS | FRAME_CONTINUATION if on == stream => {
                    if kind != FRAME_CONTINUATION && flags & FLAG_PADDED != 0 {
                        let pad = *payload.first().unwrap_or(&0) as usize;
                        if pad + 1 > payload.len() {
                            return Err(CriError::Protocol("bad padding".into()));
                        }
                        payload.truncate(payload.len() - pad);
                        payload.remove(0);
                    }
                    if kind == FRAME_HEADERS && flags & FLAG_PRIORITY != 0 {
                        payload.drain(..5.min(payload.len()));
                    }
                    if kind == FRAME_DATA {
                        data.extend_from_slice(&payload);
                    } else {
                        blocks.extend_from_slice(&payload);
                    }
                    if kind != FRAME_CONTINUATION && flags & FLAG_END_STREAM != 0 {
                        break;
                    }
                }
                // WINDOW_UPDATE, acknowledgements, other streams: nothing owed.
                _ => {}
            }
        }
        if data.len() < 5 {
            return Err(CriError::Status {
                method: path,
                trailers: blocks,
            });
        }
        let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
        if data[0] != 0 || data.len() < 5 + len {
            return Err(CriError::Protocol(format!(
                "gRPC message: flag {} length {len}, {} bytes",
                data[0],
                data.len()
            )));
        }
        Ok(data[5..5 + len].to_vec())
    }

    /// `Version`: `(runtime_name, runtime_version, runtime_api_version)` (fields 2, 3, 4).
    pub fn version(&mut self) -> Result<(String, String, String), CriError> {
        let r = self.call("Version", &Enc::default().string(1, "v1").finish())?;
        Ok((string_field(&r, 2)?, string_field(&r, 3)?, string_field(&r, 4)?))
    }

    /// `RunPodSandbox` (request: config = 1, runtime_handler = 2): the sandbox id (field 1).
    pub fn run_pod_sandbox(&mut self, config: &PodSandboxConfig) -> Result<String, CriError> {
        let request = Enc::default().message(1, config.encode()).finish();
        string_field(&self.call("RunPodSandbox", &request)?, 1)
    }

    /// `StopPodSandbox` (pod_sandbox_id = 1).
    pub fn stop_pod_sandbox(&mut self, id: &str) -> Result<(), CriError> {
        self.call("StopPodSandbox", &Enc::default().string(1, id).finish())
            .map(drop)
    }

    /// `RemovePodSandbox` (pod_sandbox_id = 1).
    pub fn remove_pod_sandbox(&mut self, id: &str) -> Result<(), CriError> {
        self.call("RemovePodSandbox", &Enc::default().string(1, id).finish())
            .map(drop)
    }

    /// `PodSandboxStatus` (pod_sandbox_id = 1, verbose = 2).
    pub fn pod_sandbox_status(&mut self, id: &str) -> Result<PodSandboxStatus, CriError> {
        let request = Enc::default().string(1, id).uint(2, 1).finish();
        let response = self.call("PodSandboxStatus", &request)?;
        let status = bytes_field(&response, 1)?;
        let network = bytes_field(&status, 5)?;
        Ok(PodSandboxStatus {
            id: string_field(&status, 1)?,
            metadata: PodSandboxMetadata::decode(&bytes_field(&status, 2)?)?,
            state: uint_field(&status, 3)?,
            ip: string_field(&network, 1)?,
            additional_ips: repeated_field(&network, 2)?
                .iter()
                .map(|ip| string_field(ip, 1))
                .collect::<Result<_, _>>()?,
            info: map_field(&response, 2)?,
        })
    }

    /// `ListPodSandbox` (no filter): every sandbox (`items` = 1).
    pub fn list_pod_sandbox(&mut self) -> Result<Vec<PodSandbox>, CriError> {
        let response = self.call("ListPodSandbox", &[])?;
        repeated_field(&response, 1)?
            .iter()
            .map(|item| {
                Ok(PodSandbox {
                    id: string_field(item, 1)?,
                    metadata: PodSandboxMetadata::decode(&bytes_field(item, 2)?)?,
                    state: uint_field(item, 3)?,
                })
            })
            .collect()
    }
}
