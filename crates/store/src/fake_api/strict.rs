//! Where the fake API server is as strict as a real kube-apiserver, because weft's bugs came
//! from the difference (issue 9): RBAC rules (from deploy/'s ClusterRoles) per client identity,
//! a status subresource only where the type's CRD has one, pods without `spec.containers`
//! rejected, and OwnerReferencesPermissionEnforcement for `blockOwnerDeletion`. Each decision
//! is a pure function here; the server only applies them. Messages are the API server's.

use std::collections::BTreeSet;

use http::Method;
use serde_json::{Value, json};

use crate::{Object, OwnerReference};

/// A ClusterRole that cannot be read as RBAC rules.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// The document is not a ClusterRole or Role.
    #[error("not a ClusterRole or Role: kind {0:?}")]
    NotARole(String),
    /// A rule lacks a list it needs.
    #[error("rule {index}: {field} is not a list of strings")]
    Malformed {
        /// Index of the rule.
        index: usize,
        /// The field.
        field: &'static str,
    },
}

/// One RBAC policy rule (resource rules only; `*` matches anything).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// API groups (`""` is the core group).
    pub api_groups: Vec<String>,
    /// Resources, `plural` or `plural/subresource`.
    pub resources: Vec<String>,
    /// Verbs (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...).
    pub verbs: Vec<String>,
    /// Object names the rule is limited to (empty: any).
    pub resource_names: Vec<String>,
}

/// The rules a client is granted: what it may do, nothing else.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules(pub Vec<Rule>);

fn strings(
    rule: &Value,
    field: &'static str,
    index: usize,
    required: bool,
) -> Result<Vec<String>, RulesError> {
    match &rule[field] {
        Value::Null if !required => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().map(String::from))
            .collect::<Option<Vec<_>>>()
            .ok_or(RulesError::Malformed { index, field }),
        _ => Err(RulesError::Malformed { index, field }),
    }
}

impl Rules {
    /// The rules of a ClusterRole (or Role) document, as parsed from deploy/'s YAML.
    pub fn from_role(role: &Value) -> Result<Self, RulesError> {
        let kind = role["kind"].as_str().unwrap_or_default();
        if kind != "ClusterRole" && kind != "Role" {
            return Err(RulesError::NotARole(kind.into()));
        }
        let rules = role["rules"].as_array().map(Vec::as_slice).unwrap_or_default();
        rules
            .iter()
            .enumerate()
            .map(|(index, rule)| {
                Ok(Rule {
                    api_groups: strings(rule, "apiGroups", index, true)?,
                    resources: strings(rule, "resources", index, true)?,
                    verbs: strings(rule, "verbs", index, true)?,
                    resource_names: strings(rule, "resourceNames", index, false)?,
                })
            })
            .collect::<Result<_, _>>()
            .map(Rules)
    }

    /// Whether `verb` on `resource` (`plural` or `plural/sub`) of `group`, object `name`, is
    /// allowed.
    pub fn allows(&self, verb: &str, group: &str, resource: &str, name: Option<&str>) -> bool {
        let has = |list: &[String], item: &str| list.iter().any(|x| x == "*" || x == item);
        self.0.iter().any(|r| {
            has(&r.verbs, verb)
                && has(&r.api_groups, group)
                && has(&r.resources, resource)
                && (r.resource_names.is_empty()
                    || name.is_some_and(|n| r.resource_names.iter().any(|x| x == n)))
        })
    }
}

/// One permission: `(verb, API group, resource)` (`plural` or `plural/subresource`).
pub type Permission = (String, String, String);

impl Rules {
    /// Every permission the rules name, one per verb × group × resource (wildcards as written).
    pub fn grants(&self) -> BTreeSet<Permission> {
        let mut out = BTreeSet::new();
        for rule in &self.0 {
            for verb in &rule.verbs {
                for group in &rule.api_groups {
                    for resource in &rule.resources {
                        out.insert((verb.clone(), group.clone(), resource.clone()));
                    }
                }
            }
        }
        out
    }

    /// What the rules grant that nothing in `used` exercised (a role broader than its user
    /// needs), minus `allowed` (permissions kept on purpose, e.g. used only on failure paths).
    pub fn unused(
        &self,
        used: &BTreeSet<Permission>,
        allowed: &BTreeSet<Permission>,
    ) -> BTreeSet<Permission> {
        self.grants()
            .into_iter()
            .filter(|grant| !used.contains(grant) && !allowed.contains(grant))
            .collect()
    }

    /// What in `used` the rules do not allow (a role narrower than its user needs).
    pub fn missing(&self, used: &BTreeSet<Permission>) -> BTreeSet<Permission> {
        used.iter()
            .filter(|(verb, group, resource)| !self.allows(verb, group, resource, None))
            .cloned()
            .collect()
    }
}

