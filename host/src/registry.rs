//! The plugins a host serves, by name, and how a new version replaces an old
//! one while claims are being provisioned.
//!
//! Sources (a watched directory, ConfigMaps) hand the registry component
//! bytes; the registry compiles and validates them *before* swapping them in,
//! so a broken file never serves a call. A call holds the version it started
//! with (an `Arc`), so calls in flight finish on it while new calls get the
//! new one.
//!
//! Removal policy: a removed plugin stops provisioning at once, but its last
//! version is kept to delete the volumes it made. After a restart that
//! version is found again in the compile cache by the digest recorded on each
//! volume; if the cache is gone too, deletes fail with an event saying to
//! restore the plugin, and the volume is kept (nothing is lost).
//!
//! One source per plugin: the source whose version serves a plugin owns its
//! name. Another source's version of it is rejected (it is not a way to
//! upgrade) and kept aside; when the owner removes the plugin, that version
//! takes over without a gap, if it loads.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::metrics::Metrics;
use crate::policy::PolicySet;
use crate::provisioner::{
    annotations, DeleteError, DeleteState, NodeStorage, PluginInfo, ProvisionError,
    ProvisionOptions, ProvisionState, Provisioner, ReportedCapacity, ResizeError, ResizeOptions,
    ResizeState, Resized,
};
use crate::runtime::Runtime;
use crate::wasm_provisioner::WasmProvisioner;

/// What became of a new version handed to [`PluginRegistry::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reload {
    /// It serves from now on.
    Loaded { digest: String },
    /// The same bytes already serve (or were already rejected): nothing to do.
    Unchanged,
    /// It cannot be used; the previous version, if any, keeps serving.
    Rejected { reason: String },
    /// The policy gives it to the other side's hosts (`runsOn`): not
    /// loaded here, and nothing is wrong.
    NotHere { reason: String },
}

/// Where a version comes from: a plugin source (one watched directory, or
/// the plugin ConfigMaps of a namespace) and the file or ConfigMap in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub source: String,
    pub item: String,
}

/// The source of plugins named by reference in the policy
/// (`plugins.<name>.image`).
pub const IMAGE_SOURCE: &str = "OCI registries (plugins.<name>.image in the sandbox policy)";

impl Origin {
    pub fn new(source: impl Into<String>, item: impl Into<String>) -> Self {
        Self {
            source: source.into(),
            item: item.into(),
        }
    }

    /// The version `digest` of image `reference`.
    pub fn image(reference: &str, digest: &str) -> Self {
        let repository = reference.split('@').next().unwrap_or(reference);
        Self::new(IMAGE_SOURCE, format!("{repository}@{digest}"))
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.item)
    }
}

/// Loaded plugins, swappable one at a time.
pub struct PluginRegistry {
    runtime: Arc<Runtime>,
    metrics: Arc<Metrics>,
    /// Where plugins come from, for error messages ("`<name>.wasm` files in …").
    sources: String,
    state: RwLock<State>,
    /// One reload at a time, so two versions of a plugin never race to swap.
    reloading: tokio::sync::Mutex<()>,
    /// Counts the versions loaded ([`Provisioner::plugins_changed`]).
    loaded: tokio::sync::watch::Sender<u64>,
    /// Why a plugin source's loader stopped, if one did: no new version
    /// would ever load, so the host is not ready.
    loader_stopped: std::sync::Mutex<Option<String>>,
}

#[derive(Default)]
struct State {
    policies: Arc<PolicySet>,
    serving: BTreeMap<String, Arc<WasmProvisioner>>,
    /// The last version that could not be used, with why; shown to claims
    /// when no version serves, and not retried until its bytes change.
    rejected: BTreeMap<String, (String, String)>,
    /// Removed plugins' last versions, kept to delete their volumes.
    removed: BTreeMap<String, Arc<WasmProvisioner>>,
    /// The source each serving plugin comes from.
    owners: BTreeMap<String, String>,
    /// Another source's version of a plugin that has an owner: it takes
    /// over when the owner removes the plugin.
    contested: BTreeMap<String, (Origin, Vec<u8>)>,
}

