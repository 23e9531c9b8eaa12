//! What the node agent reads back from disk and from its socket on the IPAM path: the release
//! journal (`weft_ipam::journal::decode_journal`, a file that may be torn or foreign) and each
//! call in it, in the installed `weft-ipam`'s wire format (`weft_plugin_client::wire::decode_call`).
//! No input panics; what decodes re-encodes to the same calls.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_ipam::journal;
use weft_plugin_client::wire;

fuzz_target!(|data: &[u8]| {
    let (calls, _skipped) = journal::decode_journal(data);
    let rewritten = journal::remaining(&calls, 0);
    assert_eq!(journal::decode_journal(&rewritten).0, calls, "a rewritten journal reads back");
    for call in calls.iter().map(Vec::as_slice).chain(std::iter::once(data)) {
        let Ok(decoded) = wire::decode_call(call) else { continue };
        let env: Vec<(&[u8], &[u8])> = decoded.env.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())).collect();
        let again = wire::encode_call(env, decoded.stdin);
        let back = wire::decode_call(&again).expect("an encoded call decodes");
        assert_eq!(back.stdin, decoded.stdin);
    }
});
