//! `weft explain vmi`: why a VMI's network is (or is not) working, interface by interface and
//! stage by stage, as a pure function of a [`Snapshot`] of what the cluster and the node know.
//! The command only gathers the snapshot (store objects, and on the local cluster as root the
//! pod netns's links and nft tables) and prints the [`Report`].

pub mod cni_error;
pub mod stages;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use weft_vm::VirtualMachineInstance;

use crate::kinds::{Event, Pod};

use cni_error::classify;

// The annotation belongs to the VMI's status report (weft-vm); explain reads it.
pub use weft_vm::status::DHCP_RECORD_ANNOTATION;

/// The launcher's DHCP record of a VMI ([`DHCP_RECORD_ANNOTATION`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DhcpRecord {
    /// Whether the launcher booted a guest (false under `weft up --no-guests`).
    pub guest: bool,
    /// Per VMI interface name.
    #[serde(default)]
    pub interfaces: BTreeMap<String, DhcpCounters>,
    /// Guest interfaces whose DHCP client gave up (`WEFT-LEASEFAIL` on the serial console).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lease_failures: Vec<String>,
}

/// What one interface's DHCP server saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DhcpCounters {
    /// Whether a DHCP server runs for it (no IPv4 address to lease: none).
    pub served: bool,
    /// DHCP requests received.
    pub received: u64,
    /// Replies sent (offers and acknowledgements).
    pub replied: u64,
    /// Requests dropped as not from the guest's own MAC.
    pub dropped: u64,
}

/// What the node sees inside the launcher pod's network namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetnsFacts {
    /// Link names in the pod netns.
    pub links: BTreeSet<String>,
    /// nft tables in the pod netns as `family name` (`ip nat`).
    pub nft_tables: BTreeSet<String>,
}

/// Everything the stage evaluation looks at.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The VMI.
    pub vmi: VirtualMachineInstance,
    /// Its launcher pod (the newest that is not being deleted), if any.
    pub pod: Option<Pod>,
    /// `(namespace, name)` of every NetworkAttachmentDefinition.
    pub nads: BTreeSet<(String, String)>,
    /// Reserved addresses per IPAM network name.
    pub reservations: BTreeMap<String, usize>,
    /// Events about the VMI and its pod.
    pub events: Vec<Event>,
    /// The pod netns, when it could be looked into (root on the local cluster); `None`: not
    /// checked, with the reason in `netns_unchecked`.
    pub netns: Option<NetnsFacts>,
    /// Why the netns was not looked into.
    pub netns_unchecked: String,
    /// The cluster's network configuration (admission).
    pub config: weft_vm::ClusterConfig,
}

/// How a stage came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// It holds.
    Ok,
    /// It does not: `reason` says why, `fix` what to change.
    Failed,
    /// Not looked at (no access, no record, does not apply).
    NotChecked,
    /// A stage it depends on failed.
    NotReached,
}

/// The stages, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// 1: the interface/network pair passes admission and its NAD exists.
    Spec,
    /// 2: the launcher pod's networks annotation names it.
    PodAnnotation,
    /// 3: the pod's network-status has its entry.
    NetworkStatus,
    /// 4: the pod link is in the pod netns.
    PodLink,
    /// 5: the binding's links (and nft table) are there.
    Wiring,
    /// 6: the DHCP server answered the guest.
    Dhcp,
    /// 7: the guest reports the address.
    GuestReport,
    /// 8: `status.interfaces` has the IP.
    StatusIp,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 8] = [
        Stage::Spec,
        Stage::PodAnnotation,
        Stage::NetworkStatus,
        Stage::PodLink,
        Stage::Wiring,
        Stage::Dhcp,
        Stage::GuestReport,
        Stage::StatusIp,
    ];

    /// 1-based number.
    pub fn number(self) -> usize {
        Stage::ALL.iter().position(|s| *s == self).unwrap_or(0) + 1
    }

    /// Short title.
    pub fn title(self) -> &'static str {
        match self {
            Stage::Spec => "spec and admission",
            Stage::PodAnnotation => "pod networks annotation",
            Stage::NetworkStatus => "pod network-status",
            Stage::PodLink => "pod link",
            Stage::Wiring => "binding wiring",
            Stage::Dhcp => "DHCP lease",
            Stage::GuestReport => "guest reports the address",
            Stage::StatusIp => "status.interfaces IP",
        }
    }

    /// The stages whose failure means this one is not reached.
    fn depends_on(self) -> &'static [Stage] {
        match self {
            Stage::Spec => &[],
            Stage::PodAnnotation => &[Stage::Spec],
            Stage::NetworkStatus => &[Stage::PodAnnotation],
            Stage::PodLink => &[Stage::NetworkStatus],
            Stage::Wiring => &[Stage::PodLink],
            Stage::Dhcp => &[Stage::Wiring],
            Stage::GuestReport => &[Stage::Dhcp],
            // The controller fills status.interfaces from network-status too.
            Stage::StatusIp => &[Stage::NetworkStatus],
        }
    }
}

