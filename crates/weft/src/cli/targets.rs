//! kubectl's argument forms, decided purely: `KIND [NAME...]`, `KIND/NAME...`, `KIND1,KIND2`,
//! and `-o` output formats.

use crate::jsonpath::{JsonPathError, Template};

/// Arguments that do not form a request.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Nothing named.
    #[error("you must specify the type of resource to get, e.g. `weft get vmi` or `weft get vm/NAME`")]
    Empty,
    /// `KIND/NAME` mixed with a bare word (kubectl refuses the same).
    #[error(
        "there is no need to specify a resource type as a separate argument when passing arguments in resource/name form (e.g. `weft get vm/a vm/b` or `weft get vm a b`), got {0:?}"
    )]
    Mixed(String),
    /// `KIND/` or `/NAME`.
    #[error("arguments in resource/name form must have a single resource and name, got {0:?}")]
    Malformed(String),
    /// A name given for several kinds at once.
    #[error("a resource name cannot be given with several kinds ({0}); use KIND/NAME")]
    NamesForKinds(String),
    /// `-o` with a format weft does not print.
    #[error(
        "unable to match a printer suitable for the output format {0:?}, allowed formats are: json, jsonpath, name, wide, yaml"
    )]
    UnknownOutput(String),
    /// `-o jsonpath=` with a bad template.
    #[error(transparent)]
    JsonPath(#[from] JsonPathError),
}

/// One thing to get or delete: a kind as typed, and a name (`None`: all of that kind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The kind as the user typed it (`vm`, `pods`, ...), resolved later.
    pub kind: String,
    /// The object's name; `None` lists the kind.
    pub name: Option<String>,
}

/// `KIND [NAME...]` (KIND may be `k1,k2` without names) or `KIND/NAME...`, as kubectl reads them.
pub fn parse_targets(args: &[String]) -> Result<Vec<Target>, TargetError> {
    let first = args.first().ok_or(TargetError::Empty)?;
    if first.contains('/') {
        return args
            .iter()
            .map(|arg| {
                let (kind, name) = arg
                    .split_once('/')
                    .ok_or_else(|| TargetError::Mixed(arg.clone()))?;
                if kind.is_empty() || name.is_empty() || name.contains('/') {
                    return Err(TargetError::Malformed(arg.clone()));
                }
                Ok(Target {
                    kind: kind.into(),
                    name: Some(name.into()),
                })
            })
            .collect();
    }
    if let Some(mixed) = args[1..].iter().find(|a| a.contains('/')) {
        return Err(TargetError::Mixed(mixed.clone()));
    }
    let kinds: Vec<&str> = first.split(',').filter(|k| !k.is_empty()).collect();
    if kinds.is_empty() {
        return Err(TargetError::Empty);
    }
    let names = &args[1..];
    if names.is_empty() {
        return Ok(kinds
            .into_iter()
            .map(|kind| Target {
                kind: kind.into(),
                name: None,
            })
            .collect());
    }
    if kinds.len() > 1 {
        return Err(TargetError::NamesForKinds(first.clone()));
    }
    Ok(names
        .iter()
        .map(|name| Target {
            kind: kinds[0].into(),
            name: Some(name.clone()),
        })
        .collect())
}

/// `KIND NAME` or `KIND/NAME` for commands about exactly one object (describe, explain).
pub fn one_object(kind: &str, name: Option<&str>) -> Result<(String, String), TargetError> {
    let mut args = vec![kind.to_string()];
    args.extend(name.map(String::from));
    match parse_targets(&args)?.as_slice() {
        [
            Target {
                kind,
                name: Some(name),
            },
        ] => Ok((kind.clone(), name.clone())),
        _ => Err(TargetError::Malformed(args.join(" "))),
    }
}

/// How `get` prints.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// The kind's table.
    Table,
    /// The table with more columns.
    Wide,
    /// `kind.group/name` per object.
    Name,
    /// JSON: the object, or a `List`.
    Json,
    /// YAML documents.
    Yaml,
    /// A kubectl JSONPath template over the object or the `List`.
    JsonPath(Template),
}

