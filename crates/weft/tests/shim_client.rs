//! The installed `weft-cni` (the static shim of crates/plugin-client, put in a bin dir by
//! `weft install-cni`) as a runtime execs it, against a scripted agent on a Unix socket: what it
//! sends, what it prints of each answer, and what it hands to the weft binary (`passthru` run
//! as `weft-cni`) — VERSION and "unreachable" without an agent, `/cni` for an older agent, and
//! answers it does not print written as CNI errors in the config's version without the call
//! being sent again. No root needed: nothing is attached.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

/// A request the scripted agent received: its path and body.
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An agent that answers each connection with the next of `answers` (raw HTTP responses;
/// `None` closes the connection without an answer) and records what it was sent.
fn scripted_agent(socket: &Path, answers: Vec<Option<String>>) -> Received {
    let listener = UnixListener::bind(socket).unwrap();
    let received: Received = Arc::default();
    let log = received.clone();
    std::thread::spawn(move || {
        for answer in answers {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut request = Vec::new();
            let mut buf = [0; 65536];
            // Read the head, then Content-Length bytes of body.
            let (head_end, length) = loop {
                let n = stream.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break (request.len(), 0);
                }
                request.extend_from_slice(&buf[..n]);
                if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&request[..end]).to_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                    break (end + 4, length);
                }
            };
            while request.len() < head_end + length {
                let n = stream.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
            }
            let head = String::from_utf8_lossy(&request[..head_end]).into_owned();
            let path = head.split(' ').nth(1).unwrap_or_default().to_string();
            log.lock().unwrap().push((path, request[head_end..].to_vec()));
            if let Some(answer) = answer {
                let _ = stream.write_all(answer.as_bytes());
            }
        }
    });
    received
}

fn http(status: &str, body: &str) -> Option<String> {
    Some(format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
}

struct Bin {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    socket_dir: PathBuf,
}

fn installed() -> Bin {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    install_plugins(&bin);
    let socket_dir = dir.path().join("run");
    std::fs::create_dir(&socket_dir).unwrap();
    Bin {
        _dir: dir,
        bin,
        socket_dir,
    }
}

/// The config a runtime hands the shim, naming `socket_dir`.
fn config(version: &str, socket_dir: &Path) -> Vec<u8> {
    format!(
        r#"{{"cniVersion":"{version}","name":"weft","type":"weft-cni","daemonSocketDir":"{}"}}"#,
        socket_dir.display()
    )
    .into_bytes()
}

fn shim(bin: &Path, command: &str, stdin: &[u8]) -> Output {
    let mut child = Command::new(bin.join("weft-cni"))
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", "c0ffee")
        .env("CNI_NETNS", "/var/run/netns/x")
        .env("CNI_IFNAME", "eth0")
        .env(
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p",
        )
        .env("CNI_PATH", bin)
        .env("LANG", "C")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(out)))
}

#[test]
fn the_installed_shim_is_the_static_client_and_the_weft_binary_is_passthru() {
    let b = installed();
    let shim = std::fs::read(b.bin.join("weft-cni")).unwrap();
    let full = std::fs::read(weft_bin()).unwrap();
    assert!(shim.starts_with(b"\x7fELF") && shim.len() < full.len() / 4);
    assert_eq!(std::fs::read(b.bin.join("passthru")).unwrap(), full);
}

#[test]
fn the_call_goes_to_the_agent_as_it_came_and_its_answer_is_printed_as_it_is() {
    let b = installed();
    let result = r#"{"cniVersion":"0.4.0","interfaces":[{"name":"eth0"}],"ips":[]}"#;
    let error = r#"{"cniVersion":"0.4.0","code":7,"msg":"no such network","details":"d"}"#;
    let received = scripted_agent(
        &b.socket_dir.join("weft.sock"),
        vec![
            http("200 OK", result),
            http("400 Bad Request", error),
            http("200 OK", ""),
        ],
    );
    let stdin = config("0.4.0", &b.socket_dir);
    let add = shim(&b.bin, "ADD", &stdin);
    assert!(add.status.success(), "{}", text(&add));
    assert_eq!(add.stdout, result.as_bytes(), "printed byte for byte");
    let failed = shim(&b.bin, "ADD", &stdin);
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed));
    assert_eq!(failed.stdout, error.as_bytes());
    let del = shim(&b.bin, "DEL", &stdin);
    assert!(del.status.success() && del.stdout.is_empty(), "{}", text(&del));

    let received = received.lock().unwrap();
    assert_eq!(received.len(), 3, "one request per call");
    let (path, body) = &received[0];
    assert_eq!(path, "/cni-call");
    let call = weft_plugin_client::wire::decode_call(body).unwrap();
    assert_eq!(
        call.stdin,
        &stdin[..],
        "the config exactly as the runtime wrote it"
    );
    assert_eq!(call.var("CNI_COMMAND"), Some("ADD"));
    assert_eq!(call.var("CNI_IFNAME"), Some("eth0"));
    assert!(
        call.env.iter().all(|(k, _)| k.starts_with("CNI_")),
        "only CNI_* variables: {:?}",
        call.env
    );
}

