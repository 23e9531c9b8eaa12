//! Core Kubernetes kinds the local cluster and the agent use (the subset weft reads and writes;
//! every other field round-trips untouched).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weft_store::{ObjectMeta, Resource};

/// Label naming the VM of a launcher pod (KubeVirt's, `vm.kubevirt.io/name`); weft-ipam
/// reads it to find the VM's claims, so its constant is the one.
pub use weft_ipam::vm_claim::POD_VM_LABEL as VM_NAME_LABEL;

/// A Pod (core/v1), the fields weft uses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pod {
    /// Metadata (annotations carry the networks selection and network-status).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Spec.
    #[serde(default)]
    pub spec: PodSpec,
    /// Status.
    #[serde(default, skip_serializing_if = "PodStatus::is_empty")]
    pub status: PodStatus,
    /// Other fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Pod spec subset.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// Node the pod is bound to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// Hostname inside the pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    /// Other fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Pod status subset.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// Pending, Running, Succeeded, Failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Primary pod IP.
    #[serde(rename = "podIP", default, skip_serializing_if = "String::is_empty")]
    pub pod_ip: String,
    /// Human-readable reason for the phase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Other fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl PodStatus {
    fn is_empty(&self) -> bool {
        self.phase.is_empty() && self.pod_ip.is_empty() && self.message.is_empty() && self.extra.is_empty()
    }
}

impl Resource for Pod {
    const API_VERSION: &'static str = "v1";
    const KIND: &'static str = "Pod";
    const PLURAL: &'static str = "pods";
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A Node (core/v1): in the local cluster, one network namespace with an agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Status (addresses, conditions).
    #[serde(default)]
    pub status: Value,
    /// Other fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Resource for Node {
    const API_VERSION: &'static str = "v1";
    const KIND: &'static str = "Node";
    const PLURAL: &'static str = "nodes";
    const NAMESPACED: bool = false;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The object an [`Event`] is about (core/v1 `ObjectReference`, the fields weft fills).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// API version of the object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// Kind of the object.
    #[serde(default)]
    pub kind: String,
    /// Namespace (empty for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    #[serde(default)]
    pub name: String,
}

/// An Event (core/v1, kubectl's shape): something that happened to an object. A repeat of the
/// same reason about the same object bumps `count` and `lastTimestamp` instead of adding one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What it is about.
    #[serde(default)]
    pub involved_object: ObjectReference,
    /// Short CamelCase reason (`AgentDown`).
    #[serde(default)]
    pub reason: String,
    /// Human-readable description.
    #[serde(default)]
    pub message: String,
    /// `Normal` or `Warning`.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// How many times it happened.
    #[serde(default)]
    pub count: u32,
    /// First time (RFC 3339).
    #[serde(default)]
    pub first_timestamp: String,
    /// Last time (RFC 3339).
    #[serde(default)]
    pub last_timestamp: String,
    /// Who reports it (`weft-supervisor`).
    #[serde(default)]
    pub reporting_component: String,
    /// Other fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Resource for Event {
    const API_VERSION: &'static str = "v1";
    const KIND: &'static str = "Event";
    const PLURAL: &'static str = "events";
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
