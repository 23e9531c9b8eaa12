//! The inspection commands that need no cluster: `weft net parse`, `weft vm render`.

mod common;

use common::*;

#[test]
fn net_parse_prints_npwg_elements_or_the_multus_error() {
    let dir = tempfile::tempdir().unwrap();
    let ok = weft(
        dir.path(),
        &["net", "parse", "--namespace", "ns1", " net-a , other/net-b@data0"],
    );
    assert!(ok.status.success(), "{}", text(&ok));
    let elements: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(
        elements,
        serde_json::json!([{"name": "net-a", "namespace": "ns1"}, {"name": "net-b", "namespace": "other", "interface": "data0"}])
    );
    let json = weft(
        dir.path(),
        &[
            "net",
            "parse",
            r#"[{"name":"x","mac":"02:00:00:00:00:01","ips":["10.0.0.5/24"]}]"#,
        ],
    );
    let elements: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(elements[0]["mac"], "02:00:00:00:00:01");
    let bad = weft(dir.path(), &["net", "parse", "default/net1@myIfc Name"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("Failed to parse interface name: must be less than 15 chars"),
        "{}",
        text(&bad)
    );
}

#[test]
fn vm_render_shows_what_weft_decides_for_the_example() {
    let dir = tempfile::tempdir().unwrap();
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/vm.yaml");
    let out = weft(dir.path(), &["vm", "render", "-f", file]);
    assert!(out.status.success(), "{}", text(&out));
    let rendered: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rendered["podInterfaceNames"]["data"], "pod3a6eb0790f3");
    assert_eq!(rendered["podInterfaceNames"]["default"], "eth0");
    let networks = rendered["launcherPodAnnotations"]["k8s.v1.cni.cncf.io/networks"]
        .as_str()
        .unwrap();
    assert_eq!(
        networks,
        r#"[{"name":"data","namespace":"default","mac":"02:00:00:0a:00:01","interface":"pod3a6eb0790f3"}]"#
    );
    assert_eq!(rendered["validation"], serde_json::json!([]));
}

/// The manifest of the kubectl-forms test: pods with labels in two namespaces and a NAD.
const OBJECTS: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: web1, labels: {app: web, tier: front}}
spec: {nodeName: node1}
---
apiVersion: v1
kind: Pod
metadata: {name: web2, labels: {app: web, tier: back}}
spec: {nodeName: node2}
---
apiVersion: v1
kind: Pod
metadata: {name: db, labels: {app: db}}
---
apiVersion: v1
kind: Pod
metadata: {name: other, namespace: team, labels: {app: web, tier: front}}
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: data}
spec: {config: '{"cniVersion":"1.0.0","type":"bridge","bridge":"br-data"}'}
"#;

/// Stdout of a successful `weft` run.
fn ok(state: &std::path::Path, args: &[&str]) -> String {
    let out = weft(state, args);
    assert!(out.status.success(), "weft {args:?}: {}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// A table with its AGE cells masked and runs of blanks folded (ages change between runs).
fn masked(table: &str) -> String {
    table
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|cell| {
                    let digits = cell.trim_end_matches(['s', 'm', 'h', 'd']);
                    if digits.len() < cell.len()
                        && !digits.is_empty()
                        && digits.bytes().all(|b| b.is_ascii_digit())
                    {
                        "<age>"
                    } else {
                        cell
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
                + "\n"
        })
        .collect()
}

/// A fresh embedded store with [`OBJECTS`] applied; its state dir.
fn store_with_objects() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    init_store(state);
    let manifest = state.join("objects.yaml");
    std::fs::write(&manifest, OBJECTS).unwrap();
    ok(state, &["apply", "-f", manifest.to_str().unwrap()]);
    dir
}

#[test]
fn kubectl_forms_of_get_and_delete() {
    let dir = store_with_objects();
    let state = dir.path();

    // KIND/NAME, -o name (the form kubectl prints, which weft reads back).
    assert_eq!(ok(state, &["get", "pod/web1", "-o", "name"]), "pod/web1\n");
    assert_eq!(
        ok(state, &["get", "po", "web1", "db", "-o", "name"]),
        "pod/web1\npod/db\n"
    );
    assert_eq!(
        ok(state, &["get", "net-attach-def/data", "-o", "name"]),
        "networkattachmentdefinition.k8s.cni.cncf.io/data\n"
    );
    assert_eq!(
        ok(
            state,
            &[
                "get",
                "networkattachmentdefinition.k8s.cni.cncf.io/data",
                "-o",
                "jsonpath={.metadata.name}"
            ]
        ),
        "data"
    );
    // -l in every operator; -n and -A global (before or after the subcommand).
    let names = |args: &[&str]| {
        ok(
            state,
            &[&["get", "pods", "-o", "jsonpath={.items[*].metadata.name}"], args].concat(),
        )
    };
    assert_eq!(names(&["-l", "app=web"]), "web1 web2");
    assert_eq!(names(&["-l", "app=web,tier!=back"]), "web1");
    assert_eq!(names(&["-l", "tier in (front, back)"]), "web1 web2");
    assert_eq!(names(&["-l", "app notin (db)"]), "web1 web2");
    assert_eq!(names(&["-l", "!tier"]), "db");
    assert_eq!(names(&["-l", "tier"]), "web1 web2");
    assert_eq!(names(&["-n", "team"]), "other");
    assert_eq!(names(&["-A", "-l", "tier=front"]), "web1 other");
    assert_eq!(
        ok(state, &["-n", "team", "get", "pod", "other", "-o", "name"]),
        "pod/other\n"
    );
    let range = ok(
        state,
        &[
            "get",
            "pods",
            "-A",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {.spec.nodeName}{"\n"}{end}"#,
        ],
    );
    assert_eq!(
        range,
        "default/db \ndefault/web1 node1\ndefault/web2 node2\nteam/other \n"
    );
    // Tables: the default and -o wide, with NAMESPACE under -A.
    insta::assert_snapshot!(
        "get_pods_all_namespaces",
        masked(&ok(state, &["get", "pods", "-A"]))
    );
    insta::assert_snapshot!("get_nad_wide", masked(&ok(state, &["get", "nad", "-o", "wide"])));
    // Bad selectors and formats are refused with kubectl's words, exit 1.
    let bad = weft(state, &["get", "pods", "-l", "app in web"]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("unable to parse requirement"),
        "{}",
        text(&bad)
    );
    let bad = weft(state, &["get", "pods", "-o", "xml"]);
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("unable to match a printer"),
        "{}",
        text(&bad)
    );
    let bad = weft(state, &["get", "pod/web1", "db"]);
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("resource/name form"),
        "{}",
        text(&bad)
    );
    let none = weft(state, &["get", "pods", "-l", "app=nothing"]);
    assert!(none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("No resources found in default namespace."));

    // delete: KIND/NAME, -l, -f (only what the manifest names, in its namespaces).
    assert_eq!(ok(state, &["delete", "pod/db"]), "pod/db deleted\n");
    assert_eq!(
        ok(state, &["delete", "pods", "-l", "tier=back"]),
        "pod/web2 deleted\n"
    );
    assert_eq!(names(&["-A"]), "web1 other");
    let missing = weft(state, &["delete", "pod", "db"]);
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    let partial = state.join("partial.yaml");
    std::fs::write(
        &partial,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: other, namespace: team}\n---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: data}\n",
    )
    .unwrap();
    let deleted = ok(state, &["delete", "-f", partial.to_str().unwrap()]);
    assert_eq!(
        deleted,
        "pod/other deleted\nnetworkattachmentdefinition/data deleted\n"
    );
    assert_eq!(names(&["-A"]), "web1");
    assert_eq!(ok(state, &["get", "nad", "-o", "name"]), "");
}

