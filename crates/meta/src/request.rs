//! Request-level decisions taken before planning: the pod UID cross-check and the synthetic
//! result for a pod that no longer exists (docs/upstream/multus.md §3.1 step 3, §5).

use weft_cni::{CniResult, Interface, IpConfig, RequestEnv};

use crate::args::{K8sArgs, join_cni_args};

use crate::config::MetaConfig;
use crate::plan::{AttachmentRequest, Pod};

/// Pod annotation telling where a pod came from; anything but `api` is a static pod.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

/// The runtime's pod UID does not match the pod read from the store (a re-created pod with a
/// stale sandbox).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected pod UID \"{expected}\" but got \"{found}\" from Kube API (pod {namespace}/{name})")]
pub struct UidMismatch {
    /// `K8S_POD_UID`.
    pub expected: String,
    /// The stored pod's UID.
    pub found: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
}

impl AttachmentRequest {
    /// The request a runtime makes to attach `ifname` of pod `namespace/name` in `netns`:
    /// `CNI_ARGS` carrying the pod's identity (`IgnoreUnknown`, `K8S_POD_NAMESPACE`,
    /// `K8S_POD_NAME`), as benchmarks and tests that play the runtime need it.
    pub fn for_pod(container_id: &str, netns: &str, ifname: &str, namespace: &str, name: &str) -> Self {
        Self {
            container_id: container_id.into(),
            netns: netns.into(),
            ifname: ifname.into(),
            cni_args: format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}"),
            k8s: K8sArgs {
                pod_namespace: namespace.into(),
                pod_name: name.into(),
                ..Default::default()
            },
        }
    }

    /// The request from a validated CNI environment (the shim forwards the runtime's).
    /// `CNI_IFNAME` defaults to `eth0` as in Multus's daemon.
    pub fn from_request_env(env: &RequestEnv) -> Self {
        let arg = |v: Option<&str>| v.unwrap_or_default().to_owned();
        Self {
            container_id: env.container_id.clone(),
            netns: env.netns.clone(),
            ifname: if env.ifname.is_empty() {
                "eth0".into()
            } else {
                env.ifname.clone()
            },
            cni_args: join_cni_args(env.args.pairs()),
            k8s: K8sArgs {
                pod_namespace: arg(env.args.pod_namespace()),
                pod_name: arg(env.args.pod_name()),
                pod_infra_container_id: arg(env.args.pod_infra_container_id()),
                pod_uid: arg(env.args.pod_uid()),
            },
        }
    }
}

/// ADD: a `K8S_POD_UID` that differs from the pod's is an error, except for static pods (their
/// mirror pod has another UID, Multus #773). DEL treats a mismatch as "pod unknown".
pub fn check_pod_uid(request: &AttachmentRequest, pod: &Pod) -> Result<(), UidMismatch> {
    let uid = &request.k8s.pod_uid;
    let is_static = pod
        .annotations
        .get(CONFIG_SOURCE_ANNOTATION)
        .is_some_and(|source| source != "api");
    if uid.is_empty() || pod.uid.is_empty() || *uid == pod.uid || is_static {
        return Ok(());
    }
    Err(UidMismatch {
        expected: uid.clone(),
        found: pod.uid.clone(),
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
    })
}

/// The result of an ADD for a pod that was deleted meanwhile: no delegate runs and the runtime
/// gets `{interfaces:[{name: CNI_IFNAME, sandbox: CNI_NETNS}], ips:[{address: 0.0.0.0/0,
/// gateway: 0.0.0.0}]}` in the configuration's version (Multus).
pub fn synthetic_result(config: &MetaConfig, request: &AttachmentRequest) -> CniResult {
    CniResult {
        cni_version: config.cni_version.clone(),
        interfaces: vec![Interface {
            name: request.ifname.clone(),
            sandbox: request.netns.clone(),
            ..Default::default()
        }],
        ips: vec![IpConfig {
            address: "0.0.0.0/0".parse().expect("valid"),
            gateway: Some([0, 0, 0, 0].into()),
            interface: None,
        }],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_check() {
        let mut request = AttachmentRequest::default();
        request.k8s.pod_uid = "a".into();
        let mut pod = Pod {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "b".into(),
            ..Default::default()
        };
        assert_eq!(
            check_pod_uid(&request, &pod).unwrap_err().to_string(),
            "expected pod UID \"a\" but got \"b\" from Kube API (pod ns/p)"
        );
        pod.annotations
            .insert(CONFIG_SOURCE_ANNOTATION.into(), "file".into());
        assert!(check_pod_uid(&request, &pod).is_ok());
        request.k8s.pod_uid.clear();
        assert!(check_pod_uid(&request, &pod).is_ok());
    }

    #[test]
    fn from_env() {
        let vars = [
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "abc"),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
            (
                "CNI_ARGS",
                "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u",
            ),
        ];
        let env =
            RequestEnv::from_lookup(|k| vars.iter().find(|(key, _)| *key == k).map(|(_, v)| v.to_string()))
                .unwrap();
        let request = AttachmentRequest::from_request_env(&env);
        assert_eq!(request.k8s.pod_label(), "ns/p/u");
        assert_eq!(
            request.cni_args,
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u"
        );
    }

    #[test]
    fn synthetic() {
        let config = MetaConfig::parse(br#"{"cniVersion":"0.3.1","clusterNetwork":"x"}"#).unwrap();
        let request = AttachmentRequest {
            ifname: "eth0".into(),
            netns: "/proc/1/ns/net".into(),
            ..Default::default()
        };
        let value = serde_json::to_value(synthetic_result(&config, &request)).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"cniVersion":"0.3.1","interfaces":[{"name":"eth0","sandbox":"/proc/1/ns/net"}],
                "ips":[{"address":"0.0.0.0/0","gateway":"0.0.0.0"}]})
        );
    }
}
