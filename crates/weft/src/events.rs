//! Emitting core/v1 Events: one object per (involved object, reason), a repeat bumps `count`.

use std::sync::Arc;

use weft_store::{Api, Store, StoreError};

use crate::kinds::{Event, ObjectReference};

/// `Normal` event type.
pub const NORMAL: &str = "Normal";
/// `Warning` event type.
pub const WARNING: &str = "Warning";

/// Namespace an event about `object` lives in (cluster-scoped objects: `default`, as kubectl).
pub fn event_namespace(object: &ObjectReference) -> String {
    if object.namespace.is_empty() {
        "default".into()
    } else {
        object.namespace.clone()
    }
}

/// Name of the event about `object` for `reason`: stable, so a repeat finds it.
pub fn event_name(object: &ObjectReference, reason: &str) -> String {
    // FNV-1a over kind/name/reason: short, stable across processes (unlike std's hasher).
    let mut hash: u64 = 0xcbf29ce484222325;
    for byte in format!("{}/{}/{reason}", object.kind, object.name).bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    format!("{}.{:016x}", object.name.to_lowercase(), hash)
}

/// The event after one more occurrence at `now`: a new one (count 1), or `existing` bumped.
pub fn occurrence(
    existing: Option<Event>,
    object: &ObjectReference,
    type_: &str,
    reason: &str,
    message: &str,
    component: &str,
    now: &str,
) -> Event {
    occurrences(existing, object, type_, reason, message, component, now, 1)
}

/// The event after `n` more occurrences, the last at `now` (an aggregating recorder's write).
#[allow(clippy::too_many_arguments)]
pub fn occurrences(
    existing: Option<Event>,
    object: &ObjectReference,
    type_: &str,
    reason: &str,
    message: &str,
    component: &str,
    now: &str,
    n: u32,
) -> Event {
    let mut event = existing.unwrap_or_else(|| {
        let mut fresh = Event::default();
        fresh.metadata.name = event_name(object, reason);
        fresh.metadata.namespace = Some(event_namespace(object));
        fresh.involved_object = object.clone();
        fresh.reason = reason.into();
        fresh.first_timestamp = now.into();
        fresh
    });
    event.count += n;
    event.type_ = type_.into();
    event.message = message.into();
    event.last_timestamp = now.into();
    event.reporting_component = component.into();
    event
}

/// Record an occurrence of `reason` about `object` (create, or bump the existing event).
pub async fn emit(
    store: &Arc<dyn Store>,
    object: &ObjectReference,
    type_: &str,
    reason: &str,
    message: &str,
    component: &str,
) -> Result<Event, StoreError> {
    let api = Api::<Event>::namespaced(store.clone(), &event_namespace(object));
    let name = event_name(object, reason);
    let now = weft_store::now_rfc3339();
    loop {
        let existing = api.get(&name).await?;
        let is_new = existing.is_none();
        let next = occurrence(existing, object, type_, reason, message, component, &now);
        let result = if is_new {
            api.create(&next).await
        } else {
            api.replace(&next).await
        };
        match result {
            Err(e) if e.is_conflict() || e.is_already_exists() => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> ObjectReference {
        ObjectReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            namespace: String::new(),
            name: "node1".into(),
        }
    }

    #[test]
    fn a_repeat_bumps_count_and_keeps_the_first_time() {
        let first = occurrence(
            None,
            &node(),
            WARNING,
            "AgentDown",
            "exited",
            "weft-supervisor",
            "t1",
        );
        assert_eq!((first.count, first.first_timestamp.as_str()), (1, "t1"));
        assert_eq!(first.metadata.namespace.as_deref(), Some("default"));
        let second = occurrence(
            Some(first.clone()),
            &node(),
            WARNING,
            "AgentDown",
            "exited again",
            "weft-supervisor",
            "t2",
        );
        assert_eq!(second.count, 2);
        assert_eq!(second.first_timestamp, "t1");
        assert_eq!(second.last_timestamp, "t2");
        assert_eq!(second.metadata.name, first.metadata.name);
        assert_eq!(second.message, "exited again");
    }

    #[test]
    fn names_differ_by_reason_and_object() {
        let a = event_name(&node(), "AgentDown");
        assert_ne!(a, event_name(&node(), "AgentRestarted"));
        let other = ObjectReference {
            name: "node2".into(),
            ..node()
        };
        assert_ne!(a, event_name(&other, "AgentDown"));
        assert_eq!(a, event_name(&node(), "AgentDown"), "stable");
    }
}
