//! The meta-plugin's decisions: configuration, delegate planning (cluster network, default
//! networks, annotation networks, the auxiliary chain), namespace isolation, default routes,
//! device IDs and device-info paths, `CNI_ARGS` and capability args, rollback and teardown
//! order, the per-container cache, hot-plug status, and the thick-mode configuration files.
//! Everything here is pure; the agent executes the plans.

pub mod args;
pub mod aux_chain;
pub mod cache;
pub mod catalog;
pub mod config;
pub mod devices;
pub mod executor;
pub mod flow;
pub mod gateway;
pub mod hotplug;
pub mod install;
pub mod isolation;
pub mod plan;
pub mod request;
pub mod resolve;
pub mod teardown;

pub use args::{K8sArgs, delegate_cni_args, join_cni_args};
pub use aux_chain::{AuxChainError, PASSTHRU_TYPE, aux_chain_dir, resolve_aux_chain};
pub use cache::{CACHE_VERSION, CacheError, CacheRecord, DelDecision, decide_del, gc_targets};
pub use catalog::{MemoryCatalog, NadFetches, NetworkCatalog, PathEntry, RecordingCatalog, plan_fetching};
pub use config::{ConfigError, LogLevel, MetaConfig, parse_global_namespaces};
pub use devices::{
    DeviceAllocator, DeviceAttachment, DeviceError, PodDeviceEntry, cni_device_info_path, device_attachment,
    dp_device_info_path, parse_device_info, parse_kubelet_checkpoint, with_device_id,
};
pub use executor::{
    AddOutcome, DELS_AT_ONCE, Executor, ExecutorError, NoRouteEditor, RouteEditor, Schedule, schedule,
};
pub use flow::{
    AddDecision, AddError, DelPlan, PodLookup, decide_add, decide_del_plan, del_plan_of_record,
    plan_error_code,
};
pub use gateway::{DefaultRoutePlan, GatewayError, RouteAction, apply_route_action, plan_default_routes};
pub use hotplug::{
    HotplugError, HotplugScope, hotplug_diff, plan_hotplug_add, status_after_add, status_after_remove,
};
pub use isolation::{IsolationError, check_isolation};
pub use plan::{
    AttachmentRequest, AttachmentRequests, DelegatePlan, PlanError, Pod, merge_cni_args, plan_add,
    plan_del_recompute,
};
pub use request::{CONFIG_SOURCE_ANNOTATION, UidMismatch, check_pod_uid, synthetic_result};
pub use resolve::{NetworkSource, ResolveError, Resolved, resolve_nad, resolve_static_network};
pub use teardown::{
    CacheAfterDel, add_failure_message, cache_after_del, del_failure_message, rollback_order,
    rollback_targets, teardown_order,
};