impl PluginRegistry {
    /// An empty registry; `sources` tells users where plugins are looked for.
    pub fn new(
        runtime: Arc<Runtime>,
        policies: PolicySet,
        metrics: Arc<Metrics>,
        sources: impl Into<String>,
    ) -> Self {
        report_unusable_grants(&policies, &metrics);
        Self {
            runtime,
            metrics,
            sources: sources.into(),
            state: RwLock::new(State {
                policies: Arc::new(policies),
                ..State::default()
            }),
            reloading: tokio::sync::Mutex::new(()),
            loaded: tokio::sync::watch::channel(0).0,
            loader_stopped: std::sync::Mutex::new(None),
        }
    }

    /// The runtime plugins are compiled and run in.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The sandbox policy in force.
    pub fn policies(&self) -> Arc<PolicySet> {
        self.state.read().expect("registry lock").policies.clone()
    }

    /// The digest of the version of `name` that serves, if one does.
    pub fn serving_digest(&self, name: &str) -> Option<String> {
        let state = self.state.read().expect("registry lock");
        state
            .serving
            .get(name)
            .map(|p| p.plugin().digest().to_owned())
    }

    /// What an operator should look at although the host serves: granted
    /// directories refusing new volumes (`/readyz` shows these).
    pub fn notes(&self) -> Vec<String> {
        let state = self.state.read().expect("registry lock");
        state
            .policies
            .unusable_grants()
            .map(|(plugin, path, found)| {
                format!(
                    "plugin {plugin} makes no new volume in {}: {found}",
                    path.display()
                )
            })
            .collect()
    }

    /// Why the host should not be ready: a plugin loader stopped, or a call
    /// is stuck past its budget on a blocked thread.
    pub fn unready_reason(&self) -> Option<String> {
        self.loader_stopped().or_else(|| {
            let stuck = self.runtime.stuck_calls();
            (!stuck.is_empty()).then(|| stuck.join("; "))
        })
    }

