//! The request environment: `CNI_COMMAND` and the parameters each verb needs.

use std::fmt;
use std::str::FromStr;

use crate::args::CniArgs;
use crate::error::{CniError, codes};

/// A CNI verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CniCommand {
    /// Attach.
    Add,
    /// Detach.
    Del,
    /// Verify an attachment (≥ 0.4.0).
    Check,
    /// Plugin readiness (≥ 1.1.0).
    Status,
    /// Garbage-collect stale attachments (≥ 1.1.0).
    Gc,
    /// Report supported versions.
    Version,
}

impl CniCommand {
    /// The `CNI_COMMAND` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Add => "ADD",
            Self::Del => "DEL",
            Self::Check => "CHECK",
            Self::Status => "STATUS",
            Self::Gc => "GC",
            Self::Version => "VERSION",
        }
    }

    /// Whether the verb concerns one attachment (container id and interface name required).
    pub fn is_attachment(self) -> bool {
        matches!(self, Self::Add | Self::Del | Self::Check)
    }

    /// Whether `CNI_NETNS` is required (ADD and CHECK; DEL tolerates a gone netns).
    pub fn requires_netns(self) -> bool {
        matches!(self, Self::Add | Self::Check)
    }
}

impl fmt::Display for CniCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CniCommand {
    type Err = CniError;

    fn from_str(text: &str) -> Result<Self, CniError> {
        Ok(match text {
            "ADD" => Self::Add,
            "DEL" => Self::Del,
            "CHECK" => Self::Check,
            "STATUS" => Self::Status,
            "GC" => Self::Gc,
            "VERSION" => Self::Version,
            other => {
                return Err(CniError::new(
                    codes::INVALID_ENVIRONMENT,
                    format!("unknown CNI_COMMAND: {other}"),
                ));
            }
        })
    }
}

/// The environment variable names of the protocol.
pub mod vars {
    /// The verb.
    pub const COMMAND: &str = "CNI_COMMAND";
    /// Container (attachment) id.
    pub const CONTAINER_ID: &str = "CNI_CONTAINERID";
    /// Path of the network namespace.
    pub const NETNS: &str = "CNI_NETNS";
    /// Interface name inside the container.
    pub const IFNAME: &str = "CNI_IFNAME";
    /// Extra `KEY=VALUE;...` arguments.
    pub const ARGS: &str = "CNI_ARGS";
    /// Plugin search path, `:`-separated.
    pub const PATH: &str = "CNI_PATH";
}

