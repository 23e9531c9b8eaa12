//! The Kubernetes manifests in deploy/ agree with the code: every document is a well-formed
//! object, each CRD names its kind exactly as the Rust type does (group, version, kind, plural,
//! scope) and its schema has every field the type writes, the RBAC bound to each workload covers
//! every resource it touches, and the DaemonSet mounts the socket dir the shim dials.

use std::path::{Path, PathBuf};

use serde_json::Value;
use weft_ipam::claim::{Condition, IpamClaimStatus, OwnerPod};
use weft_ipam::reservation::IpReservationSpec;
use weft_ipam::{IpReservation, IpamClaim};
use weft_netconf::NetworkAttachmentDefinition;
use weft_store::Resource;
use weft_vm::{VirtualMachine, VirtualMachineInstance};

/// The agent's default socket (`weft::protocol::DEFAULT_SOCKET`; the weft crate has no library
/// target to import it from).
const AGENT_DEFAULT_SOCKET: &str = "/run/weft/weft.sock";
const NAMESPACE: &str = "weft-system";
const READ: [&str; 3] = ["get", "list", "watch"];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "yaml" || ext == "yml") {
            out.push(path);
        }
    }
}

/// Every non-empty YAML document under deploy/, with the file it came from.
fn documents() -> Vec<(String, Value)> {
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &mut files);
    assert!(!files.is_empty(), "no YAML under deploy/");
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(deploy_dir()).unwrap().display().to_string();
        let parsed = serde_saphyr::from_multiple::<Value>(&text)
            .unwrap_or_else(|e| panic!("deploy/{name}: invalid YAML: {e}"));
        docs.extend(
            parsed
                .into_iter()
                .filter(|d| !d.is_null())
                .map(|d| (name.clone(), d)),
        );
    }
    docs
}

fn of_kind<'a>(docs: &'a [(String, Value)], kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|(_, d)| d["kind"] == kind)
        .map(|(_, d)| d)
        .collect()
}

