//! Whether a VMI's guest runs without qemu-guest-agent: the mark the launcher sets, and the
//! controller, `weft up` and `weft explain` read (a leaf, so they need not import the agent).

/// VMI annotation the launcher sets (`absent`) when the guest's image was built without
/// qemu-guest-agent (the host lacks the package): nothing will ever report from inside that
/// guest, so waiting for a guest-agent source (`weft up`) is pointless.
pub const AGENT_ABSENT_ANNOTATION: &str = "weft.dev/guest-agent";

/// Sets or clears [`AGENT_ABSENT_ANNOTATION`].
pub fn mark_absent(annotations: &mut std::collections::BTreeMap<String, String>, absent: bool) {
    if absent {
        annotations.insert(AGENT_ABSENT_ANNOTATION.into(), "absent".into());
    } else {
        annotations.remove(AGENT_ABSENT_ANNOTATION);
    }
}

/// Whether `vmi`'s guest runs without qemu-guest-agent ([`AGENT_ABSENT_ANNOTATION`]).
pub fn agent_absent(vmi: &weft_vm::VirtualMachineInstance) -> bool {
    vmi.metadata.annotation(AGENT_ABSENT_ANNOTATION) == Some("absent")
}
