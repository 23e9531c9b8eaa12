//! The `k8s.v1.cni.cncf.io/networks` and `v1.multus-cni.io/default-network` annotation parsers, with
//! Multus's accept/reject decisions and messages (docs/upstream/multus.md §1.3, §2.5).
//!
//! Every message starts with Multus's exact text; where Multus does not name the offending item we
//! append it (docs/compat.md).

use std::net::IpAddr;

use crate::NetworkSelectionElement;
use crate::hwaddr::parse_hardware_addr;

/// Why an annotation was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    /// A text item has more than one `/`.
    #[error(
        "parsePodNetworkAnnotation: parsePodNetworkObjectName: Invalid network object (failed at '/') in item '{item}'"
    )]
    TooManySlashes {
        /// The offending comma-separated item.
        item: String,
    },
    /// A text item has more than one `@`.
    #[error(
        "parsePodNetworkAnnotation: parsePodNetworkObjectName: Invalid network object (failed at '@') in item '{item}'"
    )]
    TooManyAts {
        /// The offending comma-separated item.
        item: String,
    },
    /// A namespace or name is not a DNS-1123 label.
    #[error(
        "parsePodNetworkAnnotation: parsePodNetworkObjectName: Failed to parse: one or more items did not match comma-delimited format (must consist of lower case alphanumeric characters). Must start and end with an alphanumeric character), mismatch @ '{part}'"
    )]
    NotALabel {
        /// The namespace or name that failed.
        part: String,
    },
    /// A text item's interface name is too long or has whitespace or `/`.
    #[error(
        "parsePodNetworkAnnotation: parsePodNetworkObjectName: Failed to parse interface name: must be less than 15 chars and not contain '/' or spaces. interface name '{interface}'"
    )]
    BadInterfaceName {
        /// The requested interface name.
        interface: String,
    },
    /// JSON mode: the value is not a JSON array of selection elements.
    #[error(
        "parsePodNetworkAnnotation: failed to parse pod Network Attachment Selection Annotation JSON format: {detail}"
    )]
    Json {
        /// The decoder's message (Go's wording for the common syntax errors).
        detail: String,
    },
    /// JSON mode: an element of the array is `null`.
    #[error(
        "parsePodNetworkAnnotation: failed to parse pod Network Attachment Selection Annotation JSON format: element {index} is null"
    )]
    NullElement {
        /// Position in the array.
        index: usize,
    },
    /// `mac` is not a hardware address.
    #[error(
        "parsePodNetworkAnnotation: failed to mac: address {mac}: invalid MAC address (network '{network}')"
    )]
    BadMac {
        /// The requested MAC.
        mac: String,
        /// The element's network name.
        network: String,
    },
    /// `infiniband-guid` is not a hardware address.
    #[error(
        "parsePodNetworkAnnotation: failed to validate infiniband GUID: address {guid}: invalid MAC address (network '{network}')"
    )]
    BadInfinibandGuid {
        /// The requested GUID.
        guid: String,
        /// The element's network name.
        network: String,
    },
    /// An `ips` entry with `/` is not a CIDR.
    #[error("failed to parse CIDR \"{ip}\": invalid CIDR address: {ip} (network '{network}')")]
    BadCidr {
        /// The requested address.
        ip: String,
        /// The element's network name.
        network: String,
    },
    /// An `ips` entry without `/` is not an IP address.
    #[error("failed to parse IP address \"{ip}\" (network '{network}')")]
    BadIp {
        /// The requested address.
        ip: String,
        /// The element's network name.
        network: String,
    },
    /// The default-network annotation names more than one network.
    #[error("tryLoadK8sPodDefaultNetwork: more than one default network is specified: {value}")]
    MoreThanOneDefaultNetwork {
        /// The annotation value.
        value: String,
    },
}

/// Parse the networks annotation value. An empty value means "no secondary networks" (Multus's
/// `NoK8sNetworkError`, which every caller treats as success) and gives an empty list.
/// Empty namespaces become `default_namespace` (the pod's namespace).
pub fn parse_networks_annotation(
    value: &str,
    default_namespace: &str,
) -> Result<Vec<NetworkSelectionElement>, AnnotationError> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    let mut elements = if value.contains(['[', '{', '"']) {
        parse_json_list(value)?
    } else {
        value
            .split(',')
            .map(|item| parse_text_item(item.trim()))
            .collect::<Result<Vec<_>, _>>()?
    };
    for element in &mut elements {
        post_process(element, default_namespace)?;
    }
    Ok(elements)
}

