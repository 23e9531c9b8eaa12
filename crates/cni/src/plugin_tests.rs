use std::collections::HashMap;

use serde_json::{Value, json};

use super::*;
use crate::result::IpConfig;

/// Echoes the request into its result so tests can see what it received.
struct Echo;

impl Plugin for Echo {
    fn supported_versions(&self) -> &[CniVersion] {
        &CniVersion::SUPPORTED
    }
    fn add(&self, request: &PluginRequest) -> Result<CniResult, CniError> {
        if request.config.as_object().contains_key("fail") {
            return Err(CniError::new(codes::TRY_AGAIN_LATER, "asked to fail").with_details("d"));
        }
        let mut result = request.prev_result()?.unwrap_or_default();
        result.ips.push(IpConfig {
            address: "10.0.0.7/24".parse().unwrap(),
            gateway: None,
            interface: None,
        });
        Ok(result)
    }
    fn del(&self, _: &PluginRequest) -> Result<(), CniError> {
        Ok(())
    }
    fn check(&self, _: &PluginRequest) -> Result<(), CniError> {
        Ok(())
    }
    fn gc(&self, request: &PluginRequest) -> Result<(), CniError> {
        let valid = request.valid_attachments()?;
        if valid.len() == 1 && valid[0].ifname == "eth0" {
            Ok(())
        } else {
            Err(CniError::new(999, format!("{valid:?}")))
        }
    }
}

fn env(command: &str) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<&str, String> = [
        ("CNI_COMMAND", command.to_string()),
        ("CNI_CONTAINERID", "c1".into()),
        ("CNI_NETNS", "/run/netns/x".into()),
        ("CNI_IFNAME", "eth0".into()),
        ("CNI_PATH", "/usr/lib/cni".into()),
    ]
    .into_iter()
    .collect();
    move |key| map.get(key).cloned()
}

fn json_out(outcome: &Outcome) -> Value {
    serde_json::from_slice(&outcome.stdout).unwrap()
}

#[test]
fn add_writes_the_result_in_the_config_version() {
    for (version, has_ip4) in [("0.2.0", true), ("0.4.0", false), ("1.1.0", false)] {
        let config = json!({"cniVersion": version, "name": "n", "type": "echo"});
        let outcome = dispatch(&Echo, env("ADD"), config.to_string().as_bytes());
        assert_eq!(outcome.exit_code, 0);
        let out = json_out(&outcome);
        assert_eq!(out["cniVersion"], version);
        assert_eq!(out.get("ip4").is_some(), has_ip4, "{out}");
    }
}

#[test]
fn prev_result_in_any_version_is_read() {
    let config = json!({"cniVersion": "1.0.0", "name": "n", "type": "echo",
        "prevResult": {"cniVersion": "0.2.0", "ip4": {"ip": "10.9.0.2/16"}}});
    let out = json_out(&dispatch(&Echo, env("ADD"), config.to_string().as_bytes()));
    assert_eq!(out["ips"][0]["address"], "10.9.0.2/16");
    assert_eq!(out["ips"][1]["address"], "10.0.0.7/24");
}

#[test]
fn errors_are_json_on_stdout_with_exit_1() {
    let config = json!({"cniVersion": "0.4.0", "name": "n", "type": "echo", "fail": true});
    let outcome = dispatch(&Echo, env("ADD"), config.to_string().as_bytes());
    assert_eq!(outcome.exit_code, 1);
    assert_eq!(
        json_out(&outcome),
        json!({"cniVersion": "0.4.0", "code": 11, "msg": "asked to fail", "details": "d"})
    );
}

#[test]
fn version_reply_needs_no_other_variables() {
    let lookup = |key: &str| (key == "CNI_COMMAND").then(|| "VERSION".to_string());
    let outcome = dispatch(&Echo, lookup, br#"{"cniVersion":"1.0.0"}"#);
    assert_eq!(outcome.exit_code, 0);
    let out = json_out(&outcome);
    assert_eq!(out["cniVersion"], "1.0.0");
    assert_eq!(out["supportedVersions"].as_array().unwrap().len(), 7);
    assert_eq!(json_out(&dispatch(&Echo, lookup, b""))["cniVersion"], "1.1.0");
}

#[test]
fn version_gates() {
    struct Old;
    impl Plugin for Old {
        fn supported_versions(&self) -> &[CniVersion] {
            &CniVersion::SUPPORTED[..6]
        }
        fn add(&self, _: &PluginRequest) -> Result<CniResult, CniError> {
            Ok(CniResult::default())
        }
        fn del(&self, _: &PluginRequest) -> Result<(), CniError> {
            Ok(())
        }
        fn check(&self, _: &PluginRequest) -> Result<(), CniError> {
            Ok(())
        }
    }
    let unsupported = dispatch(&Old, env("ADD"), br#"{"cniVersion":"1.1.0","type":"old"}"#);
    assert_eq!(json_out(&unsupported)["code"], 1);
    assert_eq!(json_out(&unsupported)["msg"], "incompatible CNI versions");
    let check = dispatch(&Echo, env("CHECK"), br#"{"cniVersion":"0.3.1","type":"echo"}"#);
    assert_eq!(json_out(&check)["msg"], "config version does not allow CHECK");
    let gc = dispatch(&Echo, env("GC"), br#"{"cniVersion":"1.0.0","type":"echo"}"#);
    assert_eq!(json_out(&gc)["msg"], "config version does not allow GC");
    let status = dispatch(&Echo, env("STATUS"), br#"{"cniVersion":"1.1.0","type":"echo"}"#);
    assert_eq!(
        status,
        Outcome {
            stdout: Vec::new(),
            exit_code: 0
        }
    );
}

#[test]
fn gc_reads_either_attachment_key() {
    for key in [VALID_ATTACHMENTS_KEY, LEGACY_ATTACHMENTS_KEY] {
        let config = json!({"cniVersion": "1.1.0", "type": "echo",
            key: [{"containerID": "c1", "ifname": "eth0"}]});
        let outcome = dispatch(&Echo, env("GC"), config.to_string().as_bytes());
        assert_eq!(
            outcome.exit_code,
            0,
            "{}",
            String::from_utf8_lossy(&outcome.stdout)
        );
    }
}

#[test]
fn bad_input_codes() {
    let out = json_out(&dispatch(&Echo, env("ADD"), b"{nope"));
    assert_eq!(out["code"], 6);
    let out = json_out(&dispatch(&Echo, env("ADD"), br#"{"cniVersion":"1.0.0"}"#));
    assert_eq!(out["code"], 7);
    assert!(out["msg"].as_str().unwrap().contains("\"type\""));
    let out = json_out(&dispatch(&Echo, |_| None, b"{}"));
    assert_eq!(out["code"], 4);
    assert!(out["msg"].as_str().unwrap().contains("CNI_COMMAND"));
}

proptest::proptest! {
    #[test]
    fn dispatch_never_panics(stdin in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), command in "ADD|DEL|CHECK|STATUS|GC|VERSION|X") {
        let outcome = dispatch(&Echo, env(&command), &stdin);
        if outcome.exit_code != 0 {
            let error: CniError = serde_json::from_slice(&outcome.stdout).unwrap();
            proptest::prop_assert!(error.code != 0 && !error.cni_version.is_empty());
        }
    }
}
