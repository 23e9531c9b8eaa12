use std::collections::BTreeSet;

use proptest::prelude::*;
use weft_netconf::{NETWORKS_ANNOTATION, RESOURCE_NAME_ANNOTATION};

use super::*;
use crate::catalog::MemoryCatalog;
use crate::config::MetaConfig;
use crate::plan::{AttachmentRequest, DelegatePlan, Pod, plan_add, plan_del_recompute};

const CHECKPOINT: &str = r#"{
  "Data": {
    "PodDeviceEntries": [
      {"PodUID": "u1", "ContainerName": "c", "ResourceName": "intel.com/sriov",
       "DeviceIDs": {"1": ["0000:03:02.0"], "0": ["0000:03:00.3", "0000:03:00.1"]}, "AllocResp": "Cg=="},
      {"PodUID": "u1", "ContainerName": "d", "ResourceName": "intel.com/sriov",
       "DeviceIDs": {"0": ["0000:03:00.2"]}},
      {"PodUID": "u2", "ContainerName": "c", "ResourceName": "intel.com/sriov",
       "DeviceIDs": {"0": ["0000:04:00.0"]}},
      {"PodUID": "u1", "ContainerName": "c", "ResourceName": "example.com/vdpa",
       "DeviceIDs": ["vdpa:2", "vdpa:1"]}
    ],
    "RegisteredDevices": {"intel.com/sriov": ["0000:03:00.1"]}
  },
  "Checksum": 1234
}"#;

