//! The passt binding end to end on the local cluster, with a real QEMU guest: the KubeVirt CR
//! registers the `passt` network binding plugin, a VM binds its pod network with
//! `binding: {name: passt}`. The guest's udhcpc leases the pod IP from passt's own DHCP, reaches
//! the remote host beyond the node (wget), and serves a port that is reachable at the pod IP
//! from the node. Stopped and started, a new passt serves the new pod; the old one is gone with
//! its socket, and after `weft down` no passt of the cluster is left. A plugin the KubeVirt CR
//! does not register is admitted and waits (FailedCreate) until the CR registers it.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

const TEST: &str = "passt_binding_leases_reaches_the_remote_host_and_serves_inbound";
const PORT: u16 = 8080;
const REMOTE: &str = "http://172.31.255.254:8080/";

const KUBEVIRT: &str = "apiVersion: kubevirt.io/v1
kind: KubeVirt
metadata:
  name: kubevirt
  namespace: kubevirt
spec:
  configuration:
    network:
      binding:
        passt:
          sidecarImage: quay.io/kubevirt/network-passt-binding:v1.5.0
          migration:
            method: link-refresh
";

fn vm_manifest() -> String {
    format!(
        "apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: vmp
  namespace: default
spec:
  running: true
  template:
    metadata:
      annotations:
        weft.dev/guest-checks: \"wget={REMOTE} httpd={PORT}\"
    spec:
      domain:
        devices:
          interfaces:
            - name: default
              binding:
                name: passt
              ports:
                - port: {PORT}
        resources:
          requests:
            memory: 256Mi
      networks:
        - name: default
          pod: {{}}
"
    )
}

fn json(state: &Path, args: &[&str]) -> serde_json::Value {
    let out = weft(state, args);
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

fn guest_check(vmi: &serde_json::Value, kind: &str, target: &str) -> Option<bool> {
    let raw = vmi["metadata"]["annotations"]["weft.dev/guest-report"]
        .as_str()
        .unwrap_or("[]");
    let checks: Vec<serde_json::Value> = serde_json::from_str(raw).unwrap_or_default();
    checks
        .iter()
        .find(|c| c["kind"] == kind && c["target"] == target)
        .map(|c| c["ok"] == true)
}

/// Wait (bounded) until the guest of the current VMI reported both checks and its guest agent
/// its address; returns the VMI. (The agent is polled on its own schedule: a poll between the
/// guest's start and its lease reports the NIC without an address, so the wait is for the
/// address, not for the first guest-agent report.)
fn wait_for_checks(state: &Path) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let vmi = json(state, &["get", "vmi", "vmp", "-o", "json"]);
        let wget = guest_check(&vmi, "wget", REMOTE);
        let httpd = guest_check(&vmi, "httpd", &PORT.to_string());
        let nic = &vmi["status"]["interfaces"][0];
        // The agent is asked every few seconds: a session taken before udhcpc's lease reports
        // the link-local address only, and the next one the leased IPv4 address. Wait for that.
        let agent = nic["infoSource"]
            .as_str()
            .is_some_and(|s| s.contains("guest-agent"))
            && nic["ipAddress"]
                .as_str()
                .is_some_and(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok());
        if let (Some(wget), Some(httpd), true) = (wget, httpd, agent) {
            assert!(wget, "the guest reaches the remote host through passt: {vmi}");
            assert!(httpd, "the guest serves port {PORT}: {vmi}");
            return vmi;
        }
        assert!(Instant::now() < deadline, "no guest checks from vmp: {vmi}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The launcher pod of vmp (the one running), from `weft get pods`.
fn launcher_pod(state: &Path) -> serde_json::Value {
    let pods = json(state, &["get", "pods", "-o", "json"]);
    let items = pods["items"]
        .as_array()
        .or(pods.as_array())
        .cloned()
        .unwrap_or_default();
    let mut candidates: Vec<serde_json::Value> = items
        .into_iter()
        .chain(pods.get("metadata").map(|_| pods.clone()))
        .filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("virt-launcher-vmp-"))
                && p["status"]["phase"] == "Running"
        })
        .collect();
    assert_eq!(candidates.len(), 1, "one running launcher pod: {pods}");
    candidates.remove(0)
}

fn node_netns(state: &Path) -> String {
    let cluster: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("cluster.json")).unwrap()).unwrap();
    cluster["nodes"][0]["netns"].as_str().unwrap().to_string()
}

