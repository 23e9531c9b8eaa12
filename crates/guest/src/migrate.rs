//! Live migration over QMP: the commands (built purely) and the parsed `query-migrate` answer.
//!
//! The source runs `migrate-set-parameters` (downtime limit, bandwidth) then `migrate` to a
//! Unix socket its node agent proxies to the target node; the target QEMU started with
//! `-incoming defer` gets `migrate-incoming` on its own Unix socket, resumes by itself once the
//! state is in (it is not started with `-S`) and then runs `announce-self`.

use serde::Serialize;
use serde_json::{Value, json};

/// Downtime QEMU may take for the final stop-and-copy, in milliseconds. QEMU's and libvirt's
/// default is 300 ms; weft asks for half: QEMU overshoots its estimate on a loaded host, and the
/// guest's outage is the downtime plus its resume and announce on the target (≤ 300 ms is the
/// aim).
pub const DOWNTIME_LIMIT_MS: u64 = 150;
/// Bandwidth cap for the transfer, in bytes/s: generous (10 GiB/s), the link is local.
pub const MAX_BANDWIDTH: u64 = 10 << 30;

/// `migrate-set-parameters` with `downtime_ms` and `bandwidth` (bytes/s).
pub fn set_parameters(downtime_ms: u64, bandwidth: u64) -> Value {
    json!({"execute": "migrate-set-parameters", "arguments": {
        "downtime-limit": downtime_ms, "max-bandwidth": bandwidth,
    }})
}

/// `migrate` (pre-copy) to `uri` (e.g. `unix:/…/migration.sock`).
pub fn migrate(uri: &str) -> Value {
    json!({"execute": "migrate", "arguments": {"uri": uri}})
}

/// `migrate-incoming` on `uri` (a QEMU started with `-incoming defer`).
pub fn migrate_incoming(uri: &str) -> Value {
    json!({"execute": "migrate-incoming", "arguments": {"uri": uri}})
}

/// `query-migrate`.
pub fn query_migrate() -> Value {
    json!({"execute": "query-migrate"})
}

/// `migrate_cancel`.
pub fn cancel() -> Value {
    json!({"execute": "migrate_cancel"})
}

/// `query-status`.
pub fn query_status() -> Value {
    json!({"execute": "query-status"})
}

/// `cont`.
pub fn cont() -> Value {
    json!({"execute": "cont"})
}

/// `announce-self`: gratuitous ARP / RARP on every NIC so bridges and the overlay learn the
/// guest's new port (QEMU's defaults: 5 rounds, 50 ms apart, growing by 100 ms).
pub fn announce_self() -> Value {
    json!({"execute": "announce-self", "arguments": {
        "initial": 50, "max": 550, "rounds": 5, "step": 100,
    }})
}

/// What a migration target's `query-status` run status asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetRunStatus {
    /// The guest runs (QEMU resumed it after the incoming state).
    Running,
    /// Paused after the incoming state (`paused`, `postmigrate`): it needs `cont`.
    NeedsCont,
    /// Not there yet (`inmigrate`, ...).
    NotYet,
}

/// Read a target's `query-status` `status` string.
pub fn target_run_status(status: &str) -> TargetRunStatus {
    match status {
        "running" => TargetRunStatus::Running,
        "paused" | "postmigrate" => TargetRunStatus::NeedsCont,
        _ => TargetRunStatus::NotYet,
    }
}

/// Where a migration is, from `query-migrate`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationProgress {
    /// QEMU's status: `setup`, `active`, `device`, `completed`, `failed`, `cancelling`,
    /// `cancelled`, ... (`none` before any migration).
    pub status: String,
    /// Bytes sent so far.
    pub transferred_bytes: u64,
    /// RAM bytes still to send.
    pub remaining_bytes: u64,
    /// Guest RAM.
    pub total_bytes: u64,
    /// Pages dirtied per second (the last iteration).
    pub dirty_pages_rate: u64,
    /// Pre-copy iterations so far.
    pub iterations: u64,
    /// Milliseconds since the start (or the whole time, when completed).
    pub total_time_ms: u64,
    /// The stop-and-copy downtime, once completed.
    pub downtime_ms: Option<u64>,
    /// QEMU's estimate of the downtime while active.
    pub expected_downtime_ms: Option<u64>,
    /// Why it failed.
    pub error: Option<String>,
}

impl MigrationProgress {
    /// Parses a `query-migrate` return value.
    pub fn parse(value: &Value) -> Self {
        let u = |v: &Value| v.as_u64().unwrap_or(0);
        let ram = &value["ram"];
        Self {
            status: value["status"].as_str().unwrap_or("none").to_string(),
            transferred_bytes: u(&ram["transferred"]),
            remaining_bytes: u(&ram["remaining"]),
            total_bytes: u(&ram["total"]),
            dirty_pages_rate: u(&ram["dirty-pages-rate"]),
            iterations: u(&ram["dirty-sync-count"]),
            total_time_ms: u(&value["total-time"]),
            downtime_ms: value["downtime"].as_u64(),
            expected_downtime_ms: value["expected-downtime"].as_u64(),
            error: value["error-desc"].as_str().map(String::from),
        }
    }

    /// Whether this progress is worth writing after `written` (the last written): it differs,
    /// and a migration has begun (`status` is not `none`).
    pub fn is_news(&self, written: Option<&Self>) -> bool {
        written != Some(self) && self.status != "none"
    }

