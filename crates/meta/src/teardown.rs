//! Rollback after a failed ADD and teardown order for DEL (docs/upstream/multus.md §3.1 step 9,
//! §3.10; `vectors/multus/08-add-failure-rollback.json`), with Multus's messages.

use crate::args::K8sArgs;
use crate::plan::DelegatePlan;

/// Multus's rollback when ADD of delegate `failed` fails: `failed`, `failed − 1`, …, `0` (the
/// failed one too). weft does not roll back this way (see [`rollback_targets`]).
pub fn rollback_order(failed: usize) -> Vec<usize> {
    (0..=failed).rev().collect()
}

/// The delegates to DEL after a failed ADD, last to first: exactly those whose ADD succeeded
/// (`succeeded[i]`). A failed delegate is not DELeted: it made nothing this ADD may claim, and
/// its interface name may be another container's (a shared namespace; the name being taken is
/// why its ADD failed), which its DEL would remove. Plugins clean up their own failed ADD, and
/// a conflist delegate undoes its earlier plugins itself (`weft_cni::CniRuntime::add`).
pub fn rollback_targets(succeeded: &[bool]) -> Vec<usize> {
    (0..succeeded.len()).rev().filter(|i| succeeded[*i]).collect()
}

/// DEL order for `count` delegates: last to first.
pub fn teardown_order(count: usize) -> Vec<usize> {
    (0..count).rev().collect()
}

/// The ADD error: `[<ns>/<pod>/<uid>:<net>]: error adding container to network "<net>": <err>`.
pub fn add_failure_message(k8s: &K8sArgs, plan: &DelegatePlan, error: &str) -> String {
    let net = plan.network_name();
    format!(
        "[{}:{net}]: error adding container to network \"{net}\": {error}",
        k8s.pod_label()
    )
}

/// The DEL error when some delegates failed: `errors: <e1> / <e2> …`, each naming its network.
pub fn del_failure_message(errors: &[(String, String)]) -> String {
    let parts: Vec<String> = errors
        .iter()
        .map(|(network, e)| format!("DelegateDel - \"{network}\": {e}"))
        .collect();
    format!("errors: {}", parts.join(" / "))
}

/// What to do with the cache after a DEL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheAfterDel {
    /// Every delegate is gone: remove the record.
    Remove,
    /// Some delegate still holds resources: keep the record so the runtime's retry finds them.
    Keep,
}

/// Keep the cache when a delegate DEL failed for a reason other than "already gone"
/// (Multus removes it unless `retryDeleteOnError`, leaking IPs: #355 — docs/compat.md).
pub fn cache_after_del(errors: &[String]) -> CacheAfterDel {
    if errors.iter().all(|e| e.contains("no such file or directory")) {
        CacheAfterDel::Remove
    } else {
        CacheAfterDel::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders() {
        assert_eq!(rollback_order(0), vec![0]);
        assert_eq!(rollback_order(3), vec![3, 2, 1, 0]);
        assert_eq!(rollback_targets(&[true, true, false, false]), vec![1, 0]);
        assert_eq!(rollback_targets(&[false]), Vec::<usize>::new());
        assert_eq!(rollback_targets(&[true, false, true, false]), vec![2, 0]);
        assert_eq!(teardown_order(3), vec![2, 1, 0]);
        assert!(teardown_order(0).is_empty());
    }

    #[test]
    fn cache_disposition() {
        assert_eq!(cache_after_del(&[]), CacheAfterDel::Remove);
        assert_eq!(
            cache_after_del(&["open /x: no such file or directory".into()]),
            CacheAfterDel::Remove
        );
        assert_eq!(cache_after_del(&["boom".into()]), CacheAfterDel::Keep);
        assert_eq!(
            del_failure_message(&[("a".into(), "x".into()), ("b".into(), "y".into())]),
            "errors: DelegateDel - \"a\": x / DelegateDel - \"b\": y"
        );
    }
}
