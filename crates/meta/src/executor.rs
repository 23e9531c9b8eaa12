//! Running a plan through the CNI runtime (the thin effectful side): ADD in the order
//! [`schedule`] decides (delegates that do not depend on each other concurrently, the cluster
//! network among them) with rollback of what it attached on failure and results in plan order;
//! DEL in reverse collecting every error; CHECK on every delegate.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use weft_cni::runtime::exec::PluginExec;
use weft_cni::{
    CniArgs, CniResult, CniRuntime, ConfigError, Delegate, DelegateError, GcAttachment, RuntimeConf,
};
use weft_netconf::{NetworkStatus, network_statuses};

use crate::devices::{DeviceAttachment, parse_device_info};
use crate::gateway::{RouteAction, apply_route_action};
use crate::plan::{AttachmentRequest, DelegatePlan};
use crate::teardown::{add_failure_message, rollback_targets};

/// Applies a delegate's default-route edits inside the pod's network namespace.
pub trait RouteEditor: Sync {
    /// Delete/add default routes on `ifname` in `netns` as `action` says.
    fn apply(&self, netns: &str, ifname: &str, action: &RouteAction) -> Result<(), String>;
}

/// For plans without route actions: any action is an error (nothing may be silently skipped).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoRouteEditor;

impl RouteEditor for NoRouteEditor {
    fn apply(&self, _netns: &str, ifname: &str, _action: &RouteAction) -> Result<(), String> {
        Err(format!(
            "default-route requested on {ifname} but no route editor is configured"
        ))
    }
}

/// What a successful ADD produced.
#[derive(Clone, Debug, PartialEq)]
pub struct AddOutcome {
    /// The result for the runtime: the master's (the first delegate's if none is master).
    pub result: CniResult,
    /// Every delegate's result in plan order, after route edits (cache them for DEL/CHECK).
    pub results: Vec<CniResult>,
    /// The network-status entries, in plan order.
    pub statuses: Vec<NetworkStatus>,
}

/// Why running a plan failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// ADD failed at a delegate; everything started was rolled back.
    #[error("{message}{}", rollback_suffix(.rollback_errors))]
    Add {
        /// Multus's message naming the pod and the network.
        message: String,
        /// Index of the failed delegate.
        failed: usize,
        /// Rollback DELs that failed too, `(network, error)`.
        rollback_errors: Vec<(String, String)>,
        /// What this ADD attached and could not remove, for the runtime's DEL to retry (plan
        /// index, ADD result, in plan order): the delegates whose rollback DEL failed, and a
        /// failed conflist whose undo of its earlier plugins failed (with the result they made;
        /// what they attached is this ADD's own, so a DEL of it removes nobody else's).
        held: Vec<(usize, CniResult)>,
        /// Every delegate that failed found no free plugin slot (`ExecError::NoSlot`: the
        /// node's bound on plugins at once stayed full). A retry may well succeed: CNI code 11,
        /// not 100.
        no_slot: bool,
    },
    /// Some delegates failed DEL or CHECK; every delegate was attempted.
    #[error("errors: {}", .0.iter().map(|(n, e)| format!("{n}: {e}")).collect::<Vec<_>>().join(" / "))]
    Delegates(Vec<(String, String)>),
}

impl ExecutorError {
    /// The CNI error for the runtime (code 100, delegate failed; 11, try again later, when a
    /// delegate found no free plugin slot; the message names the network(s)).
    pub fn to_cni_error(&self) -> weft_cni::CniError {
        let code = match self {
            Self::Add { no_slot: true, .. } => weft_cni::codes::TRY_AGAIN_LATER,
            _ => weft_cni::codes::DELEGATE_FAILED,
        };
        weft_cni::CniError::new(code, self.to_string())
    }
}

/// Why one delegate's ADD failed.
#[derive(Debug)]
struct AddFailure {
    message: String,
    /// A plugin of it found no free plugin slot (for a conflist, maybe after earlier ones ran).
    no_slot: bool,
    /// What the delegate still has attached: a conflist whose later plugin failed and whose
    /// undo of the earlier ones failed too (`DelegateError::still_attached`).
    attached: Option<Box<CniResult>>,
}

