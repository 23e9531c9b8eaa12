//! What a migration target's guest boots with: the leaf the guest role reads (the migration
//! role writes it, see [`crate::agent::local::migration::target_vmi`]).

use std::path::Path;

use anyhow::Context;
use weft_vm::VirtualMachineInstance;

/// Annotation on the VMI a migration target's launcher boots from: its QEMU waits for the
/// incoming state (`-incoming defer`) and continues the serial log named by the value (the
/// source's, so the guest's reports read on; empty: none).
pub const INCOMING_ANNOTATION: &str = "weft.dev/migration-incoming";

/// Before a migration target's QEMU starts: its serial log continues the source's.
pub fn seed_serial_log(vmi: &VirtualMachineInstance, serial_log: &Path) -> anyhow::Result<()> {
    let Some(seed) = vmi
        .metadata
        .annotation(INCOMING_ANNOTATION)
        .filter(|s| !s.is_empty())
    else {
        return Ok(());
    };
    match std::fs::read(seed) {
        Ok(bytes) => {
            std::fs::write(serial_log, bytes).with_context(|| format!("write {}", serial_log.display()))?
        }
        Err(e) => tracing::warn!(seed, "migration target: the source's serial log: {e}"),
    }
    Ok(())
}
