//! The thick plugin path with the real reference plugins: a runtime execs `weft-cni` → the
//! agent (in a node namespace) → bridge/host-local for eth0 and NADs' bridges for secondary
//! networks; network-status lands on the pod; DEL removes everything, and DEL again succeeds.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// A node namespace running an agent, with a cluster network, NADs and pods in the store.
struct Node {
    // Dropped first: the agent stops before its namespace and state go.
    _agent: KillOnDrop,
    dir: tempfile::TempDir,
    bin: PathBuf,
    node_netns: String,
    conf: serde_json::Value,
    _node: Netns,
}

impl Node {
    /// `manifests`: YAML with `{state}` replaced by the state dir; `meta`: extra meta-plugin keys.
    fn start(tag: &str, manifests: &str, meta: serde_json::Value) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let (bin, conf_dir) = node_files(state, "10.250.0.0/24");
        apply(
            state,
            "objects.yaml",
            &manifests.replace("{state}", &state.display().to_string()),
        );
        let node = Netns::new(&format!("{tag}-node"));
        let agent = start_agent(
            &node,
            state,
            &conf_dir,
            &bin,
            &["--metrics-addr", "127.0.0.1:9102"],
        );
        let conf = shim_config(state, &conf_dir, meta);
        // The conflist a runtime reads (the agent's dynamic-networks role uses it too).
        let mut plugin = conf.clone();
        if let Some(map) = plugin.as_object_mut() {
            map.remove("name");
            map.remove("cniVersion");
        }
        let conflist = serde_json::json!({"cniVersion": "1.0.0", "name": "weft", "plugins": [plugin]});
        std::fs::write(conf_dir.join("00-weft.conflist"), conflist.to_string()).unwrap();
        Self {
            _agent: agent,
            dir,
            bin,
            conf,
            node_netns: node.name.clone(),
            _node: node,
        }
    }

    /// The agent's Prometheus metrics (TCP, inside the node namespace).
    fn metrics(&self) -> String {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.node_netns,
                "busybox",
                "wget",
                "-q",
                "-O",
                "-",
                "http://127.0.0.1:9102/metrics",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn state(&self) -> &Path {
        self.dir.path()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.state().join("agent.log")).unwrap_or_default()
    }

    fn shim(&self, command: &str, pod_ns: &Netns, namespace: &str, pod: &str) -> std::process::Output {
        run_shim(&self.bin, &self.conf, command, pod_ns, namespace, pod)
    }
}

/// Poll `probe` for up to 15 s.
fn eventually<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

const BLUE_NAD: &str = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: blue, namespace: NS}
spec:
  config: '{"cniVersion":"1.0.0","type":"bridge","bridge":"br-blue","ipam":{"type":"weft-ipam","range":"192.168.77.0/24","stateDir":"{state}"}}'
"#;

