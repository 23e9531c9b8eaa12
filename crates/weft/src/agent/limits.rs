//! The agent server's limits (connections, read timeouts, body size, where metrics may be
//! served) as pure decisions, each answered with a CNI error the shim passes to the runtime.

use std::net::SocketAddr;
use std::time::Duration;

use weft_cni::{CniError, codes};

/// Limits of the agent's HTTP server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; more are answered "busy" at once and closed.
    pub max_connections: usize,
    /// How long a request's head, and then its body, may take to arrive.
    pub read_timeout: Duration,
    /// The largest request body read.
    pub max_body: usize,
}

/// The answer to a connection over [`Limits::max_connections`] (the runtime retries).
pub fn busy_error(max_connections: usize) -> CniError {
    CniError::new(
        codes::TRY_AGAIN_LATER,
        format!("weft agent is busy: {max_connections} connections open, its limit (--max-connections)"),
    )
}

/// Whether a body announced as `content_length` bytes may be read (checked before reading a
/// byte of it: a `Content-Length: 1000000000000` is answered at once).
pub fn check_body_size(content_length: Option<u64>, max_body: usize) -> Result<(), CniError> {
    match content_length {
        Some(len) if len > max_body as u64 => {
            Err(body_too_large(max_body).with_details(format!("Content-Length {len}")))
        }
        _ => Ok(()),
    }
}

/// The answer to a body over the limit.
pub fn body_too_large(max_body: usize) -> CniError {
    CniError::new(
        codes::INVALID_NETWORK_CONFIG,
        format!("request to the weft agent is too large: over the limit of {max_body} bytes"),
    )
}

/// The answer to a body that did not arrive within the read timeout.
pub fn body_timeout(timeout: Duration) -> CniError {
    CniError::new(
        codes::IO_FAILURE,
        format!(
            "request body did not arrive within {} s: closing the connection",
            timeout.as_secs()
        ),
    )
}

/// Whether `/metrics` may be served over TCP at `addr`: loopback only, unless the operator
/// explicitly allows other addresses (metrics are then readable from the network).
pub fn check_metrics_addr(addr: SocketAddr, allow_remote: bool) -> Result<(), String> {
    if addr.ip().is_loopback() || allow_remote {
        Ok(())
    } else {
        Err(format!(
            "--metrics-addr {addr} is not a loopback address: metrics would be readable from the network (pass --metrics-allow-remote to mean it)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announced_bodies_over_the_limit_are_refused_before_reading() {
        assert!(check_body_size(None, 10).is_ok());
        assert!(check_body_size(Some(10), 10).is_ok());
        let err = check_body_size(Some(1_000_000_000_000), 10).unwrap_err();
        assert!(err.msg.contains("limit of 10 bytes"), "{}", err.msg);
    }

    #[test]
    fn metrics_stay_on_loopback_unless_allowed() {
        assert!(check_metrics_addr("127.0.0.1:9102".parse().unwrap(), false).is_ok());
        assert!(check_metrics_addr("[::1]:9102".parse().unwrap(), false).is_ok());
        assert!(check_metrics_addr("0.0.0.0:9102".parse().unwrap(), false).is_err());
        assert!(check_metrics_addr("10.0.0.1:9102".parse().unwrap(), true).is_ok());
    }

    #[test]
    fn busy_is_retryable_and_names_the_limit() {
        let err = busy_error(7);
        assert_eq!(err.code, codes::TRY_AGAIN_LATER);
        assert!(err.msg.contains("7 connections"), "{}", err.msg);
    }
}
