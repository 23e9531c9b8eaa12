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
    /// Kind (vm, vmi, pod, nad, ipamclaim, node).
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
}

pub async fn run(state: &Path, args: DescribeArgs) -> anyhow::Result<i32> {
    let ty = cluster::resolve_kind(&args.kind)?;
    let store = cluster::open_running_store(state).await?;
    let namespace = ty.namespaced.then_some(args.namespace.as_str());
    let object = store
        .get(&ty, namespace, &args.name)
        .await?
        .with_context(|| format!("{} {} not found", ty.kind, ty.key(namespace, &args.name)))?;
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
