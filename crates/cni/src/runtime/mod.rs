//! The runtime side ("libcni in Rust"): run a network configuration's plugins for ADD, DEL,
//! CHECK, STATUS and GC.
//!
//! [`plan`] builds each plugin's stdin and environment purely; [`exec`] runs binaries.
//! [`CniRuntime`] ties them together with libcni's list semantics, plus one deliberate
//! difference: each plugin is handed the newest spec version it supports that is not newer
//! than the list's (probed once per binary with VERSION), so a 1.1.0 list can drive plugins
//! that only speak 1.0.0. Results come back as canonical [`CniResult`]s whatever version the
//! plugin wrote.

pub mod exec;
pub mod limit;
pub mod plan;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use crate::args::CniArgs;
use crate::config::{AnyNetworkConfig, ConfigError, JsonObject, NetworkConfig, NetworkConfigList};
use crate::convert::{ResultError, parse_result, result_to_value};
use crate::error::{CniError, codes};
use crate::plugin::GcAttachment;
use crate::request::{CniCommand, RequestEnv};
use crate::result::CniResult;
use crate::version::{CniVersion, VersionReply, negotiate};

use exec::{ExecError, FindError, PluginExec, ProcessExec};

/// The attachment parameters of a request (libcni `RuntimeConf`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeConf {
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_NETNS`: path of the container's network namespace.
    pub netns: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_ARGS`.
    pub args: CniArgs,
    /// Capability arguments (`mac`, `ips`, `portMappings`, ...); each plugin receives in
    /// `runtimeConfig` only those it declares in `capabilities`.
    pub capability_args: JsonObject,
}

impl RuntimeConf {
    /// The attachment of a request as received (container id, netns, ifname, args), with no
    /// capability args.
    pub fn from_request(request: &RequestEnv) -> Self {
        Self {
            container_id: request.container_id.clone(),
            netns: request.netns.clone(),
            ifname: request.ifname.clone(),
            args: request.args.clone(),
            capability_args: JsonObject::new(),
        }
    }
}

/// Why running a delegate failed.
#[derive(Debug, thiserror::Error)]
pub enum DelegateError {
    /// The plugin binary is not in the search path (or its name is invalid).
    #[error("{0}")]
    NotFound(#[from] FindError),
    /// The plugin ran and reported an error (its stderr is in `error.details`).
    #[error("plugin type={plugin:?} {command}: {error}")]
    Plugin {
        /// The plugin type.
        plugin: String,
        /// The verb.
        command: CniCommand,
        /// The plugin's CNI error (or one made from its exit status when stdout had none).
        error: CniError,
    },
    /// The plugin could not be started or timed out.
    #[error("plugin type={plugin:?} {command}: {source}")]
    Exec {
        /// The plugin type.
        plugin: String,
        /// The verb.
        command: CniCommand,
        /// What went wrong.
        source: ExecError,
    },
    /// A result could not be read, or not written in the version a plugin needs.
    #[error("plugin type={plugin:?} {command}: {source}")]
    Result {
        /// The plugin type.
        plugin: String,
        /// The verb.
        command: CniCommand,
        /// The conversion error.
        source: ResultError,
    },
    /// The request is not possible with these versions (e.g. CHECK on 0.3.1, or a plugin
    /// that supports nothing at or below the list's version).
    #[error("network {network:?}: {reason}")]
    Incompatible {
        /// The network name.
        network: String,
        /// Why.
        reason: String,
    },
    /// CHECK needs the cached result of the ADD.
    #[error("network {0:?}: CHECK needs the cached ADD result")]
    MissingCachedResult(String),
    /// The configuration is invalid.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// Several plugins failed (DEL and GC keep going and report all).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Multiple(Vec<DelegateError>),
    /// A list's ADD failed, and DELeting the plugins before the failing one failed too: what
    /// they attached may still be there.
    #[error("{add}; undoing the plugins before it failed: {undo}")]
    Undo {
        /// The ADD failure.
        add: Box<DelegateError>,
        /// The undo's failures.
        undo: Box<DelegateError>,
        /// The result the list had made before the failing plugin: what may still be attached,
        /// for a later DEL of the list ([`DelegateError::still_attached`]).
        attached: Box<CniResult>,
    },
}

impl DelegateError {
    /// Whether the plugin found no free slot under the node's bound
    /// ([`exec::ExecError::NoSlot`]), also behind an [`DelegateError::Undo`].
    pub fn is_no_slot(&self) -> bool {
        match self {
            Self::Exec {
                source: exec::ExecError::NoSlot { .. },
                ..
            } => true,
            Self::Undo { add, .. } => add.is_no_slot(),
            _ => false,
        }
    }

