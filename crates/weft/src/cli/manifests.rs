//! Manifests: YAML (multi-document) or JSON files of Kubernetes-shaped objects, applied to the store.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;
use weft_store::{Object, Store};

use crate::cluster;

/// Parse every object in a YAML or JSON text (multi-document YAML, a JSON object, or a JSON
/// `List`/array). Each object must carry apiVersion, kind and metadata.name.
pub fn parse_manifests(text: &str, origin: &str) -> anyhow::Result<Vec<Object>> {
    let documents: Vec<Value> = if text.trim_start().starts_with(['{', '[']) {
        match serde_json::from_str::<Value>(text).with_context(|| format!("{origin}: invalid JSON"))? {
            Value::Array(items) => items,
            Value::Object(map) if map.get("kind").and_then(Value::as_str) == Some("List") => map
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            other => vec![other],
        }
    } else {
        serde_saphyr::from_multiple::<Value>(text).with_context(|| format!("{origin}: invalid YAML"))?
    };
    let mut objects = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        if document.is_null() {
            continue;
        }
        let what = format!("{origin}: document {}", index + 1);
        for field in ["apiVersion", "kind"] {
            if document
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                anyhow::bail!("{what}: field {field} is required");
            }
        }
        if document
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            anyhow::bail!("{what}: field metadata.name is required");
        }
        let object: Object = serde_json::from_value(document).with_context(|| what.clone())?;
        objects.push(object);
    }
    Ok(objects)
}

/// Create each object, or update it when it exists (its status is kept).
pub async fn apply_objects(store: &dyn Store, objects: Vec<Object>) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    for mut object in objects {
        let ty = cluster::resource_type_of(&object)?;
        if ty.namespaced && object.metadata.namespace.is_none() {
            object.metadata.namespace = Some("default".into());
        }
        let label = format!("{}/{}", ty.kind.to_lowercase(), object.metadata.name);
        match store
            .get(&ty, object.metadata.namespace.as_deref(), &object.metadata.name)
            .await?
        {
            None => {
                store
                    .create(&ty, object)
                    .await
                    .with_context(|| format!("create {label}"))?;
                done.push(format!("{label} created"));
            }
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
                store
                    .update(&ty, object)
                    .await
                    .with_context(|| format!("update {label}"))?;
                done.push(format!("{label} configured"));
            }
        }
    }
    Ok(done)
}

/// `weft apply -f FILE`.
pub async fn apply(state: &Path, file: &Path) -> anyhow::Result<i32> {
    let text = if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?
    };
    let objects = parse_manifests(&text, &file.display().to_string())?;
    let store = cluster::open_store(state).await?;
    for line in apply_objects(store.as_ref(), objects).await? {
        println!("{line}");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_documents_become_objects() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: data\nspec:\n  config: '{\"cniVersion\":\"1.0.0\"}'\n";
        let objects = parse_manifests(text, "test.yaml").unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[1].kind, "NetworkAttachmentDefinition");
    }

    #[test]
    fn missing_name_is_named_in_the_error() {
        let err = parse_manifests("apiVersion: v1\nkind: Pod\nmetadata: {}\n", "x.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "x.yaml: document 1: field metadata.name is required"
        );
    }
}
