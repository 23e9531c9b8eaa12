//! Manifests: YAML (multi-document) or JSON files of Kubernetes-shaped objects, applied to the store.
//!
//! `weft apply` is all-or-nothing per file: [`parse_manifests`] parses and validates every
//! document first (required fields, a known kind, names as the API server checks them) and
//! reports every problem; only a file without any goes to [`apply_objects`], which undoes what
//! it wrote when a write fails midway.

use std::path::Path;

use serde_json::Value;
use weft_store::names::{InvalidObject, validate_metadata};
use weft_store::{Object, ResourceType, Store, StoreError};

use weft_vm::admission::Operation;

use crate::cluster;

/// One problem with one document of a manifest file.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file is not JSON.
    #[error("{origin}: invalid JSON: {source}")]
    Json {
        /// File name.
        origin: String,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The file is not YAML.
    #[error("{origin}: invalid YAML: {source}")]
    Yaml {
        /// File name.
        origin: String,
        /// The parser's error.
        source: Box<serde_saphyr::Error>,
    },
    /// A document lacks apiVersion, kind or metadata.name.
    #[error("{what}: field {field} is required")]
    Required {
        /// `file: document N`.
        what: String,
        /// The missing field.
        field: &'static str,
    },
    /// A document does not have the shape of an object.
    #[error("{what}: {source}")]
    Shape {
        /// `file: document N`.
        what: String,
        /// Why it does not deserialise.
        source: serde_json::Error,
    },
    /// A kind weft does not store.
    #[error("{what}: unknown kind {api_version}/{kind}")]
    UnknownKind {
        /// `file: document N`.
        what: String,
        /// The document's apiVersion.
        api_version: String,
        /// The document's kind.
        kind: String,
    },
    /// A name or namespace the API server would refuse.
    #[error("{what}: {source}")]
    Invalid {
        /// `file: document N`.
        what: String,
        /// The API server's message.
        source: InvalidObject,
    },
}

/// Every problem found in a manifest file (at least one); displayed one per line.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct ManifestErrors(pub Vec<ManifestError>);

/// Parse and validate every object in a YAML or JSON text (multi-document YAML, a JSON object,
/// or a JSON `List`/array): each must carry apiVersion, kind and metadata.name, be of a kind
/// weft knows, and have a valid name and namespace (namespaced objects without one get
/// `default`). Every document is checked; all problems are returned together.
pub fn parse_manifests(text: &str, origin: &str) -> Result<Vec<Object>, ManifestErrors> {
    parse_manifests_in(text, origin, "default")
}

/// [`parse_manifests`], with namespaced objects that name none put in `namespace` (`-n`).
pub fn parse_manifests_in(text: &str, origin: &str, namespace: &str) -> Result<Vec<Object>, ManifestErrors> {
    let documents: Vec<Value> = if text.trim_start().starts_with(['{', '[']) {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => items,
            Ok(Value::Object(map)) if map.get("kind").and_then(Value::as_str) == Some("List") => map
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            Ok(other) => vec![other],
            Err(source) => {
                return Err(ManifestErrors(vec![ManifestError::Json {
                    origin: origin.into(),
                    source,
                }]));
            }
        }
    } else {
        serde_saphyr::from_multiple::<Value>(text).map_err(|source| {
            ManifestErrors(vec![ManifestError::Yaml {
                origin: origin.into(),
                source: Box::new(source),
            }])
        })?
    };
    let mut objects = Vec::new();
    let mut errors = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        if document.is_null() {
            continue;
        }
        match check_document(document, &format!("{origin}: document {}", index + 1), namespace) {
            Ok(object) => objects.push(object),
            Err(error) => errors.push(error),
        }
    }
    if errors.is_empty() {
        Ok(objects)
    } else {
        Err(ManifestErrors(errors))
    }
}