fn named<'a>(docs: &'a [(String, Value)], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = of_kind(docs, kind)
        .into_iter()
        .filter(|d| d["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "exactly one {kind} {name} in deploy/");
    found[0]
}

/// `(group, version)` of an apiVersion; the core group is "".
fn group_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

#[test]
fn every_document_is_a_named_object() {
    let docs = documents();
    for (file, doc) in &docs {
        for field in ["apiVersion", "kind"] {
            assert!(
                doc[field].as_str().is_some_and(|s| !s.is_empty()),
                "deploy/{file}: a document has no {field}: {doc}"
            );
        }
        assert!(
            doc["metadata"]["name"].as_str().is_some_and(|s| !s.is_empty()),
            "deploy/{file}: {} without metadata.name",
            doc["kind"]
        );
    }
    let mut ids: Vec<String> = docs
        .iter()
        .map(|(_, d)| {
            format!(
                "{} {} {}/{}",
                d["apiVersion"].as_str().unwrap(),
                d["kind"].as_str().unwrap(),
                d["metadata"]["namespace"].as_str().unwrap_or(""),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    ids.sort();
    let before = ids.len();
    ids.dedup();
    assert_eq!(before, ids.len(), "an object is defined twice in deploy/");
}

/// Checks that `schema` (an OpenAPI v3 schema) admits every field of `value`, recursively.
fn assert_schema_covers(schema: &Value, value: &Value, path: &str) {
    if schema["x-kubernetes-preserve-unknown-fields"] == true {
        return;
    }
    match value {
        Value::Object(map) => {
            assert_eq!(
                schema["type"], "object",
                "{path}: the CRD schema is not an object"
            );
            for (key, child) in map {
                let child_schema = &schema["properties"][key];
                assert!(
                    !child_schema.is_null(),
                    "{path}.{key}: written by the Rust type but missing from the CRD schema"
                );
                assert_schema_covers(child_schema, child, &format!("{path}.{key}"));
            }
        }
        Value::Array(items) => {
            assert_eq!(schema["type"], "array", "{path}: the CRD schema is not an array");
            for item in items {
                assert_schema_covers(&schema["items"], item, &format!("{path}[]"));
            }
        }
        Value::String(_) => assert_eq!(schema["type"], "string", "{path}"),
        Value::Bool(_) => assert_eq!(schema["type"], "boolean", "{path}"),
        Value::Number(_) => assert!(
            schema["type"] == "integer" || schema["type"] == "number",
            "{path}: {}",
            schema["type"]
        ),
        Value::Null => {}
    }
}

/// The CRD of `T`: names, scope and served/storage version match the Rust constants; the schema
/// of that version admits `example` (everything but metadata, which the API server owns).
fn assert_crd_matches<T: Resource>(docs: &[(String, Value)], example: &T) -> Value {
    let (group, version) = group_version(T::API_VERSION);
    let crd = named(
        docs,
        "CustomResourceDefinition",
        &format!("{}.{group}", T::PLURAL),
    );
    let what = format!("CRD of {}", T::KIND);
    assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1", "{what}");
    assert_eq!(crd["spec"]["group"], group, "{what}");
    assert_eq!(crd["spec"]["names"]["kind"], T::KIND, "{what}");
    assert_eq!(crd["spec"]["names"]["plural"], T::PLURAL, "{what}");
    let scope = if T::NAMESPACED { "Namespaced" } else { "Cluster" };
    assert_eq!(crd["spec"]["scope"], scope, "{what}");
    let versions = crd["spec"]["versions"].as_array().expect("spec.versions");
    let storage: Vec<&Value> = versions.iter().filter(|v| v["storage"] == true).collect();
    assert_eq!(storage.len(), 1, "{what}: exactly one storage version");
    let served = versions
        .iter()
        .find(|v| v["name"] == version)
        .unwrap_or_else(|| panic!("{what}: no version {version}"));
    assert_eq!(served["served"], true, "{what}");
    assert_eq!(served["storage"], true, "{what}");
    let schema = &served["schema"]["openAPIV3Schema"];
    let mut object = serde_json::to_value(example).unwrap();
    object.as_object_mut().unwrap().remove("metadata");
    assert_schema_covers(schema, &object, T::KIND);
    served.clone()
}

#[test]
fn crds_match_the_rust_types() {
    let docs = documents();

    let mut nad = NetworkAttachmentDefinition::default();
    nad.spec.config = r#"{"cniVersion":"1.0.0","type":"bridge"}"#.into();
    let version = assert_crd_matches(&docs, &nad);
    let crd = named(
        &docs,
        "CustomResourceDefinition",
        "network-attachment-definitions.k8s.cni.cncf.io",
    );
    let short = strings(&crd["spec"]["names"]["shortNames"]);
    assert!(
        short.contains(&"net-attach-def") && short.contains(&"nad"),
        "{short:?}"
    );
    assert_eq!(crd["spec"]["names"]["singular"], "network-attachment-definition");
    assert_eq!(
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["config"]["type"],
        "string"
    );

    let mut claim = IpamClaim::new("default", "vm1.tenant", "tenant", "net1");
    claim.status = IpamClaimStatus {
        ips: vec!["10.0.0.5/24".into()],
        owner_pod: Some(OwnerPod {
            name: "virt-launcher-vm1-abcde".into(),
        }),
        conditions: vec![Condition {
            type_: "IPsAllocated".into(),
            status: "True".into(),
            reason: "SuccessfulAllocation".into(),
            message: "ok".into(),
            last_transition_time: "2026-01-01T00:00:00Z".into(),
            observed_generation: Some(1),
        }],
    };
    let version = assert_crd_matches(&docs, &claim);
    assert!(
        version["subresources"]["status"].is_object(),
        "IPAMClaim needs the status subresource"
    );
    let required = strings(&version["schema"]["openAPIV3Schema"]["properties"]["spec"]["required"]);
    assert!(
        required.contains(&"network") && required.contains(&"interface"),
        "IPAMClaim spec.network and spec.interface are required upstream: {required:?}"
    );

    let reservation = IpReservation::new(IpReservationSpec {
        network: "tenant".into(),
        ip: Some("10.0.0.5".parse().unwrap()),
        container_id: "c0ffee".into(),
        ifname: "net1".into(),
        pod_ref: "default/web".into(),
        pod_uid: "uid".into(),
        node: "n1".into(),
        claim: Some("default/vm1.tenant".into()),
    });
    assert_crd_matches(&docs, &reservation);
}

/// Whether `rules` (a role's `rules`) allow `verb` on `group`/`resource`.
fn allows(rules: &[&Value], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|rule| {
        let groups = strings(&rule["apiGroups"]);
        let resources = strings(&rule["resources"]);
        let verbs = strings(&rule["verbs"]);
        (groups.contains(&group) || groups.contains(&"*"))
            && (resources.contains(&resource) || resources.contains(&"*"))
            && (verbs.contains(&verb) || verbs.contains(&"*"))
    })
}

/// Rules of every ClusterRole bound (by a ClusterRoleBinding) to the service account.
fn rules_of<'a>(docs: &'a [(String, Value)], service_account: &str) -> Vec<&'a Value> {
    let mut rules = Vec::new();
    for binding in of_kind(docs, "ClusterRoleBinding") {
        let bound = binding["subjects"].as_array().into_iter().flatten().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == service_account && s["namespace"] == NAMESPACE
        });
        if !bound {
            continue;
        }
        assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
        let role = named(docs, "ClusterRole", binding["roleRef"]["name"].as_str().unwrap());
        rules.extend(role["rules"].as_array().expect("rules"));
    }
    rules
}