fn pod_manifest(namespace: &str, name: &str, networks: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  annotations:\n    k8s.v1.cni.cncf.io/networks: {networks}\nspec: {{nodeName: n1}}\n"
    )
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn shim_agent_reference_plugins_add_del_del() {
    if !root_or_skip("shim_agent_reference_plugins_add_del_del") {
        return;
    }
    let manifests = BLUE_NAD.replace("NS", "default") + &pod_manifest("default", "web", "blue@blue0");
    let node = Node::start("sa", &manifests, serde_json::json!({}));
    let pod = Netns::new("sa-pod");

    let add = node.shim("ADD", &pod, "default", "web");
    assert!(
        add.status.success(),
        "ADD failed: {}\nagent log:\n{}",
        text(&add),
        node.log()
    );
    let result: serde_json::Value = serde_json::from_slice(&add.stdout).unwrap();
    assert_eq!(result["cniVersion"], "1.0.0");
    assert!(
        result["ips"][0]["address"]
            .as_str()
            .unwrap()
            .starts_with("10.250.0."),
        "{result}"
    );
    let attached = pod.links();
    assert!(
        attached.contains(&"eth0".to_string()) && attached.contains(&"blue0".to_string()),
        "{attached:?}"
    );
    let status = weft(node.state(), &["net", "status", "web"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("network-status");
    assert_eq!(status[0]["interface"], "eth0");
    assert_eq!(status[0]["default"], true);
    assert_eq!(status[1]["name"], "default/blue");
    assert_eq!(status[1]["interface"], "blue0");
    assert!(
        status[1]["ips"][0].as_str().unwrap().starts_with("192.168.77."),
        "{status}"
    );

    let check = node.shim("CHECK", &pod, "default", "web");
    assert!(
        check.status.success(),
        "CHECK reaches every attached delegate: {}\n{}",
        text(&check),
        node.log()
    );

    let metrics = eventually("metrics over TCP", || {
        Some(node.metrics()).filter(|m| !m.is_empty())
    });
    assert!(
        metrics.contains(r#"weft_agent_cni_requests_total{verb="ADD",result="ok"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("weft_agent_cni_request_duration_seconds_bucket"),
        "{metrics}"
    );

    let del = node.shim("DEL", &pod, "default", "web");
    assert!(del.status.success(), "DEL failed: {}\n{}", text(&del), node.log());
    assert_eq!(pod.links(), vec!["lo".to_string()], "everything detached");
    let again = node.shim("DEL", &pod, "default", "web");
    assert!(
        again.status.success(),
        "second DEL must succeed: {}\n{}",
        text(&again),
        node.log()
    );
    let list = weft(node.state(), &["ipam", "list"]);
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains("192.168.77."),
        "address released:\n{}",
        text(&list)
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn shim_agent_namespace_isolation_refuses_other_namespaces_and_attaches_nothing() {
    if !root_or_skip("shim_agent_namespace_isolation_refuses_other_namespaces_and_attaches_nothing") {
        return;
    }
    let manifests = BLUE_NAD.replace("NS", "team-b") + &pod_manifest("team-a", "web", "team-b/blue");
    let node = Node::start("iso", &manifests, serde_json::json!({"namespaceIsolation": true}));
    let pod = Netns::new("iso-pod");
    let add = node.shim("ADD", &pod, "team-a", "web");
    assert!(!add.status.success(), "ADD must be refused: {}", text(&add));
    let error: serde_json::Value = serde_json::from_slice(&add.stdout).expect("CNI error on stdout");
    assert_eq!(error["code"], 103, "{error}");
    let msg = error["msg"].as_str().unwrap_or("");
    assert!(
        msg.contains("namespace isolation") && msg.contains("team-b"),
        "{msg}"
    );
    assert_eq!(
        pod.links(),
        vec!["lo".to_string()],
        "nothing attached, not even eth0"
    );
    let del = node.shim("DEL", &pod, "team-a", "web");
    assert!(
        del.status.success(),
        "DEL after a refused ADD succeeds: {}\n{}",
        text(&del),
        node.log()
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn shim_agent_failing_delegate_rolls_back_everything() {
    if !root_or_skip("shim_agent_failing_delegate_rolls_back_everything") {
        return;
    }
    let broken = r#"
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: broken, namespace: default}
spec:
  config: '{"cniVersion":"1.0.0","type":"macvlan","master":"does-not-exist","ipam":{"type":"static","addresses":[{"address":"192.168.78.5/24"}]}}'
"#;
    let manifests = BLUE_NAD.replace("NS", "default")
        + broken
        + &pod_manifest("default", "web", "blue@blue0,broken@bad0");
    let node = Node::start("rb", &manifests, serde_json::json!({}));
    let pod = Netns::new("rb-pod");
    let add = node.shim("ADD", &pod, "default", "web");
    assert!(!add.status.success(), "ADD must fail: {}", text(&add));
    let error: serde_json::Value = serde_json::from_slice(&add.stdout).expect("CNI error on stdout");
    assert!(
        error["msg"].as_str().unwrap_or("").contains("broken"),
        "the error names the network: {error}"
    );
    assert_eq!(
        pod.links(),
        vec!["lo".to_string()],
        "eth0 and blue0 were rolled back"
    );
    let list = weft(node.state(), &["ipam", "list"]);
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains("192.168.77."),
        "no address leaked:\n{}",
        text(&list)
    );
    let del = node.shim("DEL", &pod, "default", "web");
    assert!(
        del.status.success(),
        "DEL after a failed ADD succeeds: {}\n{}",
        text(&del),
        node.log()
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn shim_agent_a_conflist_whose_later_plugin_fails_leaves_nothing_behind() {
    if !root_or_skip("shim_agent_a_conflist_whose_later_plugin_fails_leaves_nothing_behind") {
        return;
    }
    // bridge + weft-ipam attach and allocate; tuning then fails (no such sysctl): the list's
    // ADD undoes bridge (its veth, its address), the meta-plugin rolls back eth0.
    let chain = r#"
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: chain, namespace: default}
spec:
  config: '{"cniVersion":"1.0.0","name":"chain","plugins":[{"type":"bridge","bridge":"br-chain","ipam":{"type":"weft-ipam","range":"192.168.79.0/24","stateDir":"{state}"}},{"type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.no_such_knob":"1"}}]}'
"#;
    let manifests = chain.to_string() + &pod_manifest("default", "web", "chain@chain0");
    let node = Node::start("cl", &manifests, serde_json::json!({}));
    let pod = Netns::new("cl-pod");
    let node_links_before = node._node.links();
    let add = node.shim("ADD", &pod, "default", "web");
    assert!(!add.status.success(), "ADD must fail: {}", text(&add));
    let error: serde_json::Value = serde_json::from_slice(&add.stdout).expect("CNI error on stdout");
    assert!(error["msg"].as_str().unwrap_or("").contains("chain"), "{error}");
    assert_eq!(pod.links(), vec!["lo".to_string()], "chain0 and eth0 undone");
    let list = weft(node.state(), &["ipam", "list"]);
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains("192.168.79."),
        "bridge's address was released by the undo:\n{}\n{}",
        text(&list),
        node.log()
    );
    let leftover: Vec<String> = node
        ._node
        .links()
        .into_iter()
        .filter(|l| !node_links_before.contains(l) && l.starts_with("veth"))
        .collect();
    assert!(leftover.is_empty(), "no host-side veth left: {leftover:?}");
    let del = node.shim("DEL", &pod, "default", "web");
    assert!(del.status.success(), "{}", text(&del));
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn shim_agent_hotplug_follows_the_networks_annotation() {
    if !root_or_skip("shim_agent_hotplug_follows_the_networks_annotation") {
        return;
    }
    let green = r#"
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: green, namespace: default}
spec:
  config: '{"cniVersion":"1.0.0","type":"bridge","bridge":"br-green","ipam":{"type":"static","addresses":[{"address":"192.168.79.5/24"}]}}'
"#;
    let manifests = BLUE_NAD.replace("NS", "default") + green + &pod_manifest("default", "web", "blue@blue0");
    let node = Node::start("hp", &manifests, serde_json::json!({}));
    let pod = Netns::new("hp-pod");
    let add = node.shim("ADD", &pod, "default", "web");
    assert!(add.status.success(), "ADD failed: {}\n{}", text(&add), node.log());
    let wait_links = |want: &[&str]| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let mut links = pod.links();
            links.sort();
            let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
            want.sort();
            if links == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "links {links:?}, want {want:?}\n{}",
                node.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // Hot-plug: the annotation gains green → green0 appears, network-status lists it.
    let file = node.state().join("pod2.yaml");
    std::fs::write(&file, pod_manifest("default", "web", "blue@blue0,green@green0")).unwrap();
    assert!(
        weft(node.state(), &["apply", "-f", file.to_str().unwrap()])
            .status
            .success()
    );
    wait_links(&["lo", "eth0", "blue0", "green0"]);
    eventually("green0 in network-status", || {
        let status = weft(node.state(), &["net", "status", "web"]);
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).ok()?;
        status
            .as_array()?
            .iter()
            .any(|s| s["interface"] == "green0" && s["ips"][0] == "192.168.79.5")
            .then_some(())
    });
    // Hot-unplug: blue leaves the annotation → blue0 goes, its address is released.
    std::fs::write(&file, pod_manifest("default", "web", "green@green0")).unwrap();
    assert!(
        weft(node.state(), &["apply", "-f", file.to_str().unwrap()])
            .status
            .success()
    );
    wait_links(&["lo", "eth0", "green0"]);
    eventually("blue's address released", || {
        let list = weft(node.state(), &["ipam", "list"]);
        (!String::from_utf8_lossy(&list.stdout).contains("192.168.77.")).then_some(())
    });
    // DEL removes what is attached now, hot-plugged attachments included.
    let del = node.shim("DEL", &pod, "default", "web");
    assert!(del.status.success(), "DEL failed: {}\n{}", text(&del), node.log());
    assert_eq!(pod.links(), vec!["lo".to_string()]);
}

/// Selections without interface names (the short form `a,b`, JSON without `interface`, and
/// both mixed with named ones) match the attachments ADD named `net<N>`: nothing is re-plugged
/// or unplugged, the agent logs no hot-plug failure, and real changes still apply.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn shim_agent_hotplug_matches_selections_without_interface_names() {
    if !root_or_skip("shim_agent_hotplug_matches_selections_without_interface_names") {
        return;
    }
    let nad = |name: &str, octet: u8| {
        format!(
            "---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  config: '{{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\",\"bridge\":\"br-{name}\",\"ipam\":{{\"type\":\"static\",\"addresses\":[{{\"address\":\"192.168.{octet}.5/24\"}}]}}}}'\n"
        )
    };
    let manifests =
        nad("green", 81) + &nad("red", 82) + &nad("gold", 83) + &pod_manifest("default", "web", "green,red");
    let node = Node::start("hpn", &manifests, serde_json::json!({}));
    let pod = Netns::new("hpn-pod");
    let add = node.shim("ADD", &pod, "default", "web");
    assert!(add.status.success(), "ADD failed: {}\n{}", text(&add), node.log());
    let wait_links = |want: &[&str]| {
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want.sort();
        eventually(&format!("links {want:?}"), || {
            let mut links = pod.links();
            links.sort();
            (links == want).then_some(())
        });
    };
    wait_links(&["lo", "eth0", "net1", "net2"]);
    let apply = |networks: &str| {
        let file = node.state().join("pod.yaml");
        std::fs::write(&file, pod_manifest("default", "web", networks)).unwrap();
        let applied = weft(node.state(), &["apply", "-f", file.to_str().unwrap()]);
        assert!(applied.status.success(), "{}", text(&applied));
    };
    // JSON without interfaces, plus a named one: only gold0 is new.
    apply(r#"'[{"name":"green"},{"name":"red","namespace":"default"},{"name":"gold","interface":"gold0"}]'"#);
    wait_links(&["lo", "eth0", "net1", "net2", "gold0"]);
    // Mixed short form: red leaves (net2 goes), the others stay where ADD put them.
    apply("green,gold@gold0");
    wait_links(&["lo", "eth0", "net1", "gold0"]);
    // An unnamed network hot-plugged at position 3 gets net3, as ADD would have named it.
    apply("green,gold@gold0,red");
    wait_links(&["lo", "eth0", "net1", "gold0", "net3"]);
    eventually("net3 in network-status", || {
        let status = weft(node.state(), &["net", "status", "web"]);
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).ok()?;
        status
            .as_array()?
            .iter()
            .any(|s| s["name"] == "default/red" && s["interface"] == "net3" && s["ips"][0] == "192.168.82.5")
            .then_some(())
    });
    let log = node.log();
    assert!(
        !log.contains("dynamic networks"),
        "the agent logged hot-plug failures:\n{log}"
    );
    let del = node.shim("DEL", &pod, "default", "web");
    assert!(del.status.success(), "DEL failed: {}\n{}", text(&del), node.log());
    assert_eq!(pod.links(), vec!["lo".to_string()]);
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn shim_agent_default_route_moves_to_the_requested_network() {
    if !root_or_skip("shim_agent_default_route_moves_to_the_requested_network") {
        return;
    }
    let annotation = r#"'[{"name":"blue","interface":"blue0","default-route":["192.168.77.1"]}]'"#;
    let manifests = BLUE_NAD.replace("NS", "default") + &pod_manifest("default", "web", annotation);
    let node = Node::start("dr", &manifests, serde_json::json!({}));
    let pod = Netns::new("dr-pod");
    let add = node.shim("ADD", &pod, "default", "web");
    assert!(add.status.success(), "ADD failed: {}\n{}", text(&add), node.log());
    let routes: serde_json::Value =
        serde_json::from_str(&pod.exec(&["ip", "-j", "route", "show", "default"])).unwrap();
    let routes = routes.as_array().cloned().unwrap_or_default();
    assert_eq!(routes.len(), 1, "one default route: {routes:?}");
    assert_eq!(routes[0]["gateway"], "192.168.77.1");
    assert_eq!(routes[0]["dev"], "blue0");
    let del = node.shim("DEL", &pod, "default", "web");
    assert!(del.status.success(), "{}", text(&del));
}

/// A delegate whose ADD takes 1.2 s; every call is logged (`LOG`), a DEL with whether the
/// runtime gave it the ADD's result.
const SLOW_PLUGIN: &str = r#"#!/bin/sh
input=$(cat)
case "$CNI_COMMAND" in
VERSION)
  echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}' ;;
ADD)
  echo "${GOMAXPROCS:-unset}" > LOG.env
  echo "ADD start" >> LOG
  sleep 1.2
  echo "ADD end" >> LOG
  printf '{"cniVersion":"1.0.0","interfaces":[{"name":"%s","sandbox":"%s"}]}\n' "$CNI_IFNAME" "$CNI_NETNS" ;;
