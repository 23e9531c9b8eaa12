use std::os::unix::net::UnixListener;

use super::*;

/// A fake agent on a Unix socket: reads requests line by line and answers each with the next
/// canned reply (raw bytes, so stale data and the 0xFF delimiter can be scripted).
fn fake_agent(
    replies: Vec<Vec<u8>>,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::thread::JoinHandle<Vec<String>>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("qga.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let handle = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut requests = Vec::new();
        let mut buffer = Vec::new();
        let mut replies = replies.into_iter();
        loop {
            let mut chunk = [0u8; 1024];
            let n = match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            buffer.extend_from_slice(&chunk[..n]);
            while let Some(at) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=at).collect();
                requests.push(String::from_utf8_lossy(&line).trim().to_string());
                // Out of replies: keep the connection open and silent, like a guest whose agent
                // does not run (QEMU holds the socket).
                if let Some(reply) = replies.next() {
                    stream.write_all(&reply).unwrap();
                }
            }
        }
        requests
    });
    (dir, path, handle)
}

fn sync_id(request: &str) -> u64 {
    let json: Value = serde_json::from_str(request.trim_start_matches('\u{FFFD}')).unwrap();
    json["arguments"]["id"].as_u64().unwrap()
}

#[test]
fn the_handshake_skips_stale_replies_up_to_the_delimiter() {
    // The agent answers the sync only after the client's id is known: script it through a
    // reply that the test fills in once the request arrived.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("qga.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let agent = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut buffer = Vec::new();
        while !buffer.contains(&b'\n') {
            let mut chunk = [0u8; 1024];
            let n = stream.read(&mut chunk).unwrap();
            buffer.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(
            buffer[0], DELIMITER,
            "the client flushes the agent's parser first"
        );
        let id = sync_id(&String::from_utf8_lossy(&buffer[1..]));
        // A stale reply to a previous client, then the delimiter and the sync reply.
        let mut reply = b"{\"return\": {\"host-name\": \"stale\"}}\n".to_vec();
        reply.push(DELIMITER);
        reply.extend(format!("{{\"return\": {id}}}\n").bytes());
        reply.extend(b"{\"return\": {\"host-name\": \"vm1\"}}\n");
        stream.write_all(&reply).unwrap();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        String::from_utf8(rest).unwrap()
    });
    let mut client = QgaClient::connect(&path, Duration::from_secs(5)).unwrap();
    let value = client.execute("guest-get-host-name").unwrap();
    assert_eq!(parse_host_name(&value).unwrap(), "vm1");
    drop(client);
    assert_eq!(agent.join().unwrap(), "{\"execute\":\"guest-get-host-name\"}\n");
}

#[test]
fn an_agent_that_never_answers_is_a_bounded_timeout() {
    // QEMU accepts the connection whether or not an agent runs in the guest.
    let (_dir, path, _agent) = fake_agent(vec![]);
    let start = Instant::now();
    let error = QgaClient::connect(&path, Duration::from_millis(300))
        .err()
        .unwrap();
    assert!(matches!(error, QgaError::Timeout { .. }), "{error}");
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
}

#[test]
fn a_sync_reply_with_another_id_is_rejected() {
    let mut reply = vec![DELIMITER];
    reply.extend(b"{\"return\": 4294967296}\n");
    let (_dir, path, _agent) = fake_agent(vec![reply]);
    let error = QgaClient::connect(&path, Duration::from_secs(2)).err().unwrap();
    assert!(matches!(error, QgaError::SyncMismatch { .. }), "{error}");
}

#[test]
fn a_missing_socket_is_an_io_error_naming_it() {
    let error = query(Path::new("/nonexistent/qga.sock"), Duration::from_secs(1)).unwrap_err();
    assert!(error.to_string().contains("/nonexistent/qga.sock"), "{error}");
}

#[test]
fn an_agent_error_keeps_class_and_description() {
    let line =
        br#"{"error": {"class": "CommandNotFound", "desc": "The command guest-foo has not been found"}}"#;
    let error = parse_reply("guest-foo", line).unwrap_err();
    assert_eq!(
        error.to_string(),
        "guest agent: guest-foo: CommandNotFound: The command guest-foo has not been found"
    );
    assert!(matches!(parse_reply("x", b"{}"), Err(QgaError::Malformed { .. })));
    assert!(matches!(
        parse_reply("x", b"not json"),
        Err(QgaError::Malformed { .. })
    ));
}