fn assert_allowed(rules: &[&Value], who: &str, api_version: &str, resource: &str, verbs: &[&str]) {
    let (group, _) = group_version(api_version);
    for verb in verbs {
        assert!(
            allows(rules, group, resource, verb),
            "{who} may not {verb} {resource} (group {group:?})"
        );
    }
}

/// The service account a workload runs as; it must exist in deploy/.
fn service_account_of<'a>(docs: &'a [(String, Value)], kind: &str, name: &str) -> &'a str {
    let workload = named(docs, kind, name);
    assert_eq!(workload["metadata"]["namespace"], NAMESPACE, "{kind} {name}");
    let account = workload["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or_else(|| panic!("{kind} {name} has no serviceAccountName"));
    let sa = named(docs, "ServiceAccount", account);
    assert_eq!(sa["metadata"]["namespace"], NAMESPACE);
    account
}

#[test]
fn rbac_covers_every_resource_the_workloads_touch() {
    let docs = documents();
    let nad = NetworkAttachmentDefinition::API_VERSION;
    let claims = IpamClaim::API_VERSION;
    let reservations = IpReservation::API_VERSION;
    // The node agent and the weft-ipam it runs (as weft-node: weft-ipam has no identity of its own).
    let account = service_account_of(&docs, "DaemonSet", "weft-node");
    let rules = rules_of(&docs, account);
    assert!(!rules.is_empty(), "no ClusterRole bound to {account}");
    assert_allowed(&rules, account, "v1", "pods", &READ);
    assert_allowed(&rules, account, "v1", "pods/status", &["update"]);
    assert_allowed(&rules, account, "v1", "events", &["get", "create", "update"]);
    assert_allowed(&rules, account, nad, NetworkAttachmentDefinition::PLURAL, &READ);
    assert_allowed(&rules, account, claims, IpamClaim::PLURAL, &["get", "list"]);
    assert_allowed(
        &rules,
        account,
        claims,
        &format!("{}/status", IpamClaim::PLURAL),
        &["update"],
    );
    assert_allowed(
        &rules,
        account,
        reservations,
        IpReservation::PLURAL,
        &["get", "list", "create", "delete"],
    );
    assert!(
        !of_kind(&docs, "ClusterRole")
            .iter()
            .any(|r| r["metadata"]["name"] == "weft-ipam"),
        "an unbound weft-ipam role grants nobody anything"
    );
    // The controller beside KubeVirt: claims and reservation GC (the exact set is replayed
    // against what it used in tests/kubevirt_claims.rs), nothing KubeVirt owns.
    let account = service_account_of(&docs, "Deployment", "weft-controller");
    let rules = rules_of(&docs, account);
    assert_allowed(
        &rules,
        account,
        VirtualMachine::API_VERSION,
        VirtualMachine::PLURAL,
        &["list", "watch"],
    );
    assert_allowed(
        &rules,
        account,
        nad,
        NetworkAttachmentDefinition::PLURAL,
        &["list", "watch"],
    );
    assert_allowed(
        &rules,
        account,
        claims,
        IpamClaim::PLURAL,
        &["list", "watch", "create", "delete"],
    );
    assert_allowed(&rules, account, "v1", "pods", &["list", "watch"]);
    assert_allowed(
        &rules,
        account,
        reservations,
        IpReservation::PLURAL,
        &["list", "delete"],
    );
    let kubevirt = group_version(VirtualMachine::API_VERSION).0;
    for (group, resource, verb) in [
        (kubevirt, VirtualMachineInstance::PLURAL, "create"),
        (kubevirt, VirtualMachineInstance::PLURAL, "delete"),
        (kubevirt, "virtualmachineinstances/status", "update"),
        (kubevirt, "virtualmachines/status", "update"),
        (kubevirt, "virtualmachines/finalizers", "update"),
        ("", "pods", "create"),
        ("", "pods", "delete"),
        ("", "pods/status", "update"),
    ] {
        assert!(
            !allows(&rules, group, resource, verb),
            "weft-controller may {verb} {resource}: that is KubeVirt's"
        );
    }
    // Nothing broader than needed: no wildcard anywhere.
    for role in of_kind(&docs, "ClusterRole") {
        for rule in role["rules"].as_array().into_iter().flatten() {
            for field in ["apiGroups", "resources", "verbs"] {
                assert!(
                    !strings(&rule[field]).contains(&"*"),
                    "ClusterRole {}: wildcard in {field}",
                    role["metadata"]["name"]
                );
            }
        }
    }
}

