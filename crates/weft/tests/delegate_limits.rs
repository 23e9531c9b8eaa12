//! Limits on what delegates a node runs, through the real shim and agent: the node-wide bound
//! on ADD plugin processes (`weft agent --max-plugins`: a pod's four secondary ADDs, allowed
//! four at once by `--parallel-delegates`, run at most two at a time under `--max-plugins 2`;
//! their DELs are not bounded), and a NAD that names the meta-plugin itself (refused: it would
//! ADD the pod's networks again from within its own ADD).

mod common;

use std::path::Path;

use common::*;

/// A delegate that logs when each ADD and DEL starts and ends (nanoseconds, GNU date). An ADD
/// sleeps in between and returns one interface; a DEL waits (at most 10 s) until three DELs have
/// started, so DELs that may run at once are seen to, however slowly they start. `LOG` is
/// replaced by the log's path.
const TIMED_PLUGIN: &str = r#"#!/bin/sh
cat > /dev/null
case "$CNI_COMMAND" in
VERSION)
  echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}' ;;
ADD)
  echo "ADD $(date +%s%N) 1" >> LOG
  sleep 0.4
  echo "ADD $(date +%s%N) -1" >> LOG
  printf '{"cniVersion":"1.0.0","interfaces":[{"name":"%s","sandbox":"%s"}]}\n' "$CNI_IFNAME" "$CNI_NETNS" ;;
DEL)
  echo "DEL $(date +%s%N) 1" >> LOG
  touch "LOG.del.$CNI_IFNAME"
  i=0
  while [ "$(ls LOG.del.* | wc -l)" -lt 3 ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
  echo "DEL $(date +%s%N) -1" >> LOG ;;
esac
exit 0
"#;

/// The most calls of `command` in the log that ran at the same time.
fn peak(log: &Path, command: &str) -> (i32, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut events: Vec<(u128, i32)> = text
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            (fields.next()? == command).then_some(())?;
            Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
        })
        .collect();
    // An end before a start at the same instant: touching runs do not overlap.
    events.sort();
    let (mut now, mut most) = (0, 0);
    for (_, step) in &events {
        now += step;
        most = most.max(now);
    }
    (most, events.len() / 2)
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn max_plugins_bounds_the_adds_of_the_node_and_leaves_dels_alone() {
    if !root_or_skip("max_plugins_bounds_the_adds_of_the_node_and_leaves_dels_alone") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let (bin, conf_dir) = node_files(state, "10.249.0.0/24");
    let log = state.join("timed.log");
    install_script_plugin(
        &bin,
        "timed",
        &TIMED_PLUGIN.replace("LOG", &log.display().to_string()),
    );
    let mut manifests = String::new();
    for n in 1..=4 {
        manifests += &format!(
            "---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: t{n}, namespace: default}}\nspec:\n  config: '{{\"cniVersion\":\"1.0.0\",\"type\":\"timed\"}}'\n"
        );
    }
    manifests += "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: bound\n  namespace: default\n  annotations:\n    k8s.v1.cni.cncf.io/networks: t1,t2,t3,t4\nspec: {nodeName: n1}\n";
    apply(state, "objects.yaml", &manifests);
    let node = Netns::new("bound-node");
    let _agent = start_agent(
        &node,
        state,
        &conf_dir,
        &bin,
        &["--parallel-delegates", "4", "--max-plugins", "2"],
    );
    let agent_log = || std::fs::read_to_string(state.join("agent.log")).unwrap_or_default();
    let conf = shim_config(state, &conf_dir, serde_json::json!({}));
    let pod = Netns::new("bound-pod");

    let add = run_shim(&bin, &conf, "ADD", &pod, "default", "bound");
    assert!(add.status.success(), "ADD: {}\n{}", text(&add), agent_log());
    let (adds_at_once, adds) = peak(&log, "ADD");
    assert_eq!(adds, 4, "every secondary ADD ran once:\n{}", agent_log());
    assert_eq!(
        adds_at_once, 2,
        "4 allowed per pod, 2 per node: the node's bound holds and is reached"
    );

    let del = run_shim(&bin, &conf, "DEL", &pod, "default", "bound");
    assert!(del.status.success(), "DEL: {}\n{}", text(&del), agent_log());
    let (dels_at_once, dels) = peak(&log, "DEL");
    assert_eq!(dels, 4, "every secondary DEL ran once:\n{}", agent_log());
    assert!(
        dels_at_once > 2,
        "DELs are not bounded by --max-plugins: {dels_at_once} at once"
    );
    assert_eq!(pod.links(), ["lo"], "DEL left links in the pod");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_nad_naming_the_meta_plugin_is_refused_and_attaches_nothing() {
    if !root_or_skip("a_nad_naming_the_meta_plugin_is_refused_and_attaches_nothing") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let (bin, conf_dir) = node_files(state, "10.248.0.0/24");
    let manifests = "---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: loop, namespace: default}\nspec:\n  config: '{\"cniVersion\":\"1.0.0\",\"type\":\"weft-cni\"}'\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: looped\n  namespace: default\n  annotations:\n    k8s.v1.cni.cncf.io/networks: loop\nspec: {nodeName: n1}\n";
    // `weft apply` refuses such a NAD, and writes nothing of the file.
    let file = state.join("objects.yaml");
    std::fs::write(&file, manifests).unwrap();
    let refused = weft(state, &["apply", "-f", file.to_str().unwrap()]);
    assert!(
        !refused.status.success()
            && String::from_utf8_lossy(&refused.stderr).contains(
                "NetworkAttachmentDefinition \"loop\" is invalid: spec.config: Invalid value: plugin type \"weft-cni\" is the meta-plugin itself"
            ),
        "weft apply refuses the NAD: {}",
        text(&refused)
    );
    let pods = weft(state, &["get", "pods", "-o", "name"]);
    assert!(
        pods.stdout.is_empty(),
        "nothing of the file was written: {}",
        text(&pods)
    );
    // One can still reach the agent (kubectl on a cluster, an older weft): the agent's guard
    // is what this test is about, so the objects are written past admission.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = weft::cluster::open_running_store(state).await.unwrap();
        let objects = weft::manifests::parse_manifests(manifests, "objects.yaml").unwrap();
        weft::manifests::apply_objects(store.as_ref(), objects)
            .await
            .unwrap();
    });
    let node = Netns::new("loop-node");
    let _agent = start_agent(&node, state, &conf_dir, &bin, &[]);
    let agent_log = || std::fs::read_to_string(state.join("agent.log")).unwrap_or_default();
    let conf = shim_config(state, &conf_dir, serde_json::json!({}));
    let pod = Netns::new("loop-pod");

    let add = run_shim(&bin, &conf, "ADD", &pod, "default", "looped");
    assert!(!add.status.success(), "ADD must fail: {}", text(&add));
    let error: serde_json::Value = serde_json::from_slice(&add.stdout).expect("a CNI error on stdout");
    let msg = format!("{} {}", error["msg"], error["details"]);
    assert!(
        msg.contains("default/loop") && msg.contains("meta-plugin itself"),
        "the error names the NAD and why: {error}\n{}",
        agent_log()
    );
    assert_eq!(pod.links(), ["lo"], "nothing attached, not even eth0");
    let del = run_shim(&bin, &conf, "DEL", &pod, "default", "looped");
    assert!(del.status.success(), "DEL after the refused ADD: {}", text(&del));
}