    /// The migration is over (whatever the outcome).
    pub fn is_final(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "cancelled")
    }

    /// Why a finished migration did not complete (`None` when it did): QEMU's error, said
    /// to be the proxy's when the target node's migration proxy was never reached
    /// (`proxy_reached`), else the final status.
    pub fn failure_reason(&self, proxy_reached: bool) -> Option<String> {
        if self.status == "completed" {
            return None;
        }
        Some(match (&self.error, proxy_reached) {
            (Some(error), true) => error.clone(),
            (Some(error), false) => {
                format!("the target node's migration proxy was not reached: {error}")
            }
            (None, _) => format!("the migration was {}", self.status),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_run_status_says_whether_to_cont() {
        let cases = [
            ("running", TargetRunStatus::Running),
            ("paused", TargetRunStatus::NeedsCont),
            ("postmigrate", TargetRunStatus::NeedsCont),
            ("inmigrate", TargetRunStatus::NotYet),
            ("prelaunch", TargetRunStatus::NotYet),
            ("", TargetRunStatus::NotYet),
        ];
        for (status, want) in cases {
            assert_eq!(target_run_status(status), want, "{status}");
        }
    }

    #[test]
    fn progress_is_written_when_it_is_news() {
        let none = MigrationProgress {
            status: "none".into(),
            ..Default::default()
        };
        let active = MigrationProgress {
            status: "active".into(),
            transferred_bytes: 10,
            ..Default::default()
        };
        let further = MigrationProgress {
            transferred_bytes: 20,
            ..active.clone()
        };
        assert!(!none.is_news(None));
        assert!(!none.is_news(Some(&active)));
        assert!(active.is_news(None));
        assert!(!active.is_news(Some(&active)));
        assert!(further.is_news(Some(&active)));
    }

    #[test]
    fn failure_reasons() {
        let at = |status: &str, error: Option<&str>| MigrationProgress {
            status: status.into(),
            error: error.map(String::from),
            ..Default::default()
        };
        assert_eq!(at("completed", None).failure_reason(false), None);
        assert_eq!(
            at("failed", Some("Unable to write"))
                .failure_reason(true)
                .as_deref(),
            Some("Unable to write")
        );
        assert_eq!(
            at("failed", Some("Unable to write"))
                .failure_reason(false)
                .as_deref(),
            Some("the target node's migration proxy was not reached: Unable to write")
        );
        assert_eq!(
            at("cancelled", None).failure_reason(true).as_deref(),
            Some("the migration was cancelled")
        );
    }

    #[test]
    fn commands() {
        assert_eq!(
            set_parameters(300, 1 << 30)["arguments"],
            json!({"downtime-limit": 300, "max-bandwidth": 1u64 << 30})
        );
        assert_eq!(migrate("unix:/x")["arguments"]["uri"], "unix:/x");
        assert_eq!(migrate_incoming("unix:/y")["execute"], "migrate-incoming");
        assert_eq!(cancel()["execute"], "migrate_cancel");
        assert_eq!(announce_self()["arguments"]["rounds"], 5);
    }

    #[test]
    fn a_migration_target_waits_for_incoming_and_appends_to_the_serial_log() {
        let mut spec = crate::GuestSpec::new(
            "vm1",
            std::path::Path::new("/k/vmlinux"),
            std::path::Path::new("/k/initrd"),
            std::path::Path::new("/run/weft/vm1"),
        );
        let plain = spec.argv();
        assert!(plain.contains(&"file:/run/weft/vm1/vm1.serial.log".to_string()));
        assert!(!plain.contains(&"-incoming".to_string()));
        spec.incoming = true;
        spec.serial_append = true;
        let argv = spec.argv().join(" ");
        // After the devices (same layout as the source), before the guest-agent channel.
        assert!(
            argv.contains(" -qmp unix:/run/weft/vm1/vm1.qmp,server=on,wait=off -incoming defer -device virtio-serial-pci"),
            "{argv}"
        );
        assert!(
            argv.contains(
                "-chardev file,id=weft-serial,path=/run/weft/vm1/vm1.serial.log,append=on -serial chardev:weft-serial"
            ),
            "{argv}"
        );
    }

    #[test]
    fn query_migrate_parses() {
        // As QEMU 10 answers while active and once completed.
        let active = json!({"status": "active", "total-time": 812, "expected-downtime": 31,
            "ram": {"transferred": 1_000_000u64, "remaining": 9_000_000u64, "total": 268_435_456u64,
                    "dirty-pages-rate": 120, "dirty-sync-count": 2}});
        let p = MigrationProgress::parse(&active);
        assert_eq!(
            (p.status.as_str(), p.transferred_bytes, p.remaining_bytes),
            ("active", 1_000_000, 9_000_000)
        );
        assert_eq!(
            (p.dirty_pages_rate, p.iterations, p.expected_downtime_ms),
            (120, 2, Some(31))
        );
        assert!(!p.is_final());
        let done = json!({"status": "completed", "total-time": 1500, "downtime": 40,
            "ram": {"transferred": 30_000_000u64, "remaining": 0, "total": 268_435_456u64}});
        let p = MigrationProgress::parse(&done);
        assert!(p.is_final());
        assert_eq!(p.downtime_ms, Some(40));
        let failed = json!({"status": "failed", "error-desc": "Unable to write to socket: Broken pipe"});
        assert_eq!(
            MigrationProgress::parse(&failed).error.as_deref(),
            Some("Unable to write to socket: Broken pipe")
        );
        assert_eq!(MigrationProgress::parse(&json!({})).status, "none");
    }
}