/// pid and start time of the recorded passt.
fn passt_record(state: &Path) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(state.join("run/passt-default-vmp-default.pid")).ok()?;
    let mut words = text.split_whitespace();
    Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
}

fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    if rest.trim_start().starts_with(['Z', 'X']) {
        return None;
    }
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn alive(record: (u32, u64)) -> bool {
    start_time(record.0) == Some(record.1)
}

/// Every live process whose command line names `needle`.
fn processes_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmdline.contains(needle) && start_time(pid).is_some() {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

/// Check one running VMI end to end; returns its passt record and socket directory.
fn check_running(state: &Path) -> ((u32, u64), PathBuf) {
    let vmi = wait_for_checks(state);
    let pod = launcher_pod(state);
    let pod_ip = pod["status"]["podIP"].as_str().unwrap_or("").to_string();
    assert!(pod_ip.starts_with("10.244.1."), "pod IP: {pod}");
    let nic = &vmi["status"]["interfaces"][0];
    // The guest agent reports the address the guest's udhcpc leased: the pod's own IP.
    assert!(
        nic["infoSource"].as_str().unwrap_or("").contains("guest-agent"),
        "{nic}"
    );
    assert_eq!(nic["ipAddress"].as_str(), Some(pod_ip.as_str()), "{vmi}");
    // passt runs as recorded, inside the pod.
    let record = passt_record(state).expect("passt is recorded in run/");
    assert!(alive(record), "the recorded passt runs");
    let pod_dir = state
        .join("nodes/node1/pods")
        .join(format!("default_{}", pod["metadata"]["name"].as_str().unwrap()));
    let socket_dir = pod_dir.join("passt-default");
    assert!(socket_dir.join("passt.sock").exists(), "{}", socket_dir.display());
    let domain = std::fs::read_to_string(pod_dir.join("domain.xml")).unwrap();
    assert!(
        domain.contains("<interface type=\"user\"><source dev=\"eth0\"></source>")
            && domain.contains("<backend type=\"passt\"")
            && domain.contains(&format!(
                "<portForward proto=\"tcp\" dev=\"eth0\"><range start=\"{PORT}\"></range></portForward>"
            )),
        "{domain}"
    );
    // Inbound: the port the guest serves is reachable at the pod IP from the node.
    let url = format!("http://{pod_ip}:{PORT}/");
    let fetched = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &node_netns(state),
            "timeout",
            "10",
            "busybox",
            "wget",
            "-q",
            "-O",
            "-",
        ])
        .arg(&url)
        .output()
        .unwrap();
    assert!(
        fetched.status.success() && String::from_utf8_lossy(&fetched.stdout).contains("weft-guest"),
        "GET {url} from the node: {}",
        text(&fetched)
    );
    (record, socket_dir)
}

