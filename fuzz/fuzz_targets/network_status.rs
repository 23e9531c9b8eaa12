//! The network-status annotation (`k8s.v1.cni.cncf.io/network-status`), read by the meta-plugin
//! and by the VM control plane: no input panics, and whatever parses is written back and read
//! again unchanged.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use weft_netconf::{
    NETWORK_STATUS_ANNOTATION, format_network_status_annotation, parse_network_status_annotation,
    read_network_status_annotation,
};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = read_network_status_annotation(text);
    let annotations = BTreeMap::from([(NETWORK_STATUS_ANNOTATION.to_owned(), text.to_owned())]);
    let _ = weft_vm::network_statuses(&annotations);
    let Ok(statuses) = parse_network_status_annotation(text) else {
        return;
    };
    let written = format_network_status_annotation(&statuses);
    let again = parse_network_status_annotation(&written)
        .unwrap_or_else(|e| panic!("re-parsing {written} failed: {e}"));
    assert_eq!(
        statuses, again,
        "write/read round trip changed the statuses ({written})"
    );
});
