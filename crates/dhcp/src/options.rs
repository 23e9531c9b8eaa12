//! Byte encodings of the options whose wire format KubeVirt pins down exactly.

use std::net::Ipv4Addr;

use crate::config::{ClasslessRoute, ConfigError};

/// Longest search domain KubeVirt accepts.
const MAX_DOMAIN_LEN: usize = 253;

/// Option 121 (RFC 3442): non-default routes first in their original order, default routes
/// last; each is the prefix length, the significant destination octets and the gateway
/// (`0.0.0.0` when absent).
pub fn classless_routes(routes: &[ClasslessRoute]) -> Vec<u8> {
    let (defaults, specific): (Vec<&ClasslessRoute>, Vec<&ClasslessRoute>) = routes
        .iter()
        .partition(|route| route.destination.is_none_or(|dst| dst.prefix_len() == 0));
    let mut bytes = Vec::new();
    for route in specific.into_iter().chain(defaults) {
        let (prefix, octets) = match route.destination {
            Some(dst) => (dst.prefix_len(), dst.trunc().addr().octets()),
            None => (0, [0; 4]),
        };
        bytes.push(prefix);
        bytes.extend_from_slice(&octets[..usize::from(prefix.div_ceil(8))]);
        bytes.extend_from_slice(&route.gateway.unwrap_or(Ipv4Addr::UNSPECIFIED).octets());
    }
    bytes
}

/// Option 119 (RFC 3397): each domain as RFC 1035 labels, NUL-terminated, no compression.
/// Every domain must be valid ([`is_valid_search_domain`]) and the whole list fit in 255 bytes.
pub fn search_domains(domains: &[String]) -> Result<Vec<u8>, ConfigError> {
    let mut bytes = Vec::new();
    for domain in domains {
        if !is_valid_search_domain(domain) {
            return Err(ConfigError::InvalidSearchDomain(domain.clone()));
        }
        // A trailing dot (fully qualified) is the root label, which the terminator encodes.
        for label in domain.split('.').filter(|label| !label.is_empty()) {
            bytes.push(label.len() as u8);
            bytes.extend_from_slice(label.as_bytes());
        }
        bytes.push(0);
    }
    if bytes.len() > 255 {
        return Err(ConfigError::SearchDomainsTooLong(bytes.len()));
    }
    Ok(bytes)
}

/// KubeVirt's search-domain rule: at most 253 characters and
/// `^(?:[_a-z0-9](?:[_a-z0-9-]{0,61}[a-z0-9])?\.)*(?:[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?)?$`
/// (lowercase only: resolv.conf domains are lowercased before they get here).
pub fn is_valid_search_domain(domain: &str) -> bool {
    if domain.len() > MAX_DOMAIN_LEN {
        return false;
    }
    let mut labels: Vec<&str> = domain.split('.').collect();
    let last = labels.pop().unwrap_or_default();
    let inner_ok = labels.iter().all(|label| {
        is_label(label, |c| {
            c == b'_' || c.is_ascii_lowercase() || c.is_ascii_digit()
        })
    });
    inner_ok && (last.is_empty() || is_label(last, |c| c.is_ascii_lowercase()))
}

/// One label: 1–63 bytes, a first byte accepted by `first`, inner bytes `[_a-z0-9-]` (with `_`
/// only when `first` accepts it), last byte `[a-z0-9]`.
fn is_label(label: &str, first: impl Fn(u8) -> bool) -> bool {
    let bytes = label.as_bytes();
    let Some((&head, rest)) = bytes.split_first() else {
        return false;
    };
    if bytes.len() > 63 || !first(head) {
        return false;
    }
    let underscore_ok = first(b'_');
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match rest.split_last() {
        None => true,
        Some((&tail, middle)) => {
            alnum(tail)
                && middle
                    .iter()
                    .all(|&c| alnum(c) || c == b'-' || (underscore_ok && c == b'_'))
        }
    }
}

/// Option 15: the longest search domain, the first one on ties.
pub fn domain_name(domains: &[String]) -> Option<&str> {
    domains
        .iter()
        .fold(None::<&String>, |best, domain| match best {
            Some(best) if best.len() >= domain.len() => Some(best),
            _ => Some(domain),
        })
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fully_qualified_domain_encodes_like_relative() {
        let relative = search_domains(&["a.b".into()]).unwrap();
        let absolute = search_domains(&["a.b.".into()]).unwrap();
        assert_eq!(relative, absolute);
        assert_eq!(relative, vec![1, b'a', 1, b'b', 0]);
    }

    proptest::proptest! {
        #[test]
        fn valid_domains_encode_as_length_prefixed_labels(
            labels in proptest::collection::vec("[a-z0-9_]([a-z0-9_-]{0,20}[a-z0-9])?", 0..4),
            last in "[a-z]([a-z0-9-]{0,20}[a-z0-9])?",
        ) {
            let mut all = labels.clone();
            all.push(last);
            let domain = all.join(".");
            proptest::prop_assert!(is_valid_search_domain(&domain), "{}", domain);
            let bytes = search_domains(std::slice::from_ref(&domain)).unwrap();
            let mut expected = Vec::new();
            for label in &all {
                expected.push(label.len() as u8);
                expected.extend_from_slice(label.as_bytes());
            }
            expected.push(0);
            proptest::prop_assert_eq!(bytes, expected);
        }

        #[test]
        fn uppercase_or_spaces_are_never_valid(domain in "[a-z.]{0,10}[A-Z ,][a-z.]{0,10}") {
            proptest::prop_assert!(!is_valid_search_domain(&domain));
        }
    }

    #[test]
    fn empty_route_list_encodes_empty() {
        assert!(classless_routes(&[]).is_empty());
    }
}
