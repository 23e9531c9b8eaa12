//! `weft get` and `weft delete` in kubectl's forms: `KIND [NAME...]`, `KIND/NAME...`,
//! `-l SELECTOR`, `-o wide|name|json|yaml|jsonpath=...`, `delete -f FILE`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde_json::Value;
use weft_store::label_selector::LabelSelector;
use weft_store::{ListOptions, Object, ResourceType, Store};

use super::Scope;
use super::targets::{Output, Target, object_name, parse_output, parse_targets};
use crate::cluster;

/// `weft get KIND [NAME...]`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// `KIND [NAME...]`, `KIND/NAME...` or `KIND1,KIND2`. Kinds: vm, vmi, pod, node, nad,
    /// ipamclaim, event, ipreservation (singular, plural or short names as kubectl's).
    #[arg(required = true, value_name = "KIND[/NAME]")]
    pub targets: Vec<String>,
    /// Output format: wide, name, json, yaml, jsonpath=TEMPLATE (default: a table).
    #[arg(short, long, default_value = "table")]
    pub output: String,
    /// Label selector: `k=v`, `k!=v`, `k in (a,b)`, `k notin (a)`, `k`, `!k`, comma-joined.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
}

/// `weft delete KIND NAME...`, `KIND/NAME...`, `KIND -l SELECTOR` or `-f FILE`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// `KIND NAME...` or `KIND/NAME...` (`KIND` alone with `-l`).
    #[arg(
        value_name = "KIND[/NAME]",
        required_unless_present = "file",
        conflicts_with = "file"
    )]
    pub targets: Vec<String>,
    /// Delete the objects this manifest names (`-` for stdin).
    #[arg(short = 'f', long = "filename")]
    pub file: Option<PathBuf>,
    /// Delete the objects of KIND matching this label selector.
    #[arg(short = 'l', long, conflicts_with = "file")]
    pub selector: Option<String>,
}

/// The objects `targets` name, grouped by kind in the order asked; a named object that does
/// not exist is an error.
async fn collect(
    store: &dyn Store,
    targets: &[Target],
    selector: &LabelSelector,
    scope: &Scope,
) -> anyhow::Result<Vec<(ResourceType, Vec<Object>)>> {
    let mut groups: Vec<(ResourceType, Vec<Object>)> = Vec::new();
    for target in targets {
        let ty = cluster::resolve_kind(&target.kind)?;
        let objects = match &target.name {
            Some(name) => {
                let namespace = ty.namespaced.then_some(scope.namespace.as_str());
                vec![
                    store
                        .get(&ty, namespace, name)
                        .await?
                        .with_context(|| format!("{} {} not found", ty.kind, ty.key(namespace, name)))?,
                ]
            }
            None => {
                let namespace = (ty.namespaced && !scope.all_namespaces).then_some(scope.namespace.as_str());
                let options = ListOptions {
                    labels: selector.equalities(),
                    ..ListOptions::default()
                };
                let mut items = store.list(&ty, namespace, &options).await?.items;
                items.retain(|o| selector.matches(&o.metadata.labels));
                items
            }
        };
        match groups.iter_mut().find(|(t, _)| t.kind == ty.kind) {
            Some((_, existing)) => existing.extend(objects),
            None => groups.push((ty, objects)),
        }
    }
    Ok(groups)
}

fn parse_selector(selector: Option<&str>, targets: &[Target]) -> anyhow::Result<LabelSelector> {
    let Some(text) = selector else {
        return Ok(LabelSelector::default());
    };
    anyhow::ensure!(
        targets.iter().all(|t| t.name.is_none()),
        "a name cannot be given together with a label selector (-l)"
    );
    Ok(LabelSelector::parse(text)?)
}

/// `weft get`.
pub async fn get(state: &Path, args: GetArgs, scope: &Scope) -> anyhow::Result<i32> {
    let targets = parse_targets(&args.targets)?;
    let output = parse_output(&args.output)?;
    let selector = parse_selector(args.selector.as_deref(), &targets)?;
    let store = cluster::open_running_store(state).await?;
    let groups = collect(store.as_ref(), &targets, &selector, scope).await?;
    let single = targets.len() == 1 && targets[0].name.is_some();
    print!("{}", render(&groups, &output, single, scope)?);
    if !single && groups.iter().all(|(_, objects)| objects.is_empty()) && is_listing(&output) {
        if scope.all_namespaces || groups.iter().all(|(ty, _)| !ty.namespaced) {
            eprintln!("No resources found");
        } else {
            eprintln!("No resources found in {} namespace.", scope.namespace);
        }
    }
    Ok(0)
}

fn is_listing(output: &Output) -> bool {
    matches!(output, Output::Table | Output::Wide | Output::Name)
}

