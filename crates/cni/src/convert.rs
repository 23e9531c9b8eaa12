//! Result conversion between every spec version and the canonical [`CniResult`].
//!
//! Reading accepts a result written in any version (0.1.0/0.2.0 `ip4`/`ip6`, 0.3.x/0.4.0 with
//! `ips[].version`, 1.0.0/1.1.0). Writing converts down with the spec's rules: fields a version
//! lacks are dropped, and 0.1.0/0.2.0 keep only the first address of each family (with that
//! family's routes); a result without any address cannot be written in 0.1.0/0.2.0.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::result::{CniResult, Dns, IpConfig, Route};
use crate::version::CniVersion;

/// Why a result could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    /// The text is not a result of the version it claims.
    #[error("cannot decode CNI result (version {version}): {source}")]
    Decode {
        /// Version the result was read as.
        version: String,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// The `cniVersion` is unknown or malformed.
    #[error("unsupported CNI result version {0:?}")]
    UnsupportedVersion(String),
    /// The result cannot be expressed in the requested version.
    #[error("cannot convert CNI result to version {version}: {reason}")]
    Unconvertible {
        /// Requested version.
        version: CniVersion,
        /// What makes it impossible.
        reason: &'static str,
    },
}

/// Reads a result written in any supported version from JSON text.
pub fn parse_result(bytes: &[u8]) -> Result<CniResult, ResultError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|source| ResultError::Decode {
        version: "?".into(),
        source,
    })?;
    result_from_value(value)
}

/// Reads a result written in any supported version from a JSON value. A result without
/// `cniVersion` is read by its shape (`ip4`/`ip6` means 0.2.0, otherwise 1.0.0).
pub fn result_from_value(value: Value) -> Result<CniResult, ResultError> {
    let declared = value.get("cniVersion").and_then(Value::as_str).map(str::to_owned);
    let version = match declared.as_deref() {
        Some(text) if !text.is_empty() => {
            let version: CniVersion = text
                .parse()
                .map_err(|_| ResultError::UnsupportedVersion(text.into()))?;
            if !version.is_supported() {
                return Err(ResultError::UnsupportedVersion(text.into()));
            }
            version
        }
        _ if value.get("ip4").is_some() || value.get("ip6").is_some() => CniVersion::V0_2_0,
        _ => CniVersion::V1_0_0,
    };
    let decode = |source| ResultError::Decode {
        version: version.to_string(),
        source,
    };
    let mut result = if version.has_legacy_result() {
        serde_json::from_value::<LegacyResult>(value)
            .map_err(decode)?
            .into_canonical()
    } else {
        serde_json::from_value::<CniResult>(value).map_err(decode)?
    };
    result.cni_version = declared.unwrap_or_default();
    Ok(result)
}

/// Writes `result` in `version` as a JSON value, converting down as the spec prescribes.
pub fn result_to_value(result: &CniResult, version: CniVersion) -> Result<Value, ResultError> {
    if !version.is_supported() {
        return Err(ResultError::UnsupportedVersion(version.to_string()));
    }
    let serialized = if version.has_legacy_result() {
        serde_json::to_value(LegacyResult::from_canonical(result, version)?)
    } else {
        let mut out = result.clone();
        out.cni_version = version.to_string();
        if version < CniVersion::V1_1_0 {
            strip_1_1_fields(&mut out);
        }
        let mut value = serde_json::to_value(&out);
        if version < CniVersion::V1_0_0
            && let Ok(Value::Object(map)) = &mut value
            && let Some(Value::Array(ips)) = map.get_mut("ips")
        {
            for ip in ips.iter_mut().filter_map(Value::as_object_mut) {
                let family = match ip.get("address").and_then(Value::as_str) {
                    Some(address) if address.contains(':') => "6",
                    _ => "4",
                };
                // `version` comes first on the wire in 0.3/0.4, as libcni writes it.
                let mut ordered = serde_json::Map::new();
                ordered.insert("version".into(), Value::from(family));
                ordered.append(ip);
                *ip = ordered;
            }
        }
        value
    };
    serialized.map_err(|source| ResultError::Decode {
        version: version.to_string(),
        source,
    })
}

/// Writes `result` in `version` as JSON text.
pub fn result_to_bytes(result: &CniResult, version: CniVersion) -> Result<Vec<u8>, ResultError> {
    let value = result_to_value(result, version)?;
    Ok(serde_json::to_vec(&value).expect("a JSON value always serializes"))
}

/// The result as it looks after a round trip through `version`: what conversion keeps.
pub fn project_to_version(result: &CniResult, version: CniVersion) -> Result<CniResult, ResultError> {
    let mut projected = result_from_value(result_to_value(result, version)?)?;
    projected.cni_version = result.cni_version.clone();
    Ok(projected)
}

fn strip_1_1_fields(result: &mut CniResult) {
    for interface in &mut result.interfaces {
        interface.mtu = None;
        interface.socket_path.clear();
        interface.pci_id.clear();
    }
    for route in &mut result.routes {
        route.mtu = None;
        route.advmss = None;
        route.priority = None;
        route.table = None;
        route.scope = None;
    }
}

/// The 0.1.0/0.2.0 result shape.
#[derive(Debug, Default, Serialize, Deserialize)]
struct LegacyResult {
    #[serde(rename = "cniVersion", default, skip_serializing_if = "String::is_empty")]
    cni_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip4: Option<LegacyIpConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip6: Option<LegacyIpConfig>,
    #[serde(default, skip_serializing_if = "Dns::is_empty")]
    dns: Dns,
}

#[derive(Debug, Serialize, Deserialize)]
struct LegacyIpConfig {
    ip: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    routes: Vec<LegacyRoute>,
}

#[derive(Debug, Serialize, Deserialize)]
struct LegacyRoute {
    dst: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gw: Option<IpAddr>,
}

impl LegacyResult {
    fn into_canonical(self) -> CniResult {
        let mut result = CniResult {
            dns: self.dns,
            ..CniResult::default()
        };
        for config in [self.ip4, self.ip6].into_iter().flatten() {
            result.ips.push(IpConfig {
                address: config.ip,
                gateway: config.gateway,
                interface: None,
            });
            result.routes.extend(config.routes.into_iter().map(|r| Route {
                dst: r.dst,
                gw: r.gw,
                mtu: None,
                advmss: None,
                priority: None,
                table: None,
                scope: None,
            }));
        }
        result
    }

    fn from_canonical(result: &CniResult, version: CniVersion) -> Result<Self, ResultError> {
        let first_of = |v4: bool| {
            result
                .ips
                .iter()
                .find(|ip| ip.address.addr().is_ipv4() == v4)
                .map(|ip| LegacyIpConfig {
                    ip: ip.address,
                    gateway: ip.gateway,
                    routes: result
                        .routes
                        .iter()
                        .filter(|r| r.dst.addr().is_ipv4() == v4)
                        .map(|r| LegacyRoute { dst: r.dst, gw: r.gw })
                        .collect(),
                })
        };
        let legacy = Self {
            cni_version: version.to_string(),
            ip4: first_of(true),
            ip6: first_of(false),
            dns: result.dns.clone(),
        };
        if legacy.ip4.is_none() && legacy.ip6.is_none() {
            return Err(ResultError::Unconvertible {
                version,
                reason: "no IP addresses (0.1.0/0.2.0 results need one)",
            });
        }
        Ok(legacy)
    }
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
