//! Attacks on the local cluster's process lifecycle (issue 13, items 4 and 11): `weft down`
//! aimed at a directory that holds no cluster, two clusters side by side, and kill -9 of the
//! node agent and of the controller. Each test brings up its own `weft up --no-guests` cluster
//! in a temp state dir and tears it down; clusters are named by id, so they coexist with other
//! engineers' and each other's.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// A cluster brought up in a temp state dir, torn down on drop (if still recorded).
struct Cluster {
    dir: tempfile::TempDir,
}

impl Cluster {
    fn up(nodes: &str) -> Self {
        Self::up_with(&["up", "--nodes", nodes, "--no-guests", "--timeout", "90"])
    }

    /// One node running vm1's guest.
    fn up_with_guest() -> Self {
        Self::up_with(&["up", "--nodes", "1", "--timeout", "240"])
    }

    fn up_with(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Self { dir };
        let up = weft(cluster.state(), args);
        assert!(up.status.success(), "weft up:\n{}\n{}", text(&up), cluster.logs());
        cluster
    }

    fn state(&self) -> &Path {
        self.dir.path()
    }

    fn topology(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.state().join("cluster.json")).unwrap()).unwrap()
    }

    /// The namespaces this cluster recorded (underlay, remote, nodes).
    fn fixed_netns(&self) -> Vec<String> {
        let t = self.topology();
        let mut names = vec![
            t["underlay_netns"].as_str().unwrap().to_string(),
            t["remote_netns"].as_str().unwrap().to_string(),
        ];
        for node in t["nodes"].as_array().unwrap() {
            names.push(node["netns"].as_str().unwrap().to_string());
        }
        names
    }

    fn node_netns(&self) -> String {
        self.topology()["nodes"][0]["netns"].as_str().unwrap().to_string()
    }

    /// Every recorded process: (name, pid, start time).
    fn processes(&self) -> Vec<(String, u32, u64)> {
        let mut all = Vec::new();
        for entry in std::fs::read_dir(self.state().join("run")).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "pid") {
                let name = path.file_stem().unwrap().to_str().unwrap().to_string();
                let (pid, start) = read_record(&path).unwrap();
                all.push((name, pid, start));
            }
        }
        all.sort();
        all
    }

    fn record(&self, name: &str) -> Option<(u32, u64)> {
        read_record(&self.state().join("run").join(format!("{name}.pid")))
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        serde_json::from_slice(&weft(self.state(), args).stdout).unwrap_or_default()
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for file in ["supervisor.log", "controller.log", "nodes/node1/agent.log"] {
            let text = std::fs::read_to_string(self.state().join(file)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            out += &format!(
                "--- {file}\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        out
    }

    fn down(&self) -> std::process::Output {
        weft(self.state(), &["down"])
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.state().join("cluster.json").exists() {
            let _ = self.down();
        }
    }
}

fn read_record(path: &Path) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut words = text.split_whitespace();
    Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
}

/// Whether the process (pid, start time) runs: same start time in /proc/<pid>/stat, not a zombie.
fn running(pid: u32, start: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields.first().is_some_and(|s| *s != "Z") && fields.get(19).and_then(|s| s.parse().ok()) == Some(start)
}

fn netns_list() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

fn wait<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        // Namespaces on the host at that moment: a `weft down` from before this fix (another
        // checkout's binary) deletes every `weft-*` namespace, which is worth seeing here.
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}; weft namespaces now: {:?}",
            netns_list()
                .into_iter()
                .filter(|n| n.starts_with("weft-"))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn vm1_running(cluster: &Cluster) -> bool {
    cluster.json(&["get", "vmi", "vm1", "-o", "json"])["status"]["phase"] == "Running"
}

/// The cluster is intact: its namespaces exist, its processes run, vm1 is Running.
fn assert_intact(cluster: &Cluster, processes: &[(String, u32, u64)], what: &str) {
    let host = netns_list();
    for ns in cluster.fixed_netns() {
        assert!(host.contains(&ns), "{what}: namespace {ns} was deleted");
    }
    for (name, pid, start) in processes {
        assert!(running(*pid, *start), "{what}: {name} (pid {pid}) was stopped");
    }
    assert!(vm1_running(cluster), "{what}: vm1 no longer Running");
}