/// Parse the `v1.multus-cni.io/default-network` annotation: the same grammar as the networks
/// annotation, at most one element, empty namespace → `multus_namespace`. Empty value → `None`.
pub fn parse_default_network_annotation(
    value: &str,
    multus_namespace: &str,
) -> Result<Option<NetworkSelectionElement>, AnnotationError> {
    let mut elements = parse_networks_annotation(value, multus_namespace)?;
    match elements.len() {
        0 => Ok(None),
        1 => Ok(elements.pop()),
        _ => Err(AnnotationError::MoreThanOneDefaultNetwork {
            value: value.to_owned(),
        }),
    }
}

fn parse_json_list(value: &str) -> Result<Vec<NetworkSelectionElement>, AnnotationError> {
    let raw: Option<Vec<Option<NetworkSelectionElement>>> =
        serde_json::from_str(value).map_err(|e| AnnotationError::Json {
            detail: go_json_error(value, &e),
        })?;
    raw.unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(index, e)| e.ok_or(AnnotationError::NullElement { index }))
        .collect()
}

/// Go's `encoding/json` wording for the syntax errors people actually make (a bare word inside
/// `[ ]`); other errors keep serde_json's text, which names line and column.
fn go_json_error(value: &str, err: &serde_json::Error) -> String {
    let text = err.to_string();
    if err.is_syntax() && text.starts_with("expected value") {
        let offset = value
            .lines()
            .take(err.line().saturating_sub(1))
            .map(|l| l.len() + 1)
            .sum::<usize>()
            + err.column().saturating_sub(1);
        if let Some(c) = value.get(offset..).and_then(|rest| rest.chars().next()) {
            return format!("invalid character '{c}' looking for beginning of value");
        }
    }
    text
}

fn parse_text_item(item: &str) -> Result<NetworkSelectionElement, AnnotationError> {
    let slash: Vec<&str> = item.split('/').collect();
    let (namespace, rest) = match slash.as_slice() {
        [rest] => ("", *rest),
        [ns, rest] => (ns.trim(), *rest),
        _ => {
            return Err(AnnotationError::TooManySlashes {
                item: item.to_owned(),
            });
        }
    };
    let at: Vec<&str> = rest.split('@').collect();
    let (name, interface) = match at.as_slice() {
        [name] => (name.trim(), ""),
        [name, ifname] => (name.trim(), ifname.trim()),
        _ => {
            return Err(AnnotationError::TooManyAts {
                item: item.to_owned(),
            });
        }
    };
    for part in [namespace, name] {
        if !part.is_empty() && !is_dns1123_label(part) {
            return Err(AnnotationError::NotALabel {
                part: part.to_owned(),
            });
        }
    }
    if !interface.is_empty() && !is_valid_text_ifname(interface) {
        return Err(AnnotationError::BadInterfaceName {
            interface: interface.to_owned(),
        });
    }
    Ok(NetworkSelectionElement {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        interface: interface.to_owned(),
        ..Default::default()
    })
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, without a length limit (as Multus).
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty() && alnum(&b[0]) && alnum(&b[b.len() - 1]) && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// Multus's text-form interface rule: at most 15 bytes (IFNAMSIZ − 1), no whitespace, no `/`.
fn is_valid_text_ifname(s: &str) -> bool {
    s.len() <= 15
        && !s
            .bytes()
            .any(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r' | b'/'))
}

fn post_process(
    element: &mut NetworkSelectionElement,
    default_namespace: &str,
) -> Result<(), AnnotationError> {
    if element.namespace.is_empty() {
        element.namespace = default_namespace.to_owned();
    }
    let network = || element_label(element);
    if !element.mac.is_empty() && parse_hardware_addr(&element.mac).is_none() {
        return Err(AnnotationError::BadMac {
            mac: element.mac.clone(),
            network: network(),
        });
    }
    if !element.infiniband_guid.is_empty() && parse_hardware_addr(&element.infiniband_guid).is_none() {
        return Err(AnnotationError::BadInfinibandGuid {
            guid: element.infiniband_guid.clone(),
            network: network(),
        });
    }
    for ip in &element.ips {
        if ip.contains('/') {
            if ip.parse::<ipnet::IpNet>().is_err() {
                return Err(AnnotationError::BadCidr {
                    ip: ip.clone(),
                    network: network(),
                });
            }
        } else if ip.parse::<IpAddr>().is_err() {
            return Err(AnnotationError::BadIp {
                ip: ip.clone(),
                network: network(),
            });
        }
    }
    // The legacy alias has served once copied; clearing it keeps re-serialised elements
    // (the CLI output, caches) in today's field names.
    let legacy = std::mem::take(&mut element.interface_request);
    if element.interface.is_empty() {
        element.interface = legacy;
    }
    Ok(())
}

fn element_label(element: &NetworkSelectionElement) -> String {
    format!("{}/{}", element.namespace, element.name)
}

#[cfg(test)]
mod tests;