fn volume_host_path<'a>(pod_spec: &'a Value, volume: &str) -> Option<&'a str> {
    pod_spec["volumes"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == volume)?["hostPath"]["path"]
        .as_str()
}

/// `(mountPath, host path)` of every hostPath mount of a container.
fn host_mounts<'a>(pod_spec: &'a Value, container: &'a Value) -> Vec<(&'a str, &'a str)> {
    container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let host = volume_host_path(pod_spec, m["name"].as_str()?)?;
            Some((m["mountPath"].as_str()?, host))
        })
        .collect()
}

fn flag<'a>(args: &[&'a str], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| *a == name)
        .and_then(|i| args.get(i + 1).copied())
}

#[test]
fn daemonset_runs_the_agent_with_the_host_dirs_and_installs_the_plugins_atomically() {
    let docs = documents();
    let ds = named(&docs, "DaemonSet", "weft-node");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["hostPID"], true);
    let agent = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| strings(&c["args"]).contains(&"agent"))
        .expect("a container running `weft agent`");
    assert_eq!(agent["securityContext"]["privileged"], true);
    assert!(agent["image"].as_str().unwrap().contains("weft"));
    let args = strings(&agent["args"]);
    assert_eq!(flag(&args, "--node"), Some("$(NODE_NAME)"));
    assert!(
        args.contains(&"--in-cluster"),
        "the agent talks to the API server: {args:?}"
    );
    let node_name = agent["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "NODE_NAME")
        .expect("NODE_NAME env");
    assert_eq!(node_name["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");

    // The shim on the host dials <daemonSocketDir>/weft.sock: the agent's socket dir must be
    // that host dir, at the same path.
    let socket = Path::new(flag(&args, "--socket").unwrap_or(AGENT_DEFAULT_SOCKET));
    let socket_dir = socket.parent().unwrap().to_str().unwrap();
    let mounts = host_mounts(pod, agent);
    for dir in [
        socket_dir,
        "/opt/cni/bin",
        "/etc/cni/net.d",
        "/var/lib/weft",
        "/run/netns",
        "/var/lib/cni",
        "/run/cni",
    ] {
        assert!(
            mounts.contains(&(dir, dir)),
            "the agent must mount host {dir} at {dir}: {mounts:?}"
        );
    }
    let netns = agent["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/run/netns")
        .unwrap();
    assert_eq!(
        netns["mountPropagation"], "HostToContainer",
        "runtime netns mounts made after start"
    );

    let config_map = named(&docs, "ConfigMap", "weft-cni-config");
    let conflist: Value =
        serde_json::from_str(config_map["data"]["00-weft.conflist"].as_str().unwrap()).unwrap();
    assert_eq!(conflist["plugins"][0]["type"], "weft-cni");
    assert_eq!(conflist["plugins"][0]["daemonSocketDir"], socket_dir);
    assert_eq!(
        socket.file_name().unwrap(),
        "weft.sock",
        "the shim dials weft.sock"
    );

    let init = &pod["initContainers"][0];
    let command = [strings(&init["command"]), strings(&init["args"])].concat();
    assert_eq!(
        command,
        [
            "/usr/local/bin/weft",
            "install-cni",
            "--bin-dir",
            "/host/opt/cni/bin",
            "--conflist",
            "/etc/weft/cni/00-weft.conflist",
            "--conf-dir",
            "/host/etc/cni/net.d"
        ],
        "init container installs the plugins and the conflist, exec form (the image has no \
         shell); weft writes each file under a temp name and renames it (text file busy, \
         Multus #1221)"
    );
    assert!(
        host_mounts(pod, init).contains(&("/host/opt/cni/bin", "/opt/cni/bin")),
        "init container sees the host CNI bin dir"
    );

    let controller = named(&docs, "Deployment", "weft-controller");
    let container = &controller["spec"]["template"]["spec"]["containers"][0];
    let args = strings(&container["args"]);
    assert_eq!(args.last(), Some(&"controller"));
    assert!(
        args.contains(&"--in-cluster"),
        "the controller talks to the API server: {args:?}"
    );
}

#[test]
fn example_nad_is_a_persistent_weft_ipam_network() {
    let docs = documents();
    let nad = of_kind(&docs, "NetworkAttachmentDefinition")
        .into_iter()
        .find(|d| d["metadata"]["name"] == "tenant-blue")
        .expect("deploy/examples: NAD tenant-blue");
    let nad: NetworkAttachmentDefinition = serde_json::from_value(nad.clone()).unwrap();
    let config: Value = serde_json::from_str(&nad.spec.config).expect("spec.config is JSON");
    assert_eq!(config["ipam"]["type"], "weft-ipam");
    let parsed = weft_ipam::parse_network_config(&config).expect("a valid weft-ipam config");
    assert!(parsed.allow_persistent_ips);
    assert_eq!(parsed.network, "tenant-blue");
}

/// The init container's command, with its container paths moved under `root`.
fn install_command(root: &Path, weft: &Path) -> Vec<String> {
    let docs = documents();
    let ds = named(&docs, "DaemonSet", "weft-node");
    let init = &ds["spec"]["template"]["spec"]["initContainers"][0];
    [strings(&init["command"]), strings(&init["args"])]
        .concat()
        .iter()
        .map(|arg| {
            arg.replace("/host/opt/cni/bin", &root.join("bin").display().to_string())
                .replace("/host/etc/cni/net.d", &root.join("net.d").display().to_string())
                .replace("/etc/weft/cni", &root.join("config").display().to_string())
                .replace("/usr/local/bin/weft", &weft.display().to_string())
        })
        .collect()
}

fn run_install(command: &[String]) {
    let out = std::process::Command::new(&command[0])
        .args(&command[1..])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "install command failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn install_script_replaces_a_running_shim_without_text_file_busy() {
    let root = tempfile::tempdir().unwrap();
    for dir in ["bin", "net.d", "config"] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
    }
    let docs = documents();
    let config_map = named(&docs, "ConfigMap", "weft-cni-config");
    let conflist = config_map["data"]["00-weft.conflist"].as_str().unwrap();
    std::fs::write(root.path().join("config/00-weft.conflist"), conflist).unwrap();

    // A previous install whose plugins are running right now (the runtime calling the shim
    // while the agent is down): overwriting them in place would fail with ETXTBSY.
    let running: Vec<std::process::Child> = ["weft-cni", "weft-ipam", "passthru"]
        .iter()
        .map(|name| {
            let old = root.path().join("bin").join(name);
            std::fs::copy("/bin/sleep", &old).unwrap();
            std::process::Command::new(old).arg("30").spawn().unwrap()
        })
        .collect();

    let weft = Path::new(env!("CARGO_BIN_EXE_weft"));
    run_install(&install_command(root.path(), weft));
    for mut old in running {
        let _ = old.kill();
        let _ = old.wait();
    }

    let new = std::fs::read(weft).unwrap();
    for name in ["weft-cni", "weft-ipam", "passthru"] {
        let installed = root.path().join("bin").join(name);
        let content = std::fs::read(&installed).unwrap();
        if name != "passthru" {
            assert!(
                content.starts_with(b"\x7fELF") && content != new && content.len() < new.len() / 4,
                "{name} is the static client, not the weft binary"
            );
        } else {
            assert!(content == new, "{name} is the new weft binary");
        }
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&installed).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o755, "{name} mode");
    }
    assert_eq!(
        std::fs::read_to_string(root.path().join("net.d/00-weft.conflist")).unwrap(),
        conflist
    );
    for dir in ["bin", "net.d"] {
        let names: Vec<String> = std::fs::read_dir(root.path().join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with('.')),
            "temporary files left in {dir}: {names:?}"
        );
    }
}

