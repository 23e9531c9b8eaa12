//! The Events the agent records about pods, as Multus writes them: `AddedInterface` (Normal) per
//! attachment of an ADD, `FailedAddInterface` (Warning) when an ADD fails, and
//! `FailedHotplugInterface` (Warning) when following a pod's networks annotation fails, and weft's
//! own `NetworkStatusNotWritten` (Warning) when an ADD's network-status write keeps failing. Through the
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
/// The reason of the Warning recorded when an ADD's network-status write keeps failing (weft's
/// own: Multus fails the ADD instead).
pub const NETWORK_STATUS_NOT_WRITTEN: &str = "NetworkStatusNotWritten";

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

/// Which `AddedInterface` Events an ADD records (`weft agent --interface-events`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum InterfaceEvents {
    /// One Event per ADD naming every interface, each in Multus' words (`Add eth0 [..] from
    /// ..; Add net1 [..] from ..`): one API write per pod instead of one per NIC.
    #[default]
    PerPod,
    /// One Event per interface, as Multus.
    PerInterface,
    /// No `AddedInterface` Events (the pod's network-status still names every interface;
    /// `FailedAddInterface` Warnings are still recorded): an ADD's only API write is its
    /// `pods/status` update.
    None,
}

/// The `AddedInterface` Events of an ADD with `statuses`, as (key, message): per interface,
/// keyed by it (a sandbox's next ADD bumps the count of the same NIC's Event), or one for the
/// pod (unkeyed) whose message holds every interface's.
pub fn added_events(mode: InterfaceEvents, statuses: &[NetworkStatus]) -> Vec<(String, String)> {
    match mode {
        InterfaceEvents::PerInterface => statuses
            .iter()
            .map(|status| (status.interface.clone(), added_message(status)))
            .collect(),
        InterfaceEvents::None => Vec::new(),
        InterfaceEvents::PerPod if statuses.is_empty() => Vec::new(),
        InterfaceEvents::PerPod => {
            let messages: Vec<String> = statuses.iter().map(added_message).collect();
            vec![(String::new(), cap_message(messages.join("; ")))]
        }
    }
}

/// The longest Event message events.k8s.io/v1 accepts (its `note`; core/v1 takes more, but
/// clients and tools that read Events through the newer API should see it whole).
pub const MESSAGE_LIMIT: usize = 1024;

/// `message` cut to [`MESSAGE_LIMIT`] bytes at a character boundary, ending in `...` when cut.
fn cap_message(message: String) -> String {
    if message.len() <= MESSAGE_LIMIT {
        return message;
    }
    let mut end = MESSAGE_LIMIT - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// Record the `AddedInterface` Events of the pod's ADD ([`added_events`]) once no other ADD
/// runs on the node, or after `--writes-yield-ms` ([`super::adds_running`]).
pub fn added(agent: &Agent, namespace: &str, name: &str, statuses: &[NetworkStatus]) {
    let events = added_events(agent.args.interface_events, statuses);
    if events.is_empty() {
        return;
    }
    let pod = pod_reference(namespace, name);
    let (recorder, adds, max) = (
        agent.events.clone(),
        agent.adds.clone(),
        agent.args.writes_yield(),
    );
    tokio::spawn(async move {
        adds.quiet(max).await;
        for (key, message) in events {
            recorder.record_keyed(&pod, NORMAL, ADDED_INTERFACE, &key, &message);
        }
    });
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

/// A `NetworkStatusNotWritten` Warning: the network-status an ADD left to write failed
/// `failures` times (still retried with backoff); `error` is the last failure.
pub fn status_not_written(
    events: &crate::event_recorder::Recorder,
    namespace: &str,
    name: &str,
    failures: u32,
    error: &str,
) {
    let pod = pod_reference(namespace, name);
    let message = format!(
        "the pod's network-status annotation could not be written ({failures} attempts, still retried with backoff): {error}"
    );
    events.record(&pod, WARNING, NETWORK_STATUS_NOT_WRITTEN, &message);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(interface: &str, ip: &str, name: &str) -> NetworkStatus {
        NetworkStatus {
            name: name.into(),
            interface: interface.into(),
            ips: vec![ip.into()],
            ..Default::default()
        }
    }

    #[test]
    fn added_events_are_one_per_pod_or_one_per_interface_in_multus_words_or_none() {
        let statuses = [
            status("eth0", "10.0.0.5", "cluster"),
            status("net1", "10.1.0.5", "default/data"),
        ];
        assert_eq!(
            added_events(InterfaceEvents::PerInterface, &statuses),
            [
                ("eth0".to_string(), "Add eth0 [10.0.0.5] from cluster".to_string()),
                (
                    "net1".to_string(),
                    "Add net1 [10.1.0.5] from default/data".to_string()
                ),
            ]
        );
        assert_eq!(
            added_events(InterfaceEvents::PerPod, &statuses),
            [(
                String::new(),
                "Add eth0 [10.0.0.5] from cluster; Add net1 [10.1.0.5] from default/data".to_string()
            )]
        );
        assert!(added_events(InterfaceEvents::PerPod, &[]).is_empty());
        // A pod with very many NICs: one message, cut to the limit.
        let many: Vec<NetworkStatus> = (0..40)
            .map(|i| status(&format!("net{i}"), "10.1.0.5", "tenant-ä/data"))
            .collect();
        let events = added_events(InterfaceEvents::PerPod, &many);
        assert_eq!(events.len(), 1);
        assert!(events[0].1.len() <= MESSAGE_LIMIT && events[0].1.ends_with("..."));
        assert!(
            events[0]
                .1
                .starts_with("Add net0 [10.1.0.5] from tenant-ä/data; Add net1")
        );
        assert!(added_events(InterfaceEvents::PerInterface, &[]).is_empty());
        assert!(added_events(InterfaceEvents::None, &statuses).is_empty());
    }
}