    /// What a failed ADD left attached that a DEL of the same configuration should remove: a
    /// list whose later plugin failed and whose undo of the plugins before it failed too
    /// ([`DelegateError::Undo`]): its result up to the failing plugin. `None` for any other
    /// failure (nothing of it stays, or it is the plugin's own to clean up).
    pub fn still_attached(&self) -> Option<&CniResult> {
        match self {
            Self::Undo { attached, .. } => Some(attached),
            _ => None,
        }
    }

    /// The error as a CNI error for a runtime: a plugin's own error keeps its code (so
    /// STATUS codes 50/51 pass through), version problems are code 1, the rest code 100.
    pub fn to_cni_error(&self) -> CniError {
        match self {
            Self::Plugin { error, .. } => error.clone(),
            Self::Undo { add, undo, .. } => {
                let mut error = add.to_cni_error();
                let undo = format!("undoing the plugins before it failed: {undo}");
                error.details = match error.details.is_empty() {
                    true => undo,
                    false => format!("{}; {undo}", error.details),
                };
                error
            }
            Self::Incompatible { .. } => CniError::new(codes::INCOMPATIBLE_VERSION, self.to_string()),
            Self::Multiple(errors) if errors.len() == 1 => errors[0].to_cni_error(),
            _ => CniError::new(codes::DELEGATE_FAILED, self.to_string()),
        }
    }
}

/// What VERSION said for a binary, and the binary's mtime when asked (`None`: no useful answer).
type ProbedVersions = (Option<SystemTime>, Option<Vec<CniVersion>>);

/// VERSION answers per plugin binary, valid while the binary's mtime is unchanged.
#[derive(Debug, Default)]
struct VersionCache(Mutex<HashMap<PathBuf, ProbedVersions>>);

impl VersionCache {
    /// The cache shared by every [`CniRuntime::new`] in this process, so a runtime made per
    /// request still probes each binary only once.
    fn shared() -> Arc<Self> {
        static SHARED: OnceLock<Arc<VersionCache>> = OnceLock::new();
        Arc::clone(SHARED.get_or_init(Default::default))
    }

    fn get(&self, binary: &Path, modified: Option<SystemTime>) -> Option<Option<Vec<CniVersion>>> {
        let cache = self.0.lock().expect("version cache lock never poisoned");
        cache
            .get(binary)
            .filter(|(at, _)| *at == modified)
            .map(|(_, versions)| versions.clone())
    }

    fn put(&self, binary: &Path, modified: Option<SystemTime>, versions: Option<Vec<CniVersion>>) {
        let mut cache = self.0.lock().expect("version cache lock never poisoned");
        cache.insert(binary.to_path_buf(), (modified, versions));
    }
}

/// Runs delegate plugins found in a search path.
pub struct CniRuntime<E: PluginExec = ProcessExec> {
    search_path: Vec<PathBuf>,
    executor: E,
    negotiate_versions: bool,
    versions: Arc<VersionCache>,
}

impl CniRuntime<ProcessExec> {
    /// A runtime running plugins from `search_path` as child processes.
    /// VERSION answers are cached process-wide (per binary and mtime).
    pub fn new(search_path: impl IntoIterator<Item = impl Into<PathBuf>>) -> Self {
        let mut runtime = Self::with_executor(search_path, ProcessExec::default());
        runtime.versions = VersionCache::shared();
        runtime
    }

