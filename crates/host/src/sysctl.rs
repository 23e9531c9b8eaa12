//! Network sysctls (`/proc/sys/net/...`) of the calling thread's namespace.
//!
//! The kernel resolves `/proc/sys/net` against the namespace of the task
//! that opens the file, so call these inside [`Netns::run_in`](crate::Netns::run_in)
//! to reach another namespace.

use std::fs;
use std::path::PathBuf;

use crate::error::{HostError, Result};

/// Checks a key and returns its path. Keys are either `/`-separated paths
/// relative to `/proc/sys` (`net/ipv4/conf/eth0.100/route_localnet`: the
/// form to use when a link name contains a dot) or, when they contain no
/// `/`, `sysctl(8)`'s dotted form (`net.ipv4.ip_forward`).
pub fn sysctl_path(key: &str) -> std::result::Result<PathBuf, String> {
    let key = if key.contains('/') {
        key.to_owned()
    } else {
        key.replace('.', "/")
    };
    if !key.starts_with("net/") {
        return Err("only network sysctls (net/...) are supported".into());
    }
    if key
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err("key must be a relative path without empty, '.' or '..' parts".into());
    }
    if key.contains('\0') {
        return Err("key contains NUL".into());
    }
    Ok(PathBuf::from("/proc/sys").join(&key))
}

/// Reads the sysctl `key` (trailing newline removed).
pub fn read_sysctl(key: &str) -> Result<String> {
    const OP: &str = "read sysctl";
    let path = sysctl_path(key).map_err(|reason| HostError::invalid(OP, key, reason))?;
    let value = fs::read_to_string(path).map_err(|e| HostError::os(OP, key, e))?;
    Ok(value.trim_end_matches('\n').to_owned())
}

/// Writes `value` to the sysctl `key`.
pub fn write_sysctl(key: &str, value: &str) -> Result<()> {
    const OP: &str = "write sysctl";
    let path = sysctl_path(key).map_err(|reason| HostError::invalid(OP, key, reason))?;
    fs::write(path, value).map_err(|e| HostError::os(OP, format!("{key}={value}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_relative_network_paths() {
        assert_eq!(
            sysctl_path("net/ipv4/ip_forward").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
        assert_eq!(
            sysctl_path("net/ipv4/conf/eth0.100/route_localnet").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/route_localnet")
        );
        assert_eq!(
            sysctl_path("net.ipv4.ip_forward").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
        for bad in [
            "kernel/hostname",
            "kernel.hostname",
            "/net/ipv4/ip_forward",
            "net/../kernel/x",
            "net//x",
            "net/ipv4/",
            "net..ipv4",
            "net",
        ] {
            assert!(sysctl_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn reading_a_missing_key_names_it() {
        let err = read_sysctl("net/ipv4/conf/no-such-link-x/forwarding").unwrap_err();
        assert!(err.is_not_found(), "{err}");
        assert!(
            err.to_string()
                .starts_with("read sysctl net/ipv4/conf/no-such-link-x/forwarding:")
        );
    }
}