#[test]
fn without_an_agent_the_weft_binary_answers_version_and_reports_the_agent_unreachable() {
    let b = installed();
    let stdin = config("0.3.1", &b.socket_dir);
    let version = shim(&b.bin, "VERSION", &stdin);
    assert!(version.status.success(), "{}", text(&version));
    let reply = json(&version);
    assert_eq!(reply["cniVersion"], "0.3.1", "{reply}");
    assert!(
        reply["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&"1.1.0".into()),
        "{reply}"
    );
    let add = shim(&b.bin, "ADD", &stdin);
    assert_eq!(add.status.code(), Some(1), "{}", text(&add));
    let error = json(&add);
    assert_eq!(error["code"], 101, "{error}");
    assert_eq!(error["cniVersion"], "0.3.1", "in the config's version: {error}");
    let socket = b.socket_dir.join("weft.sock");
    assert!(
        error["msg"]
            .as_str()
            .unwrap()
            .contains(&socket.display().to_string()),
        "{error}"
    );
}

#[test]
fn an_older_agent_gets_the_call_on_cni_from_the_weft_binary() {
    let b = installed();
    let answer = r#"{"Result":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],"ips":[{"address":"10.1.0.5/24","interface":0}]}}"#;
    let received = scripted_agent(
        &b.socket_dir.join("weft.sock"),
        vec![http("404 Not Found", ""), http("200 OK", answer)],
    );
    let add = shim(&b.bin, "ADD", &config("0.4.0", &b.socket_dir));
    assert!(add.status.success(), "{}", text(&add));
    let result = json(&add);
    assert_eq!(
        result["cniVersion"], "0.4.0",
        "converted to the config's version: {result}"
    );
    assert_eq!(result["ips"][0]["address"], "10.1.0.5/24");
    let received = received.lock().unwrap();
    let paths: Vec<&str> = received.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, ["/cni-call", "/cni"]);
}

#[test]
fn an_answer_the_shim_does_not_print_is_written_as_a_cni_error_and_not_sent_again() {
    let b = installed();
    let busy = r#"{"cniVersion":"","code":11,"msg":"weft agent busy: 512 connections at once"}"#;
    let received = scripted_agent(
        &b.socket_dir.join("weft.sock"),
        vec![http("503 Service Unavailable", busy), None],
    );
    let stdin = config("1.0.0", &b.socket_dir);
    let add = shim(&b.bin, "ADD", &stdin);
    assert_eq!(add.status.code(), Some(1), "{}", text(&add));
    let error = json(&add);
    assert_eq!(error["code"], 11, "{error}");
    assert_eq!(error["cniVersion"], "1.0.0", "{error}");
    assert!(error["msg"].as_str().unwrap().contains("busy"), "{error}");
    // The agent reads the call and closes without answering: not sent again, an error.
    let lost = shim(&b.bin, "ADD", &stdin);
    assert_eq!(lost.status.code(), Some(1), "{}", text(&lost));
    let error = json(&lost);
    assert_eq!(error["code"], 101, "{error}");
    assert_eq!(error["cniVersion"], "1.0.0", "{error}");
    assert!(
        error["msg"].as_str().unwrap().contains("did not answer"),
        "{error}"
    );
    assert_eq!(received.lock().unwrap().len(), 2, "each call was sent once");
}

#[test]
fn a_config_the_shim_cannot_read_is_reported_by_the_weft_binary_without_asking_the_agent() {
    let b = installed();
    let received = scripted_agent(&b.socket_dir.join("weft.sock"), vec![http("200 OK", "")]);
    let mut stdin = config("1.0.0", &b.socket_dir);
    stdin.truncate(stdin.len() - 1);
    let add = shim(&b.bin, "ADD", &stdin);
    assert_eq!(add.status.code(), Some(1), "{}", text(&add));
    assert_eq!(json(&add)["code"], 6, "decoding failure: {}", text(&add));
    // Over the size limit: the limit is named.
    let huge = format!(
        r#"{{"cniVersion":"1.0.0","name":"weft","type":"weft-cni","daemonSocketDir":"{}","pad":"{}"}}"#,
        b.socket_dir.display(),
        "x".repeat(weft_plugin_client::shim::MAX_CONFIG_BYTES)
    );
    let add = shim(&b.bin, "ADD", huge.as_bytes());
    let error = json(&add);
    assert_eq!(error["code"], 7, "{error}");
    assert!(error["msg"].as_str().unwrap().contains("too large"), "{error}");
    assert!(received.lock().unwrap().is_empty(), "the agent was not asked");
}