    /// Kills plugins running longer than `timeout` (default 60 s).
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.executor.timeout = timeout;
        self
    }

    /// Adds `vars` to every plugin's environment (inherited by the IPAM plugins it runs).
    pub fn with_env(mut self, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        self.executor.extra_env.extend(vars);
        self
    }

    /// Runs at most `limit`'s bound of plugins at once, counted with every runtime sharing it.
    pub fn with_exec_limit(mut self, limit: Arc<limit::ExecLimit>) -> Self {
        self.executor.limit = Some(limit);
        self
    }

    /// Runs plugins inside the network namespace at `netns` (host-side links land there).
    pub fn in_netns(mut self, netns: impl Into<PathBuf>) -> Self {
        self.executor.netns = Some(netns.into());
        self
    }
}

impl<E: PluginExec> CniRuntime<E> {
    /// A runtime with a custom executor (a netns, a timeout, or a fake for tests) and its own
    /// VERSION cache.
    pub fn with_executor(search_path: impl IntoIterator<Item = impl Into<PathBuf>>, executor: E) -> Self {
        Self {
            search_path: search_path.into_iter().map(Into::into).collect(),
            executor,
            negotiate_versions: true,
            versions: Arc::default(),
        }
    }

    /// Turns per-plugin version negotiation off: every plugin gets the list's `cniVersion`
    /// exactly as libcni does.
    pub fn without_version_negotiation(mut self) -> Self {
        self.negotiate_versions = false;
        self
    }

    /// The plugin search path (also passed to plugins as `CNI_PATH`).
    pub fn search_path(&self) -> &[PathBuf] {
        &self.search_path
    }

    /// The executor.
    pub fn executor(&self) -> &E {
        &self.executor
    }

    /// ADD: runs the plugins in order, each receiving the previous one's result as
    /// `prevResult`; returns the last result, canonical, with `cniVersion` = the list's.
    ///
    /// When a plugin after the first fails, the plugins before it are DELeted, last to first,
    /// with the result they made as `prevResult` ([`plan::undo_targets`]): what this ADD
    /// attached is not left behind (libcni leaves that to the runtime's DEL, which a
    /// meta-plugin that rolls a failed delegate back never sends it). The failing plugin is not
    /// DELeted: it cleans up its own failed ADD. An undo that fails too is reported in
    /// [`DelegateError::Undo`].
    pub fn add(&self, list: &NetworkConfigList, runtime: &RuntimeConf) -> Result<CniResult, DelegateError> {
        let mut previous: Option<CniResult> = None;
        for (index, plugin) in list.plugins().iter().enumerate() {
            match self.add_plugin(list, plugin, runtime, previous.as_ref()) {
                Ok(result) => previous = Some(result),
                Err(error) => {
                    let undo: Vec<DelegateError> = plan::undo_targets(index)
                        .into_iter()
                        .filter_map(|i| {
                            let cached = previous
                                .as_ref()
                                .filter(|_| list.cni_version() >= CniVersion::V0_4_0);
                            self.run_with_cached(list, &list.plugins()[i], CniCommand::Del, runtime, cached)
                                .err()
                        })
                        .collect();
                    return match (collect_errors(undo), previous) {
                        (Err(undo), Some(attached)) => Err(DelegateError::Undo {
                            add: Box::new(error),
                            undo: Box::new(undo),
                            attached: Box::new(attached),
                        }),
                        _ => Err(error),
                    };
                }
            }
        }
        let mut result = previous.expect("a list has at least one plugin");
        result.cni_version = list.cni_version().to_string();
        Ok(result)
    }

