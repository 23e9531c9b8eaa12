//! `weft describe KIND NAME`: the object and the Events about it, in kubectl's layout.

use std::path::Path;

use anyhow::Context;
use clap::Args;
use weft_store::{Api, ListOptions};

use crate::cluster;
use crate::kinds::Event;

/// `weft describe KIND NAME`.
#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// Kind (vm, vmi, pod, nad, ipamclaim, node, ...), or `KIND/NAME`.
    #[arg(value_name = "KIND[/NAME]")]
    pub kind: String,
    /// Name (unless given as `KIND/NAME`).
    pub name: Option<String>,
}

pub async fn run(state: &Path, args: DescribeArgs, namespace: &str) -> anyhow::Result<i32> {
    let (kind, name) = super::targets::one_object(&args.kind, args.name.as_deref())?;
    let ty = cluster::resolve_kind(&kind)?;
    let store = cluster::open_running_store(state).await?;
    let namespace = ty.namespaced.then_some(namespace);
    let object = store
        .get(&ty, namespace, &name)
        .await?
        .with_context(|| format!("{} {} not found", ty.kind, ty.key(namespace, &name)))?;
    let events_namespace = namespace.unwrap_or("default");
    let events = Api::<Event>::namespaced(store.clone(), events_namespace)
        .list(&ListOptions::default())
        .await?;
    print!(
        "{}",
        crate::describe::describe(&object, &events, jiff::Timestamp::now())
    );
    Ok(0)
}