#[test]
fn version_needs_no_agent_and_no_weft_binary_and_other_names_run_the_weft_binary() {
    let b = installed();
    std::fs::remove_file(b.bin.join("passthru")).unwrap();
    let stdin = config("0.4.0", &b.socket_dir);
    // VERSION as libcni sends it (`CNI_ARGS` empty): answered by the static shim itself.
    let mut child = Command::new(b.bin.join("weft-cni"))
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .env("CNI_ARGS", "")
        .env("CNI_PATH", &b.bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&stdin).unwrap();
    let version = child.wait_with_output().unwrap();
    assert!(version.status.success(), "{}", text(&version));
    assert_eq!(json(&version)["cniVersion"], "0.4.0");
    // Without an agent and without the weft binary: a CNI error saying what is missing.
    let add = shim(&b.bin, "ADD", &stdin);
    assert_eq!(add.status.code(), Some(1), "{}", text(&add));
    assert!(
        json(&add)["details"].as_str().unwrap().contains("passthru"),
        "{}",
        text(&add)
    );
    // Under a name that is neither weft-cni nor weft-ipam: the weft binary, same arguments.
    std::os::unix::fs::symlink(weft_bin(), b.bin.join("passthru")).unwrap();
    std::os::unix::fs::symlink(b.bin.join("weft-cni"), b.bin.join("weft")).unwrap();
    let out = Command::new(b.bin.join("weft"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")),
        "{}",
        text(&out)
    );
}

#[test]
fn refusals_before_the_call_was_read_are_written_in_the_configs_version() {
    let b = installed();
    // As the agent answers them (server.rs `refused_raw`): no version, the weft binary's to add.
    let too_large = r#"{"cniVersion":"","code":7,"msg":"request body too large (limit 1 bytes)"}"#;
    let too_slow = r#"{"cniVersion":"","code":5,"msg":"request body not received within 2s"}"#;
    let received = scripted_agent(
        &b.socket_dir.join("weft.sock"),
        vec![
            http("413 Payload Too Large", too_large),
            http("408 Request Timeout", too_slow),
        ],
    );
    let stdin = config("0.3.1", &b.socket_dir);
    for code in [7, 5] {
        let add = shim(&b.bin, "ADD", &stdin);
        let error = json(&add);
        assert_eq!(error["code"], code, "{error}");
        assert_eq!(error["cniVersion"], "0.3.1", "{error}");
    }
    assert_eq!(received.lock().unwrap().len(), 2);
}

#[test]
fn a_client_run_by_a_link_finds_the_weft_binary_beside_the_link() {
    let b = installed();
    // A bin dir of links into a package dir that has no `passthru`: the runtime's path counts.
    let package = b._dir.path().join("package");
    std::fs::create_dir(&package).unwrap();
    std::fs::rename(b.bin.join("weft-cni"), package.join("weft-cni")).unwrap();
    std::os::unix::fs::symlink(package.join("weft-cni"), b.bin.join("weft-cni")).unwrap();
    let add = shim(&b.bin, "ADD", &config("1.0.0", &b.socket_dir));
    let error = json(&add);
    assert_eq!(error["code"], 101, "the weft binary reported no agent: {error}");
}

#[test]
fn a_passthru_that_is_not_the_weft_binary_is_reported_not_looped() {
    let b = installed();
    std::fs::remove_file(b.bin.join("passthru")).unwrap();
    std::fs::copy(b.bin.join("weft-cni"), b.bin.join("passthru")).unwrap();
    let started = std::time::Instant::now();
    let add = shim(&b.bin, "ADD", &config("1.0.0", &b.socket_dir));
    assert_eq!(add.status.code(), Some(1), "{}", text(&add));
    let details = json(&add)["details"].as_str().unwrap_or_default().to_string();
    assert!(details.contains("not the weft binary"), "{}", text(&add));
    assert!(started.elapsed() < Duration::from_secs(10));
}