impl From<String> for AddFailure {
    fn from(message: String) -> Self {
        Self {
            message,
            no_slot: false,
            attached: None,
        }
    }
}

fn rollback_suffix(errors: &[(String, String)]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let list: Vec<String> = errors.iter().map(|(n, e)| format!("{n}: {e}")).collect();
    format!(" (rollback also failed: {})", list.join(" / "))
}

/// How a pod's delegates are run, decided from its plans alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The master (cluster network) is ADDed alone before the others and DELeted after them.
    pub master_alone: bool,
    /// How many delegates are ADDed at once, the master among them unless it runs alone
    /// (1: one after another, in plan order on ADD and in reverse on DEL).
    pub workers: usize,
    /// How many delegates are DELeted at once: every one (but a master that runs alone, which
    /// goes last), at most [`DELS_AT_ONCE`], unless they run one after another. A DEL mostly
    /// waits for the kernel (its links go after RCU grace periods), so a pod's DELs all at once
    /// end soonest, whatever bounds its ADDs (docs/benchmarks.md: 5 DELs of a pod at once
    /// instead of 4 and then 1).
    pub del_workers: usize,
}

/// The most delegates of one pod DELeted at once: a pod with very many networks (an SR-IOV
/// VM with dozens of VFs, a tenant's annotation listing a NAD a hundred times) must not start
/// a thread and a plugin process per network at the same moment.
pub const DELS_AT_ONCE: usize = 16;

/// The order of a pod's delegates with up to `parallelism` at once. Multus runs them one after
/// another; weft runs them concurrently unless the order matters:
/// - a delegate that changes shared state of the pod's namespace
///   ([`DelegateConfig::needs_plan_order`](weft_netconf::DelegateConfig::needs_plan_order):
///   `linkInContainer`, `vrf`, `sbr` without a table) → every delegate in plan order;
/// - a `default-route` edit on any interface, or a secondary that may add a default route of
///   its own ([`DelegateConfig::may_add_default_route`](weft_netconf::DelegateConfig::may_add_default_route))
///   → the master first, alone (its default route is in place, or edited, before a secondary
///   adds one: the reference plugins add routes exclusively, so the second one fails, and with
///   Multus that is always the secondary);
/// - otherwise the master is one of the concurrent delegates (it has no reason to go first:
///   the interfaces, bridges and IPAM ranges are each delegate's own).
pub fn schedule(plans: &[DelegatePlan], parallelism: usize) -> Schedule {
    let has_master = plans.first().is_some_and(|p| p.is_master);
    if parallelism <= 1 || plans.iter().any(|p| p.config.needs_plan_order()) {
        return Schedule {
            master_alone: has_master,
            workers: 1,
            del_workers: 1,
        };
    }
    let master_alone = has_master
        && plans
            .iter()
            .any(|p| p.default_route.action.is_some() || (!p.is_master && p.config.may_add_default_route()));
    let rest = (plans.len() - usize::from(master_alone)).max(1);
    Schedule {
        master_alone,
        workers: parallelism.min(rest),
        del_workers: rest.min(DELS_AT_ONCE),
    }
}

/// Runs plans through a [`CniRuntime`].
pub struct Executor<'a, E: PluginExec> {
    cni: &'a CniRuntime<E>,
    routes: &'a dyn RouteEditor,
    parallelism: usize,
}

impl<'a, E: PluginExec> Executor<'a, E> {
    /// Sequential execution (Multus's behaviour).
    pub fn new(cni: &'a CniRuntime<E>, routes: &'a dyn RouteEditor) -> Self {
        Self {
            cni,
            routes,
            parallelism: 1,
        }
    }

    /// Run up to `n` delegates at once (≥ 1; see [`schedule`] for when the master still runs
    /// alone and when everything runs in order). Results, statuses and rollback order stay in
    /// plan order.
    pub fn with_parallelism(mut self, n: usize) -> Self {
        self.parallelism = n.max(1);
        self
    }

