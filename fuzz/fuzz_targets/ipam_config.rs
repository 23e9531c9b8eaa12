//! The IPAM plugin's network configuration (the `ipam` section of a NAD config, with the
//! network's name and the runtime's args): no JSON value panics the parser.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = weft_ipam::parse_network_config(&value);
});