/// A validated request environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestEnv {
    /// The verb.
    pub command: CniCommand,
    /// `CNI_CONTAINERID` (empty for STATUS/GC/VERSION).
    pub container_id: String,
    /// `CNI_NETNS` (may be empty on DEL).
    pub netns: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_ARGS`, parsed (pair syntax only; check keys with [`CniArgs::load`]).
    pub args: CniArgs,
    /// `CNI_PATH` entries.
    pub path: Vec<String>,
}

fn invalid_env(var: &str, msg: impl fmt::Display) -> CniError {
    CniError::new(codes::INVALID_ENVIRONMENT, format!("{var}: {msg}"))
}

impl RequestEnv {
    /// Reads and validates the request from environment variables given by `lookup`
    /// (e.g. `|k| std::env::var(k).ok()`). Errors are code 4 naming the variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, CniError> {
        let command: CniCommand = lookup(vars::COMMAND)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| invalid_env(vars::COMMAND, "required environment variable missing"))?
            .parse()?;
        let required = |var: &str, needed: bool| -> Result<String, CniError> {
            match lookup(var) {
                Some(value) if !value.is_empty() => Ok(value),
                _ if needed => Err(invalid_env(
                    var,
                    format!("required environment variable missing for {command}"),
                )),
                _ => Ok(String::new()),
            }
        };
        let container_id = required(vars::CONTAINER_ID, command.is_attachment())?;
        let netns = required(vars::NETNS, command.requires_netns())?;
        let ifname = required(vars::IFNAME, command.is_attachment())?;
        let path = required(vars::PATH, command.is_attachment())?;
        if command.is_attachment() {
            validate_container_id(&container_id).map_err(|msg| invalid_env(vars::CONTAINER_ID, msg))?;
            validate_ifname(&ifname).map_err(|msg| invalid_env(vars::IFNAME, msg))?;
        }
        let args = CniArgs::parse(&lookup(vars::ARGS).unwrap_or_default())
            .map_err(|e| invalid_env(vars::ARGS, e))?;
        Ok(Self {
            command,
            container_id,
            netns,
            ifname,
            args,
            path: split_path(&path),
        })
    }

    /// Reads the request from the process environment.
    pub fn from_process_env() -> Result<Self, CniError> {
        Self::from_lookup(|key| std::env::var(key).ok())
    }
}

/// Splits a `:`-separated search path, dropping empty entries.
pub fn split_path(path: &str) -> Vec<String> {
    path.split(':')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Spec rule: a container id is non-empty, starts with an alphanumeric character and contains
/// only alphanumerics, `_`, `.` and `-`.
pub fn validate_container_id(id: &str) -> Result<(), &'static str> {
    let mut bytes = id.bytes();
    match bytes.next() {
        None => Err("must not be empty"),
        Some(first) if !first.is_ascii_alphanumeric() => Err("must start with a letter or digit"),
        _ if !bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')) => {
            Err("may contain only letters, digits, '_', '.' and '-'")
        }
        _ => Ok(()),
    }
}

/// Spec rule: an interface name is 1–15 bytes, not `.` or `..`, without `/`, `:` or whitespace.
pub fn validate_ifname(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("must not be empty")
    } else if name.len() > 15 {
        Err("longer than 15 characters")
    } else if name == "." || name == ".." {
        Err("must not be '.' or '..'")
    } else if name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace()) {
        Err("must not contain '/', ':' or whitespace")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |key| map.get(key).cloned()
    }

    const ADD: &[(&str, &str)] = &[
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "ctr-1"),
        ("CNI_NETNS", "/run/netns/x"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=p"),
        ("CNI_PATH", "/opt/cni/bin::/usr/lib/cni"),
    ];

    #[test]
    fn parses_a_full_add() {
        let request = RequestEnv::from_lookup(env(ADD)).unwrap();
        assert_eq!(request.command, CniCommand::Add);
        assert_eq!(request.ifname, "eth0");
        assert_eq!(request.args.pod_name(), Some("p"));
        assert_eq!(request.path, vec!["/opt/cni/bin", "/usr/lib/cni"]);
    }

    #[test]
    fn missing_variables_are_code_4_naming_the_variable() {
        for missing in [
            "CNI_CONTAINERID",
            "CNI_NETNS",
            "CNI_IFNAME",
            "CNI_PATH",
            "CNI_COMMAND",
        ] {
            let pairs: Vec<_> = ADD.iter().copied().filter(|(k, _)| *k != missing).collect();
            let err = RequestEnv::from_lookup(env(&pairs)).unwrap_err();
            assert_eq!(err.code, codes::INVALID_ENVIRONMENT);
            assert!(err.msg.contains(missing), "{err:?}");
        }
    }

    #[test]
    fn per_verb_requirements() {
        let del: Vec<_> = ADD
            .iter()
            .map(|&(k, v)| if k == "CNI_COMMAND" { (k, "DEL") } else { (k, v) })
            .filter(|(k, _)| *k != "CNI_NETNS")
            .collect();
        assert!(RequestEnv::from_lookup(env(&del)).is_ok());
        for verb in ["STATUS", "GC", "VERSION"] {
            let request = RequestEnv::from_lookup(env(&[("CNI_COMMAND", verb)])).unwrap();
            assert_eq!(request.command.as_str(), verb);
        }
        let err = RequestEnv::from_lookup(env(&[("CNI_COMMAND", "FROB")])).unwrap_err();
        assert_eq!(err.msg, "unknown CNI_COMMAND: FROB");
    }

    proptest::proptest! {
        #[test]
        fn never_panics(values in proptest::collection::vec(".{0,20}", 6)) {
            let keys = ["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"];
            let map: HashMap<&str, String> = keys.into_iter().zip(values).collect();
            if let Err(err) = RequestEnv::from_lookup(|k| map.get(k).cloned()) {
                proptest::prop_assert_eq!(err.code, codes::INVALID_ENVIRONMENT);
            }
        }
    }

    #[test]
    fn validates_container_id_ifname_and_args() {
        let with = |key: &str, value: &'static str| -> Vec<(&str, &str)> {
            ADD.iter()
                .map(|&(k, v)| if k == key { (k, value) } else { (k, v) })
                .collect()
        };
        for (key, value) in [
            ("CNI_CONTAINERID", "-bad"),
            ("CNI_CONTAINERID", "a/b"),
            ("CNI_IFNAME", "a-very-long-interface"),
            ("CNI_IFNAME", "et h0"),
            ("CNI_IFNAME", ".."),
            ("CNI_ARGS", "A=b=c"),
        ] {
            let err = RequestEnv::from_lookup(env(&with(key, value))).unwrap_err();
            assert_eq!(err.code, codes::INVALID_ENVIRONMENT);
            assert!(err.msg.starts_with(key), "{err:?}");
        }
    }
}