    /// ADD every delegate in the order [`schedule`] decides. On the first failure no further
    /// delegate starts, and every delegate whose ADD
    /// succeeded is DELeted in reverse plan order (not the failed one: see `rollback_targets`).
    pub fn add(
        &self,
        request: &AttachmentRequest,
        plans: &[DelegatePlan],
    ) -> Result<AddOutcome, ExecutorError> {
        let slots: Vec<Mutex<Option<Result<CniResult, AddFailure>>>> =
            plans.iter().map(|_| Mutex::new(None)).collect();
        let failed = AtomicBool::new(false);
        let run = |i: usize| {
            let outcome = self.add_one(request, &plans[i]);
            if outcome.is_err() {
                failed.store(true, Ordering::SeqCst);
            }
            *slots[i].lock().expect("slot lock") = Some(outcome);
        };
        let order = schedule(plans, self.parallelism);
        let first_parallel = usize::from(order.master_alone);
        for i in 0..first_parallel {
            run(i);
        }
        if order.workers == 1 {
            for i in first_parallel..plans.len() {
                if failed.load(Ordering::SeqCst) {
                    break;
                }
                run(i);
            }
        } else if !failed.load(Ordering::SeqCst) {
            let next = AtomicUsize::new(first_parallel);
            std::thread::scope(|scope| {
                for _ in 0..order.workers {
                    scope.spawn(|| {
                        loop {
                            if failed.load(Ordering::SeqCst) {
                                break;
                            }
                            let i = next.fetch_add(1, Ordering::SeqCst);
                            if i >= plans.len() {
                                break;
                            }
                            run(i);
                        }
                    });
                }
            });
        }
        let outcomes: Vec<Option<Result<CniResult, AddFailure>>> = slots
            .into_iter()
            .map(|s| s.into_inner().expect("slot lock"))
            .collect();
        if let Some(failed_index) = outcomes.iter().position(|o| matches!(o, Some(Err(_)))) {
            let Some(Err(error)) = &outcomes[failed_index] else {
                unreachable!("position matched an error")
            };
            // Only what this ADD made is undone: the delegates whose ADD succeeded. A failed
            // delegate is not DELeted: its ADD may have failed because its interface name was
            // taken (a namespace shared with another container), and its DEL would remove the
            // other container's interface.
            let succeeded: Vec<bool> = outcomes.iter().map(|o| matches!(o, Some(Ok(_)))).collect();
            let mut rollback_errors = Vec::new();
            let mut held = Vec::new();
            for i in rollback_targets(&succeeded) {
                let Some(Ok(result)) = &outcomes[i] else {
                    continue;
                };
                if let Err(e) = self.del_one(request, &plans[i], Some(result)) {
                    rollback_errors.push((plans[i].display_name.clone(), e));
                    held.push((i, result.clone()));
                }
            }
            // A failed conflist whose own undo failed holds what its earlier plugins made: the
            // runtime's DEL retries the list (its first plugin succeeded, so the interface is
            // this ADD's, not another container's).
            held.extend(outcomes.iter().enumerate().filter_map(|(i, o)| match o {
                Some(Err(AddFailure {
                    attached: Some(result),
                    ..
                })) => Some((i, (**result).clone())),
                _ => None,
            }));
            held.sort_by_key(|(i, _)| *i);
            return Err(ExecutorError::Add {
                message: add_failure_message(&request.k8s, &plans[failed_index], &error.message),
                failed: failed_index,
                rollback_errors,
                held,
                // Retriable only if no delegate failed for another reason.
                no_slot: outcomes.iter().all(|o| !matches!(o, Some(Err(f)) if !f.no_slot)),
            });
        }
        let results: Vec<CniResult> = outcomes
            .into_iter()
            .map(|o| o.expect("every delegate ran").expect("no failure"))
            .collect();
        let master = plans.iter().position(|p| p.is_master).unwrap_or(0);
        let statuses = plans
            .iter()
            .zip(&results)
            .flat_map(|(plan, result)| {
                let device_info = plan.device.as_ref().and_then(read_device_info);
                network_statuses(result, &plan.display_name, plan.is_master, device_info.as_ref())
            })
            .collect();
        Ok(AddOutcome {
            result: results.get(master).cloned().unwrap_or_default(),
            results,
            statuses,
        })
    }

