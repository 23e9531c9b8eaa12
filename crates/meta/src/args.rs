//! The `CNI_ARGS` each delegate receives (docs/upstream/multus.md §3.3.1;
//! `vectors/multus/11-cni-args-merge.json`).

use serde::{Deserialize, Serialize};

/// The pod identity the runtime passed in `CNI_ARGS` (empty strings when absent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct K8sArgs {
    /// `K8S_POD_NAMESPACE`.
    pub pod_namespace: String,
    /// `K8S_POD_NAME`.
    pub pod_name: String,
    /// `K8S_POD_INFRA_CONTAINER_ID`.
    pub pod_infra_container_id: String,
    /// `K8S_POD_UID`.
    pub pod_uid: String,
}

impl K8sArgs {
    /// The pod's namespace, `default` when the runtime left it out (as Kubernetes reads a
    /// missing namespace).
    pub fn namespace_or_default(&self) -> &str {
        match self.pod_namespace.as_str() {
            "" => "default",
            ns => ns,
        }
    }

    /// `<ns>/<pod>/<uid>`, the prefix of Multus's error messages.
    pub fn pod_label(&self) -> String {
        format!("{}/{}/{}", self.pod_namespace, self.pod_name, self.pod_uid)
    }
}

/// Seed `IgnoreUnknown=true; K8S_POD_NAMESPACE; K8S_POD_NAME; K8S_POD_INFRA_CONTAINER_ID;
/// K8S_POD_UID` in that order, then merge the runtime's `CNI_ARGS` (split on `;`, each pair on
/// its first `=`, pairs without `=` skipped): a pair fills a seeded key whose value is empty,
/// is dropped when the key is already present with a value (Multus appends a duplicate there —
/// docs/compat.md), and is appended otherwise.
pub fn delegate_cni_args(k8s: &K8sArgs, runtime_cni_args: &str) -> Vec<(String, String)> {
    let mut args: Vec<(String, String)> = [
        ("IgnoreUnknown", "true"),
        ("K8S_POD_NAMESPACE", k8s.pod_namespace.as_str()),
        ("K8S_POD_NAME", k8s.pod_name.as_str()),
        ("K8S_POD_INFRA_CONTAINER_ID", k8s.pod_infra_container_id.as_str()),
        ("K8S_POD_UID", k8s.pod_uid.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    for pair in runtime_cni_args.split(';') {
        let Some((key, value)) = pair.split_once('=') else {
            continue;
        };
        match args.iter_mut().find(|(k, _)| k == key) {
            Some((_, seeded)) if seeded.is_empty() => *seeded = value.to_owned(),
            Some(_) => {}
            None => args.push((key.to_owned(), value.to_owned())),
        }
    }
    args
}

/// `K=V;K=V` as put in the `CNI_ARGS` environment variable.
pub fn join_cni_args(args: &[(String, String)]) -> String {
    args.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_values_are_not_duplicated() {
        let k8s = K8sArgs {
            pod_namespace: "ns".into(),
            pod_name: "p".into(),
            pod_infra_container_id: "c".into(),
            pod_uid: "u".into(),
        };
        let args = delegate_cni_args(
            &k8s,
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;X=1;junk",
        );
        assert_eq!(
            join_cni_args(&args),
            "IgnoreUnknown=true;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=c;K8S_POD_UID=u;X=1"
        );
    }
}
