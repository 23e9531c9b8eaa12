//! `weft up`: bring the local cluster up ([`crate::local::up`]), then wait for its VMs to run
//! and lease every NIC, and show them as `weft get vmi` does (the tables are the CLI's, so
//! `local` does not import the CLI).

use std::path::Path;
use std::time::{Duration, Instant};

use weft_store::Api;

use crate::cluster;
use crate::local::{Topology, UpArgs};

/// `weft up` (with `--no-wait`, return once the cluster is up).
pub async fn run(state: &Path, args: UpArgs) -> anyhow::Result<i32> {
    let topology = crate::local::up(state, args.clone()).await?;
    if args.no_wait {
        return Ok(0);
    }
    wait_for_guests(&topology, &args).await
}

async fn wait_for_guests(topology: &Topology, args: &UpArgs) -> anyhow::Result<i32> {
    let store = cluster::open_store(&topology.state_dir, cluster::Component::Cli).await?;
    let vmis = Api::<weft_vm::VirtualMachineInstance>::all(store.clone());
    let pods = Api::<crate::kinds::Pod>::all(store.clone());
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    println!("waiting for the VMs to run and lease an address on every NIC...");
    loop {
        let list = vmis.list(&Default::default()).await?;
        let pods = pods.list(&Default::default()).await?;
        let ready = !list.is_empty()
            && list.iter().all(|vmi| {
                // The launcher pod's network-status tells an L2-only NIC (nothing to lease).
                let namespace = vmi.metadata.namespace.as_deref();
                let in_namespace = pods
                    .iter()
                    .filter(|p| p.metadata.namespace.as_deref() == namespace);
                let statuses = super::explain::launcher_of(in_namespace, &vmi.metadata.name)
                    .map(|p| weft_vm::netstatus::network_statuses(&p.metadata.annotations))
                    .unwrap_or_default();
                weft_vm::status::all_nics_leased(vmi, args.no_guests, &statuses)
            });
        if ready {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("timed out after {}s; current state:", args.timeout);
            print_status(&store).await?;
            return Ok(1);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    print_status(&store).await?;
    Ok(0)
}

async fn print_status(store: &std::sync::Arc<dyn weft_store::Store>) -> anyhow::Result<()> {
    let ty = <weft_vm::VirtualMachineInstance as weft_store::Resource>::resource_type();
    let list = store.list(&ty, None, &Default::default()).await?;
    println!(
        "\n$ weft get vmi\n{}",
        super::table("VirtualMachineInstance", &list.items, false)
    );
    for vmi in &list.items {
        let status = serde_json::json!({"status": {"interfaces": vmi.path("status.interfaces")}});
        println!(
            "$ weft get vmi {} -o yaml   # status.interfaces\n{}",
            vmi.metadata.name,
            serde_saphyr::to_string(&status)?
        );
    }
    Ok(())
}
