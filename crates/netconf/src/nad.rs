//! The NetworkAttachmentDefinition CRD (`k8s.cni.cncf.io/v1`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weft_object::{ObjectMeta, Resource};

/// A NetworkAttachmentDefinition: a named CNI configuration pods can select.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkAttachmentDefinition {
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Spec (optional per the NPWG spec).
    #[serde(default)]
    pub spec: NetworkAttachmentDefinitionSpec,
    /// Any other top-level field, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The NAD spec: a CNI config (single plugin or conflist) as a JSON string.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkAttachmentDefinitionSpec {
    /// The CNI configuration JSON; empty means "look it up on disk by name".
    #[serde(default)]
    pub config: String,
}

impl Resource for NetworkAttachmentDefinition {
    const API_VERSION: &'static str = "k8s.cni.cncf.io/v1";
    const KIND: &'static str = "NetworkAttachmentDefinition";
    const PLURAL: &'static str = "network-attachment-definitions";
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
