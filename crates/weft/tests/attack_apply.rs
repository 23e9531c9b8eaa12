//! Attacks on `weft apply` and the commands that talk to the local cluster:
//!
//! * a 4-document file whose last document is bad must create nothing (it used to create the
//!   first three), print every error on its own line and exit 1;
//! * names the API server refuses (`/`, `..`, 300 characters, upper case, a bad namespace) are
//!   refused, each error naming its field, in the API server's words;
//! * without a local cluster, `apply`/`get`/`delete`/... say so, exit non-zero and create
//!   nothing (they used to create a store in the state directory).
//!
//! The store is the local cluster's real embedded store (`<state>/store.db`, SQLite, opened as
//! `weft up` opens it); the commands are the real binary. No namespaces: no root needed.

mod common;

use std::path::Path;

use common::*;
use weft_store::{ResourceType, SqliteStore};

const NAD: &str = "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: data\nspec:\n  config: '{\"cniVersion\":\"1.0.0\",\"name\":\"data\",\"type\":\"bridge\"}'\n";
const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p1\nspec:\n  containers: []\n";
const CLAIM: &str = "apiVersion: k8s.cni.cncf.io/v1alpha1\nkind: IPAMClaim\nmetadata:\n  name: vm1.data\nspec:\n  network: data\n  interface: net1\n";

fn vm(name: &str, namespace: &str) -> String {
    format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: {name:?}\n  namespace: {namespace:?}\nspec:\n  running: false\n  template:\n    spec:\n      domain:\n        devices: {{}}\n"
    )
}

fn types() -> Vec<ResourceType> {
    vec![
        ResourceType::new(
            "k8s.cni.cncf.io/v1",
            "NetworkAttachmentDefinition",
            "network-attachment-definitions",
            true,
        ),
        ResourceType::new("v1", "Pod", "pods", true),
        ResourceType::new("k8s.cni.cncf.io/v1alpha1", "IPAMClaim", "ipamclaims", true),
        ResourceType::new("kubevirt.io/v1", "VirtualMachine", "virtualmachines", true),
    ]
}

/// Every object of the kinds the files use, as `kind/namespace/name`.
fn stored(state: &Path) -> Vec<String> {
    stored_keys(state, &types())
}

/// A state directory holding a local cluster's store, as `weft up` leaves it.
fn cluster_state() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    drop(SqliteStore::open(dir.path().join("store.db")).unwrap());
    dir
}

fn apply(state: &Path, manifest: &str) -> std::process::Output {
    let file = state.join("input.yaml");
    std::fs::write(&file, manifest).unwrap();
    weft(state, &["apply", "-f", file.to_str().unwrap()])
}

#[test]
fn a_bad_last_document_creates_nothing_and_is_reported() {
    let state = cluster_state();
    let manifest = [NAD, POD, CLAIM, &vm("Bad/Name", "default")].join("---\n");
    let out = apply(state.path(), &manifest);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "{}", text(&out));
    assert!(
        errors[0].ends_with(
            "input.yaml: document 4: The VirtualMachine \"Bad/Name\" is invalid: metadata.name: Invalid value: \"Bad/Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        ),
        "{}",
        errors[0]
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("created"),
        "{}",
        text(&out)
    );
    assert_eq!(
        stored(state.path()),
        Vec::<String>::new(),
        "nothing may be created"
    );

    // The same file with a good last document goes in whole.
    let manifest = [NAD, POD, CLAIM, &vm("vm1", "default")].join("---\n");
    let out = apply(state.path(), &manifest);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        stored(state.path()),
        [
            "NetworkAttachmentDefinition/default/data",
            "Pod/default/p1",
            "IPAMClaim/default/vm1.data",
            "VirtualMachine/default/vm1"
        ]
    );
}

#[test]
fn names_the_api_server_refuses_are_refused_each_on_its_line() {
    let state = cluster_state();
    let long = "a".repeat(300);
    let cases = [
        (
            vm("a/b", "default"),
            "metadata.name: Invalid value: \"a/b\": a lowercase RFC 1123 subdomain",
        ),
        (
            vm("..", "default"),
            "metadata.name: Invalid value: \"..\": a lowercase RFC 1123 subdomain",
        ),
        (vm(&long, "default"), "metadata.name: Invalid value: \"aaaa"),
        (
            vm("Upper", "default"),
            "metadata.name: Invalid value: \"Upper\": a lowercase RFC 1123 subdomain",
        ),
        (
            vm("ok", "Bad_NS"),
            "metadata.namespace: Invalid value: \"Bad_NS\": a lowercase RFC 1123 label",
        ),
        (vm("ok2", &"n".repeat(64)), "must be no more than 63 characters"),
    ];
    let manifest = std::iter::once(NAD.to_string())
        .chain(cases.iter().map(|(doc, _)| doc.clone()))
        .collect::<Vec<_>>()
        .join("---\n");
    let out = apply(state.path(), &manifest);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), cases.len(), "{}", text(&out));
    for (n, ((_, wanted), line)) in cases.iter().zip(&errors).enumerate() {
        assert!(
            line.contains(&format!("document {}: The VirtualMachine", n + 2)),
            "{line}"
        );
        assert!(line.contains(wanted), "{line} lacks {wanted}");
    }
    assert!(
        errors[2].contains("must be no more than 253 characters"),
        "{}",
        errors[2]
    );
    assert_eq!(
        stored(state.path()),
        Vec::<String>::new(),
        "nothing may be created"
    );
}

#[test]
fn without_a_local_cluster_commands_say_so_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("no-cluster");
    let file = dir.path().join("nad.yaml");
    std::fs::write(&file, NAD).unwrap();
    let file = file.to_str().unwrap();
    for args in [
        vec!["apply", "-f", file],
        vec!["get", "vm"],
        vec!["get", "pod", "p1", "-o", "json"],
        vec!["delete", "vm", "vm1"],
        vec!["start", "vm1"],
        vec!["stop", "vm1"],
        vec!["migrate", "vm1"],
        vec!["net", "status", "p1"],
        vec!["ipam", "list"],
    ] {
        let out = weft(&state, &args);
        assert!(!out.status.success(), "{args:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("no local cluster at {}: run `weft up`", state.display())),
            "{args:?}: {}",
            text(&out)
        );
        assert!(!state.exists(), "{args:?} created {}", state.display());
    }
}
