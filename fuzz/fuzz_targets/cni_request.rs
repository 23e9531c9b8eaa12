//! A whole CNI plugin invocation, decided purely by `weft_cni::plugin::dispatch`: the fuzz input
//! is the environment (`KEY=VALUE` lines), a NUL byte, then stdin. Also the `CNI_ARGS` parser
//! and the any-version result reader. No input panics; a successful ADD prints a result that
//! reads back.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use weft_cni::plugin::{Plugin, PluginRequest, dispatch};
use weft_cni::{CniArgs, CniError, CniResult, Interface, IpConfig, parse_result};

/// A plugin that does nothing and always returns the same result.
struct Fixed;

impl Plugin for Fixed {
    fn add(&self, request: &PluginRequest) -> Result<CniResult, CniError> {
        request.prev_result()?;
        request.valid_attachments()?;
        Ok(CniResult {
            interfaces: vec![Interface {
                name: request.env.ifname.clone(),
                mac: "02:00:00:00:00:01".into(),
                sandbox: request.env.netns.clone(),
                ..Default::default()
            }],
            ips: vec![IpConfig {
                address: "10.1.2.3/24".parse().expect("literal"),
                gateway: Some("10.1.2.1".parse().expect("literal")),
                interface: Some(0),
            }],
            ..Default::default()
        })
    }

    fn del(&self, request: &PluginRequest) -> Result<(), CniError> {
        request.prev_result().map(drop)
    }

    fn check(&self, request: &PluginRequest) -> Result<(), CniError> {
        request.prev_result().map(drop)
    }

    fn gc(&self, request: &PluginRequest) -> Result<(), CniError> {
        request.valid_attachments().map(drop)
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = parse_result(data);
    let (env_bytes, stdin) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let env_text = String::from_utf8_lossy(env_bytes);
    let env: HashMap<&str, &str> = env_text.lines().filter_map(|line| line.split_once('=')).collect();
    let outcome = dispatch(&Fixed, |key| env.get(key).map(|v| (*v).to_owned()), stdin);
    if outcome.exit_code == 0 && env.get("CNI_COMMAND") == Some(&"ADD") {
        parse_result(&outcome.stdout).unwrap_or_else(|e| {
            panic!(
                "ADD printed a result that does not read back ({e}): {}",
                String::from_utf8_lossy(&outcome.stdout)
            )
        });
    }
    let args = env.get("CNI_ARGS").copied().unwrap_or(&env_text);
    if let Ok(parsed) = CniArgs::parse(args) {
        let _ = (parsed.ips(), parsed.mac(), parsed.ignore_unknown());
    }
    let _ = CniArgs::load(args, &CniArgs::KNOWN_KEYS);
    let _ = CniArgs::load(args, &[]);
});