/// What `get` prints for `groups` (pure; `single`: one named object, printed bare rather
/// than in a `List`).
pub fn render(
    groups: &[(ResourceType, Vec<Object>)],
    output: &Output,
    single: bool,
    scope: &Scope,
) -> anyhow::Result<String> {
    let all: Vec<&Object> = groups.iter().flat_map(|(_, objects)| objects).collect();
    let document = || -> anyhow::Result<Value> {
        Ok(if single && all.len() == 1 {
            serde_json::to_value(all[0])?
        } else {
            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": all, "metadata": {"resourceVersion": ""}})
        })
    };
    Ok(match output {
        Output::Table | Output::Wide => {
            let tables: Vec<String> = groups
                .iter()
                .filter(|(_, objects)| !objects.is_empty())
                .map(|(ty, objects)| {
                    super::inspect::table_with(
                        &ty.kind,
                        objects,
                        scope.all_namespaces && ty.namespaced,
                        *output == Output::Wide,
                    )
                })
                .collect();
            tables.join("\n")
        }
        Output::Name => all
            .iter()
            .map(|o| object_name(&o.api_version, &o.kind, &o.metadata.name) + "\n")
            .collect(),
        Output::Json => serde_json::to_string_pretty(&document()?)? + "\n",
        Output::Yaml => serde_saphyr::to_string(&document()?)?,
        Output::JsonPath(template) => template.render(&document()?),
    })
}

/// `weft delete`.
pub async fn delete(state: &Path, args: DeleteArgs, scope: &Scope) -> anyhow::Result<i32> {
    let store = cluster::open_running_store(state).await?;
    let mut doomed: Vec<(ResourceType, Object)> = Vec::new();
    match &args.file {
        Some(file) => {
            let Some(objects) = super::manifests::read_manifests(file, &scope.namespace)? else {
                return Ok(1);
            };
            for object in objects {
                let ty = cluster::known_type_of(&object).context("kind from parse_manifests")?;
                doomed.push((ty, object));
            }
        }
        None => {
            let targets = parse_targets(&args.targets)?;
            anyhow::ensure!(
                args.selector.is_some() || targets.iter().all(|t| t.name.is_some()),
                "resource(s) were provided, but no name was specified: `weft delete KIND NAME`, `KIND/NAME` or `KIND -l SELECTOR`"
            );
            let selector = parse_selector(args.selector.as_deref(), &targets)?;
            for (ty, objects) in collect(store.as_ref(), &targets, &selector, scope).await? {
                doomed.extend(objects.into_iter().map(|o| (ty.clone(), o)));
            }
        }
    }
    let mut missing = 0;
    for (ty, object) in doomed {
        let namespace = object.metadata.namespace.as_deref().filter(|_| ty.namespaced);
        let name = &object.metadata.name;
        match store.delete(&ty, namespace, name, None).await? {
            Some(_) => println!("{}/{name} deleted", ty.kind.to_lowercase()),
            None => {
                // As kubectl: report and go on with the rest, exit 1 at the end.
                eprintln!("Error: {} {} not found", ty.kind, ty.key(namespace, name));
                missing += 1;
            }
        }
    }
    Ok(if missing > 0 { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_store::Resource;

    fn vmi(name: &str, ns: &str) -> Object {
        let ty = weft_vm::VirtualMachineInstance::resource_type();
        let mut o = Object::new(&ty, Some(ns), name);
        o.data.insert(
            "status".into(),
            serde_json::json!({"phase": "Running", "nodeName": "node1",
                "interfaces": [{"name": "default", "ipAddress": "10.0.0.5", "ipAddresses": ["10.0.0.5", "fd00::5"]},
                               {"name": "data", "ipAddress": "10.1.0.7"}]}),
        );
        o
    }

    fn scope(all: bool) -> Scope {
        Scope {
            namespace: "default".into(),
            all_namespaces: all,
        }
    }

    #[test]
    fn outputs_of_a_list() {
        let ty = weft_vm::VirtualMachineInstance::resource_type();
        let groups = vec![(ty, vec![vmi("vm1", "default"), vmi("vm2", "other")])];
        let name = render(&groups, &Output::Name, false, &scope(true)).unwrap();
        assert_eq!(
            name,
            "virtualmachineinstance.kubevirt.io/vm1\nvirtualmachineinstance.kubevirt.io/vm2\n"
        );
        let path =
            parse_output(r#"jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}"#)
                .unwrap();
        assert_eq!(
            render(&groups, &path, false, &scope(true)).unwrap(),
            "default/vm1\nother/vm2\n"
        );
        let json: Value =
            serde_json::from_str(&render(&groups, &Output::Json, false, &scope(true)).unwrap()).unwrap();
        assert_eq!(json["kind"], "List");
        assert_eq!(json["items"][1]["metadata"]["name"], "vm2");
        let one = vec![(
            weft_vm::VirtualMachineInstance::resource_type(),
            vec![vmi("vm1", "default")],
        )];
        let ip = parse_output("jsonpath={.status.interfaces[0].ipAddress}").unwrap();
        assert_eq!(render(&one, &ip, true, &scope(false)).unwrap(), "10.0.0.5");
        let yaml = render(&one, &Output::Yaml, true, &scope(false)).unwrap();
        assert!(yaml.contains("kind: VirtualMachineInstance"), "{yaml}");
    }

    #[test]
    fn wide_tables() {
        let ty = weft_vm::VirtualMachineInstance::resource_type();
        let groups = vec![(ty, vec![vmi("vm1", "default"), vmi("vm2", "other")])];
        let wide = render(&groups, &Output::Wide, false, &scope(true)).unwrap();
        // Objects without a creationTimestamp: AGE is `-`, the table is stable.
        insta::assert_snapshot!(wide);
    }
}
