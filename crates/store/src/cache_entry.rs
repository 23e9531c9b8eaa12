//! How a watch cache holds one object: whole, or packed as its compact JSON text.
//!
//! A dynamic [`Object`] is a tree of `serde_json` maps (an `IndexMap` per JSON object, a
//! B-tree per label map): a projected VM with two networks costs 2–3 KiB held whole, its text
//! about 350 bytes. A controller that caches 10,000 VMs and 20,000 claims beside KubeVirt
//! only reads a few of them per change, so it keeps those kinds packed and pays a parse per
//! read instead (docs/benchmarks.md, "Controller at 10,000 VMs").

use crate::{Object, StoreError};

/// One cached object.
#[derive(Debug, Clone)]
pub(crate) enum CacheEntry {
    /// The object as it came (the local cluster's roles, kinds read whole and often).
    Whole(Box<Object>),
    /// The object's compact JSON text, with its resourceVersion kept aside for the
    /// freshness comparison every watch event makes.
    Packed {
        resource_version: Option<u64>,
        text: Box<str>,
    },
}

/// The numeric resourceVersion of `object`, if it has one (the API's are opaque strings, but
/// every backend weft talks to makes them decimal counters).
pub(crate) fn resource_version(object: &Object) -> Option<u64> {
    object
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
}

impl CacheEntry {
    /// Hold `object` whole, or packed when `packed`.
    pub(crate) fn new(object: Object, packed: bool) -> Self {
        if packed {
            Self::packed(&object)
        } else {
            CacheEntry::Whole(Box::new(object))
        }
    }

    /// A copy of `object`, packed when `packed` (no intermediate copy when packed).
    pub(crate) fn of(object: &Object, packed: bool) -> Self {
        if packed {
            Self::packed(object)
        } else {
            CacheEntry::Whole(Box::new(object.clone()))
        }
    }

    /// `object` packed, without taking it (an object that does not serialise, which no parsed
    /// object is, is held whole).
    pub(crate) fn packed(object: &Object) -> Self {
        match serde_json::to_string(object) {
            Ok(text) => CacheEntry::Packed {
                resource_version: resource_version(object),
                text: text.into_boxed_str(),
            },
            Err(_) => CacheEntry::Whole(Box::new(object.clone())),
        }
    }

    /// The object (a copy; parsed from the text when packed).
    pub(crate) fn object(&self) -> Result<Object, StoreError> {
        match self {
            CacheEntry::Whole(object) => Ok(object.as_ref().clone()),
            CacheEntry::Packed { text, .. } => serde_json::from_str(text)
                .map_err(|e| StoreError::Backend(format!("cached object does not parse back: {e}"))),
        }
    }

    /// Whether `candidate` is at least as fresh as this entry (by resourceVersion; an object
    /// without a numeric one always wins, as before packing).
    pub(crate) fn is_not_newer_than(&self, candidate: &Object) -> bool {
        let cached = match self {
            CacheEntry::Whole(object) => resource_version(object),
            CacheEntry::Packed { resource_version, .. } => *resource_version,
        };
        match (resource_version(candidate), cached) {
            (Some(candidate), Some(cached)) => candidate >= cached,
            _ => true,
        }
    }

    /// The resourceVersion string, for change detection on a relist.
    pub(crate) fn same_version_as(&self, other: &Object) -> bool {
        match self {
            CacheEntry::Whole(object) => object.metadata.resource_version == other.metadata.resource_version,
            CacheEntry::Packed {
                resource_version: rv, ..
            } => resource_version(other) == *rv,
        }
    }

    /// Heap bytes held by a packed entry's text (0 when whole): for tests of the saving.
    #[cfg(test)]
    pub(crate) fn packed_len(&self) -> usize {
        match self {
            CacheEntry::Whole(_) => 0,
            CacheEntry::Packed { text, .. } => text.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(rv: &str) -> Object {
        serde_json::from_value(json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm-00001", "namespace": "scale-0", "resourceVersion": rv,
                "uid": "0b7c3e1a-2f4d-4c59-9a8e-5d6f7a8b9c0d", "labels": {"a": "b"}},
            "spec": {"template": {"spec": {"networks": [
                {"name": "blue", "multus": {"networkName": "blue"}},
                {"name": "green", "multus": {"networkName": "green", "default": false}}]}}}}))
        .unwrap()
    }

    #[test]
    fn a_packed_object_reads_back_equal_and_small() {
        let entry = CacheEntry::new(vm("41"), true);
        assert_eq!(entry.object().unwrap(), vm("41"));
        assert!(entry.packed_len() < 400, "{}", entry.packed_len());
        assert!(matches!(CacheEntry::new(vm("41"), false), CacheEntry::Whole(_)));
    }

    #[test]
    fn freshness_and_version_compare_the_same_whole_or_packed() {
        for packed in [false, true] {
            let entry = CacheEntry::new(vm("41"), packed);
            assert!(
                entry.is_not_newer_than(&vm("41")),
                "equal wins (packed: {packed})"
            );
            assert!(entry.is_not_newer_than(&vm("42")));
            assert!(
                !entry.is_not_newer_than(&vm("40")),
                "older loses (packed: {packed})"
            );
            assert!(entry.is_not_newer_than(&vm("")), "no version: wins");
            assert!(entry.same_version_as(&vm("41")));
            assert!(!entry.same_version_as(&vm("42")));
        }
    }
}
