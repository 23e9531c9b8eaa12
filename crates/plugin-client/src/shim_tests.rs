use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::*;

fn answer(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn the_socket_comes_from_the_environment_the_config_or_the_default() {
    let config = br#"{"cniVersion":"1.0.0","name":"weft","type":"weft-cni","daemonSocketDir":"/run/w"}"#;
    assert_eq!(
        socket_path(Some(OsString::from("/tmp/x.sock")), config).unwrap(),
        PathBuf::from("/tmp/x.sock")
    );
    assert_eq!(
        socket_path(None, config).unwrap(),
        PathBuf::from("/run/w/weft.sock")
    );
    for other in [
        &br#"{"cniVersion":"1.0.0"}"#[..],
        br#"{"daemonSocketDir":""}"#,
        br#"{"daemonSocketDir":7}"#,
        br#"{"x":{"daemonSocketDir":"/run/w"}}"#,
    ] {
        assert_eq!(socket_path(None, other).unwrap(), PathBuf::from(DEFAULT_SOCKET));
    }
    assert!(socket_path(None, b"{\"daemonSocketDir\":").is_err());
    // The environment wins even over a config that cannot be read (the agent reports it).
    assert!(socket_path(Some(OsString::from("/s")), b"not json").is_ok());
}

#[test]
fn the_agents_success_and_cni_errors_are_printed_as_they_came() {
    let socket = Path::new("/run/weft/weft.sock");
    let ok = next(socket, Ok(answer("200 OK", r#"{"cniVersion":"0.4.0","ips":[]}"#)));
    assert_eq!(
        ok,
        Next::Print {
            stdout: br#"{"cniVersion":"0.4.0","ips":[]}"#.to_vec(),
            exit_code: 0
        }
    );
    let empty = next(socket, Ok(answer("200 OK", "")));
    assert_eq!(
        empty,
        Next::Print {
            stdout: vec![],
            exit_code: 0
        }
    );
    let error = r#"{"cniVersion":"0.3.1","code":7,"msg":"bad"}"#;
    assert_eq!(
        next(socket, Ok(answer("400 Bad Request", error))),
        Next::Print {
            stdout: error.as_bytes().to_vec(),
            exit_code: 1
        }
    );
}

#[test]
fn no_agent_or_an_older_one_hands_the_whole_call_to_the_full_shim() {
    let socket = Path::new("/run/weft/weft.sock");
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    assert_eq!(
        next(socket, Err(ExchangeError::Connect(refused))),
        Next::Full(Handoff::Call)
    );
    assert_eq!(
        next(socket, Ok(answer("404 Not Found", ""))),
        Next::Full(Handoff::Call)
    );
    assert_eq!(Handoff::Call.encode(), None);
}

#[test]
fn other_answers_are_handed_over_to_be_written_not_sent_again() {
    let socket = Path::new("/run/weft/weft.sock");
    let busy = r#"{"code":11,"msg":"weft agent busy"}"#;
    let handed = next(socket, Ok(answer("503 Service Unavailable", busy)));
    let expected = Handoff::Answered {
        status: 503,
        body: busy.into(),
    };
    assert_eq!(handed, Next::Full(expected.clone()));
    assert_eq!(Handoff::decode(&expected.encode().unwrap()), expected);
    // A 400 that is not a JSON object is not printed either.
    assert!(matches!(
        next(socket, Ok(answer("400 Bad Request", "nope"))),
        Next::Full(Handoff::Answered { status: 400, .. })
    ));
    let lost = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    let Next::Full(unanswered @ Handoff::Unanswered(_)) = next(socket, Err(ExchangeError::Io(lost))) else {
        panic!("a lost answer is not a new call");
    };
    assert_eq!(Handoff::decode(&unanswered.encode().unwrap()), unanswered);
    for garbage in [&b"HTTP/1.1 200"[..], b"garbage", b""] {
        assert!(
            matches!(
                next(socket, Ok(garbage.to_vec())),
                Next::Full(Handoff::Unanswered(_))
            ),
            "{garbage:?}"
        );
    }
    // A long body is cut; the encoding keeps its lines.
    let long = "x\n".repeat(HANDOFF_BODY_BYTES);
    let Next::Full(Handoff::Answered { body, .. }) =
        next(socket, Ok(answer("500 Internal Server Error", &long)))
    else {
        panic!("not handed over");
    };
    assert_eq!(body.len(), HANDOFF_BODY_BYTES);
    let handoff = Handoff::Answered { status: 500, body };
    assert_eq!(Handoff::decode(&handoff.encode().unwrap()), handoff);
}

#[test]
fn only_a_plain_version_call_is_answered_by_the_shim() {
    let env = |pairs: &[(&str, &[u8])]| -> Vec<(OsString, OsString)> {
        use std::os::unix::ffi::OsStringExt;
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from_vec(v.to_vec())))
            .collect()
    };
    assert!(is_plain_version(&env(&[
        ("CNI_COMMAND", b"VERSION"),
        ("CNI_PATH", b"/opt/cni/bin")
    ])));
    assert!(is_plain_version(&env(&[
        ("CNI_COMMAND", b"VERSION"),
        ("CNI_ARGS", b""),
        ("LANG", b"\xff")
    ])));
    assert!(!is_plain_version(&env(&[("CNI_COMMAND", b"ADD")])));
    assert!(!is_plain_version(&env(&[
        ("CNI_COMMAND", b"VERSION"),
        ("CNI_ARGS", b"K8S_POD_NAME=x")
    ])));
    assert!(!is_plain_version(&env(&[
        ("CNI_COMMAND", b"VERSION"),
        ("CNI_IFNAME", b"\xff")
    ])));
    assert!(!is_plain_version(&env(&[])));
}

#[test]
fn a_handed_over_answer_never_claims_success_or_holds_nul() {
    assert!(matches!(
        Handoff::decode("200\n{\"Result\":{}}"),
        Handoff::Unanswered(_)
    ));
    assert!(matches!(Handoff::decode("204\n"), Handoff::Unanswered(_)));
    let with_nul = Handoff::Answered {
        status: 503,
        body: "a\0b".into(),
    };
    assert_eq!(with_nul.encode().unwrap(), "503\nab");
}