#[test]
fn polling_backs_off_when_the_agent_does_not_answer() {
    let (period, max) = (Duration::from_secs(3), Duration::from_secs(60));
    assert_eq!(next_poll(0, period, max), period);
    assert_eq!(next_poll(1, period, max), Duration::from_secs(6));
    assert_eq!(next_poll(3, period, max), Duration::from_secs(24));
    assert_eq!(next_poll(5, period, max), max);
    assert_eq!(next_poll(u32::MAX, period, max), max);
}

#[test]
fn random_ids_fit_in_31_bits() {
    for _ in 0..100 {
        assert!(random_id() <= 0x7fff_ffff);
    }
}

/// Replies of Debian 12's qemu-guest-agent 7.2.22 in weft's guest image, recorded by the root
/// test `crates/guest/tests/agent.rs` (`WEFT_QGA_RECORD=DIR`).
fn vector(command: &str) -> Value {
    let text = match command {
        "guest-info" => include_str!("../testdata/qga/guest-info.json"),
        "guest-get-osinfo" => include_str!("../testdata/qga/guest-get-osinfo.json"),
        "guest-network-get-interfaces" => include_str!("../testdata/qga/guest-network-get-interfaces.json"),
        "guest-get-host-name" => include_str!("../testdata/qga/guest-get-host-name.json"),
        _ => unreachable!(),
    };
    parse_reply(command, text.trim().as_bytes()).unwrap()
}

#[test]
fn recorded_guest_info() {
    let info = GuestInfo::parse(&vector("guest-info")).unwrap();
    assert_eq!(info.version, "7.2.22");
    for command in [
        "guest-network-get-interfaces",
        "guest-get-osinfo",
        "guest-get-host-name",
        "guest-sync-delimited",
    ] {
        assert!(info.commands.iter().any(|c| c == command), "{command}");
    }
    // Disabled commands are not listed.
    assert!(!info.commands.iter().any(|c| c == "guest-get-devices"));
}

#[test]
fn recorded_osinfo_has_kubevirts_field_names() {
    let os = GuestOsInfo::parse(&vector("guest-get-osinfo")).unwrap();
    assert_eq!(os.id, "weft");
    assert_eq!(os.kernel_release, "6.1.0-48-amd64");
    assert_eq!(os.machine, "x86_64");
    let json = serde_json::to_value(&os).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "id": "weft",
            "name": "weft guest",
            "prettyName": "weft guest 0.1.0 (busybox initramfs, Debian kernel)",
            "version": "0.1.0 (busybox initramfs)",
            "versionId": "0.1.0",
            "kernelRelease": "6.1.0-48-amd64",
            "kernelVersion": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.172-1 (2026-05-15)",
            "machine": "x86_64"
        })
    );
    // An agent that knows nothing (all fields optional in QGA's schema) gives empty fields.
    assert_eq!(
        GuestOsInfo::parse(&serde_json::json!({})).unwrap(),
        GuestOsInfo::default()
    );
}

#[test]
fn recorded_interfaces_without_the_loopback() {
    let interfaces = parse_interfaces(&vector("guest-network-get-interfaces")).unwrap();
    assert_eq!(
        interfaces,
        [GuestInterface {
            name: "eth0".into(),
            mac: "52:54:00:78:00:01".into(),
            addresses: vec![GuestAddress {
                address: "10.0.4.2".parse().unwrap(),
                prefix: 24
            }],
        }]
    );
    assert_eq!(parse_host_name(&vector("guest-get-host-name")).unwrap(), "qga-vm");
}

#[test]
fn interfaces_with_zoned_ipv6_and_no_mac() {
    let value = serde_json::json!([
        {"name": "eth1", "hardware-address": "52:54:00:AA:00:02", "ip-addresses": [
            {"ip-address-type": "ipv6", "ip-address": "fe80::5054:ff:feaa:2%eth1", "prefix": 64}]},
        {"name": "sit0"}
    ]);
    let interfaces = parse_interfaces(&value).unwrap();
    assert_eq!(interfaces[0].mac, "52:54:00:aa:00:02");
    assert_eq!(
        interfaces[0].addresses[0].address,
        "fe80::5054:ff:feaa:2".parse::<std::net::IpAddr>().unwrap()
    );
    assert_eq!(
        interfaces[1],
        GuestInterface {
            name: "sit0".into(),
            ..Default::default()
        }
    );
    let bad = serde_json::json!([{"name": "eth0", "ip-addresses": [{"ip-address": "nope", "prefix": 1}]}]);
    assert!(parse_interfaces(&bad).unwrap_err().to_string().contains("nope"));
}
