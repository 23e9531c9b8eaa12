//! NetworkAttachmentDefinition `spec.config` text and the meta-plugin's own config: the delegate
//! config parser, name injection, the CNI config/config-list parser and `MetaConfig`. No input
//! panics; name injection is idempotent and its output always parses as a JSON object.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_netconf::{DelegateConfig, inject_network_name};

fuzz_target!(|data: &[u8]| {
    let _ = weft_cni::AnyNetworkConfig::from_bytes(data);
    let _ = weft_meta::MetaConfig::parse(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = DelegateConfig::parse(text) {
        let _ = (
            config.name(),
            config.cni_version(),
            config.kind(),
            config.first_type(),
        );
        let _ = (config.is_list(), config.capabilities(), config.to_value());
        let _ = config.with_cni_version_if_missing("1.0.0");
    }
    if let Ok(injected) = inject_network_name(text, "fuzz-net") {
        let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&injected)
            .unwrap_or_else(|e| panic!("injected config {injected} is not a JSON object: {e}"));
        assert!(object.contains_key("name"), "no name in {injected}");
        let twice = inject_network_name(&injected, "fuzz-net").expect("injected config re-parses");
        assert_eq!(injected, twice, "name injection is not idempotent");
    }
});