fn restarts(cluster: &Cluster) -> Vec<serde_json::Value> {
    std::fs::read_to_string(cluster.state().join("run/restarts.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn events(cluster: &Cluster, reason: &str) -> Vec<serde_json::Value> {
    cluster.json(&["get", "events", "-A", "-o", "json"])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

/// Kill -9 a recorded process; return its record.
fn kill9(cluster: &Cluster, name: &str) -> (u32, u64) {
    let (pid, start) = cluster
        .record(name)
        .unwrap_or_else(|| panic!("no record of {name}"));
    assert!(running(pid, start), "{name} runs before the attack");
    sigkill(pid);
    (pid, start)
}

fn sigkill(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// Wait until vm1's VMI is `Failed`; return it.
fn wait_vm1_failed(cluster: &Cluster) -> serde_json::Value {
    wait("vm1 marked Failed", Duration::from_secs(30), || {
        let vmi = cluster.json(&["get", "vmi", "vm1", "-o", "json"]);
        (vmi["status"]["phase"] == "Failed").then_some(vmi)
    })
}

/// Wait until `name` runs again under a new pid; return it.
fn wait_restarted(cluster: &Cluster, name: &str, old: (u32, u64)) -> (u32, u64) {
    wait(&format!("{name} restarted"), Duration::from_secs(60), || {
        cluster.record(name).filter(|r| *r != old && running(r.0, r.1))
    })
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn down_of_a_dir_with_no_cluster_is_refused_and_touches_nothing() {
    if !root_or_skip("down_of_a_dir_with_no_cluster_is_refused_and_touches_nothing") {
        return;
    }
    let cluster = Cluster::up("1");
    wait("vm1 Running", Duration::from_secs(90), || {
        vm1_running(&cluster).then_some(())
    });
    let processes = cluster.processes();
    assert!(
        processes.iter().any(|(n, ..)| n == "agent-node1"),
        "{processes:?}"
    );
    assert!(processes.iter().any(|(n, ..)| n == "controller"), "{processes:?}");
    assert!(processes.iter().any(|(n, ..)| n == "supervisor"), "{processes:?}");

    // The attack: `weft down` on an empty directory (and on one holding unrelated files).
    let empty = tempfile::tempdir().unwrap();
    let out = weft(empty.path(), &["down"]);
    assert!(
        !out.status.success(),
        "down of an empty dir must fail:\n{}",
        text(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no local cluster recorded in"), "{}", text(&out));
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("notes.txt"), "mine").unwrap();
    let out = weft(other.path(), &["down"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        other.path().join("notes.txt").exists(),
        "down must not remove a foreign dir's files"
    );
    assert_intact(&cluster, &processes, "after down of a foreign dir");

    // A forged record in the cluster's own run dir: an unrelated process with its true start
    // identity. down stops only processes that belong to this state dir.
    let mut bystander = KillOnDrop(Command::new("sleep").arg("300").spawn().unwrap());
    let bystander_pid = bystander.0.id();
    let stat = std::fs::read_to_string(format!("/proc/{bystander_pid}/stat")).unwrap();
    let start: u64 = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    std::fs::write(
        cluster.state().join("run/intruder.pid"),
        format!("{bystander_pid} {start}\n"),
    )
    .unwrap();

    let names = cluster.fixed_netns();
    let out = cluster.down();
    assert!(out.status.success(), "{}", text(&out));
    let host = netns_list();
    for ns in names {
        assert!(!host.contains(&ns), "{ns} left behind");
    }
    for (name, pid, start) in &processes {
        assert!(!running(*pid, *start), "{name} still runs after down");
    }
    assert!(
        bystander.0.try_wait().unwrap().is_none(),
        "down signalled a process its state dir did not start"
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn two_clusters_coexist_and_down_of_one_leaves_the_other() {
    if !root_or_skip("two_clusters_coexist_and_down_of_one_leaves_the_other") {
        return;
    }
    let a = Cluster::up("1");
    let b = Cluster::up("1");
    for c in [&a, &b] {
        wait("vm1 Running", Duration::from_secs(90), || {
            vm1_running(c).then_some(())
        });
    }
    let (a_names, b_names) = (a.fixed_netns(), b.fixed_netns());
    assert!(
        a_names.iter().all(|n| !b_names.contains(n)),
        "two clusters must not share namespaces: {a_names:?} {b_names:?}"
    );
    // Each cluster's pods live in namespaces named after it.
    let a_prefix = format!("weft-{}-pod-", a.topology()["cluster_id"].as_str().unwrap());
    assert!(
        netns_list().iter().any(|n| n.starts_with(&a_prefix)),
        "{a_prefix}"
    );
    let (a_procs, b_procs) = (a.processes(), b.processes());

    let out = a.down();
    assert!(out.status.success(), "{}", text(&out));
    let host = netns_list();
    for ns in &a_names {
        assert!(!host.contains(ns), "a's {ns} left behind");
    }
    assert!(
        !host.iter().any(|n| n.starts_with(&a_prefix)),
        "a's pod namespaces left behind"
    );
    for (name, pid, start) in &a_procs {
        assert!(!running(*pid, *start), "a's {name} still runs");
    }
    assert_intact(&b, &b_procs, "b after down of a");
    // b still serves: its pod network answers from its node.
    let (ip, _) = web_pod(&b);
    wait("b's pod answers ping", Duration::from_secs(20), || {
        ping(&b.node_netns(), &ip).then_some(())
    });
    let out = b.down();
    assert!(out.status.success(), "{}", text(&out));
}

/// Pids of the processes holding a DHCP server socket (UDP port 67) in `netns`.
fn dhcp_servers(netns: &str) -> Vec<u32> {
    let out = Command::new("ip")
        .args(["netns", "exec", netns, "ss", "-Hulpn", "sport", "=", ":67"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split("pid=")
        .skip(1)
        .filter_map(|rest| rest.split(',').next()?.parse().ok())
        .collect()
}

fn ping(netns: &str, ip: &str) -> bool {
    Command::new("ip")
        .args([
            "netns", "exec", netns, "busybox", "ping", "-c", "1", "-W", "1", ip,
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn apply(cluster: &Cluster, name: &str, yaml: &str) {
    let file = cluster.state().join(name);
    std::fs::write(&file, yaml).unwrap();
    let out = weft(cluster.state(), &["apply", "-f", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
}

/// Start a plain pod `web` on node1; wait until it runs; return its IP and sandbox id.
fn web_pod(cluster: &Cluster) -> (String, String) {
    apply(
        cluster,
        "web.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: default\nspec:\n  nodeName: node1\n",
    );
    wait("pod web Running with an IP", Duration::from_secs(60), || {
        let p = cluster.json(&["get", "pod", "web", "-o", "json"]);
        let ip = p["status"]["podIP"]
            .as_str()
            .filter(|ip| !ip.is_empty())?
            .to_string();
        let sandbox = p["metadata"]["annotations"]["weft.dev/sandbox-id"]
            .as_str()?
            .to_string();
        (p["status"]["phase"] == "Running").then_some((ip, sandbox))
    })
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn killed_agent_is_restarted_and_adopts_its_pods() {
    if !root_or_skip("killed_agent_is_restarted_and_adopts_its_pods") {
        return;
    }
    let cluster = Cluster::up("1");
    wait("vm1 Running", Duration::from_secs(90), || {
        vm1_running(&cluster).then_some(())
    });
    let (ip, sandbox) = web_pod(&cluster);
    let pod = || cluster.json(&["get", "pod", "web", "-o", "json"]);
    // The sandbox annotation is written after the phase that makes the VMI Running.
    let launcher_sandbox = wait("the launcher pod's sandbox", Duration::from_secs(30), || {
        cluster.json(&["get", "pods", "-o", "json"])["items"]
            .as_array()?
            .iter()
            .find(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("virt-launcher-vm1"))
            })
            .map(|p| p["metadata"]["annotations"]["weft.dev/sandbox-id"].clone())
            .filter(serde_json::Value::is_string)
    });
    let node = cluster.node_netns();
    wait("web answers ping", Duration::from_secs(20), || {
        ping(&node, &ip).then_some(())
    });

    // The attack: kill -9 the agent.
    let old = kill9(&cluster, "agent-node1");
    let new = wait_restarted(&cluster, "agent-node1", old);
    assert_ne!(new.0, old.0, "a new agent process");
    // Restarted and serving again: the node is Ready because of the restart.
    let ready = wait("node1 Ready after the restart", Duration::from_secs(30), || {
        let node = cluster.json(&["get", "node", "node1", "-o", "json"]);
        node["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready" && c["status"] == "True" && c["reason"] == "AgentRestarted")
            .cloned()
    });
    assert!(
        ready["message"].as_str().unwrap().contains(&new.0.to_string()),
        "{ready}"
    );
    // The restart is recorded, and the time it was down is visible as a Warning event.
    let log = restarts(&cluster);
    assert!(
        log.iter().any(|r| r["component"] == "agent-node1"
            && r["event"] == "exited"
            && r["pid"] == old.0
            && r["exit"] == "killed by SIGKILL"),
        "{log:?}"
    );
    assert!(
        log.iter()
            .any(|r| r["component"] == "agent-node1" && r["event"] == "restarted" && r["pid"] == new.0),
        "{log:?}"
    );
    let down = events(&cluster, "AgentDown");
    assert_eq!(down.len(), 1, "{down:?}");
    assert_eq!(down[0]["type"], "Warning");
    assert_eq!(down[0]["involvedObject"]["kind"], "Node");
    assert_eq!(down[0]["involvedObject"]["name"], "node1");
    assert!(down[0]["count"].as_u64().unwrap() >= 1);
    assert!(
        down[0]["message"].as_str().unwrap().contains("SIGKILL"),
        "{}",
        down[0]
    );
    // The supervisor writes the Ready condition, then the Event: wait for the record.
    let restarted = wait("the AgentRestarted Event", Duration::from_secs(20), || {
        let e = events(&cluster, "AgentRestarted");
        (!e.is_empty()).then_some(e)
    });
    assert_eq!(restarted.len(), 1, "{restarted:?}");
    assert_eq!(restarted[0]["count"], 1, "{restarted:?}");

    // The plain pod was adopted, not recreated: same sandbox, same IP, its network still works.
    let p = pod();
    assert_eq!(p["status"]["phase"], "Running", "{p}");
    assert_eq!(
        p["metadata"]["annotations"]["weft.dev/sandbox-id"],
        sandbox.as_str(),
        "{p}"
    );
    assert_eq!(p["status"]["podIP"], ip.as_str());
    wait(
        "web answers ping after the restart",
        Duration::from_secs(20),
        || ping(&node, &ip).then_some(()),
    );
    // The launcher was taken over too: vm1 still runs in the same sandbox, and its DHCP
    // servers (which lived in the killed agent) serve again, from the new agent.
    assert!(vm1_running(&cluster), "vm1 must stay Running");
    let launcher = cluster.json(&["get", "pods", "-o", "json"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("virt-launcher-vm1")
        })
        .cloned()
        .expect("the launcher pod");
    assert_eq!(launcher["status"]["phase"], "Running", "{launcher}");
    assert_eq!(
        launcher["metadata"]["annotations"]["weft.dev/sandbox-id"], launcher_sandbox,
        "the launcher's sandbox was adopted, not recreated"
    );
    let pod_ns = format!(
        "weft-{}-pod-default-{}",
        cluster.topology()["cluster_id"].as_str().unwrap(),
        launcher["metadata"]["name"].as_str().unwrap()
    );
    let servers = wait("DHCP served by the new agent", Duration::from_secs(20), || {
        let servers = dhcp_servers(&pod_ns);
        (servers.len() == 2 && servers.iter().all(|pid| *pid == new.0)).then_some(servers)
    });
    assert!(!servers.contains(&old.0));
    // A second kill is restarted too, and its Down event is bumped, not duplicated.
    let again = kill9(&cluster, "agent-node1");
    wait_restarted(&cluster, "agent-node1", again);
    let down = wait("AgentDown counted twice", Duration::from_secs(30), || {
        let e = events(&cluster, "AgentDown");
        (e.len() == 1 && e[0]["count"] == 2).then_some(e)
    });
    assert_ne!(down[0]["firstTimestamp"], serde_json::Value::Null);
    let out = cluster.down();
    assert!(out.status.success(), "{}\n{}", text(&out), cluster.logs());
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn killed_controller_is_restarted_and_a_stop_is_not_lost() {
    if !root_or_skip("killed_controller_is_restarted_and_a_stop_is_not_lost") {
        return;
    }
    let cluster = Cluster::up("1");
    wait("vm1 Running", Duration::from_secs(90), || {
        vm1_running(&cluster).then_some(())
    });
    // The attack: kill -9 the controller, then ask for a stop at once.
    let old = kill9(&cluster, "controller");
    let out = weft(cluster.state(), &["stop", "vm1"]);
    assert!(out.status.success(), "{}", text(&out));
    wait(
        "vm1 stopped (VMI and launcher pod gone)",
        Duration::from_secs(60),
        || {
            let vmi = weft(cluster.state(), &["get", "vmi", "vm1", "-o", "json"]);
            let pods = cluster.json(&["get", "pods", "-o", "json"]);
            (!vmi.status.success() && pods["items"].as_array().is_some_and(|p| p.is_empty())).then_some(())
        },
    );
    let new = wait_restarted(&cluster, "controller", old);
    assert_ne!(new.0, old.0);
    let log = restarts(&cluster);
    assert!(
        log.iter()
            .any(|r| r["component"] == "controller" && r["event"] == "exited" && r["pid"] == old.0),
        "{log:?}"
    );
    let down = events(&cluster, "ControllerDown");
    assert_eq!(down.len(), 1, "{down:?}");
    assert_eq!(down[0]["involvedObject"]["name"], "weft-controller");
    // The VM's status follows the VMI's deletion in a later pass of the controller.
    wait("vm1's printableStatus Stopped", Duration::from_secs(30), || {
        let vm = cluster.json(&["get", "vm", "vm1", "-o", "json"]);
        (vm["status"]["printableStatus"] == "Stopped").then_some(())
    });
    let out = cluster.down();
    assert!(out.status.success(), "{}", text(&out));
}

/// The guest case: kill -9 the agent while vm1's guest runs. The restarted agent adopts the
/// same QEMU (same pid, not orphaned, not duplicated) and the VMI stays Running and Ready; then
/// a QEMU that dies while the agent is down is not papered over: the VMI is marked Failed with
/// the reason.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn killed_agent_adopts_the_running_guest() {
    if !root_or_skip("killed_agent_adopts_the_running_guest") {
        return;
    }
    let cluster = Cluster::up_with_guest();
    let qemu = cluster.record("qemu-default-vm1").expect("QEMU recorded");
    assert!(running(qemu.0, qemu.1));

    let old = kill9(&cluster, "agent-node1");
    let new = wait_restarted(&cluster, "agent-node1", old);
    wait("the launcher adopted", Duration::from_secs(30), || {
        std::fs::read_to_string(cluster.state().join("nodes/node1/agent.log"))
            .ok()?
            .lines()
            .any(|l| l.contains("adopted the launcher"))
            .then_some(())
    });
    assert!(
        running(qemu.0, qemu.1),
        "the guest's QEMU must survive the agent restart"
    );
    assert_eq!(cluster.record("qemu-default-vm1"), Some(qemu), "no second QEMU");
    let qemus = Command::new("pgrep")
        .args(["-f", &format!("{}.*vm1", cluster.state().display())])
        .output()
        .unwrap();
    let qemus: Vec<&str> = std::str::from_utf8(&qemus.stdout).unwrap().lines().collect();
    assert_eq!(qemus, [qemu.0.to_string()], "exactly one QEMU for vm1");
    let vmi = cluster.json(&["get", "vmi", "vm1", "-o", "json"]);
    assert_eq!(vmi["status"]["phase"], "Running", "{vmi}");
    let ready = |vmi: &serde_json::Value| {
        vmi["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    };
    assert!(ready(&vmi), "{vmi}");
    assert!(new.0 != old.0);

    // QEMU dies while the agent is down: the restarted agent says so on the VMI. The agent
    // is stopped first, so no pass of the live agent sees the exit before it is killed.
    let agent = cluster.record("agent-node1").expect("the agent's record");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.0 as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    sigkill(qemu.0);
    let again = kill9(&cluster, "agent-node1");
    wait_restarted(&cluster, "agent-node1", again);
    let vmi = wait_vm1_failed(&cluster);
    let reason = vmi["status"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("QEMU") && reason.contains("exited while the node agent was down"),
        "{vmi}"
    );
    assert!(!ready(&vmi), "{vmi}");
    let out = cluster.down();
    assert!(out.status.success(), "{}", text(&out));
}

/// A guest whose QEMU dies while the agent runs is not left looking alive: the VMI is Failed with
/// the reason and `Ready=False`, and the launcher's sandbox is removed.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_guest_whose_qemu_dies_is_reported() {
    if !root_or_skip("a_guest_whose_qemu_dies_is_reported") {
        return;
    }
    let cluster = Cluster::up_with_guest();
    let qemu = cluster.record("qemu-default-vm1").expect("QEMU recorded");
    sigkill(qemu.0);
    let vmi = wait_vm1_failed(&cluster);
    let reason = vmi["status"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("QEMU exited"), "{vmi}");
    let ready = vmi["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
        .unwrap_or_default();
    assert_eq!(ready["reason"], "GuestExited", "{vmi}");
    assert_eq!(ready["status"], "False", "{vmi}");
    let prefix = format!(
        "weft-{}-pod-default-virt-launcher-vm1",
        cluster.topology()["cluster_id"].as_str().unwrap()
    );
    wait(
        "the failed launcher's namespace removed",
        Duration::from_secs(20),
        || (!netns_list().iter().any(|n| n.starts_with(&prefix))).then_some(()),
    );
    let out = cluster.down();
    assert!(out.status.success(), "{}", text(&out));
}