fn wait_gone(state: &Path, record: (u32, u64), socket_dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while alive(record) || socket_dir.exists() || passt_record(state) == Some(record) {
        assert!(
            Instant::now() < deadline,
            "after stop: passt alive {}, socket dir {} exists {}, record {:?}",
            alive(record),
            socket_dir.display(),
            socket_dir.exists(),
            passt_record(state)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn exercise(state: &Path) {
    let manifests = state.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(manifests.join("kubevirt.yaml"), KUBEVIRT).unwrap();
    std::fs::write(manifests.join("vm.yaml"), vm_manifest()).unwrap();
    let up = weft(
        state,
        &["up", "-f", manifests.to_str().unwrap(), "--timeout", "240"],
    );
    assert!(up.status.success(), "weft up failed:\n{}", text(&up));
    let (first, first_dir) = check_running(state);
    // Stop: the launcher's passt exits, its socket and record go.
    let stop = weft(state, &["stop", "vmp"]);
    assert!(stop.status.success(), "{}", text(&stop));
    wait_gone(state, first, &first_dir);
    let deadline = Instant::now() + Duration::from_secs(60);
    while weft(state, &["get", "vmi", "vmp", "-o", "json"]).status.success() {
        assert!(Instant::now() < deadline, "the VMI of the stopped VM stays");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The old launcher pod goes in a later pass of the controller: gone before the start, so
    // the new VMI's checks see one launcher pod.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pods = json(state, &["get", "pods", "-o", "json"]);
        let gone = pods["items"].as_array().is_some_and(|items| {
            !items.iter().any(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("virt-launcher-vmp-"))
            })
        });
        if gone {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stopped VM's launcher pod stays: {pods}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Start: a new pod, a new passt, everything again.
    let start = weft(state, &["start", "vmp"]);
    assert!(start.status.success(), "{}", text(&start));
    let (second, _) = check_running(state);
    assert_ne!(first, second, "a new passt for the new launcher");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn passt_binding_leases_reaches_the_remote_host_and_serves_inbound() {
    if !root_or_skip(TEST) {
        return;
    }
    for tool in ["passt", "qemu-system-x86_64", "busybox"] {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
            .unwrap_or(false);
        if !found {
            weft_testing::skip(TEST, &format!("{tool} is missing (scripts/install-deps.sh)"));
            return;
        }
    }
    let state = tempfile::tempdir().unwrap();
    let outcome = std::panic::catch_unwind(|| exercise(state.path()));
    let down = weft(state.path(), &["down"]);
    let left = processes_naming(&state.path().display().to_string());
    if let Err(panic) = outcome {
        for log in ["controller.log", "supervisor.log"] {
            eprintln!(
                "--- {log}\n{}",
                std::fs::read_to_string(state.path().join(log)).unwrap_or_default()
            );
        }
        std::panic::resume_unwind(panic);
    }
    assert!(down.status.success(), "weft down failed:\n{}", text(&down));
    assert!(
        left.is_empty(),
        "processes of the cluster left after weft down: {left:#?}"
    );
}

fn synchronized(vmi: &serde_json::Value) -> Option<serde_json::Value> {
    vmi["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Synchronized")
        .cloned()
}

fn unregistered_then_registered(state: &Path) {
    let manifests = state.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(manifests.join("vm.yaml"), vm_manifest()).unwrap();
    let up = weft(
        state,
        &[
            "up",
            "-f",
            manifests.to_str().unwrap(),
            "--no-guests",
            "--no-wait",
        ],
    );
    assert!(
        up.status.success(),
        "admitted (KubeVirt has no rule on plugin names):\n{}",
        text(&up)
    );
    // The launcher pod cannot be rendered: the VMI waits with KubeVirt's FailedCreate.
    let deadline = Instant::now() + Duration::from_secs(60);
    let condition = loop {
        let vmi = json(state, &["get", "vmi", "vmp", "-o", "json"]);
        if let Some(c) = synchronized(&vmi).filter(|c| c["status"] == "False") {
            assert_eq!(vmi["status"]["phase"], "Pending", "{vmi}");
            break c;
        }
        assert!(Instant::now() < deadline, "no Synchronized=False on vmp: {vmi}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(condition["reason"], "FailedCreate", "{condition}");
    assert_eq!(
        condition["message"],
        "failed to render launch manifest: unable to find the network binding plugin 'passt' in Kubevirt configuration"
    );
    let pods = json(state, &["get", "pods", "-o", "json"]).to_string();
    assert!(!pods.contains("virt-launcher-vmp-"), "no launcher pod: {pods}");
    // Registering the plugin lets the VMI start, its passt with it.
    apply(state, "kubevirt.yaml", KUBEVIRT);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let vmi = json(state, &["get", "vmi", "vmp", "-o", "json"]);
        let record = passt_record(state);
        if vmi["status"]["phase"] == "Running" && record.is_some_and(alive) {
            assert!(
                synchronized(&vmi).is_none_or(|c| c["status"] != "False"),
                "the FailedCreate condition is gone: {vmi}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "vmp does not run after registering passt: {vmi}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn passt_binding_an_unregistered_plugin_waits_until_the_kubevirt_cr_registers_it() {
    let name = "passt_binding_an_unregistered_plugin_waits_until_the_kubevirt_cr_registers_it";
    if !root_or_skip(name) {
        return;
    }
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("passt").is_file()))
        .unwrap_or(false);
    if !found {
        weft_testing::skip(name, "passt is missing (scripts/install-deps.sh)");
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let outcome = std::panic::catch_unwind(|| unregistered_then_registered(state.path()));
    let down = weft(state.path(), &["down"]);
    let left = processes_naming(&state.path().display().to_string());
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    assert!(down.status.success(), "weft down failed:\n{}", text(&down));
    assert!(
        left.is_empty(),
        "processes of the cluster left after weft down: {left:#?}"
    );
}
