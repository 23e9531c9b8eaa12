//! Kubernetes-shaped objects: metadata, dynamic objects and the [`Resource`] trait for typed ones.
//!
//! Wire types only, no I/O: the decision crates (KubeVirt's API in `weft-vm`, the NPWG types in
//! `weft-netconf`) and the store backends (`weft-store`) all depend on this crate, so no
//! decision compiles against SQLite or kube-rs.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Errors converting between typed and dynamic objects.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The value does not convert (wrong kind, missing or malformed fields).
    #[error("{0}")]
    Invalid(String),
}

/// Identity of a kind of object: what a REST path or a table is keyed by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceType {
    /// `group/version`, or `v1` for the core group.
    pub api_version: String,
    /// CamelCase kind, e.g. `Pod`.
    pub kind: String,
    /// Lower-case plural used in REST paths, e.g. `pods`.
    pub plural: String,
    /// Whether objects of this kind live in a namespace.
    pub namespaced: bool,
}

impl ResourceType {
    /// A resource type from its parts.
    pub fn new(api_version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        }
    }
    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
    }
    /// The API version within the group.
    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(_, v)| v)
            .unwrap_or(&self.api_version)
    }
    /// `namespace/name` (or `name` for cluster-scoped kinds): how errors and logs name an object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{ns}/{name}"),
            _ => name.to_string(),
        }
    }
}

/// A reference from a dependent object to its owner (Kubernetes `ownerReferences`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    /// Owner's apiVersion.
    pub api_version: String,
    /// Owner's kind.
    pub kind: String,
    /// Owner's name.
    pub name: String,
    /// Owner's uid.
    pub uid: String,
    /// Whether the owner is the managing controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    /// Whether deletion of the owner waits for this dependent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

/// Kubernetes `ObjectMeta`, the fields weft uses; every other field is kept in `extra`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Object name, unique per kind and namespace.
    #[serde(default)]
    pub name: String,
    /// Namespace (absent for cluster-scoped kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Unique id assigned by the store at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Opaque version for compare-and-swap; set by the store on every write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Creation time, RFC 3339, set by the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    /// Set when deletion was requested but finalizers still hold the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    /// Labels (selectable).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations (not selectable).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Owners of this object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
    /// Finalizers that must be removed before the object goes away.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    /// Every other metadata field, kept as-is (managedFields, generation, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ObjectMeta {
    /// Metadata with a name and, optionally, a namespace.
    pub fn named(namespace: Option<&str>, name: &str) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.map(Into::into),
            ..Default::default()
        }
    }
    /// An annotation's value, if set.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }
    /// A label's value, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

/// A dynamic object: apiVersion, kind, metadata and the rest of the document (spec, status...).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Object {
    /// `group/version`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Every top-level field other than apiVersion, kind and metadata.
    #[serde(flatten)]
    pub data: Map<String, Value>,
}

impl Object {
    /// An empty object of the given type and name.
    pub fn new(ty: &ResourceType, namespace: Option<&str>, name: &str) -> Self {
        Self {
            api_version: ty.api_version.clone(),
            kind: ty.kind.clone(),
            metadata: ObjectMeta::named(namespace, name),
            data: Map::new(),
        }
    }

    /// Serialise a typed resource into a dynamic object.
    pub fn from_typed<T: Resource>(value: &T) -> Result<Self, ObjectError> {
        let mut json = serde_json::to_value(value).map_err(|e| ObjectError::Invalid(e.to_string()))?;
        let map = json
            .as_object_mut()
            .ok_or_else(|| ObjectError::Invalid(format!("{} does not serialise to an object", T::KIND)))?;
        map.insert("apiVersion".into(), Value::String(T::API_VERSION.into()));
        map.insert("kind".into(), Value::String(T::KIND.into()));
        serde_json::from_value(json).map_err(|e| ObjectError::Invalid(e.to_string()))
    }

    /// Deserialise into a typed resource (apiVersion and kind are checked, then dropped).
    pub fn to_typed<T: Resource>(&self) -> Result<T, ObjectError> {
        if self.kind != T::KIND || self.api_version != T::API_VERSION {
            return Err(ObjectError::Invalid(format!(
                "expected {}/{}, got {}/{}",
                T::API_VERSION,
                T::KIND,
                self.api_version,
                self.kind
            )));
        }
        let mut map = self.data.clone();
        map.insert(
            "metadata".into(),
            serde_json::to_value(&self.metadata).map_err(|e| ObjectError::Invalid(e.to_string()))?,
        );
        serde_json::from_value(Value::Object(map)).map_err(|e| {
            ObjectError::Invalid(format!(
                "{} {}: {e}",
                T::KIND,
                T::resource_type().key(self.metadata.namespace.as_deref(), &self.metadata.name)
            ))
        })
    }

