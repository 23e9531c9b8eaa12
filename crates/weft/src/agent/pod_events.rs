//! The Events the agent records about pods, as Multus writes them: `AddedInterface` (Normal) per
//! attachment of an ADD, `FailedAddInterface` (Warning) when an ADD fails, and
//! `FailedHotplugInterface` (Warning) when following a pod's networks annotation fails. Through the
//! agent's [`Recorder`](crate::event_recorder::Recorder): on Kubernetes they are core/v1 Events
//! in the API server, aggregated and rate limited; on the local cluster, objects of its store.

use weft_cni::CniError;
use weft_meta::AttachmentRequest;
use weft_netconf::NetworkStatus;

use super::Agent;
use crate::events::{NORMAL, WARNING};
use crate::kinds::ObjectReference;

/// The reason of an attachment's Event (Multus' own).
pub const ADDED_INTERFACE: &str = "AddedInterface";
/// The reason of a failed ADD's Event.
pub const FAILED_ADD_INTERFACE: &str = "FailedAddInterface";
/// The reason of a failed hot-plug/unplug's Event (each retry of the backoff is one occurrence).
pub const FAILED_HOTPLUG: &str = "FailedHotplugInterface";

fn pod_reference(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

/// Multus' message for an attachment: `Add net1 [10.1.0.5/24] from default/data`.
pub fn added_message(status: &NetworkStatus) -> String {
    format!(
        "Add {} [{}] from {}",
        status.interface,
        status.ips.join(","),
        status.name
    )
}

/// One `AddedInterface` Event per attachment of the pod's ADD (keyed by the interface: a
/// sandbox's next ADD bumps the count of the same NIC's Event).
pub fn added(agent: &Agent, namespace: &str, name: &str, statuses: &[NetworkStatus]) {
    let pod = pod_reference(namespace, name);
    for status in statuses {
        agent.events.record_keyed(
            &pod,
            NORMAL,
            ADDED_INTERFACE,
            &status.interface,
            &added_message(status),
        );
    }
}

/// A `FailedAddInterface` Warning for an ADD of a pod that failed (the CNI error's message and
/// details); ADDs that name no pod record nothing.
pub fn add_failed(agent: &Agent, request: &AttachmentRequest, error: &CniError) {
    if request.k8s.pod_name.is_empty() {
        return;
    }
    let pod = pod_reference(&request.k8s.pod_namespace, &request.k8s.pod_name);
    let message = if error.details.is_empty() {
        error.msg.clone()
    } else {
        format!("{}: {}", error.msg, error.details)
    };
    agent.events.record(&pod, WARNING, FAILED_ADD_INTERFACE, &message);
}

/// A `FailedHotplugInterface` Warning: the dynamic-networks sweep could not apply the pod's
/// networks annotation (one occurrence per retry; the backoff and the recorder bound them).
pub fn hotplug_failed(agent: &Agent, namespace: &str, name: &str, message: &str) {
    let pod = pod_reference(namespace, name);
    agent.events.record(&pod, WARNING, FAILED_HOTPLUG, message);
}