    /// Why a plugin loader stopped (the host should not be ready), if one did.
    pub fn loader_stopped(&self) -> Option<String> {
        self.loader_stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records that a plugin loader stopped; the first reason is kept.
    pub fn report_loader_stopped(&self, why: String) {
        self.loader_stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(why);
    }

    /// The names and digests of the serving plugins.
    pub fn serving(&self) -> Vec<(String, String)> {
        let state = self.state.read().expect("registry lock");
        state
            .serving
            .iter()
            .map(|(name, p)| (name.clone(), p.plugin().digest().to_owned()))
            .collect()
    }

    /// Compiles and validates `wasm` as the new version of `name` and, if it
    /// is good, swaps it in. A version from a source other than the one
    /// serving `name` is rejected, and kept to take over if that one
    /// removes it.
    pub async fn apply(&self, name: &str, wasm: Vec<u8>, origin: &Origin) -> Reload {
        let _one_at_a_time = self.reloading.lock().await;
        {
            let mut state = self.state.write().expect("registry lock");
            if let Err(reason) = state.policies.serves(name) {
                tracing::debug!(plugin = name, %origin, "not loaded: {reason}");
                return Reload::NotHere { reason };
            }
            if let Some(image) = state.policies.image_for(name) {
                if origin.source != IMAGE_SOURCE {
                    let reason = format!(
                        "plugin {name} comes from {} (plugins.{name}.image in the sandbox \
                         policy), so {origin} (in {}) is not loaded: remove it there, or the \
                         image entry",
                        image.reference, origin.source
                    );
                    drop(state);
                    tracing::error!(plugin = name, %origin, "plugin version rejected: {reason}");
                    self.metrics.plugin_reload(name, "rejected");
                    return Reload::Rejected { reason };
                }
            }
            if let Some(owner) = state.owners.get(name).filter(|o| **o != origin.source) {
                let reason = format!(
                    "plugin {name} is already served from {owner}, and {origin} (in {}) is another version of it, which is not loaded. \
                     Give each plugin one source: remove it from one of them (the other then takes over)",
                    origin.source
                );
                state
                    .contested
                    .insert(name.to_owned(), (origin.clone(), wasm));
                drop(state);
                tracing::error!(plugin = name, %origin, "plugin version rejected: {reason}");
                self.metrics.plugin_reload(name, "rejected");
                return Reload::Rejected { reason };
            }
        }
        self.load(name, wasm, origin).await
    }

    /// [`Self::apply`] without the source check; the caller holds `reloading`.
    async fn load(&self, name: &str, wasm: Vec<u8>, origin: &Origin) -> Reload {
        // Hashing a large component takes milliseconds: not on an async worker.
        let (wasm, digest) = tokio::task::spawn_blocking(move || {
            let digest = crate::runtime::digest(&wasm);
            (wasm, digest)
        })
        .await
        .expect("digest task panicked");
        let (previous, policies) = {
            let state = self.state.read().expect("registry lock");
            let serving = state
                .serving
                .get(name)
                .map(|p| p.plugin().digest().to_owned());
            let known = serving.as_deref() == Some(&digest)
                || state.rejected.get(name).is_some_and(|(d, _)| *d == digest);
            if known {
                return Reload::Unchanged;
            }
            (serving, state.policies.clone())
        };
        let started = Instant::now();
        let runtime = self.runtime.clone();
        let plugin_name = name.to_owned();
        let key = digest.clone();
        // Compiling takes up to seconds: keep it off the async workers.
        let compiled =
            tokio::task::spawn_blocking(move || runtime.compile_digested(&plugin_name, &wasm, key))
                .await
                .expect("compile task panicked");
        let loaded = match compiled {
            Ok(compiled) => {
                self.runtime
                    .instantiate(name, compiled, policies.sandbox_for(name))
                    .await
            }
            Err(e) => Err(e),
        };
        let mut state = self.state.write().expect("registry lock");
        match loaded {
            Ok(plugin) => {
                let cache = plugin.compiled().cache;
                state.serving.insert(
                    name.to_owned(),
                    Arc::new(WasmProvisioner::new(
                        Arc::new(plugin),
                        policies.output_for(name),
                    )),
                );
                state.rejected.remove(name);
                state.removed.remove(name);
                state.owners.insert(name.to_owned(), origin.source.clone());
                drop(state);
                tracing::info!(plugin = name, %digest, previous = previous.as_deref().unwrap_or("none"), %origin, ?cache, took = ?started.elapsed(), "plugin version loaded");
                if policies.output_for(name).sources.is_empty() {
                    // An entry without `output` is most likely a policy from
                    // before the output policy: say so loudly. No entry at
                    // all is a plugin this host is not meant to run.
                    if policies.plugin_names().any(|n| n == name) {
                        tracing::warn!(plugin = name, "the sandbox policy grants plugin {name} no volume source kind (plugins.{name}.output.sources), so every volume it returns will be refused; grant what it hands out");
                    } else {
                        tracing::info!(plugin = name, "the sandbox policy has no entry for plugin {name}: it runs with no files or network and may return no volume");
                    }
                }
                self.metrics.plugin_reload(name, "loaded");
                self.metrics
                    .plugin_version(name, previous.as_deref(), Some(&digest));
                self.loaded.send_modify(|n| *n += 1);
                Reload::Loaded { digest }
            }
            Err(e) => {
                let reason = e.to_string();
                state
                    .rejected
                    .insert(name.to_owned(), (digest.clone(), reason.clone()));
                drop(state);
                match &previous {
                    Some(old) => {
                        tracing::error!(plugin = name, %digest, %origin, serving = %old, "plugin version rejected, the previous version keeps serving: {reason}")
                    }
                    None => {
                        tracing::error!(plugin = name, %digest, %origin, "plugin rejected: {reason}")
                    }
                }
                self.metrics.plugin_reload(name, "rejected");
                Reload::Rejected { reason }
            }
        }
    }

    /// Records a version that could not even be read or decoded.
    pub fn reject(&self, name: &str, reason: &str) {
        tracing::error!(plugin = name, "plugin version rejected: {reason}");
        self.state
            .write()
            .expect("registry lock")
            .rejected
            .insert(name.to_owned(), (String::new(), reason.to_owned()));
        self.metrics.plugin_reload(name, "rejected");
    }

    /// Counts a sandbox policy change by its result.
    pub fn policy_reloaded(&self, result: &str) {
        self.metrics
            .policy_reloads
            .get_or_create(&crate::metrics::ResultLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// `origin`'s source no longer offers `name`. If that source served it,
    /// another source's version takes over, or else `name` stops serving new
    /// claims (its last version stays to delete the volumes it made).
    /// Returns whether it served from that source.
    pub async fn remove(&self, name: &str, origin: &Origin) -> bool {
        let _one_at_a_time = self.reloading.lock().await;
        let handover = {
            let mut state = self.state.write().expect("registry lock");
            if state.owners.get(name).is_some_and(|o| *o != origin.source) {
                if state
                    .contested
                    .get(name)
                    .is_some_and(|(o, _)| o.source == origin.source)
                {
                    state.contested.remove(name);
                }
                return false;
            }
            state.contested.remove(name)
        };
        if let Some((other, wasm)) = handover {
            if let Reload::Loaded { .. } = self.load(name, wasm, &other).await {
                tracing::warn!(plugin = name, from = %origin.source, to = %other.source, "plugin removed from its source; the version in another source serves now");
                return true;
            }
        }
        let mut state = self.state.write().expect("registry lock");
        state.rejected.remove(name);
        state.owners.remove(name);
        let Some(last) = state.serving.remove(name) else {
            return false;
        };
        let digest = last.plugin().digest().to_owned();
        state.removed.insert(name.to_owned(), last);
        drop(state);
        tracing::warn!(plugin = name, %digest, %origin, "plugin removed: its classes cannot provision until it is back; volumes it made can still be deleted");
        self.metrics.plugin_reload(name, "removed");
        self.metrics.plugin_version(name, Some(&digest), None);
        true
    }

    /// Stops `name`'s version from `origin` serving new claims, for `why`,
    /// which claims of its classes are told; it still deletes the volumes it
    /// made, and the next version applied serves again. Returns whether it
    /// served.
    pub async fn withdraw(&self, name: &str, origin: &Origin, why: &str) -> bool {
        let withdrawn = self.remove(name, origin).await;
        if withdrawn {
            self.state
                .write()
                .expect("registry lock")
                .rejected
                .insert(name.to_owned(), (String::new(), why.to_owned()));
        }
        withdrawn
    }

    /// Applies a new sandbox policy to every loaded plugin, or to none: if
    /// any plugin cannot run under it, the old policy stays.
    pub async fn set_policies(&self, policies: PolicySet) -> Result<(), String> {
        let _one_at_a_time = self.reloading.lock().await;
        let current: Vec<(String, Arc<WasmProvisioner>, bool)> = {
            let state = self.state.read().expect("registry lock");
            let serving = state
                .serving
                .iter()
                .map(|(n, p)| (n.clone(), p.clone(), true));
            let removed = state
                .removed
                .iter()
                .map(|(n, p)| (n.clone(), p.clone(), false));
            serving.chain(removed).collect()
        };
        let mut rebound = Vec::with_capacity(current.len());
        for (name, old, serving) in current {
            // Given to the other side's hosts now: it makes nothing new
            // here, and still deletes what it made.
            let serving = serving && policies.serves(&name).is_ok();
            let policy = policies.sandbox_for(&name);
            let output = policies.output_for(&name);
            let version = if *old.plugin().policy() == policy {
                if *old.output_policy() == output {
                    rebound.push((name, old, serving));
                    continue;
                }
                old.with_output_policy(output)
            } else {
                let plugin = self
                    .runtime
                    .instantiate(&name, old.plugin().compiled().clone(), policy)
                    .await
                    .map_err(|e| e.to_string())?;
                WasmProvisioner::new(Arc::new(plugin), output)
            };
            rebound.push((name, Arc::new(version), serving));
        }
        report_unusable_grants(&policies, &self.metrics);
        let mut state = self.state.write().expect("registry lock");
        state.policies = Arc::new(policies);
        for (name, plugin, serving) in rebound {
            if !serving {
                state.serving.remove(&name);
            }
            let map = if serving {
                &mut state.serving
            } else {
                &mut state.removed
            };
            map.insert(name, plugin);
        }
        // A version rejected under the old policy may be fine under the new one.
        state.rejected.clear();
        Ok(())
    }

    /// The version serving new provisions of `plugin`.
    fn serving_version(&self, plugin: &str) -> Result<Arc<WasmProvisioner>, String> {
        let state = self.state.read().expect("registry lock");
        if let Some(p) = state.serving.get(plugin) {
            return Ok(p.clone());
        }
        if let Some((_, reason)) = state.rejected.get(plugin) {
            return Err(format!("plugin {plugin} failed to load: {reason}"));
        }
        if state.removed.contains_key(plugin) {
            return Err(format!(
                "plugin {plugin} was removed from {}; claims of its classes cannot be provisioned until it is back (volumes it made can still be deleted)",
                self.sources
            ));
        }
        state.policies.serves(plugin)?;
        let names: Vec<&str> = state.serving.keys().map(String::as_str).collect();
        Err(format!(
            "no plugin named {plugin:?} is loaded; plugins are {} (loaded: {})",
            self.sources,
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        ))
    }

    /// The version to delete `pv` with: the serving one, else the removed
    /// plugin's last version, else the version recorded on the volume, from
    /// the compile cache.
    async fn deleting_version(
        &self,
        plugin: &str,
        pv: &PersistentVolume,
    ) -> Result<Arc<WasmProvisioner>, String> {
        {
            let state = self.state.read().expect("registry lock");
            if let Some(p) = state.serving.get(plugin).or(state.removed.get(plugin)) {
                return Ok(p.clone());
            }
        }
        let digest = pv
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::PLUGIN_DIGEST));
        let unavailable = || {
            format!(
                "plugin {plugin} is not loaded and the version that made this volume ({}) is not in the compile cache; restore the plugin ({}) to delete the volume",
                digest.map_or("unrecorded", String::as_str),
                self.sources
            )
        };
        let Some(digest) = digest else {
            return Err(unavailable());
        };
        let runtime = self.runtime.clone();
        let (name, key) = (plugin.to_owned(), digest.clone());
        let compiled = tokio::task::spawn_blocking(move || runtime.compile_cached(&name, &key))
            .await
            .expect("cache task panicked")
            .ok_or_else(unavailable)?
            .map_err(|e| e.to_string())?;
        let policies = self.state.read().expect("registry lock").policies.clone();
        let plugin_version = self
            .runtime
            .instantiate(plugin, compiled, policies.sandbox_for(plugin))
            .await
            .map_err(|e| e.to_string())?;
        let version = Arc::new(WasmProvisioner::new(
            Arc::new(plugin_version),
            policies.output_for(plugin),
        ));
        tracing::info!(plugin, %digest, "restored a removed plugin's version from the compile cache to delete its volumes");
        let mut state = self.state.write().expect("registry lock");
        Ok(state
            .removed
            .entry(plugin.to_owned())
            .or_insert(version)
            .clone())
    }
}

impl Provisioner for PluginRegistry {
    fn plugins_changed(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.loaded.subscribe())
    }