    /// One plugin's ADD with the previous plugin's result.
    fn add_plugin(
        &self,
        list: &NetworkConfigList,
        plugin: &NetworkConfig,
        runtime: &RuntimeConf,
        previous: Option<&CniResult>,
    ) -> Result<CniResult, DelegateError> {
        let (binary, version) = self.prepare(list, plugin)?;
        let prev_value = previous
            .map(|result| self.result_for(plugin, CniCommand::Add, result, version))
            .transpose()?;
        let stdin = plan::plugin_stdin(list.name(), version, plugin, prev_value, &runtime.capability_args);
        let stdout = self.invoke(plugin, CniCommand::Add, &binary, Some(runtime), &stdin)?;
        parse_result(&stdout).map_err(|source| DelegateError::Result {
            plugin: plugin.plugin_type().into(),
            command: CniCommand::Add,
            source,
        })
    }

    /// DEL: runs the plugins in reverse order, each receiving `cached` (the ADD result) as
    /// `prevResult` when the list's version is ≥ 0.4.0. Keeps going past failures and reports
    /// them all.
    pub fn del(
        &self,
        list: &NetworkConfigList,
        runtime: &RuntimeConf,
        cached: Option<&CniResult>,
    ) -> Result<(), DelegateError> {
        let cached = cached.filter(|_| list.cni_version() >= CniVersion::V0_4_0);
        let errors: Vec<DelegateError> = list
            .plugins()
            .iter()
            .rev()
            .filter_map(|plugin| {
                self.run_with_cached(list, plugin, CniCommand::Del, runtime, cached)
                    .err()
            })
            .collect();
        collect_errors(errors)
    }

    /// CHECK (list version ≥ 0.4.0): runs the plugins in order with the cached ADD result as
    /// `prevResult`, stopping at the first failure. A list with `disableCheck` passes.
    pub fn check(
        &self,
        list: &NetworkConfigList,
        runtime: &RuntimeConf,
        cached: Option<&CniResult>,
    ) -> Result<(), DelegateError> {
        if !list.cni_version().supports_check() {
            return Err(DelegateError::Incompatible {
                network: list.name().into(),
                reason: format!(
                    "configuration version {} does not support CHECK",
                    list.cni_version()
                ),
            });
        }
        if list.disable_check() {
            return Ok(());
        }
        let cached = cached.ok_or_else(|| DelegateError::MissingCachedResult(list.name().into()))?;
        list.plugins().iter().try_for_each(|plugin| {
            self.run_with_cached(list, plugin, CniCommand::Check, runtime, Some(cached))
        })
    }

    /// STATUS (list version ≥ 1.1.0, else a no-op success): asks each plugin that speaks
    /// 1.1.0, stopping at the first failure (codes 50/51 come back in
    /// [`DelegateError::Plugin`]). Plugins older than 1.1.0 cannot answer and are skipped.
    pub fn status(&self, list: &NetworkConfigList) -> Result<(), DelegateError> {
        if !list.cni_version().supports_status_and_gc() {
            return Ok(());
        }
        for plugin in list.plugins() {
            let (binary, version) = self.prepare(list, plugin)?;
            if version.supports_status_and_gc() {
                let stdin = plan::plugin_stdin(list.name(), version, plugin, None, &JsonObject::new());
                self.invoke(plugin, CniCommand::Status, &binary, None, &stdin)?;
            }
        }
        Ok(())
    }

    /// GC (list version ≥ 1.1.0 and no `disableGC`, else a no-op success): sends each plugin
    /// that speaks 1.1.0 the attachments still `valid`, keeps going past failures. Deleting
    /// cached attachments that are not valid (libcni's first GC step) is the caller's job: it
    /// owns the cache.
    pub fn gc(&self, list: &NetworkConfigList, valid: &[GcAttachment]) -> Result<(), DelegateError> {
        if list.disable_gc() || !list.cni_version().supports_status_and_gc() {
            return Ok(());
        }
        let errors = list
            .plugins()
            .iter()
            .filter_map(|plugin| {
                let (binary, version) = match self.prepare(list, plugin) {
                    Ok(prepared) => prepared,
                    Err(error) => return Some(error),
                };
                if !version.supports_status_and_gc() {
                    return None;
                }
                let stdin = plan::gc_stdin(list.name(), version, plugin, valid);
                self.invoke(plugin, CniCommand::Gc, &binary, None, &stdin).err()
            })
            .collect();
        collect_errors(errors)
    }

