//! The pod networks annotation (`k8s.v1.cni.cncf.io/networks`) and the default-network
//! annotation: no input panics, and whatever parses survives a JSON round trip unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_netconf::{parse_default_network_annotation, parse_networks_annotation};

fuzz_target!(|data: &[u8]| {
    // Annotation values are Kubernetes strings: always UTF-8.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_default_network_annotation(text, "ns");
    let Ok(elements) = parse_networks_annotation(text, "ns") else {
        return;
    };
    if elements.is_empty() {
        return;
    }
    let json = serde_json::to_string(&elements).expect("parsed elements serialise");
    let again =
        parse_networks_annotation(&json, "ns").unwrap_or_else(|e| panic!("re-parsing {json} failed: {e}"));
    assert_eq!(elements, again, "JSON round trip changed the elements ({json})");
});