/// The RBAC verb of a request: `get`/`list`/`watch` for reads, `create`, `update`, `patch`,
/// `delete`/`deletecollection`.
pub fn verb(method: &Method, named: bool, watch: bool) -> &'static str {
    match (method.as_str(), named) {
        ("GET" | "HEAD", _) if watch => "watch",
        ("GET" | "HEAD", true) => "get",
        ("GET" | "HEAD", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

/// `plural` or `plural.group`, as the API server names a resource in messages.
fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// A request RBAC refuses, as the API server words it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied<'a> {
    /// The user (`system:serviceaccount:<ns>:<name>`, or `system:anonymous`).
    pub user: &'a str,
    /// The verb.
    pub verb: &'a str,
    /// The API group.
    pub group: &'a str,
    /// The plural.
    pub plural: &'a str,
    /// The subresource, if any (`status`, `finalizers`).
    pub subresource: Option<&'a str>,
    /// The object's name, if the request names one.
    pub name: Option<&'a str>,
    /// The namespace, if the request has one.
    pub namespace: Option<&'a str>,
}

impl Denied<'_> {
    /// `User "u" cannot get resource "pods" in API group "" in the namespace "ns"`.
    pub fn reason(&self) -> String {
        let resource = match self.subresource {
            Some(sub) => format!("{}/{sub}", self.plural),
            None => self.plural.to_string(),
        };
        let scope = match self.namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        format!(
            "User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            self.user, self.verb, self.group
        )
    }

    /// The API server's 403 `Status` body.
    pub fn status(&self) -> Value {
        let subject = match self.name {
            Some(name) => format!("{} \"{name}\"", qualified(self.plural, self.group)),
            None => qualified(self.plural, self.group),
        };
        forbidden(
            format!("{subject} is forbidden: {}", self.reason()),
            self.name,
            self.group,
            self.plural,
        )
    }
}

fn forbidden(message: String, name: Option<&str>, group: &str, plural: &str) -> Value {
    let mut details = json!({"kind": plural});
    if let Some(name) = name {
        details["name"] = json!(name);
    }
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": "Forbidden", "details": details, "code": 403})
}

/// The API server's 404 for a path it serves nothing at (e.g. `.../status` of a CRD without
/// the status subresource).
pub fn no_such_path() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": "the server could not find the requested resource", "reason": "NotFound",
           "details": {}, "code": 404})
}

/// The API server's 422 for a pod without containers (`spec.containers: Required value`),
/// `None` for any other object.
pub fn pod_without_containers(obj: &Object) -> Option<Value> {
    if obj.api_version != "v1" || obj.kind != "Pod" {
        return None;
    }
    let has = obj
        .data
        .get("spec")
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array)
        .is_some_and(|c| !c.is_empty());
    if has {
        return None;
    }
    let name = &obj.metadata.name;
    Some(
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("Pod \"{name}\" is invalid: spec.containers: Required value"),
        "reason": "Invalid",
        "details": {"name": name, "kind": "Pod", "causes": [
            {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}]},
        "code": 422}),
    )
}

/// The owner references of `new` whose `blockOwnerDeletion: true` OwnerReferencesPermission
/// Enforcement checks: all of them on create, on update those not already set so in `old`.
pub fn blocking_owners<'a>(new: &'a Object, old: Option<&Object>) -> Vec<&'a OwnerReference> {
    let before: BTreeSet<&str> = old
        .into_iter()
        .flat_map(|o| &o.metadata.owner_references)
        .filter(|r| r.block_owner_deletion == Some(true))
        .map(|r| r.uid.as_str())
        .collect();
    new.metadata
        .owner_references
        .iter()
        .filter(|r| r.block_owner_deletion == Some(true) && !before.contains(r.uid.as_str()))
        .collect()
}