/// One document → a valid object of a known kind, or its first problem.
fn check_document(document: Value, what: &str, namespace: &str) -> Result<Object, ManifestError> {
    let text = |pointer: &str| {
        document
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    };
    for (pointer, field) in [
        ("/apiVersion", "apiVersion"),
        ("/kind", "kind"),
        ("/metadata/name", "metadata.name"),
    ] {
        if text(pointer) {
            return Err(ManifestError::Required {
                what: what.into(),
                field,
            });
        }
    }
    let mut object: Object = serde_json::from_value(document).map_err(|source| ManifestError::Shape {
        what: what.into(),
        source,
    })?;
    let ty = cluster::known_type_of(&object).ok_or_else(|| ManifestError::UnknownKind {
        what: what.into(),
        api_version: object.api_version.clone(),
        kind: object.kind.clone(),
    })?;
    if ty.namespaced && object.metadata.namespace.is_none() {
        object.metadata.namespace = Some(namespace.into());
    }
    validate_metadata(&ty, &object.metadata).map_err(|source| ManifestError::Invalid {
        what: what.into(),
        source,
    })?;
    Ok(object)
}

/// A write of [`apply_objects`] failed; what it had written was undone (or could not be).
#[derive(Debug, thiserror::Error)]
#[error("{action} {label}: {source}{}", rollback_text(.rolled_back, .rollback_failed))]
pub struct ApplyError {
    /// `create` or `update`.
    pub action: &'static str,
    /// `kind/name` of the object whose write failed.
    pub label: String,
    /// The store's answer.
    pub source: StoreError,
    /// Objects this apply had written and then restored (deleted, or put back as they were).
    pub rolled_back: Vec<String>,
    /// Objects this apply wrote and could not restore, with why.
    pub rollback_failed: Vec<String>,
}

fn rollback_text(done: &[String], failed: &[String]) -> String {
    let mut out = String::new();
    if !done.is_empty() {
        out.push_str(&format!("\nrolled back: {}", done.join(", ")));
    }
    for failure in failed {
        out.push_str(&format!("\nrollback failed: {failure}"));
    }
    out
}

/// What an apply wrote, to undo it: a created object is deleted, an updated one gets its
/// `previous` state back (both only if nobody changed it since).
struct Written {
    ty: ResourceType,
    /// The object as this apply stored it.
    stored: Object,
    /// The state before an update; `None` for a create.
    previous: Option<Box<Object>>,
}

/// Create each object, or update it when it exists (its status is kept). Objects must come
/// from [`parse_manifests`] (known kinds, namespaces filled in). When a write fails, every
/// earlier write of this call is undone in reverse order — created objects are deleted,
/// updated ones get their previous body back — with the resourceVersion this call wrote as
/// precondition, so a concurrent writer's change is never clobbered (it is reported instead).
pub async fn apply_objects(store: &dyn Store, objects: Vec<Object>) -> Result<Vec<String>, ApplyError> {
    let mut done = Vec::new();
    let mut written = Vec::new();
    for mut object in objects {
        let Some(ty) = cluster::known_type_of(&object) else {
            let label = format!("{}/{}", object.kind.to_lowercase(), object.metadata.name);
            let source = StoreError::Invalid(format!("unknown kind {}/{}", object.api_version, object.kind));
            return Err(rollback(store, written, "create", label, source).await);
        };
        if ty.namespaced && object.metadata.namespace.is_none() {
            object.metadata.namespace = Some("default".into());
        }
        let label = format!("{}/{}", ty.kind.to_lowercase(), object.metadata.name);
        let current = match store
            .get(&ty, object.metadata.namespace.as_deref(), &object.metadata.name)
            .await
        {
            Ok(current) => current,
            Err(source) => return Err(rollback(store, written, "get", label, source).await),
        };
        match current {
            None => match store.create(&ty, object).await {
                Ok(stored) => {
                    written.push(Written {
                        ty,
                        stored,
                        previous: None,
                    });
                    done.push(format!("{label} created"));
                }
                Err(source) => return Err(rollback(store, written, "create", label, source).await),
            },
            Some(current) => {
                object.metadata.resource_version = current.metadata.resource_version.clone();
                object.metadata.uid = current.metadata.uid.clone();
                // Annotations and labels others wrote (network-status, sandbox ids...) stay, as
                // with kubectl apply; the manifest's own keys win.
                for (key, value) in &current.metadata.annotations {
                    object
                        .metadata
                        .annotations
                        .entry(key.clone())
                        .or_insert_with(|| value.clone());
                }
                for (key, value) in &current.metadata.labels {
                    object
                        .metadata
                        .labels
                        .entry(key.clone())
                        .or_insert_with(|| value.clone());
                }
                match store.update(&ty, object).await {
                    Ok(stored) => {
                        written.push(Written {
                            ty,
                            stored,
                            previous: Some(Box::new(current)),
                        });
                        done.push(format!("{label} configured"));
                    }
                    Err(source) => return Err(rollback(store, written, "update", label, source).await),
                }
            }
        }
    }
    Ok(done)
}

