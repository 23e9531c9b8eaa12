//! `status.interfaces[].infoSource`: a `", "`-separated set of who reported the interface.

/// Reported by the libvirt domain.
pub const DOMAIN: &str = "domain";
/// Reported by the guest agent.
pub const GUEST_AGENT: &str = "guest-agent";
/// Reported by Multus (network-status of the launcher pod).
pub const MULTUS_STATUS: &str = "multus-status";
/// `domain, guest-agent`.
pub const DOMAIN_AND_GUEST_AGENT: &str = "domain, guest-agent";

const SEPARATOR: &str = ", ";

/// The entries of `info_source`: split on commas, spaces around entries ignored (a
/// hand-written status may lack them), empty entries dropped. The one parser `add`, `remove`
/// and `contains` share, so they agree on what is in the list.
fn items(info_source: &str) -> Vec<&str> {
    info_source
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .collect()
}

/// `info_source` with `item` appended unless already present.
pub fn add(info_source: &str, item: &str) -> String {
    let mut list = items(info_source);
    if !list.contains(&item) {
        list.push(item);
    }
    list.join(SEPARATOR)
}

/// `info_source` without `item` (possibly empty).
pub fn remove(info_source: &str, item: &str) -> String {
    items(info_source)
        .into_iter()
        .filter(|i| *i != item)
        .collect::<Vec<_>>()
        .join(SEPARATOR)
}

/// Whether `item` is one of the sources: an entry of the comma-separated list (spaces around
/// entries ignored, as a hand-written status may lack them), never a substring of one
/// (`guest-agent-foo` is not `guest-agent`).
pub fn contains(info_source: &str, item: &str) -> bool {
    items(info_source).contains(&item)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_matches_whole_entries() {
        assert!(contains(DOMAIN_AND_GUEST_AGENT, GUEST_AGENT));
        assert!(contains(DOMAIN_AND_GUEST_AGENT, DOMAIN));
        assert!(contains("domain,guest-agent", GUEST_AGENT));
        assert!(contains(" guest-agent ", GUEST_AGENT));
        assert!(!contains("guest-agent-foo", GUEST_AGENT));
        assert!(!contains("domain, my-guest-agent", GUEST_AGENT));
        assert!(!contains("", GUEST_AGENT));
        assert_eq!(add(DOMAIN, GUEST_AGENT), DOMAIN_AND_GUEST_AGENT);
        // add/remove read the list as contains does: no duplicate, nothing left behind.
        assert_eq!(
            add("domain,multus-status", MULTUS_STATUS),
            "domain, multus-status"
        );
        assert_eq!(remove("domain,multus-status", MULTUS_STATUS), DOMAIN);
        assert_eq!(remove(DOMAIN_AND_GUEST_AGENT, DOMAIN), GUEST_AGENT);
    }
}
