//! Pure translations between the store's shapes and kube-rs's: resource types, objects, query
//! parameters and API errors.

use kube::api::{ApiResource, DynamicObject, ListParams, WatchParams};
use serde_json::Value;

use crate::{ListOptions, Object, ResourceType, StoreError};

/// The kube-rs description of a resource type.
pub fn api_resource(ty: &ResourceType) -> ApiResource {
    ApiResource {
        group: ty.group().into(),
        version: ty.version().into(),
        api_version: ty.api_version.clone(),
        kind: ty.kind.clone(),
        plural: ty.plural.clone(),
    }
}

/// An object as kube-rs sends it.
pub fn to_dynamic(obj: &Object) -> Result<DynamicObject, StoreError> {
    serde_json::to_value(obj)
        .and_then(serde_json::from_value)
        .map_err(|e| StoreError::Invalid(format!("{} {}: {e}", obj.kind, obj.key())))
}

/// An object as the API server returned it. List items of built-in kinds come without
/// apiVersion and kind, so those are taken from `ty`.
pub fn from_dynamic(ty: &ResourceType, obj: DynamicObject) -> Result<Object, StoreError> {
    let mut value = serde_json::to_value(obj)
        .map_err(|e| StoreError::Backend(format!("{} from the API server: {e}", ty.kind)))?;
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), Value::String(ty.api_version.clone()));
        map.insert("kind".into(), Value::String(ty.kind.clone()));
    }
    serde_json::from_value(value)
        .map_err(|e| StoreError::Backend(format!("{} from the API server is malformed: {e}", ty.kind)))
}

/// List parameters carrying the selectors.
pub fn list_params(opts: &ListOptions) -> ListParams {
    ListParams {
        label_selector: opts.label_selector(),
        field_selector: opts.field_selector(),
        ..ListParams::default()
    }
}

/// Watch parameters carrying the selectors, with bookmarks so resumption stays cheap.
pub fn watch_params(opts: &ListOptions) -> WatchParams {
    WatchParams {
        label_selector: opts.label_selector(),
        field_selector: opts.field_selector(),
        bookmarks: true,
        ..WatchParams::default()
    }
}

/// Which call failed, to name the error the store reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// get, list, delete, watch: no special 409 meaning.
    Read,
    /// create: 409 means the name is taken.
    Create,
    /// update, delete with a precondition: 409 means the compare-and-swap lost.
    Write,
    /// update_status: as `Write`, and a 404 for the path means no status subresource.
    StatusWrite,
}

/// The message of the API server's 404 for a path it serves nothing at.
pub const NO_SUCH_PATH: &str = "the server could not find the requested resource";

/// Map a kube-rs error to the store's. `key` names the object, `expected` is the
/// resourceVersion the caller sent (for conflicts).
pub fn store_error(
    ty: &ResourceType,
    key: &str,
    call: Call,
    expected: Option<&str>,
    e: kube::Error,
) -> StoreError {
    let status = match e {
        kube::Error::Api(status) => status,
        kube::Error::HyperError(e) => return StoreError::Unavailable(format!("Kubernetes API: {e}")),
        kube::Error::Service(e) => return StoreError::Unavailable(format!("Kubernetes API: {e}")),
        other => return StoreError::Backend(format!("{} {key}: {other}", ty.kind)),
    };
    let (kind, key) = (ty.kind.clone(), key.to_string());
    match status.code {
        // The API server's answer for a path it does not serve, e.g. `.../status` of a CRD
        // without the status subresource (KubeVirt's VMI): not "the object is not found".
        404 if status.message == NO_SUCH_PATH => StoreError::Backend(format!(
            "{kind} {key}: {NO_SUCH_PATH} (404){}",
            match call {
                Call::StatusWrite => ": the resource has no status subresource",
                _ => "",
            }
        )),
        404 => StoreError::NotFound { kind, key },
        409 if call == Call::Create || status.reason == "AlreadyExists" => {
            StoreError::AlreadyExists { kind, key }
        }
        409 => StoreError::Conflict {
            kind,
            key,
            expected: expected.unwrap_or_default().into(),
            actual: "a newer one".into(),
        },
        410 => StoreError::Expired(format!("{kind}: {}; re-list and watch again", status.message)),
        400 | 422 => StoreError::Invalid(format!("{kind} {key}: {}", status.message)),
        429 | 500..=599 => {
            StoreError::Unavailable(format!("{kind} {key}: {} ({})", status.message, status.code))
        }
        code => StoreError::Backend(format!(
            "{kind} {key}: {} ({code} {})",
            status.message, status.reason
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        let mut status = Status::failure("boom", reason);
        status.code = code;
        kube::Error::Api(Box::new(status))
    }

    fn pods() -> ResourceType {
        ResourceType::new("v1", "Pod", "pods", true)
    }

    #[test]
    fn a_path_the_server_does_not_serve_is_not_a_missing_object() {
        let mut status = Status::failure(NO_SUCH_PATH, "NotFound");
        status.code = 404;
        let e = store_error(
            &pods(),
            "ns/a",
            Call::StatusWrite,
            None,
            kube::Error::Api(Box::new(status)),
        );
        assert!(!e.is_not_found(), "{e}");
        assert!(e.to_string().contains("has no status subresource"), "{e}");
    }

    #[test]
    fn status_codes_map_to_store_errors() {
        let map = |code, reason, call| store_error(&pods(), "ns/a", call, Some("7"), api_error(code, reason));
        assert!(map(404, "NotFound", Call::Read).is_not_found());
        assert!(map(409, "AlreadyExists", Call::Create).is_already_exists());
        assert!(map(409, "Conflict", Call::Create).is_already_exists());
        let conflict = map(409, "Conflict", Call::Write);
        assert!(conflict.is_conflict(), "{conflict}");
        assert!(conflict.to_string().contains("resourceVersion 7"), "{conflict}");
        assert!(map(410, "Expired", Call::Read).is_expired());
        assert!(matches!(map(422, "Invalid", Call::Write), StoreError::Invalid(_)));
        assert!(matches!(
            map(503, "ServiceUnavailable", Call::Read),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            map(403, "Forbidden", Call::Read),
            StoreError::Backend(_)
        ));
    }

    #[test]
    fn api_resource_splits_group_and_version() {
        let ar = api_resource(&ResourceType::new(
            "k8s.cni.cncf.io/v1",
            "NetworkAttachmentDefinition",
            "network-attachment-definitions",
            true,
        ));
        assert_eq!(
            (ar.group.as_str(), ar.version.as_str()),
            ("k8s.cni.cncf.io", "v1")
        );
        let core = api_resource(&pods());
        assert_eq!(
            (
                core.group.as_str(),
                core.version.as_str(),
                core.api_version.as_str()
            ),
            ("", "v1", "v1")
        );
    }

    #[test]
    fn objects_round_trip_and_list_items_get_their_kind() {
        let obj: Object = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5", "labels": {"app": "x"}},
            "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}
        }))
        .unwrap();
        let dynamic = to_dynamic(&obj).unwrap();
        assert_eq!(from_dynamic(&pods(), dynamic.clone()).unwrap(), obj);
        let mut bare = dynamic;
        bare.types = None;
        assert_eq!(from_dynamic(&pods(), bare).unwrap(), obj);
    }
}
