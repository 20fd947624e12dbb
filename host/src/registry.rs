//! The plugins a host serves, by name: `<name>.wasm` files in a directory,
//! each compiled, validated and bound to its sandbox policy. A plugin that
//! fails to load is reported when a claim uses it; the others keep serving.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::PersistentVolume;

use crate::metrics::Metrics;
use crate::provisioner::{
    DeleteError, DeleteState, PluginInfo, ProvisionError, ProvisionOptions, ProvisionState,
    Provisioner,
};
use crate::runtime::{PolicySet, Runtime};
use crate::wasm_provisioner::WasmProvisioner;

/// Loaded plugins and the reasons others could not be loaded.
pub struct PluginRegistry {
    dir: PathBuf,
    loaded: BTreeMap<String, WasmProvisioner>,
    failed: BTreeMap<String, String>,
    metrics: Arc<Metrics>,
    _runtime: Arc<Runtime>,
}

impl PluginRegistry {
    /// Loads every `<name>.wasm` in `dir`.
    pub async fn load_dir(
        runtime: Arc<Runtime>,
        dir: &Path,
        policies: &PolicySet,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Self> {
        let mut loaded = BTreeMap::new();
        let mut failed = BTreeMap::new();
        let mut files: Vec<_> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
            .collect();
        files.sort();
        for file in files {
            let Some(name) = file.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
                continue;
            };
            let result = match std::fs::read(&file) {
                Ok(bytes) => runtime
                    .load(&name, &bytes, policies.for_plugin(&name))
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!("cannot read {}: {e}", file.display())),
            };
            match result {
                Ok(plugin) => {
                    tracing::info!(plugin = %name, digest = %plugin.digest(), file = %file.display(), "loaded plugin");
                    loaded.insert(name, WasmProvisioner::new(Arc::new(plugin)));
                }
                Err(message) => {
                    tracing::error!(plugin = %name, file = %file.display(), "cannot load plugin: {message}");
                    failed.insert(name, message);
                }
            }
        }
        for name in policies.plugin_names() {
            if !loaded.contains_key(name) && !failed.contains_key(name) {
                tracing::warn!(plugin = name, dir = %dir.display(), "the sandbox policy names a plugin that is not in the plugins directory (a typo?)");
            }
        }
        Ok(Self {
            dir: dir.to_owned(),
            loaded,
            failed,
            metrics,
            _runtime: runtime,
        })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.loaded.keys().map(String::as_str)
    }

    fn get(&self, plugin: &str) -> Result<&WasmProvisioner, String> {
        if let Some(p) = self.loaded.get(plugin) {
            return Ok(p);
        }
        if let Some(reason) = self.failed.get(plugin) {
            return Err(format!("plugin {plugin} failed to load: {reason}"));
        }
        let loaded: Vec<&str> = self.names().collect();
        Err(format!(
            "no plugin named {plugin:?} is loaded; plugins are <name>.wasm files in {} (loaded: {})",
            self.dir.display(),
            if loaded.is_empty() {
                "none".to_owned()
            } else {
                loaded.join(", ")
            }
        ))
    }
}

impl Provisioner for PluginRegistry {
    fn plugin(&self, plugin: &str) -> Result<PluginInfo, String> {
        self.get(plugin).map(|p| PluginInfo {
            block_volumes: p.supports_block(),
        })
    }

    async fn provision(
        &self,
        plugin: &str,
        opts: &ProvisionOptions,
    ) -> Result<PersistentVolume, ProvisionError> {
        let backend = self
            .get(plugin)
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

    async fn delete(&self, plugin: &str, pv: &PersistentVolume) -> Result<(), DeleteError> {
        let backend = self.get(plugin).map_err(DeleteError::failed)?;
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