    /// DEL every delegate in reverse plan order (with parallelism: all at once, up to
    /// [`DELS_AT_ONCE`], the master last when [`schedule`] runs it alone), whatever fails;
    /// `cached` are the ADD results in plan order when known (for `prevResult`).
    pub fn del(
        &self,
        request: &AttachmentRequest,
        plans: &[DelegatePlan],
        cached: &[Option<CniResult>],
    ) -> Result<(), ExecutorError> {
        let del = |i: usize| {
            self.del_one(request, &plans[i], cached.get(i).and_then(Option::as_ref))
                .err()
                .map(|e| (plans[i].display_name.clone(), e))
        };
        let order = schedule(plans, self.parallelism);
        let master_last = usize::from(order.master_alone);
        let errors: Vec<(String, String)> = if order.del_workers == 1 {
            (0..plans.len()).rev().filter_map(del).collect()
        } else {
            // Concurrently (the master last when it ran alone first); errors in reverse plan
            // order.
            let slots: Vec<Mutex<Option<(String, String)>>> =
                plans.iter().map(|_| Mutex::new(None)).collect();
            let next = AtomicUsize::new(master_last);
            std::thread::scope(|scope| {
                for _ in 0..order.del_workers {
                    scope.spawn(|| {
                        loop {
                            let i = next.fetch_add(1, Ordering::SeqCst);
                            if i >= plans.len() {
                                break;
                            }
                            *slots[i].lock().expect("slot lock") = del(i);
                        }
                    });
                }
            });
            if master_last == 1 {
                *slots[0].lock().expect("slot lock") = del(0);
            }
            slots
                .into_iter()
                .rev()
                .filter_map(|s| s.into_inner().expect("slot lock"))
                .collect()
        };
        match errors.is_empty() {
            true => Ok(()),
            false => Err(ExecutorError::Delegates(errors)),
        }
    }

    /// CHECK every delegate (in plan order), reporting every failure.
    pub fn check(
        &self,
        request: &AttachmentRequest,
        plans: &[DelegatePlan],
        cached: &[Option<CniResult>],
    ) -> Result<(), ExecutorError> {
        let errors: Vec<(String, String)> = plans
            .iter()
            .enumerate()
            .filter_map(|(i, plan)| {
                let outcome = delegate_of(plan).and_then(|d| {
                    d.check(
                        self.cni,
                        &runtime_conf(request, plan, plan.del_cni_args()),
                        cached.get(i).and_then(Option::as_ref),
                    )
                    .map_err(|e| e.to_string())
                });
                outcome.err().map(|e| (plan.display_name.clone(), e))
            })
            .collect();
        match errors.is_empty() {
            true => Ok(()),
            false => Err(ExecutorError::Delegates(errors)),
        }
    }

    /// STATUS of every given network (the cluster network and every network the node uses,
    /// not only the cluster network as Multus), reporting every failure.
    pub fn status(&self, plans: &[DelegatePlan]) -> Result<(), ExecutorError> {
        let errors: Vec<(String, String)> = plans
            .iter()
            .filter_map(|plan| {
                delegate_of(plan)
                    .and_then(|d| d.status(self.cni).map_err(|e| e.to_string()))
                    .err()
                    .map(|e| (plan.display_name.clone(), e))
            })
            .collect();
        match errors.is_empty() {
            true => Ok(()),
            false => Err(ExecutorError::Delegates(errors)),
        }
    }

    /// GC every network of [`crate::gc_targets`] with its attachments to keep, reporting
    /// every failure.
    pub fn gc(&self, targets: &[(DelegatePlan, Vec<GcAttachment>)]) -> Result<(), ExecutorError> {
        let errors: Vec<(String, String)> = targets
            .iter()
            .filter_map(|(plan, valid)| {
                delegate_of(plan)
                    .and_then(|d| d.gc(self.cni, valid).map_err(|e| e.to_string()))
                    .err()
                    .map(|e| (plan.network_name().to_owned(), e))
            })
            .collect();
        match errors.is_empty() {
            true => Ok(()),
            false => Err(ExecutorError::Delegates(errors)),
        }
    }

