//! Admission on every write of a VirtualMachine/VirtualMachineInstance, with the real binary on
//! the local cluster's real embedded store (`weft init`), no namespaces, no root:
//!
//! * `weft apply` of a VM with `macAddress: "zz"` and an unsupported model: exit 1, one
//!   kubectl-style line per cause, nothing of the file stored (it used to say `created`);
//! * a VM naming a NAD that does not exist is stored; the controller gives its VMI
//!   `Synchronized=False` (`FailedCreate`, KubeVirt's message) in phase Pending, creates no
//!   launcher pod, and clears the condition once the NAD is applied;
//! * a VM stored bypassing admission (a store from before it existed): `weft start` refuses it,
//!   and the controller gives it a `Failure` condition instead of creating a VMI.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use weft_store::{Object, ResourceType, SqliteStore, Store};

const NAD: &str = "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: NAME\nspec:\n  config: '{\"cniVersion\":\"1.0.0\",\"name\":\"NAME\",\"type\":\"bridge\"}'\n";

/// A VM with a masquerade pod NIC and a bridge NIC on NAD `nad` with the given extra fields.
fn vm(name: &str, running: bool, nad: &str, data_extra: &str) -> String {
    format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: {name}\nspec:\n  running: {running}\n  template:\n    spec:\n      domain:\n        devices:\n          interfaces:\n          - name: default\n            masquerade: {{}}\n          - name: data\n            bridge: {{}}\n{data_extra}      networks:\n      - name: default\n        pod: {{}}\n      - name: data\n        multus:\n          networkName: {nad}\n"
    )
}

fn ty(api_version: &str, kind: &str, plural: &str) -> ResourceType {
    ResourceType::new(api_version, kind, plural, true)
}

fn vm_type() -> ResourceType {
    ty("kubevirt.io/v1", "VirtualMachine", "virtualmachines")
}

fn vmi_type() -> ResourceType {
    ty(
        "kubevirt.io/v1",
        "VirtualMachineInstance",
        "virtualmachineinstances",
    )
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Every stored VM, VMI, NAD and pod as `Kind/namespace/name`.
fn stored(state: &Path) -> Vec<String> {
    let types = [
        vm_type(),
        vmi_type(),
        ty(
            "k8s.cni.cncf.io/v1",
            "NetworkAttachmentDefinition",
            "network-attachment-definitions",
        ),
        ty("v1", "Pod", "pods"),
    ];
    stored_keys(state, &types)
}

fn get(state: &Path, ty: &ResourceType, name: &str) -> Option<Object> {
    let store = SqliteStore::open(state.join("store.db")).unwrap();
    block_on(store.get(ty, Some("default"), name)).unwrap()
}

fn apply(state: &Path, manifest: &str) -> std::process::Output {
    let file = state.join("input.yaml");
    std::fs::write(&file, manifest).unwrap();
    weft(state, &["apply", "-f", file.to_str().unwrap()])
}

/// `weft controller` on `state`'s store, logging to `<state>/controller.log`.
fn start_controller(state: &Path) -> KillOnDrop {
    let child = Command::new(weft_bin())
        .arg("--state-dir")
        .arg(state)
        .arg("controller")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(state.join("controller.log")).unwrap())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// Wait (at most 30 s) until `check` holds for the object `name`; panics with `what` and the
/// object and controller log otherwise.
fn wait_for(
    state: &Path,
    ty: &ResourceType,
    name: &str,
    what: &str,
    check: impl Fn(Option<&Object>) -> bool,
) -> Option<Object> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let object = get(state, ty, name);
        if check(object.as_ref()) {
            return object;
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(state.join("controller.log")).unwrap_or_default();
            panic!("{what}: {name} is {object:#?}\ncontroller log:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn condition<'a>(object: Option<&'a Object>, type_: &str) -> Option<&'a Value> {
    object?
        .data
        .get("status")?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

#[test]
fn apply_denies_a_bad_vm_with_a_line_per_cause_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    init_store(state);
    let manifest = format!(
        "{}---\n{}",
        NAD.replace("NAME", "data"),
        vm(
            "bad",
            false,
            "nope",
            "            model: nonsense\n            macAddress: \"zz\"\n"
        )
    );
    let out = apply(state, &manifest);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
    let file = state.join("input.yaml");
    let file = file.display();
    let path = "spec.template.spec.domain.devices.interfaces[1]";
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().collect::<Vec<_>>(),
        [
            format!(
                "error: {file}: The VirtualMachine \"bad\" is invalid: {path}.model: Unsupported value: interface {path}.name uses model nonsense that is not supported."
            ),
            format!(
                "error: {file}: The VirtualMachine \"bad\" is invalid: {path}.macAddress: Invalid value: interface {path}.name has malformed MAC address (zz)."
            ),
        ],
        "{}",
        text(&out)
    );
    assert_eq!(
        stored(state),
        Vec::<String>::new(),
        "a denied file writes nothing"
    );
}

#[test]
fn a_missing_nad_is_a_vmi_condition_until_the_nad_exists() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    init_store(state);
    let _controller = start_controller(state);
    let out = apply(
        state,
        &vm(
            "good",
            true,
            "nope",
            "            macAddress: \"02:00:00:00:00:0a\"\n",
        ),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "virtualmachine/good created\n"
    );

    let vmi = wait_for(state, &vmi_type(), "good", "VMI with Synchronized=False", |vmi| {
        condition(vmi, "Synchronized").is_some()
    });
    let c = condition(vmi.as_ref(), "Synchronized").unwrap();
    assert_eq!(c["status"], "False");
    assert_eq!(c["reason"], "FailedCreate");
    assert_eq!(
        c["message"],
        "failed to render launch manifest: failed to locate network attachment definition default/nope"
    );
    assert!(c["lastTransitionTime"].is_string(), "{c}");
    assert_eq!(vmi.as_ref().unwrap().data["status"]["phase"], "Pending");
    // The VMI was stored defaulted-and-admitted from the template; no launcher pod yet.
    assert!(
        !stored(state).iter().any(|o| o.starts_with("Pod/")),
        "{:?}",
        stored(state)
    );

    let out = apply(state, &NAD.replace("NAME", "nope"));
    assert!(out.status.success(), "{}", text(&out));
    wait_for(
        state,
        &vmi_type(),
        "good",
        "condition cleared once the NAD exists",
        |vmi| vmi.is_some() && condition(vmi, "Synchronized").is_none(),
    );
}

