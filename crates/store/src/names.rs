//! Object names as the Kubernetes API server validates them (apimachinery's
//! `IsDNS1123Subdomain` / `IsDNS1123Label`, applied by `ValidateObjectMeta`).
//!
//! The Kubernetes backend gets the API server's own answer; the embedded backends (memory,
//! SQLite) call [`validate_metadata`] on create so that a name like `a/b`, `..`, `Upper` or one
//! of 300 characters is refused at the door instead of failing later (in a path, a netns name,
//! a label selector).

use crate::{ObjectMeta, ResourceType};

/// Longest DNS-1123 subdomain (object names of most kinds).
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// Longest DNS-1123 label (namespaces, and names of kinds that must be labels).
pub const DNS1123_LABEL_MAX: usize = 63;

/// The API server's message for a value that is not a DNS-1123 subdomain.
pub const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex \
used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// The API server's message for a value that is not a DNS-1123 label.
pub const LABEL_MESSAGE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// Which rule a name follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// ≤ 253 characters, dot-separated DNS-1123 labels.
    Subdomain,
    /// ≤ 63 characters, lowercase alphanumerics and '-'.
    Label,
}

/// One invalid metadata field, as the API server reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {}", self.detail())]
pub struct FieldError {
    /// The field path, e.g. `metadata.name`.
    pub field: &'static str,
    /// The value given.
    pub value: String,
    /// `None` for a missing value ("Required value"), otherwise why the value is invalid.
    pub reason: Option<String>,
}

impl FieldError {
    fn detail(&self) -> String {
        match &self.reason {
            None => "Required value".to_string(),
            Some(reason) => format!("Invalid value: {:?}: {reason}", self.value),
        }
    }
}

/// Every invalid metadata field of one object: displays like the API server's 422 message,
/// `The Pod "Bad/Name" is invalid: metadata.name: Invalid value: "Bad/Name": a lowercase ...`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("The {kind} {name:?} is invalid: {}", join(.errors))]
pub struct InvalidObject {
    /// The object's kind.
    pub kind: String,
    /// The object's name as given.
    pub name: String,
    /// The field errors, at least one.
    pub errors: Vec<FieldError>,
}