/// Undo `written` (newest first) after `action label` failed with `source`.
async fn rollback(
    store: &dyn Store,
    written: Vec<Written>,
    action: &'static str,
    label: String,
    source: StoreError,
) -> ApplyError {
    let mut rolled_back = Vec::new();
    let mut rollback_failed = Vec::new();
    // The resourceVersion each object has after this rollback's own writes: an object the file
    // names twice (created, then updated) is restored first, then deleted at the restored version.
    let mut versions: std::collections::HashMap<(String, String), Option<String>> = Default::default();
    for Written { ty, stored, previous } in written.into_iter().rev() {
        let id = (ty.kind.clone(), stored.key());
        let expected = versions
            .get(&id)
            .cloned()
            .unwrap_or_else(|| stored.metadata.resource_version.clone());
        let result = match previous {
            None => store
                .delete(
                    &ty,
                    stored.metadata.namespace.as_deref(),
                    &stored.metadata.name,
                    expected.as_deref(),
                )
                .await
                .map(|_| None),
            Some(previous) => {
                let mut previous = *previous;
                previous.metadata.resource_version = expected;
                store
                    .update(&ty, previous)
                    .await
                    .map(|restored| Some(restored.metadata.resource_version))
            }
        };
        let what = format!("{}/{}", ty.kind.to_lowercase(), stored.metadata.name);
        match result {
            Ok(version) => {
                if let Some(version) = version {
                    versions.insert(id, version);
                }
                rolled_back.push(what);
            }
            Err(error) => rollback_failed.push(format!("{what}: {error}")),
        }
    }
    ApplyError {
        action,
        label,
        source,
        rolled_back,
        rollback_failed,
    }
}

/// Admission of every VirtualMachine and VirtualMachineInstance of a file before anything is
/// written (KubeVirt's webhooks): a create or an update (the object exists) is defaulted and
/// validated by `weft_vm::admission`. Returns one line per cause of every denied object
/// (`FILE: The VirtualMachine "bad" is invalid: FIELD: Invalid value: ...`); empty when all are
/// admitted, and then the VMIs carry their network defaults.
pub async fn admit_objects(
    store: &dyn Store,
    objects: &mut [Object],
    origin: &str,
) -> Result<Vec<String>, StoreError> {
    let config = weft_vm::ClusterConfig::default();
    let mut lines = Vec::new();
    for object in objects.iter_mut() {
        let Some(ty) = cluster::known_type_of(object) else {
            continue;
        };
        let exists = store
            .get(&ty, object.metadata.namespace.as_deref(), &object.metadata.name)
            .await?
            .is_some();
        let operation = if exists {
            Operation::Update
        } else {
            Operation::Create
        };
        let causes = crate::admission::admit_object(object, operation, &config)?;
        lines.extend(
            crate::admission::invalid_lines(&object.kind, &object.metadata.name, &causes)
                .into_iter()
                .map(|line| format!("{origin}: {line}")),
        );
    }
    Ok(lines)
}

/// Read and parse a manifest file (`-` for stdin), objects without a namespace in
/// `namespace`; `None` when the file has problems, each printed on stderr (one line each).
pub fn read_manifests(file: &Path, namespace: &str) -> anyhow::Result<Option<Vec<Object>>> {
    use anyhow::Context;
    let text = if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("read stdin")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?
    };
    match parse_manifests_in(&text, &file.display().to_string(), namespace) {
        Ok(objects) => Ok(Some(objects)),
        Err(ManifestErrors(errors)) => {
            for error in errors {
                eprintln!("error: {}", one_line(&error.to_string()));
            }
            Ok(None)
        }
    }
}