    /// The versions a plugin binary reports with VERSION (cached per binary and mtime).
    /// `None` when it does not answer VERSION usefully.
    pub fn plugin_versions(&self, binary: &Path) -> Option<Vec<CniVersion>> {
        let modified = binary.metadata().and_then(|m| m.modified()).ok();
        if let Some(versions) = self.versions.get(binary, modified) {
            return versions;
        }
        let env = plan::plugin_env(CniCommand::Version, None, &self.search_path);
        let stdin = format!(r#"{{"cniVersion":"{}"}}"#, CniVersion::LATEST);
        let versions = self
            .executor
            .exec(binary, &env, stdin.as_bytes())
            .ok()
            .and_then(|out| serde_json::from_slice::<VersionReply>(&out).ok())
            .map(|reply| reply.versions())
            .filter(|versions| !versions.is_empty());
        self.versions.put(binary, modified, versions.clone());
        versions
    }

    /// Finds the plugin and picks the version to hand it.
    fn prepare(
        &self,
        list: &NetworkConfigList,
        plugin: &NetworkConfig,
    ) -> Result<(PathBuf, CniVersion), DelegateError> {
        let binary = self.executor.find(plugin.plugin_type(), &self.search_path)?;
        let wanted = list.cni_version();
        if !self.negotiate_versions {
            return Ok((binary, wanted));
        }
        let Some(supported) = self.plugin_versions(&binary) else {
            return Ok((binary, wanted));
        };
        match negotiate(wanted, &supported) {
            Some(version) => Ok((binary, version)),
            None => Err(DelegateError::Incompatible {
                network: list.name().into(),
                reason: format!(
                    "plugin type={:?} supports {:?}, nothing at or below {wanted}",
                    plugin.plugin_type(),
                    supported.iter().map(ToString::to_string).collect::<Vec<_>>()
                ),
            }),
        }
    }

    fn run_with_cached(
        &self,
        list: &NetworkConfigList,
        plugin: &NetworkConfig,
        command: CniCommand,
        runtime: &RuntimeConf,
        cached: Option<&CniResult>,
    ) -> Result<(), DelegateError> {
        let (binary, version) = self.prepare(list, plugin)?;
        if command == CniCommand::Check && !version.supports_check() {
            return Err(DelegateError::Incompatible {
                network: list.name().into(),
                reason: format!(
                    "plugin type={:?} cannot CHECK at version {version}",
                    plugin.plugin_type()
                ),
            });
        }
        let prev = cached
            .filter(|_| version >= CniVersion::V0_4_0)
            .map(|result| self.result_for(plugin, command, result, version))
            .transpose()?;
        let stdin = plan::plugin_stdin(list.name(), version, plugin, prev, &runtime.capability_args);
        self.invoke(plugin, command, &binary, Some(runtime), &stdin)
            .map(drop)
    }

    fn result_for(
        &self,
        plugin: &NetworkConfig,
        command: CniCommand,
        result: &CniResult,
        version: CniVersion,
    ) -> Result<serde_json::Value, DelegateError> {
        result_to_value(result, version).map_err(|source| DelegateError::Result {
            plugin: plugin.plugin_type().into(),
            command,
            source,
        })
    }

    fn invoke(
        &self,
        plugin: &NetworkConfig,
        command: CniCommand,
        binary: &Path,
        runtime: Option<&RuntimeConf>,
        stdin: &JsonObject,
    ) -> Result<Vec<u8>, DelegateError> {
        let env = plan::plugin_env(command, runtime, &self.search_path);
        let stdin = serde_json::to_vec(stdin).expect("a JSON object always serializes");
        self.executor
            .exec(binary, &env, &stdin)
            .map_err(|source| plugin_failure(plugin.plugin_type(), command, source))
    }
}

/// Turns a failed run into a [`DelegateError`]: the CNI error the plugin printed (stderr
/// appended to its details), or one made from the exit status.
fn plugin_failure(plugin: &str, command: CniCommand, failure: ExecError) -> DelegateError {
    let ExecError::Failed {
        status,
        stdout,
        stderr,
    } = failure
    else {
        return DelegateError::Exec {
            plugin: plugin.into(),
            command,
            source: failure,
        };
    };
    let stderr = String::from_utf8_lossy(&stderr).trim().to_string();
    let mut error = serde_json::from_slice::<CniError>(&stdout).unwrap_or_else(|_| {
        let stdout = String::from_utf8_lossy(&stdout).trim().to_string();
        CniError::new(codes::DELEGATE_FAILED, format!("plugin exited with {status}")).with_details(stdout)
    });
    if !stderr.is_empty() {
        error.details = if error.details.is_empty() {
            format!("stderr: {stderr}")
        } else {
            format!("{}; stderr: {stderr}", error.details)
        };
    }
    DelegateError::Plugin {
        plugin: plugin.into(),
        command,
        error,
    }
}

fn collect_errors(mut errors: Vec<DelegateError>) -> Result<(), DelegateError> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(DelegateError::Multiple(errors)),
    }
}