    fn plugin(&self, plugin: &str) -> Result<PluginInfo, String> {
        self.serving_version(plugin).map(|p| PluginInfo {
            block_volumes: p.supports_block(),
            resize: p.can_resize(),
            node_local: p.output_policy().makes_node_local_volumes(),
            storage: p.plugin().policy().capacity.as_ref().map(|c| NodeStorage {
                directory: c.directory.clone(),
                reserve_bytes: c.reserve_bytes,
                max_volume_bytes: p.output_policy().max_capacity_bytes,
            }),
            reports_capacity: p.reports_capacity(),
        })
    }

    async fn capacity(
        &self,
        plugin: &str,
        class: &StorageClass,
        node: &Node,
    ) -> Result<Option<ReportedCapacity>, String> {
        let backend = self.serving_version(plugin)?;
        let started = Instant::now();
        let result = backend.capacity(class, node).await;
        let outcome = match &result {
            Ok(Some(_)) => "ok",
            Ok(None) => "none",
            Err(_) => "failed",
        };
        self.metrics
            .plugin_call(plugin, "capacity", outcome, started.elapsed());
        result
    }

    async fn provision(
        &self,
        plugin: &str,
        opts: &ProvisionOptions,
    ) -> Result<PersistentVolume, ProvisionError> {
        let backend = self
            .serving_version(plugin)
            .map_err(|m| ProvisionError::new(ProvisionState::Failed, m))?;
        let started = Instant::now();
        let result = backend.provision(opts).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => match e.state {
                ProvisionState::Failed => "failed",
                ProvisionState::InBackground => "in-background",
                ProvisionState::NoChange => "no-change",
                ProvisionState::Reschedule => "reschedule",
                ProvisionState::InvalidArgument => "invalid-argument",
            },
        };
        self.metrics
            .plugin_call(plugin, "provision", outcome, started.elapsed());
        result
    }

    async fn resize(
        &self,
        plugin: &str,
        pv: &PersistentVolume,
        request: &ResizeOptions,
    ) -> Result<Resized, ResizeError> {
        let backend = self
            .serving_version(plugin)
            .map_err(|m| ResizeError::new(ResizeState::Failed, m))?;
        let started = Instant::now();
        let result = backend.resize(pv, request).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => match e.state {
                ResizeState::Failed => "failed",
                ResizeState::InBackground => "in-background",
                ResizeState::NoChange => "no-change",
                ResizeState::Infeasible => "infeasible",
            },
        };
        self.metrics
            .plugin_call(plugin, "resize", outcome, started.elapsed());
        result
    }

    async fn delete(&self, plugin: &str, pv: &PersistentVolume) -> Result<(), DeleteError> {
        let backend = self
            .deleting_version(plugin, pv)
            .await
            .map_err(DeleteError::failed)?;
        let started = Instant::now();
        let result = backend.delete(pv).await;
        let outcome = match &result {
            Ok(()) => "ok",
            Err(e) if e.state == DeleteState::Ignored => "ignored",
            Err(_) => "failed",
        };
        self.metrics
            .plugin_call(plugin, "delete", outcome, started.elapsed());
        result
    }
}

/// Logs and counts the granted directories a policy marks unusable; the
/// lifecycle's refusals then name them on each claim's event.
fn report_unusable_grants(policies: &PolicySet, metrics: &Metrics) {
    metrics.unusable_grants.clear();
    for (plugin, path, found) in policies.unusable_grants() {
        tracing::warn!(plugin, path = %path.display(), "plugin {plugin} makes no new volume in the granted directory {} until someone looks: {found}", path.display());
        metrics
            .unusable_grants
            .get_or_create(&crate::metrics::PluginLabels {
                plugin: plugin.to_owned(),
            })
            .inc();
    }
}