/// `weft apply -f FILE`: every problem of the file is printed (one line each) and nothing is
/// written unless the whole file is valid and every VM/VMI is admitted ([`admit_objects`]); a failed write rolls back the earlier ones.
pub async fn apply(state: &Path, file: &Path, namespace: &str) -> anyhow::Result<i32> {
    let Some(objects) = read_manifests(file, namespace)? else {
        return Ok(1);
    };
    let store = cluster::open_running_store(state).await?;
    let mut objects = objects;
    let denied = admit_objects(store.as_ref(), &mut objects, &file.display().to_string()).await?;
    if !denied.is_empty() {
        for line in denied {
            eprintln!("error: {line}");
        }
        return Ok(1);
    }
    match apply_objects(store.as_ref(), objects).await {
        Ok(lines) => {
            for line in lines {
                println!("{line}");
            }
            Ok(0)
        }
        Err(error) => {
            for line in error.to_string().lines() {
                eprintln!("error: {line}");
            }
            Ok(1)
        }
    }
}

/// A message on one line (YAML parser errors carry snippets over several).
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_store::Resource;

    const GOOD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: data\nspec:\n  config: '{\"cniVersion\":\"1.0.0\"}'\n";

    #[test]
    fn yaml_documents_become_objects() {
        let objects = parse_manifests(GOOD, "test.yaml").unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[1].kind, "NetworkAttachmentDefinition");
        assert_eq!(objects[0].metadata.namespace.as_deref(), Some("default"));
    }

    #[test]
    fn missing_name_is_named_in_the_error() {
        let err = parse_manifests("apiVersion: v1\nkind: Pod\nmetadata: {}\n", "x.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "x.yaml: document 1: field metadata.name is required"
        );
    }

    #[test]
    fn every_bad_document_is_reported() {
        let text = format!(
            "{GOOD}---\napiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: Bad/Name\n---\nkind: Pod\nmetadata:\n  name: b\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: c\n  namespace: a..b\n---\napiVersion: example.io/v1\nkind: Thing\nmetadata:\n  name: t\n"
        );
        let ManifestErrors(errors) = parse_manifests(&text, "f.yaml").unwrap_err();
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[0].starts_with(
            "f.yaml: document 3: The VirtualMachine \"Bad/Name\" is invalid: metadata.name: Invalid value: \"Bad/Name\": a lowercase RFC 1123 subdomain must consist of"
        ), "{}", lines[0]);
        assert_eq!(lines[1], "f.yaml: document 4: field apiVersion is required");
        assert!(
            lines[2].contains("metadata.namespace: Invalid value: \"a..b\""),
            "{}",
            lines[2]
        );
        assert_eq!(lines[3], "f.yaml: document 6: unknown kind example.io/v1/Thing");
    }

    #[tokio::test]
    async fn a_failed_write_rolls_back_the_earlier_ones() {
        let store = weft_store::MemoryStore::new();
        let pods = crate::kinds::Pod::resource_type();
        // The file updates an existing pod, creates a NAD, then hits a create the store
        // refuses (an object that did not come through parse_manifests).
        let mut existing = Object::new(&pods, Some("default"), "a");
        existing
            .data
            .insert("spec".into(), serde_json::json!({"nodeName": "n0"}));
        store.create(&pods, existing).await.unwrap();
        let mut objects = parse_manifests(GOOD, "t.yaml").unwrap();
        objects[0]
            .data
            .insert("spec".into(), serde_json::json!({"nodeName": "n1"}));
        // The NAD twice: created, then updated; both writes are undone.
        let mut nad_again = objects[1].clone();
        nad_again.metadata.labels.insert("again".into(), "yes".into());
        objects.push(nad_again);
        let mut bad = Object::new(&pods, Some("default"), "x");
        bad.metadata.name = "Bad/Name".into();
        objects.push(bad);
        let err = apply_objects(&store, objects).await.unwrap_err();
        assert!(err.source.is_invalid(), "{err}");
        assert_eq!(
            err.rolled_back,
            [
                "networkattachmentdefinition/data",
                "networkattachmentdefinition/data",
                "pod/a"
            ]
        );
        assert!(err.rollback_failed.is_empty(), "{err}");
        let nads = weft_netconf::NetworkAttachmentDefinition::resource_type();
        assert!(store.get(&nads, Some("default"), "data").await.unwrap().is_none());
        let a = store.get(&pods, Some("default"), "a").await.unwrap().unwrap();
        assert_eq!(a.data["spec"]["nodeName"], "n0");
    }
}
