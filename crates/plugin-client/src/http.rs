//! The tree's one small HTTP/1.1 client over a Unix socket, std-only (this crate stays static
//! and dependency-free): one request per connection (`Connection: close`), the response read to
//! the end. The IPAM client and the `weft` CNI shim both talk to the node agent with it.

use std::fmt;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A `POST path` request with `body` of type `content_type`, closing the connection after it.
pub fn post_request(path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: weft\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    request
}

/// Why an exchange has no response.
#[derive(Debug)]
pub enum ExchangeError {
    /// Nothing listens on the socket.
    Connect(std::io::Error),
    /// Writing the request or reading the answer failed before any answer arrived.
    Io(std::io::Error),
}

impl fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Connect(e) | Self::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ExchangeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Connect(e) | Self::Io(e) => Some(e),
        }
    }
}

/// Send `request` on a fresh connection to `socket` and read the answer until the peer closes
/// (or `timeout` passes without data). A server that refuses a request (too large, too many
/// connections) answers and closes without reading it all: the write then fails but its answer
/// is waiting, so any answer read is returned.
pub fn exchange(socket: &Path, request: &[u8], timeout: Duration) -> Result<Vec<u8>, ExchangeError> {
    let mut stream = UnixStream::connect(socket).map_err(ExchangeError::Connect)?;
    let _ = stream.set_read_timeout(Some(timeout));
    let written = stream.write_all(request);
    let mut response = Vec::with_capacity(4096);
    let read = stream.read_to_end(&mut response);
    match (written, read) {
        (Err(e), _) | (_, Err(e)) if response.is_empty() => Err(ExchangeError::Io(e)),
        _ => Ok(response),
    }
}

/// A complete response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The `Transfer-Encoding` header, if any (a `chunked` body is already decoded).
    pub transfer_encoding: Option<String>,
    /// The body: cut at `Content-Length`, or de-chunked.
    pub body: Vec<u8>,
}

/// Why bytes are not a complete HTTP/1.x response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseError {
    /// No end of the header block.
    Incomplete,
    /// The header block is not UTF-8.
    Unreadable,
    /// No `HTTP/1.1 NNN` or `HTTP/1.0 NNN` status line.
    NoStatusLine,
    /// Fewer body bytes than `Content-Length`, or an unreadable length.
    Truncated,
    /// A chunked body that is malformed or cut off.
    BadChunk(&'static str),
}

impl fmt::Display for ResponseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Incomplete => write!(f, "incomplete HTTP response"),
            Self::Unreadable => write!(f, "unreadable HTTP response"),
            Self::NoStatusLine => write!(f, "no HTTP status line"),
            Self::Truncated => write!(f, "truncated HTTP response"),
            Self::BadChunk(why) => write!(f, "bad chunked body: {why}"),
        }
    }
}

impl std::error::Error for ResponseError {}

/// Parse a complete response (the connection was closed after it).
pub fn parse_response(response: &[u8]) -> Result<Response, ResponseError> {
    let header_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or(ResponseError::Incomplete)?;
    let head = std::str::from_utf8(&response[..header_end]).map_err(|_| ResponseError::Unreadable)?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| {
            line.strip_prefix("HTTP/1.1 ")
                .or_else(|| line.strip_prefix("HTTP/1.0 "))
        })
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or(ResponseError::NoStatusLine)?;
    let mut body = &response[header_end + 4..];
    let mut transfer_encoding = None;
    for (name, value) in lines.filter_map(|line| line.split_once(':')) {
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            match value.parse::<usize>() {
                Ok(length) if length <= body.len() => body = &body[..length],
                _ => return Err(ResponseError::Truncated),
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = Some(value.to_string());
        }
    }
    let chunked = transfer_encoding
        .as_deref()
        .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"));
    let body = if chunked { dechunk(body)? } else { body.to_vec() };
    Ok(Response {
        status,
        transfer_encoding,
        body,
    })
}