/// One stage's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StageResult {
    /// Which stage.
    pub stage: Stage,
    /// `true` ✓, `false` ✗, `null` not checked or not reached.
    pub ok: Option<bool>,
    /// The outcome in full.
    pub outcome: Outcome,
    /// What was found.
    pub reason: String,
    /// What to change (empty when nothing).
    pub fix: String,
}

/// One interface's stages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InterfaceReport {
    /// VMI interface (and network) name.
    pub name: String,
    /// What the network is (`pod`, `multus default/br1`, or `missing`).
    pub network: String,
    /// The binding (`masquerade`, `bridge`, ...).
    pub binding: String,
    /// The stages, in order.
    pub stages: Vec<StageResult>,
}

/// The whole report (`-o json` prints it as is).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// `namespace/name`.
    pub vmi: String,
    /// The VMI's phase.
    pub phase: String,
    /// The launcher pod, if any.
    pub pod: Option<String>,
    /// One entry per interface, in spec order.
    pub interfaces: Vec<InterfaceReport>,
}

impl Report {
    /// Whether any stage failed (the command exits non-zero).
    pub fn failed(&self) -> bool {
        self.interfaces
            .iter()
            .flat_map(|i| &i.stages)
            .any(|s| s.outcome == Outcome::Failed)
    }
}

/// A stage's finding before dependencies are applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Finding {
    outcome: Outcome,
    reason: String,
    fix: String,
}

impl Finding {
    pub(crate) fn ok(reason: impl Into<String>) -> Self {
        Finding {
            outcome: Outcome::Ok,
            reason: reason.into(),
            fix: String::new(),
        }
    }
    pub(crate) fn failed(reason: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            outcome: Outcome::Failed,
            reason: reason.into(),
            fix: fix.into(),
        }
    }
    pub(crate) fn unchecked(reason: impl Into<String>) -> Self {
        Finding {
            outcome: Outcome::NotChecked,
            reason: reason.into(),
            fix: String::new(),
        }
    }
}

/// Evaluate every stage of every interface of the snapshot's VMI.
pub fn explain(snapshot: &Snapshot) -> Report {
    let vmi = &snapshot.vmi;
    let interfaces = vmi
        .spec
        .interfaces()
        .iter()
        .enumerate()
        .map(|(index, interface)| {
            let context = stages::Context::new(snapshot, index);
            let mut results: Vec<StageResult> = Vec::new();
            for stage in Stage::ALL {
                let blocked = stage.depends_on().iter().find(|dep| {
                    results
                        .iter()
                        .find(|r| r.stage == **dep)
                        .is_some_and(|r| matches!(r.outcome, Outcome::Failed | Outcome::NotReached))
                });
                let finding = match blocked {
                    // An unplugged interface (`state: absent`) is meant to have none of it.
                    _ if interface.is_absent() => {
                        Finding::unchecked("not checked: the interface is being unplugged (state: absent)")
                    }
                    Some(dep) => Finding {
                        outcome: Outcome::NotReached,
                        reason: format!(
                            "not reached: stage {} ({}) did not pass",
                            dep.number(),
                            dep.title()
                        ),
                        fix: String::new(),
                    },
                    None => context.evaluate(stage),
                };
                results.push(StageResult {
                    stage,
                    ok: match finding.outcome {
                        Outcome::Ok => Some(true),
                        Outcome::Failed => Some(false),
                        Outcome::NotChecked | Outcome::NotReached => None,
                    },
                    outcome: finding.outcome,
                    reason: finding.reason,
                    fix: finding.fix,
                });
            }
            InterfaceReport {
                name: interface.name.clone(),
                network: context.network_label(),
                binding: context.binding_label(),
                stages: results,
            }
        })
        .collect();
    Report {
        vmi: format!("{}/{}", vmi.namespace(), vmi.metadata.name),
        phase: vmi.status.as_ref().map(|s| s.phase.clone()).unwrap_or_default(),
        pod: snapshot.pod.as_ref().map(|p| p.metadata.name.clone()),
        interfaces,
    }
}

/// The report as text: one block per interface, one line per stage (✓, ✗, `-`), the fix
/// under a failed stage.
pub fn render_text(report: &Report) -> String {
    let mut out = format!(
        "VMI {} (phase {}, launcher pod {})\n",
        report.vmi,
        if report.phase.is_empty() {
            "unknown"
        } else {
            &report.phase
        },
        report.pod.as_deref().unwrap_or("none")
    );
    for interface in &report.interfaces {
        out += &format!(
            "\ninterface {} (network {}, binding {})\n",
            interface.name, interface.network, interface.binding
        );
        for s in &interface.stages {
            let mark = match s.outcome {
                Outcome::Ok => "✓",
                Outcome::Failed => "✗",
                Outcome::NotChecked | Outcome::NotReached => "-",
            };
            out += &format!(
                "  {mark} {} {:<26} {}\n",
                s.stage.number(),
                s.stage.title(),
                s.reason
            );
            if !s.fix.is_empty() {
                out += &format!("      {:<26} fix: {}\n", "", s.fix);
            }
        }
    }
    out
}