DEL)
  case "$input" in
  *prevResult*) echo "DEL with the result" >> LOG ;;
  *) echo "DEL without a result" >> LOG ;;
  esac ;;
esac
exit 0
"#;

/// The slow pod's node: NAD `slow` ([`SLOW_PLUGIN`], logging to the returned path), pod
/// `default/web` selecting it.
fn slow_node(tag: &str) -> (Node, PathBuf) {
    let nad = "---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: slow, namespace: default}\nspec:\n  config: '{\"cniVersion\":\"1.0.0\",\"type\":\"slow\"}'\n";
    let manifests = nad.to_string() + &pod_manifest("default", "web", "slow");
    let node = Node::start(tag, &manifests, serde_json::json!({}));
    let log = node.state().join("slow.log");
    install_script_plugin(
        &node.bin,
        "slow",
        &SLOW_PLUGIN.replace("LOG", &log.display().to_string()),
    );
    (node, log)
}

fn log_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Wait (up to 15 s) until the plugin's `log` has `line`.
fn wait_for_line(log: &Path, line: &str) {
    eventually(line, || log_lines(log).iter().any(|l| l == line).then_some(()));
}

/// After the DEL: nothing of the pod's attachment is left (eth0, its host-local address, the
/// attachment record).
fn assert_nothing_left(node: &Node, pod: &Netns) {
    assert_eq!(pod.links(), ["lo"], "eth0 went with the DEL");
    let record = node.state().join("cache").join(format!("{CONTAINER_ID}.json"));
    assert!(
        !record.exists(),
        "no attachment record outlives the DEL (the ADD must not write it back)"
    );
    let leases: Vec<String> = std::fs::read_dir(node.state().join("host-local").join("cluster"))
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|name| name.starts_with("10.250.0."))
                .collect()
        })
        .unwrap_or_default();
    assert!(leases.is_empty(), "eth0's address was released: {leases:?}");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn shim_agent_a_del_beside_its_sandboxs_add_waits_for_it_and_leaves_nothing() {
    if !root_or_skip("shim_agent_a_del_beside_its_sandboxs_add_waits_for_it_and_leaves_nothing") {
        return;
    }
    let (node, log) = slow_node("race");
    let pod = Netns::new("race-pod");
    std::thread::scope(|scope| {
        // A runtime that tears the sandbox down while its ADD still runs.
        let add = scope.spawn(|| node.shim("ADD", &pod, "default", "web"));
        wait_for_line(&log, "ADD start");
        let del = node.shim("DEL", &pod, "default", "web");
        assert!(del.status.success(), "DEL: {}\n{}", text(&del), node.log());
        let add = add.join().unwrap();
        assert!(add.status.success(), "ADD: {}\n{}", text(&add), node.log());
    });
    assert_eq!(
        log_lines(&log),
        ["ADD start", "ADD end", "DEL with the result"],
        "the DEL waited for its sandbox's ADD, then DELeted what it attached:\n{}",
        node.log()
    );
    assert_nothing_left(&node, &pod);
    // The agent runs its delegates with one Go thread (`--delegate-gomaxprocs`), unless its own
    // environment says otherwise.
    let want = std::env::var("GOMAXPROCS").unwrap_or_else(|_| "1".into());
    assert_eq!(
        std::fs::read_to_string(log.with_extension("log.env"))
            .unwrap()
            .trim(),
        want,
        "the delegate's GOMAXPROCS"
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn shim_agent_an_add_whose_runtime_gave_up_runs_to_its_end_and_its_del_removes_it_all() {
    if !root_or_skip("shim_agent_an_add_whose_runtime_gave_up_runs_to_its_end_and_its_del_removes_it_all") {
        return;
    }
    let (node, log) = slow_node("gaveup");
    let pod = Netns::new("gaveup-pod");
    // The runtime's timeout: the shim is killed while the ADD runs, its connection closed.
    let mut shim = spawn_shim_as(&node.bin, &node.conf, "ADD", &pod, "default", "web", CONTAINER_ID);
    wait_for_line(&log, "ADD start");
    shim.kill().unwrap();
    shim.wait().unwrap();
    // The agent finishes the ADD and records what it attached.
    let record = node.state().join("cache").join(format!("{CONTAINER_ID}.json"));
    eventually("the ADD to finish and record its results", || {
        let bytes = std::fs::read(&record).ok()?;
        let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        let results = value["results"].as_array()?;
        (results.len() == 2 && results.iter().all(|r| !r.is_null())).then_some(())
    });
    let del = node.shim("DEL", &pod, "default", "web");
    assert!(del.status.success(), "DEL: {}\n{}", text(&del), node.log());
    assert_eq!(
        log_lines(&log),
        ["ADD start", "ADD end", "DEL with the result"],
        "the ADD ran to its end, the DEL after it with its result:\n{}",
        node.log()
    );
    assert_nothing_left(&node, &pod);
}

/// A CNI 1.1 delegate: the ADD of `net2` takes 1.2 s, and a GC logs the interfaces of the
/// valid attachments it was given (`LOG`; libcni sends the list under two keys).
const GC_WATCH_PLUGIN: &str = r#"#!/bin/sh
input=$(cat)
case "$CNI_COMMAND" in
VERSION)
  echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}' ;;