/// Parse `-o`: `wide`, `name`, `json`, `yaml`, `jsonpath=TEMPLATE` (`jsonpath='...'` with the
/// quotes a shell left in), `table` (the default).
pub fn parse_output(text: &str) -> Result<Output, TargetError> {
    if let Some(template) = text.strip_prefix("jsonpath=") {
        let template = template
            .strip_prefix('\'')
            .and_then(|t| t.strip_suffix('\''))
            .unwrap_or(template);
        return Ok(Output::JsonPath(Template::parse(template)?));
    }
    Ok(match text {
        "" | "table" => Output::Table,
        "wide" => Output::Wide,
        "name" => Output::Name,
        "json" => Output::Json,
        "yaml" => Output::Yaml,
        other => return Err(TargetError::UnknownOutput(other.into())),
    })
}

/// kubectl's `-o name` of an object: `pod/x`, `virtualmachine.kubevirt.io/vm1`.
pub fn object_name(api_version: &str, kind: &str, name: &str) -> String {
    match api_version.split_once('/') {
        Some((group, _)) => format!("{}.{group}/{name}", kind.to_lowercase()),
        None => format!("{}/{name}", kind.to_lowercase()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn t(kind: &str, name: Option<&str>) -> Target {
        Target {
            kind: kind.into(),
            name: name.map(String::from),
        }
    }

    #[test]
    fn kubectls_argument_forms() {
        assert_eq!(parse_targets(&args(&["vm"])).unwrap(), [t("vm", None)]);
        assert_eq!(
            parse_targets(&args(&["vm", "a", "b"])).unwrap(),
            [t("vm", Some("a")), t("vm", Some("b"))]
        );
        assert_eq!(
            parse_targets(&args(&["vm/a", "pod/x"])).unwrap(),
            [t("vm", Some("a")), t("pod", Some("x"))]
        );
        assert_eq!(
            parse_targets(&args(&["vm,vmi"])).unwrap(),
            [t("vm", None), t("vmi", None)]
        );
        assert!(matches!(parse_targets(&[]), Err(TargetError::Empty)));
        assert!(matches!(
            parse_targets(&args(&["vm/a", "b"])),
            Err(TargetError::Mixed(_))
        ));
        assert!(matches!(
            parse_targets(&args(&["vm", "pod/b"])),
            Err(TargetError::Mixed(_))
        ));
        assert!(matches!(
            parse_targets(&args(&["vm/"])),
            Err(TargetError::Malformed(_))
        ));
        assert!(matches!(
            parse_targets(&args(&["/a"])),
            Err(TargetError::Malformed(_))
        ));
        assert!(matches!(
            parse_targets(&args(&["vm,vmi", "a"])),
            Err(TargetError::NamesForKinds(_))
        ));
        assert_eq!(one_object("vmi/vm1", None).unwrap(), ("vmi".into(), "vm1".into()));
        assert_eq!(
            one_object("vmi", Some("vm1")).unwrap(),
            ("vmi".into(), "vm1".into())
        );
        assert!(one_object("vmi", None).is_err());
        assert!(one_object("vmi/a", Some("b")).is_err());
    }

    #[test]
    fn output_formats() {
        assert_eq!(parse_output("wide").unwrap(), Output::Wide);
        assert_eq!(parse_output("name").unwrap(), Output::Name);
        assert_eq!(parse_output("table").unwrap(), Output::Table);
        assert!(matches!(
            parse_output("jsonpath={.metadata.name}").unwrap(),
            Output::JsonPath(_)
        ));
        assert_eq!(
            parse_output("jsonpath='{.a}'").unwrap(),
            parse_output("jsonpath={.a}").unwrap()
        );
        assert!(matches!(
            parse_output("jsonpath={.a"),
            Err(TargetError::JsonPath(_))
        ));
        let err = parse_output("xml").unwrap_err().to_string();
        assert!(err.contains("\"xml\""), "{err}");
    }

    #[test]
    fn names_as_kubectl_prints_them() {
        assert_eq!(object_name("v1", "Pod", "x"), "pod/x");
        assert_eq!(
            object_name("kubevirt.io/v1", "VirtualMachine", "vm1"),
            "virtualmachine.kubevirt.io/vm1"
        );
    }
}