#[test]
fn ipreservations_are_a_kind_to_get() {
    use weft_store::{Resource, Store};
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    init_store(state);
    let store = weft_store::SqliteStore::open(state.join("store.db")).unwrap();
    let ty = weft_ipam::IpReservation::resource_type();
    for (name, ip, pod, claim) in [
        (
            "data-10.1.0.5",
            "10.1.0.5",
            "default/virt-launcher-vm1-abcde",
            None,
        ),
        ("data-10.1.0.6", "10.1.0.6", "", Some("default/vm2.data")),
    ] {
        let mut object = weft_store::Object::new(&ty, None, name);
        object.data.insert(
            "spec".into(),
            serde_json::json!({"network": "data", "ip": ip, "containerID": "0123456789abcdef0123", "ifname": "pod3a6eb0790f3",
                               "podRef": pod, "node": "node1", "claim": claim}),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(store.create(&ty, object)).unwrap();
    }
    drop(store);
    insta::assert_snapshot!(
        "get_ipreservations",
        masked(&ok(state, &["get", "ipreservations"]))
    );
    insta::assert_snapshot!(
        "get_ipreservations_wide",
        masked(&ok(state, &["get", "ipreservation", "-o", "wide"]))
    );
    assert_eq!(
        ok(
            state,
            &[
                "get",
                "ipreservations",
                "-o",
                "jsonpath={.items[?(@.spec.claim)].spec.ip}"
            ]
        ),
        "10.1.0.6"
    );
    // `weft ipam list` stays, as the same data's view.
    let list = ok(state, &["ipam", "list"]);
    assert!(list.contains("claim default/vm2.data"), "{list}");
}

#[test]
fn describe_and_explain_take_kind_slash_name() {
    let dir = store_with_objects();
    let state = dir.path();
    let slash = ok(state, &["describe", "pod/web1"]);
    let spaced = ok(state, &["describe", "pod", "web1"]);
    assert_eq!(masked(&slash), masked(&spaced));
    assert!(slash.contains("web1"), "{slash}");
    let team = ok(state, &["describe", "-n", "team", "po/other"]);
    assert!(team.contains("team"), "{team}");
    let missing = weft(state, &["explain", "vmi/nothing"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("VirtualMachineInstance default/nothing not found"),
        "{}",
        text(&missing)
    );
}

#[test]
fn help_lists_daemons_apart() {
    let dir = tempfile::tempdir().unwrap();
    let help = ok(dir.path(), &["--help"]);
    let (clients, daemons) = help.split_once("Daemons").expect("a Daemons heading");
    assert!(
        clients.contains("  get ") && clients.contains("  apply "),
        "{help}"
    );
    for daemon in ["agent", "controller", "install-cni", "agent-ready"] {
        assert!(daemons.contains(&format!("  {daemon} ")), "{help}");
        assert!(!clients.contains(&format!("  {daemon} ")), "{help}");
    }
    // A hidden daemon still runs and has its own help.
    assert!(ok(dir.path(), &["agent", "--help"]).contains("Usage: weft agent"));
}