#[test]
fn a_vm_stored_before_admission_is_not_started_and_gets_a_failure_condition() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    init_store(state);
    // Written straight into the store, as a store from before admission may hold it.
    let text_vm = vm("old", false, "data", "            macAddress: \"zz\"\n");
    let value: Value = serde_saphyr::from_str(&text_vm).unwrap();
    let mut object: Object = serde_json::from_value(value).unwrap();
    object.metadata.namespace = Some("default".into());
    let store = SqliteStore::open(state.join("store.db")).unwrap();
    block_on(store.create(&vm_type(), object.clone())).unwrap();

    let out = weft(state, &["start", "old"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: The VirtualMachine \"old\" is invalid: spec.template.spec.domain.devices.interfaces[1].macAddress: Invalid value: "),
        "{}",
        text(&out)
    );
    let vm_now = get(state, &vm_type(), "old").unwrap();
    assert_eq!(
        vm_now.data["spec"]["running"], false,
        "start was refused: nothing written"
    );

    // The same VM marked running in the store: the controller does not create its VMI.
    let mut running = vm_now.clone();
    running.data.get_mut("spec").unwrap()["running"] = Value::Bool(true);
    block_on(store.update(&vm_type(), running)).unwrap();
    drop(store);
    let _controller = start_controller(state);
    let vm_failed = wait_for(state, &vm_type(), "old", "VM with a Failure condition", |vm| {
        condition(vm, "Failure").is_some()
    });
    let c = condition(vm_failed.as_ref(), "Failure").unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("True"), Some("FailedCreate")),
        "{c}"
    );
    assert_eq!(
        c["message"],
        "Error creating virtual machine instance: The VirtualMachineInstance \"old\" is invalid: spec.domain.devices.interfaces[1].macAddress: Invalid value: interface spec.domain.devices.interfaces[1].name has malformed MAC address (zz)."
    );
    assert!(
        get(state, &vmi_type(), "old").is_none(),
        "no VMI for a denied template"
    );
}