fn join(errors: &[FieldError]) -> String {
    match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Why `value` breaks `rule`, one message per broken constraint (empty when it is valid).
pub fn check_name(value: &str, rule: NameRule) -> Vec<String> {
    let (max, message, label_ok): (usize, &str, fn(&str) -> bool) = match rule {
        NameRule::Subdomain => (DNS1123_SUBDOMAIN_MAX, SUBDOMAIN_MESSAGE, |v| {
            v.split('.').all(is_label_shaped)
        }),
        NameRule::Label => (DNS1123_LABEL_MAX, LABEL_MESSAGE, is_label_shaped),
    };
    let mut out = Vec::new();
    if value.len() > max {
        out.push(format!("must be no more than {max} characters"));
    }
    if !label_ok(value) {
        out.push(message.to_string());
    }
    out
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, without a length limit.
fn is_label_shaped(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

/// The rule for names of `ty`: DNS-1123 label for core Namespaces (as Kubernetes requires),
/// DNS-1123 subdomain for every other kind weft stores (the API server's default, also for
/// custom resources).
pub fn name_rule(ty: &ResourceType) -> NameRule {
    if ty.group().is_empty() && ty.kind == "Namespace" {
        NameRule::Label
    } else {
        NameRule::Subdomain
    }
}

/// Validates `metadata.name` (and, for namespaced kinds, `metadata.namespace`, a DNS-1123
/// label) of an object of type `ty`, as the API server does on create.
pub fn validate_metadata(ty: &ResourceType, meta: &ObjectMeta) -> Result<(), InvalidObject> {
    let mut errors = Vec::new();
    let mut push = |field: &'static str, value: &str, rule: NameRule| {
        if value.is_empty() {
            errors.push(FieldError {
                field,
                value: String::new(),
                reason: None,
            });
            return;
        }
        for reason in check_name(value, rule) {
            errors.push(FieldError {
                field,
                value: value.to_string(),
                reason: Some(reason),
            });
        }
    };
    push("metadata.name", &meta.name, name_rule(ty));
    if ty.namespaced
        && let Some(namespace) = &meta.namespace
    {
        push("metadata.namespace", namespace, NameRule::Label);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(InvalidObject {
            kind: ty.kind.clone(),
            name: meta.name.clone(),
            errors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm() -> ResourceType {
        ResourceType::new("kubevirt.io/v1", "VirtualMachine", "virtualmachines", true)
    }

    #[test]
    fn good_names_pass() {
        for name in ["a", "vm1", "vm1.data", "0-a.b-1", &"a".repeat(253)] {
            assert!(check_name(name, NameRule::Subdomain).is_empty(), "{name}");
        }
        for name in ["a", "default", "kube-system", &"a".repeat(63)] {
            assert!(check_name(name, NameRule::Label).is_empty(), "{name}");
        }
    }

    #[test]
    fn bad_names_fail() {
        for name in [
            "Bad/Name", "..", "a/b", "Upper", "-a", "a-", "a..b", ".a", "a.", "a_b", "é", " a",
        ] {
            assert_eq!(
                check_name(name, NameRule::Subdomain),
                vec![SUBDOMAIN_MESSAGE.to_string()],
                "{name}"
            );
        }
        assert_eq!(
            check_name(&"a".repeat(254), NameRule::Subdomain),
            vec!["must be no more than 253 characters".to_string()]
        );
        assert_eq!(
            check_name(&"a".repeat(64), NameRule::Label),
            vec!["must be no more than 63 characters".to_string()]
        );
        assert_eq!(
            check_name("a.b", NameRule::Label),
            vec![LABEL_MESSAGE.to_string()]
        );
    }

    #[test]
    fn message_is_the_api_servers() {
        let err = validate_metadata(&vm(), &ObjectMeta::named(Some("default"), "Bad/Name")).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "The VirtualMachine \"Bad/Name\" is invalid: metadata.name: Invalid value: \"Bad/Name\": {SUBDOMAIN_MESSAGE}"
            )
        );
        let long = "A".repeat(300);
        let err = validate_metadata(&vm(), &ObjectMeta::named(Some("Ns_1"), &long)).unwrap_err();
        let fields: Vec<_> = err.errors.iter().map(|e| e.field).collect();
        assert_eq!(fields, ["metadata.name", "metadata.name", "metadata.namespace"]);
        assert!(err.to_string().starts_with("The VirtualMachine \"AAA"));
        assert!(
            err.to_string()
                .contains(", metadata.namespace: Invalid value: \"Ns_1\"")
        );
    }

    #[test]
    fn namespace_kind_names_are_labels_and_cluster_scoped_kinds_skip_namespace() {
        let ns = ResourceType::new("v1", "Namespace", "namespaces", false);
        assert_eq!(name_rule(&ns), NameRule::Label);
        assert!(validate_metadata(&ns, &ObjectMeta::named(None, "a.b")).is_err());
        let node = ResourceType::new("v1", "Node", "nodes", false);
        assert!(validate_metadata(&node, &ObjectMeta::named(None, "node-1.example")).is_ok());
        let err = validate_metadata(&node, &ObjectMeta::named(None, "")).unwrap_err();
        assert_eq!(err.errors[0].to_string(), "metadata.name: Required value");
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        /// A reference implementation: the API server's regular expressions, spelled out.
        fn reference(value: &str, rule: NameRule) -> bool {
            let label = |p: &str| {
                !p.is_empty()
                    && p.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !p.starts_with('-')
                    && !p.ends_with('-')
            };
            match rule {
                NameRule::Subdomain => value.len() <= 253 && value.split('.').all(label),
                NameRule::Label => value.len() <= 63 && label(value),
            }
        }

        proptest! {
            #[test]
            fn agrees_with_the_reference(value in "[a-zA-Z0-9./_ -]{0,70}|[a-z0-9.-]{240,260}") {
                for rule in [NameRule::Subdomain, NameRule::Label] {
                    prop_assert_eq!(check_name(&value, rule).is_empty(), reference(&value, rule));
                }
            }

            #[test]
            fn valid_names_have_no_slash_dotdot_or_upper(value in "\\PC{0,300}") {
                if check_name(&value, NameRule::Subdomain).is_empty() {
                    prop_assert!(!value.contains('/') && !value.contains("..") && value.len() <= 253);
                    prop_assert!(!value.chars().any(|c| c.is_uppercase()));
                }
            }
        }
    }
}
