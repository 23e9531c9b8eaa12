//! `namespace/name` references (a NAD in `multus.networkName`, an IPAMClaim, a selection element's
//! key): the one place the tree splits them.

/// `(namespace, name)` of `namespace/name`, split at the first `/` (so `ns/a/b` is `ns` and `a/b`,
/// as KubeVirt's `GetNamespaceAndNetworkName`); a bare `name` is in `default_namespace`.
pub fn split_namespaced<'a>(reference: &'a str, default_namespace: &'a str) -> (&'a str, &'a str) {
    reference
        .split_once('/')
        .unwrap_or((default_namespace, reference))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_the_first_slash_else_uses_the_default() {
        assert_eq!(split_namespaced("ns/a", "x"), ("ns", "a"));
        assert_eq!(split_namespaced("ns/a/b", "x"), ("ns", "a/b"));
        assert_eq!(split_namespaced("a", "x"), ("x", "a"));
        assert_eq!(split_namespaced("a", ""), ("", "a"));
        assert_eq!(split_namespaced("/a", "x"), ("", "a"));
    }
}