/// The 403 of OwnerReferencesPermissionEnforcement: the client may not update the owner's
/// `finalizers` subresource, so it may not set `blockOwnerDeletion` on a reference to it.
pub fn block_owner_deletion_forbidden(plural: &str, group: &str, name: &str) -> Value {
    forbidden(
        format!(
            "{} \"{name}\" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers \
             to a resource you can't set finalizers on: , <nil>",
            qualified(plural, group)
        ),
        Some(name),
        group,
        plural,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role() -> Value {
        json!({"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update"]},
            {"apiGroups": ["k8s.cni.cncf.io"], "resources": ["*"], "verbs": ["get"], "resourceNames": ["blue"]},
        ]})
    }

    #[test]
    fn rules_allow_exactly_what_they_name() {
        let rules = Rules::from_role(&role()).unwrap();
        assert!(rules.allows("list", "", "pods", None));
        assert!(rules.allows("update", "", "pods/status", Some("a")));
        assert!(
            !rules.allows("update", "", "pods", Some("a")),
            "status is not the object"
        );
        assert!(!rules.allows("create", "", "pods", None));
        assert!(!rules.allows("get", "", "nodes", Some("n1")));
        assert!(rules.allows(
            "get",
            "k8s.cni.cncf.io",
            "network-attachment-definitions",
            Some("blue")
        ));
        assert!(!rules.allows(
            "get",
            "k8s.cni.cncf.io",
            "network-attachment-definitions",
            Some("red")
        ));
        assert!(!rules.allows("list", "k8s.cni.cncf.io", "network-attachment-definitions", None));
        assert!(Rules::from_role(&json!({"kind": "Pod"})).is_err());
        assert!(Rules::from_role(&json!({"kind": "ClusterRole", "rules": [{"verbs": ["get"]}]})).is_err());
    }

    #[test]
    fn unused_and_missing_permissions_are_named() {
        let rules = Rules::from_role(&role()).unwrap();
        let p = |v: &str, g: &str, r: &str| (v.to_string(), g.to_string(), r.to_string());
        assert_eq!(rules.grants().len(), 5);
        let used = BTreeSet::from([
            p("list", "", "pods"),
            p("watch", "", "pods"),
            p("create", "", "pods"),
        ]);
        let allowed = BTreeSet::from([p("get", "", "pods")]);
        assert_eq!(
            rules.unused(&used, &allowed),
            BTreeSet::from([p("update", "", "pods/status"), p("get", "k8s.cni.cncf.io", "*")])
        );
        assert_eq!(rules.missing(&used), BTreeSet::from([p("create", "", "pods")]));
    }

    #[test]
    fn verbs_are_the_api_servers() {
        assert_eq!(verb(&Method::GET, true, false), "get");
        assert_eq!(verb(&Method::GET, false, false), "list");
        assert_eq!(verb(&Method::GET, false, true), "watch");
        assert_eq!(verb(&Method::POST, false, false), "create");
        assert_eq!(verb(&Method::PUT, true, false), "update");
        assert_eq!(verb(&Method::PATCH, true, false), "patch");
        assert_eq!(verb(&Method::DELETE, true, false), "delete");
        assert_eq!(verb(&Method::DELETE, false, false), "deletecollection");
    }

    #[test]
    fn forbidden_messages_are_the_api_servers() {
        let denied = Denied {
            user: "system:serviceaccount:weft-system:weft-node",
            verb: "create",
            group: "",
            plural: "pods",
            subresource: None,
            name: None,
            namespace: Some("default"),
        };
        assert_eq!(
            denied.status()["message"],
            "pods is forbidden: User \"system:serviceaccount:weft-system:weft-node\" cannot create \
             resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        let denied = Denied {
            verb: "update",
            group: "kubevirt.io",
            plural: "virtualmachineinstances",
            subresource: Some("status"),
            name: Some("vm1"),
            namespace: None,
            ..denied
        };
        let status = denied.status();
        assert_eq!(status["code"], 403);
        assert_eq!(status["reason"], "Forbidden");
        assert_eq!(
            status["message"],
            "virtualmachineinstances.kubevirt.io \"vm1\" is forbidden: User \
             \"system:serviceaccount:weft-system:weft-node\" cannot update resource \
             \"virtualmachineinstances/status\" in API group \"kubevirt.io\" at the cluster scope"
        );
    }

    #[test]
    fn pods_need_containers() {
        let mut pod: Object = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"}, "spec": {"nodeName": "n1"}}))
        .unwrap();
        let status = pod_without_containers(&pod).unwrap();
        assert_eq!(status["code"], 422);
        assert_eq!(
            status["message"],
            "Pod \"web\" is invalid: spec.containers: Required value"
        );
        pod.data["spec"]["containers"] = json!([{"name": "c", "image": "i"}]);
        assert_eq!(pod_without_containers(&pod), None);
        pod.kind = "Other".into();
        pod.data["spec"] = json!({});
        assert_eq!(pod_without_containers(&pod), None);
    }

    #[test]
    fn only_new_blocking_owner_references_are_checked() {
        let owner = |uid: &str, block: Option<bool>| OwnerReference {
            api_version: "kubevirt.io/v1".into(),
            kind: "VirtualMachine".into(),
            name: "vm1".into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: block,
        };
        let mut new = Object::new(
            &crate::ResourceType::new("v1", "Pod", "pods", true),
            Some("d"),
            "p",
        );
        new.metadata.owner_references =
            vec![owner("a", Some(true)), owner("b", Some(false)), owner("c", None)];
        assert_eq!(blocking_owners(&new, None).len(), 1);
        let old = new.clone();
        assert!(
            blocking_owners(&new, Some(&old)).is_empty(),
            "unchanged on update"
        );
        let body = block_owner_deletion_forbidden("ipamclaims", "k8s.cni.cncf.io", "vm1.blue");
        assert_eq!(
            body["message"],
            "ipamclaims.k8s.cni.cncf.io \"vm1.blue\" is forbidden: cannot set blockOwnerDeletion if \
             an ownerReference refers to a resource you can't set finalizers on: , <nil>"
        );
    }
}