/// The image is named in one place: deploy/kustomization.yaml's `images:` rewrites the
/// `weft:latest` every workload names, and its resources are the manifests that exist.
#[test]
fn the_kustomization_names_the_image_of_every_workload_in_one_place() {
    let docs = documents();
    let kustomization = named(&docs, "Kustomization", "weft");
    let images = kustomization["images"].as_array().expect("images:");
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0]["name"], "weft");
    assert!(images[0]["newName"].as_str().is_some_and(|n| !n.is_empty()));
    for resource in strings(&kustomization["resources"]) {
        assert!(
            deploy_dir().join(resource).is_file(),
            "kustomization resource {resource}"
        );
    }
    let mut workloads = 0;
    for kind in ["DaemonSet", "Deployment"] {
        for workload in of_kind(&docs, kind) {
            let spec = &workload["spec"]["template"]["spec"];
            for list in ["initContainers", "containers"] {
                for container in spec[list].as_array().into_iter().flatten() {
                    workloads += 1;
                    assert_eq!(
                        container["image"], "weft:latest",
                        "{kind} {}: the image the kustomization rewrites",
                        workload["metadata"]["name"]
                    );
                    assert_ne!(
                        strings(&container["command"]).first(),
                        Some(&"/bin/sh"),
                        "the image has no shell: exec-form commands only"
                    );
                }
            }
        }
    }
    assert_eq!(workloads, 3, "install-cni, agent, controller");
}
