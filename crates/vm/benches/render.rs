//! Launcher annotations + status for 10,000 VMIs with 4 networks each (target: ≤ 1 s total).

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use weft_vm::api::VirtualMachineInstance;
use weft_vm::{
    ClusterConfig, controller_status_interfaces, launcher_pod_annotations, network_statuses,
    pod_interface_names, running_pod_annotations,
};

const VMIS: usize = 10_000;

fn fleet() -> Vec<(VirtualMachineInstance, BTreeMap<String, String>)> {
    (0..VMIS)
        .map(|i| {
            let vmi: VirtualMachineInstance = serde_json::from_value(json!({
                "metadata": {"name": format!("vm{i}"), "namespace": "tenant"},
                "spec": {
                    "domain": {"devices": {"interfaces": [
                        {"name": "default", "masquerade": {}},
                        {"name": format!("red{i}"), "bridge": {}, "macAddress": "02:00:00:00:00:01"},
                        {"name": "blue", "bridge": {}},
                        {"name": "green", "sriov": {}}
                    ]}},
                    "networks": [
                        {"name": "default", "pod": {}},
                        {"name": format!("red{i}"), "multus": {"networkName": "red-nad"}},
                        {"name": "blue", "multus": {"networkName": "other/blue-nad"}},
                        {"name": "green", "multus": {"networkName": "sriov-nad"}}
                    ]
                },
                "status": {"interfaces": [
                    {"name": "default", "infoSource": "domain, guest-agent"},
                    {"name": format!("red{i}"), "infoSource": "domain, guest-agent, multus-status"}
                ]}
            }))
            .unwrap();
            let red = weft_vm::hashed_pod_interface_name(&format!("red{i}"));
            let status = json!([
                {"name": "k8s-pod-network", "interface": "eth0", "ips": ["10.0.0.1"], "default": true, "dns": {}},
                {"name": "tenant/red-nad", "interface": red, "mac": "02:00:00:00:00:01", "dns": {}},
                {"name": "tenant/sriov-nad", "interface": weft_vm::hashed_pod_interface_name("green"), "dns": {},
                 "device-info": {"type": "pci", "version": "1.0.0", "pci": {"pci-address": "0000:65:00.3"}}}
            ]);
            let mut annotations = BTreeMap::new();
            annotations.insert(
                weft_netconf::NETWORK_STATUS_ANNOTATION.to_string(),
                status.to_string(),
            );
            (vmi, annotations)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let fleet = fleet();
    let config = ClusterConfig::default();
    let mut group = c.benchmark_group("vm_10k_vmis_4_networks");
    group.sample_size(10);
    group.bench_function("baseline_serialize_vmi_json", |b| {
        b.iter(|| {
            for (vmi, _) in &fleet {
                black_box(serde_json::to_string(vmi).unwrap());
            }
        })
    });
    group.bench_function("launcher_annotations_and_status", |b| {
        b.iter(|| {
            for (vmi, annotations) in &fleet {
                black_box(launcher_pod_annotations(vmi, &config).unwrap());
                let statuses = network_statuses(annotations);
                black_box(controller_status_interfaces(
                    &vmi.spec.networks,
                    vmi.status_interfaces(),
                    &statuses,
                ));
            }
        })
    });
    group.bench_function("full_controller_pass", |b| {
        b.iter(|| {
            for (vmi, annotations) in &fleet {
                black_box(launcher_pod_annotations(vmi, &config).unwrap());
                black_box(running_pod_annotations(vmi, annotations, &config));
                let statuses = network_statuses(annotations);
                black_box(pod_interface_names(&vmi.spec.networks, &statuses));
                black_box(controller_status_interfaces(
                    &vmi.spec.networks,
                    vmi.status_interfaces(),
                    &statuses,
                ));
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
