//! Tables of `weft get`; `start`, `stop`, `vm render`, `net parse`, `net status`.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;
use weft_store::{ListOptions, Object};

use crate::cluster;

fn text(object: &Object, path: &str) -> String {
    match object.path(path) {
        Some(Value::String(s)) => s,
        Some(Value::Null) | None => String::new(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(other) => other.to_string(),
    }
}

fn age(object: &Object) -> String {
    let Some(created) = object.metadata.creation_timestamp.as_deref() else {
        return "-".into();
    };
    let Ok(created) = created.parse::<jiff::Timestamp>() else {
        return "-".into();
    };
    let seconds = (jiff::Timestamp::now().as_second() - created.as_second()).max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// The default table for a kind (columns as kubectl/virtctl show them).
pub fn table(kind: &str, objects: &[Object], with_namespace: bool) -> String {
    table_with(kind, objects, with_namespace, false)
}

/// [`table`], with the columns of `-o wide` when `wide`.
pub fn table_with(kind: &str, objects: &[Object], with_namespace: bool, wide: bool) -> String {
    let header: Vec<&str> = match kind {
        "VirtualMachineInstance" => vec!["NAME", "AGE", "PHASE", "IP", "NODENAME", "READY"],
        "VirtualMachine" => vec!["NAME", "AGE", "STATUS", "READY"],
        "Pod" => vec!["NAME", "STATUS", "IP", "NODE", "AGE"],
        "IPAMClaim" => vec!["NAME", "NETWORK", "IPS", "OWNER", "AGE"],
        "VirtualMachineInstanceMigration" => vec!["NAME", "PHASE", "VMI", "AGE"],
        "Event" => vec!["TYPE", "REASON", "OBJECT", "COUNT", "LAST SEEN", "MESSAGE"],
        "IPReservation" => vec!["NAME", "NETWORK", "IP", "HOLDER", "NODE", "AGE"],
        _ => vec!["NAME", "AGE"],
    };
    let mut rows: Vec<Vec<String>> = Vec::new();
    for o in objects {
        let name = o.metadata.name.clone();
        let row = match kind {
            "VirtualMachineInstance" => {
                let ready = o
                    .path("status.conditions")
                    .and_then(|c| c.as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                vec![
                    name,
                    age(o),
                    text(o, "status.phase"),
                    o.path("status.interfaces")
                        .and_then(|i| i.get(0).and_then(|i| i.get("ipAddress")).cloned())
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default(),
                    text(o, "status.nodeName"),
                    if ready { "True".into() } else { "False".into() },
                ]
            }
            "VirtualMachine" => vec![
                name,
                age(o),
                text(o, "status.printableStatus"),
                text(o, "status.ready"),
            ],
            "Event" => vec![
                text(o, "type"),
                text(o, "reason"),
                format!(
                    "{}/{}",
                    text(o, "involvedObject.kind").to_lowercase(),
                    text(o, "involvedObject.name")
                ),
                text(o, "count"),
                text(o, "lastTimestamp"),
                text(o, "message"),
            ],
            "Pod" => vec![
                name,
                text(o, "status.phase"),
                text(o, "status.podIP"),
                text(o, "spec.nodeName"),
                age(o),
            ],
            "IPAMClaim" => vec![
                name,
                text(o, "spec.network"),
                o.path("status.ips")
                    .and_then(|v| v.as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect::<Vec<_>>()
                    .join(","),
                text(o, "status.ownerPod.name"),
                age(o),
            ],
            "IPReservation" => {
                let mut row = super::wide::reservation_row(o);
                row.push(age(o));
                row
            }
            "VirtualMachineInstanceMigration" => {
                vec![name, text(o, "status.phase"), text(o, "spec.vmiName"), age(o)]
            }
            _ => vec![name, age(o)],
        };
        let mut row = row;
        if wide {
            row.extend(super::wide::cells(kind, o));
        }
        if with_namespace {
            row.insert(0, o.metadata.namespace.clone().unwrap_or_default());
        }
        rows.push(row);
    }
    let mut header: Vec<String> = header.into_iter().map(String::from).collect();
    if wide {
        header.extend(super::wide::headers(kind).iter().map(|h| h.to_string()));
    }
    if with_namespace {
        header.insert(0, "NAMESPACE".into());
    }
    render_table(&header, &rows)
}

fn render_table(header: &[String], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(String::len).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[String]| {
        let mut s = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("   ");
        s.truncate(s.trim_end().len());
        s + "\n"
    };
    let mut out = line(header);
    for row in rows {
        out += &line(row);
    }
    out
}

pub async fn set_running(state: &Path, name: &str, namespace: &str, running: bool) -> anyhow::Result<i32> {
    let store = cluster::open_running_store(state).await?;
    let api = weft_store::Api::<weft_vm::VirtualMachine>::namespaced(store, namespace);
    // The write is an update of the VM: it goes through the same admission as `weft apply`
    // (a VM stored before admission existed, with a template KubeVirt refuses, is not started).
    let config = weft_vm::ClusterConfig::default();
    let mut denied = Vec::new();
    api.modify(name, |vm| {
        let decision = weft_vm::admission::admit_vm(
            &vm.spec.template.spec,
            weft_vm::admission::Operation::Update,
            &config,
        );
        if !decision.allowed() {
            denied = crate::admission::invalid_lines("VirtualMachine", name, &decision.causes);
            return false;
        }
        let changed = vm.spec.running != Some(running);
        vm.spec.running = Some(running);
        changed
    })
    .await
    .with_context(|| format!("VirtualMachine {namespace}/{name}"))?;
    if !denied.is_empty() {
        for line in denied {
            eprintln!("error: {line}");
        }
        return Ok(1);
    }
    println!(
        "VirtualMachine {namespace}/{name} {}",
        if running { "started" } else { "stopped" }
    );
    Ok(0)
}

pub fn vm_render(file: &Path) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?;
    let output = weft_vm::render(&text).with_context(|| format!("{}", file.display()))?;
    println!("{}", serde_json::to_string_pretty(&output)?);
    Ok(0)
}

pub fn net_parse(namespace: &str, annotation: &str) -> anyhow::Result<i32> {
    match weft_netconf::parse_networks_annotation(annotation, namespace) {
        Ok(elements) => {
            println!("{}", serde_json::to_string_pretty(&elements)?);
            Ok(0)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(1)
        }
    }
}

pub async fn net_status(state: &Path, pod: &str, namespace: &str) -> anyhow::Result<i32> {
    let store = cluster::open_running_store(state).await?;
    let pod = weft_store::Api::<crate::kinds::Pod>::namespaced(store, namespace)
        .get(pod)
        .await?
        .with_context(|| format!("Pod {namespace}/{pod} not found"))?;
    match pod.metadata.annotation(weft_netconf::NETWORK_STATUS_ANNOTATION) {
        Some(status) => println!("{status}"),
        None => anyhow::bail!(
            "Pod {namespace}/{}: no {} annotation",
            pod.metadata.name,
            weft_netconf::NETWORK_STATUS_ANNOTATION
        ),
    }
    Ok(0)
}

pub async fn ipam_list(state: &Path, network: Option<&str>) -> anyhow::Result<i32> {
    let store = cluster::open_running_store(state).await?;
    let mut reservations = weft_store::Api::<weft_ipam::IpReservation>::all(store)
        .list(&ListOptions::default())
        .await?;
    reservations.retain(|r| network.is_none_or(|n| r.spec.network == n));
    reservations.sort_by(|a, b| (&a.spec.network, a.spec.ip).cmp(&(&b.spec.network, b.spec.ip)));
    let header: Vec<String> = ["NETWORK", "IP", "HOLDER", "CONTAINER", "IFNAME", "NODE"]
        .into_iter()
        .map(String::from)
        .collect();
    let rows: Vec<Vec<String>> = reservations
        .iter()
        .map(|r| {
            let holder = match &r.spec.claim {
                Some(claim) => format!("claim {claim}"),
                None => format!("pod {}", r.spec.pod_ref),
            };
            let container: String = r.spec.container_id.chars().take(12).collect();
            vec![
                r.spec.network.clone(),
                r.spec.ip.map(|ip| ip.to_string()).unwrap_or_default(),
                holder,
                container,
                r.spec.ifname.clone(),
                r.spec.node.clone(),
            ]
        })
        .collect();
    print!("{}", render_table(&header, &rows));
    Ok(0)
}

/// `weft migrate VM [--to NODE]`: a `VirtualMachineInstanceMigration` for the VMI, as
/// `virtctl migrate` creates it (`--to` is its `addedNodeSelector`); `--cancel` deletes the
/// VMI's unfinished migrations, as `virtctl migrate-cancel` (the abort).
pub async fn migrate(
    state: &Path,
    name: &str,
    to: Option<&str>,
    cancel: bool,
    namespace: &str,
) -> anyhow::Result<i32> {
    use weft_vm::vmim::MigrationPhase;
    let store = cluster::open_running_store(state).await?;
    let vmi = weft_store::Api::<weft_vm::VirtualMachineInstance>::namespaced(store.clone(), namespace)
        .get_required(name)
        .await
        .with_context(|| format!("VirtualMachineInstance {namespace}/{name}"))?;
    let api =
        weft_store::Api::<weft_vm::VirtualMachineInstanceMigration>::namespaced(store.clone(), namespace);
    let open: Vec<weft_vm::VirtualMachineInstanceMigration> = api
        .list(&Default::default())
        .await?
        .into_iter()
        .filter(|m| m.spec.vmi_name == name)
        .filter(|m| {
            !MigrationPhase::parse(m.status.as_ref().map(|s| s.phase.as_str()).unwrap_or(""))
                .is_some_and(MigrationPhase::is_final)
        })
        .collect();
    if cancel {
        anyhow::ensure!(
            !open.is_empty(),
            "VirtualMachineInstance {namespace}/{name} is not migrating"
        );
        for m in &open {
            api.delete(&m.metadata.name).await?;
            println!(
                "VirtualMachineInstanceMigration {namespace}/{} deleted (migration cancelled)",
                m.metadata.name
            );
        }
        return Ok(0);
    }
    if let Some(m) = open.first() {
        anyhow::bail!(
            "VirtualMachineInstance {namespace}/{name} already has a migration in progress ({})",
            m.metadata.name
        );
    }
    let phase = vmi.status.as_ref().map(|s| s.phase.as_str()).unwrap_or("");
    anyhow::ensure!(
        phase == "Running",
        "VirtualMachineInstance {namespace}/{name} is not running (phase {phase:?})"
    );
    // As KubeVirt's migration admission: a VMI that cannot move gets no migration object.
    let config = crate::controller::config::load(&store).await?;
    weft_vm::verify_migratable(&vmi, &config)
        .with_context(|| format!("VirtualMachineInstance {namespace}/{name} cannot migrate"))?;
    let mut vmim = crate::controller::migration::new_migration(namespace, name, "kubevirt-migrate-vm-");
    if let Some(node) = to {
        vmim.spec.added_node_selector.insert(
            crate::controller::launcher_pod::HOSTNAME_LABEL.into(),
            node.into(),
        );
    }
    let created = api.create(&vmim).await?;
    println!(
        "VirtualMachineInstanceMigration {namespace}/{} created: migrating {name}{}",
        created.metadata.name,
        to.map(|n| format!(" to {n}")).unwrap_or_default()
    );
    Ok(0)
}