ADD)
  if [ "$CNI_IFNAME" = net2 ]; then
    echo "ADD net2 start" >> LOG
    sleep 1.2
    echo "ADD net2 end" >> LOG
  fi
  printf '{"cniVersion":"1.1.0","interfaces":[{"name":"%s","sandbox":"%s"}]}\n' "$CNI_IFNAME" "$CNI_NETNS" ;;
GC)
  echo "GC $(echo "$input" | grep -o '"ifname": *"[a-z0-9]*"' | sed 's/.*"\([a-z0-9]*\)"$/\1/' | sort -u | tr '\n' ' ')" >> LOG ;;
esac
exit 0
"#;

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn shim_agent_gc_waits_for_a_hotplug_pass_and_keeps_what_it_attached() {
    if !root_or_skip("shim_agent_gc_waits_for_a_hotplug_pass_and_keeps_what_it_attached") {
        return;
    }
    let nad = "---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: gcw, namespace: default}\nspec:\n  config: '{\"cniVersion\":\"1.1.0\",\"type\":\"gcwatch\"}'\n";
    let manifests = nad.to_string() + &pod_manifest("default", "web", "gcw@net1");
    let node = Node::start("gcw", &manifests, serde_json::json!({"cniVersion": "1.1.0"}));
    let log = node.state().join("gcwatch.log");
    install_script_plugin(
        &node.bin,
        "gcwatch",
        &GC_WATCH_PLUGIN.replace("LOG", &log.display().to_string()),
    );
    let pod = Netns::new("gcw-pod");
    let add = node.shim("ADD", &pod, "default", "web");
    assert!(add.status.success(), "ADD: {}\n{}", text(&add), node.log());
    // The pod gains a second attachment of the same network: a hot-plug pass ADDs net2, slowly.
    let file = node.state().join("pod2.yaml");
    std::fs::write(&file, pod_manifest("default", "web", "gcw@net1,gcw@net2")).unwrap();
    let applied = weft(node.state(), &["apply", "-f", file.to_str().unwrap()]);
    assert!(applied.status.success(), "{}", text(&applied));
    wait_for_line(&log, "ADD net2 start");
    // The runtime's GC meanwhile (it never overlaps its own ADDs; this pass is the agent's).
    let gc = node.shim("GC", &pod, "default", "web");
    assert!(gc.status.success(), "GC: {}\n{}", text(&gc), node.log());
    assert_eq!(
        log_lines(&log),
        ["ADD net2 start", "ADD net2 end", "GC net1 net2 "],
        "the GC waited for the hot-plug pass and kept net2 valid:\n{}",
        node.log()
    );
    let del = node.shim("DEL", &pod, "default", "web");
    assert!(del.status.success(), "DEL: {}\n{}", text(&del), node.log());
}
