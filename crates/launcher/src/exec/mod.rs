//! Applying a [`WiringPlan`] inside the pod netns: steps in order, and on the first failure the
//! steps already applied are undone in reverse order; teardown runs every undo operation and
//! collects every error. The primitives come from a [`NetnsBackend`]: [`NetlinkBackend`]
//! (weft-host: netlink, ioctls) or [`CommandBackend`] (`ip`/`nft`/`sysctl` via `nsenter`, the
//! baseline the benchmarks compare against).

mod command;
mod netlink;

pub use command::CommandBackend;
pub use netlink::NetlinkBackend;

use crate::plan::{Op, WiringPlan};
use crate::pod_link::PodLink;

/// A primitive that failed in the netns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    /// The object the operation needs does not exist (a link, a table). Undo treats it as done.
    pub not_found: bool,
    /// What went wrong, naming the object.
    pub message: String,
}

impl BackendError {
    /// A failure that is not "object missing".
    pub fn other(message: impl Into<String>) -> Self {
        BackendError {
            not_found: false,
            message: message.into(),
        }
    }
}

/// The primitives the executor needs, performed inside one network namespace.
pub trait NetnsBackend {
    /// Perform one operation.
    fn run(&mut self, op: &Op) -> Result<(), BackendError>;
    /// Read a sysctl (path under `/proc/sys`), trimmed.
    fn read_sysctl(&mut self, key: &str) -> Result<String, BackendError>;
    /// Describe the link `name`, its addresses and routes; `None` when it does not exist.
    fn discover(&mut self, name: &str) -> Result<Option<PodLink>, BackendError>;
}

/// An operation and why it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpFailure {
    /// The operation.
    pub op: Op,
    /// Its error.
    pub error: BackendError,
}

impl std::fmt::Display for OpFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", op_label(&self.op), self.error)
    }
}

/// Applying a plan failed; what was applied has been rolled back (except `rollback_failures`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("wiring {pod_iface}: step {step} failed: {failure}{}", rollback_note(.rollback_failures))]
pub struct ApplyError {
    /// The pod interface of the plan.
    pub pod_iface: String,
    /// Index of the failed step.
    pub step: usize,
    /// The failed operation.
    pub failure: Box<OpFailure>,
    /// Undo operations that failed during rollback.
    pub rollback_failures: Vec<OpFailure>,
}

fn rollback_note(failures: &[OpFailure]) -> String {
    if failures.is_empty() {
        return String::new();
    }
    let list: Vec<String> = failures.iter().map(|f| f.to_string()).collect();
    format!("; rollback also failed: {}", list.join("; "))
}

/// Teardown finished with these failures (every operation was attempted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("teardown of {pod_iface}: {}", .failures.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("; "))]
pub struct TeardownError {
    /// The pod interface of the plan.
    pub pod_iface: String,
    /// Every operation that failed.
    pub failures: Vec<OpFailure>,
}

/// Apply `plan`. On failure the applied steps are undone in reverse order (sysctls are restored
/// to the values read before writing them) and the error says what failed.
pub fn apply(backend: &mut dyn NetnsBackend, plan: &WiringPlan) -> Result<(), ApplyError> {
    let mut previous_sysctls: Vec<Option<(String, String)>> = Vec::with_capacity(plan.steps.len());
    for (index, step) in plan.steps.iter().enumerate() {
        let result = match &step.op {
            Op::Sysctl { key, value } => backend.read_sysctl(key).and_then(|previous| {
                backend.run(&step.op)?;
                Ok(Some((key.clone(), previous)).filter(|(_, p)| p != value))
            }),
            op => backend.run(op).map(|()| None),
        };
        match result {
            Ok(previous) => previous_sysctls.push(previous),
            Err(error) => {
                let mut undo: Vec<Op> = Vec::new();
                for (done, previous) in plan.steps[..index].iter().zip(&previous_sysctls).rev() {
                    undo.extend(done.undo.iter().cloned());
                    if let Some((key, value)) = previous {
                        undo.push(Op::Sysctl {
                            key: key.clone(),
                            value: value.clone(),
                        });
                    }
                }
                return Err(ApplyError {
                    pod_iface: plan.pod_iface.clone(),
                    step: index,
                    failure: Box::new(OpFailure {
                        op: step.op.clone(),
                        error,
                    }),
                    rollback_failures: run_all(backend, &undo),
                });
            }
        }
    }
    Ok(())
}

/// Undo the whole plan (idempotent: missing links and tables count as removed), attempting every
/// operation and reporting every failure. It also cleans up after a crash at any step of
/// [`apply`] (no rollback ran), given the same plan.
pub fn teardown(backend: &mut dyn NetnsBackend, plan: &WiringPlan) -> Result<(), TeardownError> {
    let failures = run_all(backend, &plan.teardown());
    if failures.is_empty() {
        Ok(())
    } else {
        Err(TeardownError {
            pod_iface: plan.pod_iface.clone(),
            failures,
        })
    }
}

fn run_all(backend: &mut dyn NetnsBackend, ops: &[Op]) -> Vec<OpFailure> {
    ops.iter()
        .filter_map(|op| match backend.run(op) {
            Err(error) if !error.not_found => Some(OpFailure {
                op: op.clone(),
                error,
            }),
            _ => None,
        })
        .collect()
}

/// A short human label of an operation for error messages.
pub fn op_label(op: &Op) -> String {
    match op {
        Op::CreateBridge { name, .. } => format!("create bridge {name}"),
        Op::CreateTap { name, .. } => format!("create tap {name}"),
        Op::DeleteLink { name } => format!("delete link {name}"),
        Op::SetUp { name } => format!("set {name} up"),
        Op::SetDown { name } => format!("set {name} down"),
        Op::Rename { from, to } => format!("rename {from} to {to}"),
        Op::SetMac { link, mac } => format!("set {link} mac {mac}"),
        Op::CopyMac { link, from } => format!("copy mac of {from} to {link}"),
        Op::SetMaster { link, master } => format!("enslave {link} to {master}"),
        Op::ClearMaster { link } => format!("release {link} from its bridge"),
        Op::FlushAddresses { link } => format!("flush addresses of {link}"),
        Op::AddAddresses { link, .. } => format!("add addresses to {link}"),
        Op::AddRoutes { link, .. } => format!("add routes via {link}"),
        Op::SetLearning { link, enabled } => format!("set learning {} on {link}", on_off(*enabled)),
        Op::Sysctl { key, value } => format!("sysctl {key}={value}"),
        Op::InstallNat { .. } => "install nat tables".to_string(),
        Op::RemoveNat { .. } => "remove nat tables".to_string(),
    }
}

fn on_off(enabled: bool) -> &'static str {
    if enabled { "on" } else { "off" }
}
