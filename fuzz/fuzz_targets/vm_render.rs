//! `weft vm render` input: YAML or JSON documents holding a VirtualMachineInstance (or a
//! VirtualMachine), an optional Pod and an optional KubeVirt object. No input panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = weft_vm::render(text);
});