    /// `namespace/name` (or `name`).
    pub fn key(&self) -> String {
        match &self.metadata.namespace {
            Some(ns) => format!("{ns}/{}", self.metadata.name),
            None => self.metadata.name.clone(),
        }
    }

    /// A top-level field (`spec`, `status`, ...).
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.data.get(name)
    }

    /// Follow a dotted path (`spec.nodeName`, `metadata.name`) through the document.
    pub fn path(&self, path: &str) -> Option<Value> {
        let mut parts = path.split('.');
        let first = parts.next()?;
        let mut current: Value = match first {
            "metadata" => serde_json::to_value(&self.metadata).ok()?,
            "apiVersion" => Value::String(self.api_version.clone()),
            "kind" => Value::String(self.kind.clone()),
            other => self.data.get(other)?.clone(),
        };
        for part in parts {
            current = current.get(part)?.clone();
        }
        Some(current)
    }
}

/// A typed kind that can be stored: wire type + its identity.
///
/// The serialised form must be a JSON object with a `metadata` field; `apiVersion` and `kind`
/// are added and removed by [`Object::from_typed`] / [`Object::to_typed`].
pub trait Resource: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// `group/version`.
    const API_VERSION: &'static str;
    /// Kind.
    const KIND: &'static str;
    /// REST plural.
    const PLURAL: &'static str;
    /// Namespaced or cluster-scoped.
    const NAMESPACED: bool = true;

    /// The object's metadata.
    fn metadata(&self) -> &ObjectMeta;
    /// The object's metadata, mutable.
    fn metadata_mut(&mut self) -> &mut ObjectMeta;

    /// The [`ResourceType`] of this kind.
    fn resource_type() -> ResourceType {
        ResourceType::new(Self::API_VERSION, Self::KIND, Self::PLURAL, Self::NAMESPACED)
    }
}

/// A fresh random object uid (UUID v4 text form).
pub fn new_uid() -> String {
    let b: [u8; 16] = rand::random();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let variant = ((u8::from_str_radix(&hex[16..17], 16).unwrap_or(0) & 0x3) | 0x8) as u32;
    format!(
        "{}-{}-4{}-{:x}{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        variant,
        &hex[17..20],
        &hex[20..32]
    )
}

/// Now, as Kubernetes writes timestamps (RFC 3339, second precision, UTC).
pub fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second())
        .map(|t| t.to_string())
        .unwrap_or_else(|_| now.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Thing {
        metadata: ObjectMeta,
        spec: ThingSpec,
        #[serde(flatten)]
        rest: Map<String, Value>,
    }
    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct ThingSpec {
        size: u32,
    }
    impl Resource for Thing {
        const API_VERSION: &'static str = "example.io/v1";
        const KIND: &'static str = "Thing";
        const PLURAL: &'static str = "things";
        fn metadata(&self) -> &ObjectMeta {
            &self.metadata
        }
        fn metadata_mut(&mut self) -> &mut ObjectMeta {
            &mut self.metadata
        }
    }

    #[test]
    fn typed_round_trip_keeps_unknown_fields() {
        let json = serde_json::json!({
            "apiVersion": "example.io/v1", "kind": "Thing",
            "metadata": {"name": "a", "namespace": "ns", "generation": 3},
            "spec": {"size": 2}, "status": {"phase": "Ready"}
        });
        let obj: Object = serde_json::from_value(json.clone()).unwrap();
        let thing: Thing = obj.to_typed().unwrap();
        assert_eq!(thing.spec.size, 2);
        assert_eq!(thing.metadata.extra["generation"], 3);
        let back = Object::from_typed(&thing).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), json);
        assert_eq!(back.path("spec.size"), Some(Value::from(2)));
        assert_eq!(back.path("metadata.name"), Some(Value::from("a")));
    }

    #[test]
    fn wrong_kind_is_rejected() {
        let obj = Object::new(&ResourceType::new("v1", "Pod", "pods", true), Some("ns"), "p");
        assert!(obj.to_typed::<Thing>().is_err());
    }

    #[test]
    fn uid_is_uuid_shaped() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }
}
