//! The store's write semantics as pure functions, shared by every embedded backend:
//! what an object looks like after create, update, status update and delete.

use serde_json::Value;

use crate::{Object, ResourceType, StoreError, new_uid, now_rfc3339};

/// Check that `obj` is of type `ty` and names itself properly.
pub fn check_identity(ty: &ResourceType, obj: &Object) -> Result<(), StoreError> {
    if obj.api_version != ty.api_version || obj.kind != ty.kind {
        return Err(StoreError::Invalid(format!(
            "object is {}/{}, expected {}/{}",
            obj.api_version, obj.kind, ty.api_version, ty.kind
        )));
    }
    if obj.metadata.name.is_empty() {
        return Err(StoreError::Invalid(format!(
            "{}: metadata.name is required",
            ty.kind
        )));
    }
    match (&obj.metadata.namespace, ty.namespaced) {
        (None, true) => Err(StoreError::Invalid(format!(
            "{} {}: metadata.namespace is required",
            ty.kind, obj.metadata.name
        ))),
        (Some(ns), false) => Err(StoreError::Invalid(format!(
            "{} {} is cluster-scoped but has namespace {ns}",
            ty.kind, obj.metadata.name
        ))),
        _ => Ok(()),
    }
}

/// The object as stored by a create at revision `rv`; names are validated as the API server does
/// ([`crate::names::validate_metadata`]).
pub fn created(ty: &ResourceType, mut obj: Object, rv: u64) -> Result<Object, StoreError> {
    check_identity(ty, &obj)?;
    // The API server refuses such names on create; the embedded backends must do it themselves.
    crate::names::validate_metadata(ty, &obj.metadata)?;
    obj.metadata.uid = Some(new_uid());
    obj.metadata.creation_timestamp = Some(now_rfc3339());
    obj.metadata.deletion_timestamp = None;
    obj.metadata.resource_version = Some(rv.to_string());
    Ok(obj)
}

/// Fail with a conflict unless `incoming` carries no resourceVersion or the stored one.
pub fn check_version(ty: &ResourceType, stored: &Object, incoming: &Object) -> Result<(), StoreError> {
    match &incoming.metadata.resource_version {
        Some(want) if Some(want) != stored.metadata.resource_version.as_ref() => Err(StoreError::Conflict {
            kind: ty.kind.clone(),
            key: stored.key(),
            expected: want.clone(),
            actual: stored.metadata.resource_version.clone().unwrap_or_default(),
        }),
        _ => Ok(()),
    }
}

/// What an update or status update leaves in the store.
#[derive(Debug)]
pub enum UpdateOutcome {
    /// The new state of the object.
    Stored(Object),
    /// The last finalizer of an object being deleted was removed: it is gone.
    Removed(Object),
}

/// The object after `update` (`status_only == false`) or `update_status` at revision `rv`.
pub fn updated(
    ty: &ResourceType,
    stored: &Object,
    incoming: Object,
    status_only: bool,
    rv: u64,
) -> Result<UpdateOutcome, StoreError> {
    check_identity(ty, &incoming)?;
    check_version(ty, stored, &incoming)?;
    let mut next = if status_only {
        let mut next = stored.clone();
        next.metadata.labels = incoming.metadata.labels;
        next.metadata.annotations = incoming.metadata.annotations;
        match incoming.data.get("status") {
            Some(status) => next.data.insert("status".into(), status.clone()),
            None => next.data.remove("status"),
        };
        next
    } else {
        let mut next = incoming;
        match stored.data.get("status") {
            Some(status) => next.data.insert("status".into(), status.clone()),
            None => next.data.remove("status"),
        };
        next.metadata.uid = stored.metadata.uid.clone();
        next.metadata.creation_timestamp = stored.metadata.creation_timestamp.clone();
        next.metadata.deletion_timestamp = stored.metadata.deletion_timestamp.clone();
        next
    };
    next.metadata.resource_version = Some(rv.to_string());
    if next.metadata.deletion_timestamp.is_some() && next.metadata.finalizers.is_empty() {
        return Ok(UpdateOutcome::Removed(next));
    }
    Ok(UpdateOutcome::Stored(next))
}

/// What a delete does.
#[derive(Debug)]
pub enum DeleteOutcome {
    /// The object is gone; this was its last state.
    Removed(Object),
    /// Finalizers hold it: it stays with a deletionTimestamp.
    Terminating(Object),
}

/// Delete `stored` at revision `rv`, honouring a precondition resourceVersion and finalizers.
pub fn deleted(
    ty: &ResourceType,
    stored: &Object,
    precondition: Option<&str>,
    rv: u64,
) -> Result<DeleteOutcome, StoreError> {
    if let Some(want) = precondition
        && Some(want) != stored.metadata.resource_version.as_deref()
    {
        return Err(StoreError::Conflict {
            kind: ty.kind.clone(),
            key: stored.key(),
            expected: want.into(),
            actual: stored.metadata.resource_version.clone().unwrap_or_default(),
        });
    }
    let mut last = stored.clone();
    last.metadata.resource_version = Some(rv.to_string());
    if stored.metadata.finalizers.is_empty() {
        return Ok(DeleteOutcome::Removed(last));
    }
    if last.metadata.deletion_timestamp.is_none() {
        last.metadata.deletion_timestamp = Some(now_rfc3339());
    }
    Ok(DeleteOutcome::Terminating(last))
}

/// Whether a JSON value is "empty" for selectors (null or absent).
pub fn is_null(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null))
}