#[test]
fn checkpoint_per_numa_and_plain_lists() {
    let entries = parse_kubelet_checkpoint(CHECKPOINT.as_bytes()).unwrap();
    assert_eq!(entries.len(), 4);
    assert_eq!(entries[0].pod_uid, "u1");
    assert_eq!(entries[0].container_name, "c");
    assert_eq!(
        entries[0].device_ids,
        vec!["0000:03:00.3", "0000:03:00.1", "0000:03:02.0"],
        "NUMA node 0 first"
    );
    assert_eq!(entries[3].device_ids, vec!["vdpa:2", "vdpa:1"]);
    let empty = parse_kubelet_checkpoint(br#"{"Data":{"PodDeviceEntries":null},"Checksum":0}"#).unwrap();
    assert!(empty.is_empty());
    let err = parse_kubelet_checkpoint(b"{").unwrap_err().to_string();
    assert!(err.starts_with("kubelet device checkpoint: "), "{err}");
    assert!(parse_kubelet_checkpoint(br#"{"Checksum":1}"#).is_err());
}

#[test]
fn allocator_hands_sorted_ids_of_the_pod_once() {
    let entries = parse_kubelet_checkpoint(CHECKPOINT.as_bytes()).unwrap();
    let mut alloc = DeviceAllocator::for_pod(&entries, "u1");
    let drawn: Vec<Option<String>> = (0..5).map(|_| alloc.next("intel.com/sriov")).collect();
    assert_eq!(
        drawn,
        vec![
            Some("0000:03:00.1".into()),
            Some("0000:03:00.2".into()),
            Some("0000:03:00.3".into()),
            Some("0000:03:02.0".into()),
            None
        ],
        "every container's devices, sorted; u2's never"
    );
    assert_eq!(alloc.next("example.com/vdpa").as_deref(), Some("vdpa:1"));
    assert_eq!(alloc.next("other.com/x"), None);
    assert_eq!(
        DeviceAllocator::for_pod(&entries, "").next("intel.com/sriov"),
        None
    );
}

#[test]
fn device_info_paths_replace_slashes() {
    assert_eq!(
        cni_device_info_path("/var/run/k8s.cni.cncf.io/devinfo", "default/sriov", "abc", "net1"),
        "/var/run/k8s.cni.cncf.io/devinfo/cni/default-sriov-abc_net1"
    );
    assert_eq!(
        dp_device_info_path("/d/", "intel.com/sriov", "0000:03:00.1"),
        "/d/dp/intel.com-sriov-0000:03:00.1-device.json"
    );
    assert_eq!(
        dp_device_info_path("/d", "r/x", "a/b"),
        "/d/dp/r-x-a-b-device.json"
    );
}

#[test]
fn attachment_prefers_the_resource_device() {
    let from_resource =
        device_attachment("/d", "r/x", Some("1".into()), "explicit", "ns/n", "c", "net1").unwrap();
    assert_eq!(from_resource.device_id, "1");
    assert!(from_resource.from_resource);
    assert_eq!(from_resource.dp_device_info_file, "/d/dp/r-x-1-device.json");
    let explicit = device_attachment("/d", "", None, "explicit", "ns/n", "c", "net1").unwrap();
    assert_eq!(explicit.device_id, "explicit");
    assert!(!explicit.from_resource);
    assert_eq!(explicit.dp_device_info_file, "");
    assert_eq!(explicit.cni_device_info_file, "/d/cni/ns-n-c_net1");
    assert!(device_attachment("/d", "r/x", None, "", "ns/n", "c", "net1").is_none());
}

#[test]
fn device_id_is_set_on_every_plugin() {
    let plugin =
        weft_netconf::DelegateConfig::parse(r#"{"cniVersion":"1.0.0","name":"n","type":"sriov"}"#).unwrap();
    let v = with_device_id(&plugin, "0000:03:00.1").unwrap().to_value();
    assert_eq!(v["deviceID"], "0000:03:00.1");
    assert_eq!(v["pciBusID"], "0000:03:00.1");
    let list = weft_netconf::DelegateConfig::parse(
        r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"sriov"},{"type":"tuning"}]}"#,
    )
    .unwrap();
    let v = with_device_id(&list, "x").unwrap().to_value();
    assert!(v.get("deviceID").is_none(), "plugins only, not the list");
    for p in v["plugins"].as_array().unwrap() {
        assert_eq!(p["deviceID"], "x");
        assert_eq!(p["pciBusID"], "x");
    }
}

#[test]
fn device_info_must_be_an_object() {
    assert!(parse_device_info(br#"{"type":"pci","version":"1.1.0"}"#).is_some());
    assert!(parse_device_info(b"[]").is_none());
    assert!(parse_device_info(b"").is_none());
}

fn setup(resources: &[(&str, &str)]) -> (MetaConfig, MemoryCatalog, AttachmentRequest) {
    let config =
        MetaConfig::parse(br#"{"cniVersion":"1.0.0","clusterNetwork":"cluster","deviceInfoDir":"/devinfo"}"#)
            .unwrap();
    let mut catalog = MemoryCatalog::default().with_conf_file(
        "10-c.conf",
        r#"{"cniVersion":"1.0.0","name":"cluster","type":"ptp"}"#,
    );
    for (nad, resource) in resources {
        catalog = catalog.with_nad(
            "ns",
            nad,
            r#"{"cniVersion":"1.0.0","plugins":[{"type":"sriov","capabilities":{"deviceID":true}},{"type":"tuning"}]}"#,
        );
        if !resource.is_empty() {
            catalog
                .nads
                .get_mut(&("ns".to_string(), nad.to_string()))
                .unwrap()
                .metadata
                .annotations
                .insert(RESOURCE_NAME_ANNOTATION.into(), resource.to_string());
        }
    }
    let mut request = AttachmentRequest {
        container_id: "ctr".into(),
        ifname: "eth0".into(),
        ..Default::default()
    };
    request.k8s.pod_namespace = "ns".into();
    request.k8s.pod_name = "p".into();
    request.k8s.pod_uid = "u1".into();
    (config, catalog, request)
}

fn pod(annotation: &str) -> Pod {
    Pod {
        namespace: "ns".into(),
        name: "p".into(),
        uid: "u1".into(),
        annotations: [(NETWORKS_ANNOTATION.to_string(), annotation.to_string())].into(),
    }
}

fn device_ids(plans: &[DelegatePlan]) -> Vec<Option<&str>> {
    plans
        .iter()
        .map(|p| p.device.as_ref().map(|d| d.device_id.as_str()))
        .collect()
}

#[test]
fn plan_gives_each_delegate_of_a_resource_the_next_device() {
    let (config, catalog, request) = setup(&[("sriov", "intel.com/sriov"), ("plain", "")]);
    let catalog = catalog.with_devices(parse_kubelet_checkpoint(CHECKPOINT.as_bytes()).unwrap());
    let annotation = r#"[{"name":"sriov"},{"name":"plain","deviceID":"explicit"},{"name":"sriov","deviceID":"ignored"},{"name":"plain"}]"#;
    let plans = plan_add(&config, &request, Some(&pod(annotation)), &catalog).unwrap();
    assert_eq!(
        device_ids(&plans),
        vec![
            None,
            Some("0000:03:00.1"),
            Some("explicit"),
            Some("0000:03:00.2"),
            None
        ]
    );
    let sriov = &plans[3];
    assert_eq!(sriov.capability_args["deviceID"], "0000:03:00.2");
    assert_eq!(
        sriov.capability_args["CNIDeviceInfoFile"],
        "/devinfo/cni/ns-sriov-ctr_net3"
    );
    let device = sriov.device.as_ref().unwrap();
    assert_eq!(device.resource_name, "intel.com/sriov");
    assert_eq!(
        device.dp_device_info_file,
        "/devinfo/dp/intel.com-sriov-0000:03:00.2-device.json"
    );
    let config_value = sriov.config.to_value();
    for plugin in config_value["plugins"].as_array().unwrap() {
        assert_eq!(plugin["deviceID"], "0000:03:00.2");
        assert_eq!(plugin["pciBusID"], "0000:03:00.2");
    }
    // An explicit deviceID reaches runtimeConfig only, never the config.
    let explicit = &plans[2];
    assert_eq!(explicit.capability_args["deviceID"], "explicit");
    assert_eq!(
        explicit.capability_args["CNIDeviceInfoFile"],
        "/devinfo/cni/ns-plain-ctr_net2"
    );
    assert!(explicit.config.to_value()["plugins"][0].get("deviceID").is_none());
    assert!(plans[4].capability_args.get("CNIDeviceInfoFile").is_none());
    // The cache keeps the device for DEL.
    let record = crate::cache::CacheRecord::new(&request, plans.clone());
    let back = crate::cache::CacheRecord::decode(&record.to_bytes(), "ctr").unwrap();
    assert_eq!(back.delegates, plans);
}

#[test]
fn exhausted_or_unknown_resources_fall_back_to_the_element() {
    let (config, catalog, request) = setup(&[("sriov", "example.com/vdpa")]);
    let catalog = catalog.with_devices(parse_kubelet_checkpoint(CHECKPOINT.as_bytes()).unwrap());
    let annotation =
        r#"[{"name":"sriov"},{"name":"sriov"},{"name":"sriov","deviceID":"mine"},{"name":"sriov"}]"#;
    let plans = plan_add(&config, &request, Some(&pod(annotation)), &catalog).unwrap();
    assert_eq!(
        device_ids(&plans),
        vec![None, Some("vdpa:1"), Some("vdpa:2"), Some("mine"), None]
    );
    let mine = plans[3].device.as_ref().unwrap();
    assert!(!mine.from_resource);
    assert_eq!(
        mine.dp_device_info_file, "/devinfo/dp/example.com-vdpa-mine-device.json",
        "Multus copies with resource name and element device alike"
    );
    // No pod known: nothing is drawn.
    let (plans, _) = plan_del_recompute(&config, &request, None, &catalog).unwrap();
    assert_eq!(device_ids(&plans), vec![None]);
}

#[test]
fn defaults_name_the_kubelet_and_multus_paths() {
    let config = MetaConfig::parse(br#"{"clusterNetwork":"x"}"#).unwrap();
    assert_eq!(config.device_checkpoint_file, DEFAULT_CHECKPOINT_FILE);
    assert_eq!(config.device_info_dir, DEFAULT_DEVICE_INFO_DIR);
}

proptest! {
    /// Within one ADD no device ID is handed twice, each one handed belongs to the pod and the
    /// delegate's resource, and a resource is exhausted before any of its delegates goes without.
    #[test]
    fn ids_are_never_handed_twice_within_one_add(
        entries in proptest::collection::vec(
            ("u[12]", 0usize..3, proptest::collection::vec("[a-d]{1,2}", 0..4)), 0..6),
        picks in proptest::collection::vec(0usize..3, 0..8),
    ) {
        let resources = ["r.io/a", "r.io/b", "r.io/c"];
        let entries: Vec<PodDeviceEntry> = entries
            .into_iter()
            .map(|(uid, r, ids)| PodDeviceEntry {
                pod_uid: uid,
                container_name: "c".into(),
                resource_name: resources[r].into(),
                device_ids: ids,
            })
            .collect();
        let (config, catalog, request) =
            setup(&[("n0", resources[0]), ("n1", resources[1]), ("n2", resources[2])]);
        let catalog = catalog.with_devices(entries.clone());
        let annotation = picks.iter().map(|i| format!("n{i}")).collect::<Vec<_>>().join(",");
        let plans = plan_add(&config, &request, Some(&pod(&annotation)), &catalog).unwrap();
        let mut seen = BTreeSet::new();
        for (plan, pick) in plans.iter().skip(1).zip(&picks) {
            let owned: BTreeSet<&str> = entries
                .iter()
                .filter(|e| e.pod_uid == "u1" && e.resource_name == resources[*pick])
                .flat_map(|e| e.device_ids.iter().map(String::as_str))
                .collect();
            match &plan.device {
                Some(device) => {
                    prop_assert!(device.from_resource);
                    prop_assert!(owned.contains(device.device_id.as_str()));
                    prop_assert!(
                        seen.insert((*pick, device.device_id.clone())),
                        "{} handed twice",
                        device.device_id
                    );
                }
                None => {
                    let handed = seen.iter().filter(|(r, _)| r == pick).count();
                    prop_assert_eq!(handed, owned.len(), "a device was left while a delegate got none");
                }
            }
        }
    }
}

#[test]
fn take_skips_a_device_wherever_the_cursor_is() {
    let entries = vec![PodDeviceEntry {
        pod_uid: "u".into(),
        resource_name: "r".into(),
        device_ids: vec!["a".into(), "b".into(), "c".into()],
        ..Default::default()
    }];
    let mut alloc = DeviceAllocator::for_pod(&entries, "u");
    alloc.take("r", "b");
    assert_eq!(alloc.next("r").as_deref(), Some("a"));
    alloc.take("r", "a");
    alloc.take("r", "zz");
    alloc.take("other", "a");
    assert_eq!(alloc.next("r").as_deref(), Some("c"));
    assert_eq!(alloc.next("r"), None);
}

#[test]
fn hotplug_takes_a_device_no_attachment_holds() {
    let (config, catalog, request) = setup(&[("sriov", "intel.com/sriov")]);
    let catalog = catalog.with_devices(parse_kubelet_checkpoint(CHECKPOINT.as_bytes()).unwrap());
    let pod = pod("sriov");
    let attached = plan_add(&config, &request, Some(&pod), &catalog).unwrap();
    assert_eq!(device_ids(&attached), vec![None, Some("0000:03:00.1")]);
    let element = weft_netconf::NetworkSelectionElement {
        name: "sriov".into(),
        namespace: "ns".into(),
        interface: "hot1".into(),
        ..Default::default()
    };
    let plan =
        crate::hotplug::plan_hotplug_add(&config, &request, &pod, &element, &attached, &catalog).unwrap();
    let device = plan.device.as_ref().unwrap();
    assert_eq!(device.device_id, "0000:03:00.2");
    assert_eq!(device.cni_device_info_file, "/devinfo/cni/ns-sriov-ctr_hot1");
    assert_eq!(plan.capability_args["deviceID"], "0000:03:00.2");
    assert_eq!(plan.config.to_value()["plugins"][0]["pciBusID"], "0000:03:00.2");
}