/// A delegate network: a configuration (single plugin or list) the caller runs through a
/// [`CniRuntime`]. A single plugin is run as a one-plugin list with its own name and version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delegate {
    config: AnyNetworkConfig,
    list: NetworkConfigList,
}

impl Delegate {
    /// A delegate for a parsed configuration.
    pub fn new(config: AnyNetworkConfig) -> Self {
        let list = config.clone().into_list();
        Self { config, list }
    }

    /// A delegate from configuration JSON (a `.conf` or a `.conflist`).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ConfigError> {
        AnyNetworkConfig::from_bytes(bytes).map(Self::new)
    }

    /// The network name.
    pub fn name(&self) -> &str {
        self.list.name()
    }

    /// The configuration as given (a single plugin or a list).
    pub fn config(&self) -> &AnyNetworkConfig {
        &self.config
    }

    /// The configuration as a list.
    pub fn as_list(&self) -> &NetworkConfigList {
        &self.list
    }

    /// ADD; see [`CniRuntime::add`].
    pub fn add<E: PluginExec>(
        &self,
        cni: &CniRuntime<E>,
        runtime: &RuntimeConf,
    ) -> Result<CniResult, DelegateError> {
        cni.add(&self.list, runtime)
    }

    /// DEL; see [`CniRuntime::del`].
    pub fn del<E: PluginExec>(
        &self,
        cni: &CniRuntime<E>,
        runtime: &RuntimeConf,
        cached: Option<&CniResult>,
    ) -> Result<(), DelegateError> {
        cni.del(&self.list, runtime, cached)
    }

    /// CHECK; see [`CniRuntime::check`].
    pub fn check<E: PluginExec>(
        &self,
        cni: &CniRuntime<E>,
        runtime: &RuntimeConf,
        cached: Option<&CniResult>,
    ) -> Result<(), DelegateError> {
        cni.check(&self.list, runtime, cached)
    }

    /// STATUS; see [`CniRuntime::status`].
    pub fn status<E: PluginExec>(&self, cni: &CniRuntime<E>) -> Result<(), DelegateError> {
        cni.status(&self.list)
    }

    /// GC; see [`CniRuntime::gc`].
    pub fn gc<E: PluginExec>(
        &self,
        cni: &CniRuntime<E>,
        valid: &[GcAttachment],
    ) -> Result<(), DelegateError> {
        cni.gc(&self.list, valid)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
