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

impl StoreError {
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
