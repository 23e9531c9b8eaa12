//! Planning against the NADs it names, fetched as it names them (`plan_fetching`, the agent's
//! loop), decides exactly what planning against every NAD of the cluster decides, and fetches
//! no NAD the request does not name.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::json;
use weft_meta::{
    AttachmentRequest, K8sArgs, MemoryCatalog, MetaConfig, Pod, PodLookup, decide_add, plan_fetching,
};

const NAMESPACES: [&str; 3] = ["default", "tenant", "kube-system"];
const NAMES: [&str; 4] = ["a", "b", "c", "d"];

fn nad_config(namespace: &str, name: &str) -> String {
    json!({"cniVersion": "1.0.0", "name": format!("{namespace}-{name}"), "type": "bridge",
        "bridge": format!("br-{name}"), "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}})
    .to_string()
}

/// A network reference as an annotation or config may write it: `name` or `namespace/name`.
fn reference() -> impl Strategy<Value = String> {
    (prop::option::of(0..NAMESPACES.len()), 0..NAMES.len()).prop_map(|(ns, name)| match ns {
        Some(ns) => format!("{}/{}", NAMESPACES[ns], NAMES[name]),
        None => NAMES[name].to_string(),
    })
}

#[derive(Debug, Clone)]
struct Case {
    /// Which (namespace, name) NADs exist.
    existing: BTreeSet<(usize, usize)>,
    cluster_network: String,
    default_networks: Vec<String>,
    isolation: bool,
    pod_namespace: usize,
    selections: Vec<(String, Option<String>)>,
    default_override: Option<String>,
}

/// A network the configuration names: a name in multusNamespace (`kube-system`), there with
/// `exists`, or now and then a reference with a namespace (a path to planning).
fn configured() -> impl Strategy<Value = (String, Option<(usize, usize)>)> {
    prop_oneof![
        5 => (0..NAMES.len(), prop::bool::weighted(0.9))
            .prop_map(|(n, exists)| (NAMES[n].to_string(), exists.then_some((2, n)))),
        1 => reference().prop_map(|r| (r, None)),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        // Most NADs exist, so that most cases plan (a missing one fails the whole ADD).
        prop::collection::btree_set((0..NAMESPACES.len(), 0..NAMES.len()), 6..12),
        configured(),
        prop::collection::vec(configured(), 0..=1),
        any::<bool>(),
        0..NAMESPACES.len(),
        prop::collection::vec((reference(), prop::option::of("net[1-9]")), 0..5),
        prop::option::weighted(0.2, reference()),
    )
        .prop_map(
            |(
                mut existing,
                (cluster_network, cluster),
                defaults,
                isolation,
                pod_namespace,
                selections,
                default_override,
            )| {
                existing.extend(cluster);
                existing.extend(defaults.iter().filter_map(|(_, key)| *key));
                Case {
                    existing,
                    cluster_network,
                    default_networks: defaults.into_iter().map(|(name, _)| name).collect(),
                    isolation,
                    pod_namespace,
                    selections,
                    default_override,
                }
            },
        )
}

fn full_catalog(case: &Case) -> MemoryCatalog {
    case.existing
        .iter()
        .fold(MemoryCatalog::default(), |catalog, &(ns, name)| {
            catalog.with_nad(
                NAMESPACES[ns],
                NAMES[name],
                &nad_config(NAMESPACES[ns], NAMES[name]),
            )
        })
}

fn inputs(case: &Case) -> (MetaConfig, AttachmentRequest, Pod) {
    let config = json!({"cniVersion": "1.0.0", "name": "weft", "type": "weft",
        "clusterNetwork": case.cluster_network, "defaultNetworks": case.default_networks,
        "namespaceIsolation": case.isolation, "multusNamespace": "kube-system"});
    let config = MetaConfig::parse(config.to_string().as_bytes()).expect("config");
    let namespace = NAMESPACES[case.pod_namespace];
    let request = AttachmentRequest {
        container_id: "0123456789".into(),
        netns: "/var/run/netns/x".into(),
        ifname: "eth0".into(),
        cni_args: String::new(),
        k8s: K8sArgs {
            pod_namespace: namespace.into(),
            pod_name: "pod".into(),
            ..Default::default()
        },
    };
    let elements: Vec<String> = case
        .selections
        .iter()
        .map(|(reference, interface)| match interface {
            Some(interface) => format!("{reference}@{interface}"),
            None => reference.clone(),
        })
        .collect();
    let mut annotations = BTreeMap::new();
    if !elements.is_empty() {
        annotations.insert(weft_netconf::NETWORKS_ANNOTATION.to_string(), elements.join(","));
    }
    if let Some(reference) = &case.default_override {
        annotations.insert(
            weft_netconf::DEFAULT_NETWORK_ANNOTATION.to_string(),
            reference.clone(),
        );
    }
    let pod = Pod {
        namespace: namespace.into(),
        name: "pod".into(),
        uid: String::new(),
        annotations,
    };
    (config, request, pod)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn planning_with_the_nads_it_names_decides_as_with_every_nad(case in case()) {
        let full = full_catalog(&case);
        let (config, request, pod) = inputs(&case);
        let expected = decide_add(&config, &request, PodLookup::Found(&pod), &full);

        let mut fetched = Vec::new();
        let mut catalog = MemoryCatalog::default();
        let decided = plan_fetching(
            &mut catalog,
            |namespace, name| {
                fetched.push((namespace.to_string(), name.to_string()));
                full.nads.get(&(namespace.to_string(), name.to_string())).cloned()
            },
            |catalog| decide_add(&config, &request, PodLookup::Found(&pod), catalog),
        );
        prop_assert_eq!(decided, expected);

        // Each NAD fetched once, and only NADs the request names: the cluster network, the
        // default networks, the override and the selections (each in at most the namespaces a
        // reference may resolve to: its own, the pod's, multusNamespace, `default`).
        let unique: BTreeSet<_> = fetched.iter().cloned().collect();
        prop_assert_eq!(unique.len(), fetched.len(), "fetched twice: {:?}", fetched);
        let named: BTreeSet<&str> = std::iter::once(&case.cluster_network)
            .chain(&case.default_networks)
            .chain(&case.default_override)
            .chain(case.selections.iter().map(|(r, _)| r))
            .map(|r| r.rsplit('/').next().unwrap_or(r))
            .collect();
        for (_, name) in &fetched {
            prop_assert!(named.contains(name.as_str()), "fetched {} not named by {:?}", name, case);
        }
        prop_assert!(fetched.len() <= 4 * named.len().max(1), "{} fetches for {:?}", fetched.len(), case);
    }
}

#[test]
fn a_catalog_already_holding_the_named_nads_fetches_nothing() {
    let case = Case {
        // The cluster network is a name in multusNamespace (`kube-system`); `b`, the pod's.
        existing: [(2, 0), (1, 1)].into(),
        cluster_network: "a".into(),
        default_networks: vec![],
        isolation: false,
        pod_namespace: 1,
        selections: vec![("b".into(), None)],
        default_override: None,
    };
    let mut catalog = full_catalog(&case);
    let (config, request, pod) = inputs(&case);
    let mut fetches = 0;
    let decided = plan_fetching(
        &mut catalog,
        |_, _| {
            fetches += 1;
            None
        },
        |catalog| decide_add(&config, &request, PodLookup::Found(&pod), catalog),
    );
    assert!(decided.is_ok(), "{decided:?}");
    assert_eq!(fetches, 0);
}
