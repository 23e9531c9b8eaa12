//! Errors of the store, shaped like the Kubernetes API's status reasons.

/// What went wrong talking to the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The object does not exist.
    #[error("{kind} {key} not found")]
    NotFound {
        /// Kind of the object.
        kind: String,
        /// `namespace/name` or `name`.
        key: String,
    },
    /// An object with this name already exists (create).
    #[error("{kind} {key} already exists")]
    AlreadyExists {
        /// Kind of the object.
        kind: String,
        /// `namespace/name` or `name`.
        key: String,
    },
    /// The resourceVersion given does not match the stored one (compare-and-swap lost).
    #[error(
        "conflict on {kind} {key}: the object has been modified (have resourceVersion {expected}, store has {actual})"
    )]
    Conflict {
        /// Kind of the object.
        kind: String,
        /// `namespace/name` or `name`.
        key: String,
        /// resourceVersion the caller sent.
        expected: String,
        /// resourceVersion in the store.
        actual: String,
    },
    /// The object is malformed for this operation (missing name, wrong kind, bad JSON...).
    #[error("invalid object: {0}")]
    Invalid(String),
    /// Metadata the API server would refuse (an invalid name or namespace); displays as its
    /// 422 message.
    #[error(transparent)]
    InvalidObject(#[from] crate::names::InvalidObject),
    /// A watch asked for changes the store no longer keeps (compacted): re-list, then watch again.
    #[error("resourceVersion expired: {0}")]
    Expired(String),
    /// The backend cannot be reached or is not ready.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store's files are unsafe to use (a link, someone else's, writable by others) or
    /// damaged (emptied, without weft's schema, malformed pages): refused, never started afresh.
    #[error("store refused: {0}")]
    Refused(String),
    /// Any other backend failure.
    #[error("store backend error: {0}")]
    Backend(String),
}

/// The message of the API server's 404 for a path it serves nothing at (as the Kubernetes
/// backend keeps it in [`StoreError::Backend`]).
const NO_SUCH_PATH: &str = "the server could not find the requested resource";

impl StoreError {
    /// True when the store does not serve the kind at all (a list answered the API server's 404
    /// for the path: the CRD is not installed), or answered NotFound for it.
    pub fn is_not_served(&self) -> bool {
        match self {
            StoreError::NotFound { .. } => true,
            StoreError::Backend(message) => message.contains(NO_SUCH_PATH),
            _ => false,
        }
    }

    /// True for [`StoreError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound { .. })
    }
    /// True for [`StoreError::Conflict`].
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }
    /// True for [`StoreError::Invalid`] and [`StoreError::InvalidObject`].
    pub fn is_invalid(&self) -> bool {
        matches!(self, StoreError::Invalid(_) | StoreError::InvalidObject(_))
    }
    /// True for [`StoreError::Expired`].
    pub fn is_expired(&self) -> bool {
        matches!(self, StoreError::Expired(_))
    }
    /// True for [`StoreError::AlreadyExists`].
    pub fn is_already_exists(&self) -> bool {
        matches!(self, StoreError::AlreadyExists { .. })
    }
}

impl From<weft_object::ObjectError> for StoreError {
    fn from(e: weft_object::ObjectError) -> Self {
        match e {
            weft_object::ObjectError::Invalid(message) => StoreError::Invalid(message),
        }
    }
}

#[cfg(test)]
mod not_served_tests {
    use super::StoreError;

    #[test]
    fn the_api_servers_404_for_an_unserved_path_is_not_served_and_other_errors_are_not() {
        // How the Kubernetes backend keeps kube-apiserver's 404 for a resource it does not serve.
        let crd_missing = StoreError::Backend(
            "VirtualMachine (all): the server could not find the requested resource (404)".into(),
        );
        assert!(crd_missing.is_not_served());
        assert!(!crd_missing.is_not_found(), "not an object that is missing");
        assert!(
            StoreError::NotFound {
                kind: "resource".into(),
                key: "kubevirt.io/v1/virtualmachines".into()
            }
            .is_not_served()
        );
        assert!(!StoreError::Unavailable("Kubernetes API: connection refused".into()).is_not_served());
        assert!(!StoreError::Backend("VirtualMachine (all): 500".into()).is_not_served());
    }
}
