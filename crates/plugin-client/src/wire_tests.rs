use proptest::prelude::*;

use super::*;

fn pairs<'a>(env: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
    env.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes()))
}

#[test]
fn a_call_keeps_the_cni_variables_and_the_exact_stdin() {
    let env = [
        ("CNI_COMMAND", "ADD"),
        ("PATH", "/usr/bin"),
        ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=a=b"),
        ("WEFT_IPAM_SOCKET", "/run/weft/weft.sock"),
        ("CNI_IFNAME", ""),
    ];
    let stdin = b"{\"cniVersion\":\"1.0.0\"}\0\n\xff";
    let body = encode_call(pairs(&env), stdin);
    let call = decode_call(&body).expect("decodes");
    assert_eq!(
        call.env,
        vec![
            ("CNI_COMMAND".to_string(), "ADD".to_string()),
            ("CNI_ARGS".into(), "IgnoreUnknown=1;K8S_POD_NAME=a=b".into()),
            ("CNI_IFNAME".into(), String::new()),
        ]
    );
    assert_eq!(call.stdin, stdin);
    assert_eq!(call.var("CNI_COMMAND"), Some("ADD"));
    assert_eq!(call.var("PATH"), None);
}

#[test]
fn bodies_that_are_not_calls_are_named() {
    assert_eq!(decode_call(b"CNI_COMMAND=ADD"), Err(WireError::Unterminated));
    assert_eq!(decode_call(b""), Err(WireError::Unterminated));
    assert_eq!(
        decode_call(b"PATH=/bin\0\0{}"),
        Err(WireError::BadEntry("PATH=/bin".into()))
    );
    assert_eq!(
        decode_call(b"CNI_COMMAND\0\0{}"),
        Err(WireError::BadEntry("CNI_COMMAND".into()))
    );
    assert_eq!(
        decode_call(b"CNI_X=\xff\0\0"),
        Err(WireError::NotUtf8("CNI_X".into()))
    );
    let empty = decode_call(b"\0").expect("no variables, empty config");
    assert!(empty.env.is_empty() && empty.stdin.is_empty());
}

#[test]
fn the_request_is_one_http_post_with_its_length() {
    let request = http_request(b"CNI_COMMAND=DEL\0\0{}");
    let text = String::from_utf8(request).unwrap();
    assert!(text.starts_with("POST /ipam HTTP/1.1\r\n"), "{text}");
    assert!(text.contains("Content-Type: application/vnd.weft.cni-call\r\n"));
    assert!(text.contains("Content-Length: 19\r\n"));
    assert!(text.contains("Connection: close\r\n\r\nCNI_COMMAND=DEL\0\0{}"));
}

#[test]
fn answers_are_printed_only_when_they_are_the_agents_answer() {
    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\ncontent-type: application/json\r\n\r\n{\"ips\":[]}\n";
    assert_eq!(
        read_answer(ok),
        Answer::Print {
            stdout: b"{\"ips\":[]}\n".to_vec(),
            exit_code: 0
        }
    );
    let empty = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
    assert_eq!(
        read_answer(empty),
        Answer::Print {
            stdout: Vec::new(),
            exit_code: 0
        }
    );
    let error =
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 31\r\n\r\n{\"code\":7,\"msg\":\"bad config\"}  ";
    assert_eq!(
        read_answer(error),
        Answer::Print {
            stdout: b"{\"code\":7,\"msg\":\"bad config\"}  ".to_vec(),
            exit_code: 1
        }
    );
    let fallbacks: [&[u8]; 7] = [
        b"HTTP/1.1 421 Misdirected Request\r\ncontent-length: 0\r\n\r\n",
        // An older agent that reads /ipam as JSON.
        b"HTTP/1.1 415 Unsupported Media Type\r\ncontent-length: 4\r\n\r\nnope",
        b"HTTP/1.1 400 Bad Request\r\ncontent-length: 4\r\n\r\nnope",
        b"HTTP/1.1 500 Internal Server Error\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n{\"ips\"",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-le",
    ];
    for response in fallbacks {
        assert!(
            matches!(read_answer(response), Answer::Fallback(_)),
            "{}",
            String::from_utf8_lossy(response)
        );
    }
    assert!(matches!(read_answer(b""), Answer::Fallback(_)));
    assert!(matches!(read_answer(b"SSH-2.0\r\n\r\n"), Answer::Fallback(_)));
}

#[test]
fn the_clients_own_errors_are_cni_errors() {
    let error = cni_error(
        5,
        "weft-ipam: cannot run",
        "/opt/cni/bin/weft-cni \"gone\"\n\u{1}",
    );
    let text = String::from_utf8(error).unwrap();
    assert_eq!(
        text,
        r#"{"cniVersion":"1.1.0","code":5,"msg":"weft-ipam: cannot run","details":"/opt/cni/bin/weft-cni \"gone\"\n\u0001"}"#
    );
}

proptest! {
    #[test]
    fn any_environment_and_config_round_trip(
        env in proptest::collection::vec(("CNI_[A-Z_]{1,12}", "[^\u{0}]{0,40}"), 0..8),
        noise in proptest::collection::vec(("[A-Z_]{1,8}", "[^\u{0}]{0,20}"), 0..4),
        stdin in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let all: Vec<(String, String)> = noise.iter().cloned().chain(env.iter().cloned()).collect();
        let body = encode_call(all.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())), &stdin);
        let call = decode_call(&body).unwrap();
        let expected: Vec<(String, String)> = all
            .into_iter()
            .filter(|(k, _)| is_cni_variable(k.as_bytes()))
            .collect();
        prop_assert_eq!(call.env, expected);
        prop_assert_eq!(call.stdin, &stdin[..]);
    }

    #[test]
    fn reading_any_response_never_panics(response in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = read_answer(&response);
    }
}