/// The payload of a chunked HTTP/1.1 body (chunk extensions ignored, trailers dropped).
pub fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, ResponseError> {
    let mut out = Vec::new();
    loop {
        let line_end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or(ResponseError::BadChunk("truncated chunk size"))?;
        let line =
            std::str::from_utf8(&body[..line_end]).map_err(|_| ResponseError::BadChunk("bad chunk size"))?;
        let digits = line.split(';').next().unwrap_or("").trim();
        if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ResponseError::BadChunk("bad chunk size"));
        }
        let size =
            usize::from_str_radix(digits, 16).map_err(|_| ResponseError::BadChunk("bad chunk size"))?;
        let start = line_end + 2;
        if size == 0 {
            return Ok(out);
        }
        let end = start
            .checked_add(size)
            .ok_or(ResponseError::BadChunk("bad chunk size"))?;
        let chunk = body
            .get(start..end)
            .ok_or(ResponseError::BadChunk("truncated chunk"))?;
        out.extend_from_slice(chunk);
        if body.get(end..end + 2) != Some(b"\r\n") {
            return Err(ResponseError::BadChunk("truncated chunk trailer"));
        }
        body = &body[end + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_names_length_and_type() {
        let request = post_request("/x", "application/json", b"{}");
        assert_eq!(
            request,
            b"POST /x HTTP/1.1\r\nHost: weft\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
        );
    }

    #[test]
    fn content_length_cuts_the_body() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}junk").unwrap();
        assert_eq!(
            (r.status, r.body.as_slice(), r.transfer_encoding),
            (200, &b"{}"[..], None)
        );
        let r = parse_response(b"HTTP/1.0 500 Oops\r\n\r\nall of it").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (500, &b"all of it"[..]));
    }

    #[test]
    fn chunked_bodies_are_decoded() {
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: y\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.body, b"hello, world");
        assert_eq!(r.transfer_encoding.as_deref(), Some("chunked"));
        assert_eq!(dechunk(b"0\r\n\r\n").unwrap(), b"");
        assert_eq!(dechunk(b"A\r\n0123456789\r\n0\r\n\r\n").unwrap(), b"0123456789");
    }

    #[test]
    fn malformed_chunks_are_errors() {
        for bad in [
            &b""[..],
            b"5\r\nhel",
            b"5\r\nhelloXX0\r\n\r\n",
            b"zz\r\nhello\r\n0\r\n\r\n",
            b"\r\nhello\r\n",
            b"ffffffffffffffffff\r\n",
            b"ffffffffffffffff\r\nx\r\n",
            b"5\r\nhello\r\n",
        ] {
            assert!(
                matches!(dechunk(bad), Err(ResponseError::BadChunk(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn incomplete_or_foreign_responses_are_errors() {
        assert_eq!(parse_response(b""), Err(ResponseError::Incomplete));
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\ncontent-le"),
            Err(ResponseError::Incomplete)
        );
        assert_eq!(
            parse_response(b"SSH-2.0\r\n\r\n"),
            Err(ResponseError::NoStatusLine)
        );
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\n\xff: x\r\n\r\n"),
            Err(ResponseError::Unreadable)
        );
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n{}"),
            Err(ResponseError::Truncated)
        );
    }

    #[test]
    fn exchange_reads_the_answer_of_a_real_socket() {
        let dir = std::env::temp_dir().join(format!("weft-http-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("s");
        let _ = std::fs::remove_file(&socket);
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = vec![0u8; 4096];
            let n = conn.read(&mut request).unwrap();
            request.truncate(n);
            conn.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
                .unwrap();
            request
        });
        let raw = exchange(
            &socket,
            &post_request("/p", "text/plain", b"hi"),
            Duration::from_secs(10),
        )
        .unwrap();
        let request = server.join().unwrap();
        assert!(request.starts_with(b"POST /p HTTP/1.1\r\n") && request.ends_with(b"\r\n\r\nhi"));
        assert_eq!(parse_response(&raw).unwrap().body, b"ok");
        assert!(matches!(
            exchange(&dir.join("absent"), b"", Duration::from_secs(1)),
            Err(ExchangeError::Connect(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
