//! Reading a request: the REST path's target, and the query as kube-rs encodes it.

/// Which object or collection a request path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `group/version`, or `v1` for the core group.
    pub api_version: String,
    /// Namespace from the path, if any.
    pub namespace: Option<String>,
    /// Resource plural.
    pub plural: String,
    /// Object name, absent for a collection.
    pub name: Option<String>,
    /// Whether the path ends in `/status`.
    pub status: bool,
}

/// Parse a Kubernetes REST path (`/api/v1/namespaces/ns/pods/a/status`, `/apis/g/v/nodes`).
pub fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (api_version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => (version.to_string(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, rest @ ..] => (Some(ns.to_string()), [&[*plural][..], rest].concat()),
        other => (None, other.to_vec()),
    };
    let (plural, name, status) = match rest.as_slice() {
        [plural] => (plural, None, false),
        [plural, name] => (plural, Some(name.to_string()), false),
        [plural, name, "status"] => (plural, Some(name.to_string()), true),
        _ => return None,
    };
    Some(Target {
        api_version,
        namespace,
        plural: plural.to_string(),
        name,
        status,
    })
}

/// Decode `%XX` escapes and `+` (query strings as kube-rs encodes them).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The query parameters of a URI, decoded.
pub(super) fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// `k=v,k2=v2` into pairs (equality selectors only).
pub(super) fn selector_pairs(selector: &str) -> Vec<(String, String)> {
    selector
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            // `k=v` and `k==v` are the same selector.
            let (k, v) = s.split_once('=').unwrap_or((s, ""));
            (k.to_string(), v.strip_prefix('=').unwrap_or(v).to_string())
        })
        .collect()
}

/// One page of a list (`limit` / `continue`, as kube-apiserver pages).
pub(super) struct Page {
    /// The objects of this page.
    pub items: Vec<crate::Object>,
    /// The list's resourceVersion (a continued list keeps the first page's).
    pub resource_version: String,
    /// The token for the next page, if any remain.
    pub next: Option<String>,
    /// Objects after this page.
    pub remaining: usize,
}

/// The page of `list` (ordered by namespace, name) after the `continue` token's key, at most
/// `limit` objects. The token is `<resourceVersion>/<namespace>/<name>` of the page's last
/// object; unlike kube-apiserver's, later pages show the current objects, not the snapshot's
/// (a watch from the first page's resourceVersion replays what changed meanwhile).
pub(super) fn page(list: crate::ObjectList, limit: Option<usize>, token: Option<&str>) -> Page {
    let mut resource_version = list.resource_version;
    let mut items = list.items;
    if let Some((rv, key)) = token.and_then(|t| t.split_once('/')) {
        resource_version = rv.to_string();
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        items.retain(|o| {
            (
                o.metadata.namespace.as_deref().unwrap_or(""),
                o.metadata.name.as_str(),
            ) > (ns, name)
        });
    }
    let Some(limit) = limit.filter(|l| *l < items.len()) else {
        return Page {
            items,
            resource_version,
            next: None,
            remaining: 0,
        };
    };
    let remaining = items.len() - limit;
    items.truncate(limit);
    let last = items.last().expect("limit > 0");
    let next = format!(
        "{resource_version}/{}/{}",
        last.metadata.namespace.as_deref().unwrap_or(""),
        last.metadata.name
    );
    Page {
        items,
        resource_version,
        next: Some(next),
        remaining,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_target() {
        let t = parse_path("/api/v1/namespaces/ns/pods/a/status").unwrap();
        assert_eq!(
            t,
            Target {
                api_version: "v1".into(),
                namespace: Some("ns".into()),
                plural: "pods".into(),
                name: Some("a".into()),
                status: true
            }
        );
        let t = parse_path("/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions").unwrap();
        assert_eq!((t.api_version.as_str(), t.name), ("k8s.cni.cncf.io/v1", None));
        let t = parse_path("/api/v1/nodes/n1").unwrap();
        assert_eq!((t.namespace, t.name.as_deref()), (None, Some("n1")));
        assert_eq!(parse_path("/api/v1/pods").unwrap().plural, "pods");
        assert!(parse_path("/healthz").is_none());
        assert!(parse_path("/api/v1/namespaces/ns/pods/a/exec/x").is_none());
    }

    #[test]
    fn query_values_are_decoded() {
        assert_eq!(percent_decode("app%3Dweb%2Ctier%3Dfront"), "app=web,tier=front");
        assert_eq!(percent_decode("a+b%2"), "a b%2");
        assert_eq!(
            selector_pairs("app=web,spec.nodeName==n1"),
            [
                ("app".into(), "web".into()),
                ("spec.nodeName".into(), "n1".into())
            ]
        );
    }

    #[test]
    fn lists_are_paged_by_limit_and_continue_in_order() {
        let objects: Vec<crate::Object> = (0..5)
            .map(|i| {
                serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("p{i}"), "namespace": if i < 2 { "a" } else { "b" }}}))
                .unwrap()
            })
            .collect();
        let list = |rv: &str| crate::ObjectList {
            items: objects.clone(),
            resource_version: rv.into(),
        };
        let names = |p: &Page| {
            p.items
                .iter()
                .map(|o| o.metadata.name.clone())
                .collect::<Vec<_>>()
        };
        let first = page(list("7"), Some(2), None);
        assert_eq!(names(&first), ["p0", "p1"]);
        assert_eq!((first.next.as_deref(), first.remaining), (Some("7/a/p1"), 3));
        let second = page(list("9"), Some(2), first.next.as_deref());
        assert_eq!(names(&second), ["p2", "p3"]);
        assert_eq!(
            second.resource_version, "7",
            "a continued list keeps its first resourceVersion"
        );
        let last = page(list("9"), Some(2), second.next.as_deref());
        assert_eq!((names(&last), last.next), (vec!["p4".to_string()], None));
        let whole = page(list("7"), None, None);
        assert_eq!((whole.items.len(), whole.next), (5, None));
    }
}