    fn add_one(&self, request: &AttachmentRequest, plan: &DelegatePlan) -> Result<CniResult, AddFailure> {
        let delegate = delegate_of(plan).map_err(AddFailure::from)?;
        if let Some(device) = &plan.device {
            // Best effort, as Multus: the device plugin may not write device-info at all.
            let _ = copy_device_info(device);
        }
        let result = delegate
            .add(self.cni, &runtime_conf(request, plan, plan.add_cni_args()))
            .map_err(|e: DelegateError| AddFailure {
                no_slot: e.is_no_slot(),
                message: e.to_string(),
                attached: e.still_attached().cloned().map(Box::new),
            })?;
        let touched = !result.interfaces.is_empty() || !result.ips.is_empty();
        match &plan.default_route.action {
            Some(action) if touched => {
                self.routes
                    .apply(&request.netns, &plan.ifname, action)
                    .map_err(AddFailure::from)?;
                Ok(apply_route_action(&result, action))
            }
            _ => Ok(result),
        }
    }

    fn del_one(
        &self,
        request: &AttachmentRequest,
        plan: &DelegatePlan,
        cached: Option<&CniResult>,
    ) -> Result<(), String> {
        if let Some(file) = plan.device_info_file() {
            let _ = std::fs::remove_file(file);
        }
        match delegate_of(plan)?.del(
            self.cni,
            &runtime_conf(request, plan, plan.del_cni_args()),
            cached,
        ) {
            // A plugin that is not installed cannot hold anything for this attachment (its ADD
            // could not have run either); failing would block the sandbox's removal forever.
            Err(e) if only_missing_plugins(&e) => Ok(()),
            other => other.map_err(|e| e.to_string()),
        }
    }
}

fn only_missing_plugins(error: &weft_cni::runtime::DelegateError) -> bool {
    use weft_cni::runtime::DelegateError;
    match error {
        DelegateError::NotFound(_) => true,
        DelegateError::Multiple(errors) => errors.iter().all(only_missing_plugins),
        _ => false,
    }
}

/// Copy the device plugin's device-info file to the attachment's (mode 0444, never over an
/// existing file; Multus `CopyDeviceInfoForCNIFromDP`).
fn copy_device_info(device: &DeviceAttachment) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if device.dp_device_info_file.is_empty() {
        return Ok(());
    }
    let bytes = std::fs::read(&device.dp_device_info_file)?;
    if parse_device_info(&bytes).is_none() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "device-plugin device-info is not a JSON object",
        ));
    }
    let target = std::path::Path::new(&device.cni_device_info_file);
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(target)?
        .write_all(&bytes)
}

/// The attachment's device-info file, whoever wrote it (`None` when absent or not an object).
fn read_device_info(device: &DeviceAttachment) -> Option<serde_json::Value> {
    parse_device_info(&std::fs::read(&device.cni_device_info_file).ok()?)
}

fn delegate_of(plan: &DelegatePlan) -> Result<Delegate, String> {
    Delegate::from_bytes(plan.config.text().as_bytes()).map_err(|e: ConfigError| e.to_string())
}

/// The runtime config `plan`'s delegate gets for `request`, with CNI_ARGS `args`
/// ([`DelegatePlan::add_cni_args`] or [`DelegatePlan::del_cni_args`]).
pub fn runtime_conf(
    request: &AttachmentRequest,
    plan: &DelegatePlan,
    args: Vec<(String, String)>,
) -> RuntimeConf {
    RuntimeConf {
        container_id: request.container_id.clone(),
        netns: request.netns.clone(),
        ifname: plan.ifname.clone(),
        args: CniArgs::from_pairs(args),
        capability_args: plan.capability_args.clone(),
    }
}

#[cfg(test)]
mod tests;
