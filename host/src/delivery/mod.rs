//! How plugin versions and the sandbox policy reach the [`PluginRegistry`]:
//! files in a watched directory (a mounted ConfigMap, an image volume, any
//! directory). The registry validates each version before it serves.
//!
//! [`PluginRegistry`]: crate::registry::PluginRegistry

pub mod configmaps;
pub mod directory;
pub mod encoding;
pub mod package;
mod policy_file;
mod watch;

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

pub use directory::PluginDir;
pub use policy_file::PolicyFile;
pub use watch::{watch, WatchConfig};

use crate::metrics::Metrics;
use crate::registry::PluginRegistry;
use crate::runtime::{PolicySet, Runtime};

/// Loads the plugins in `dir` under the sandbox policy in `policy`, then
/// keeps watching both on a background task: new versions are validated
/// and swapped in as they arrive.
pub async fn serve_directory(
    dir: &Path,
    policy: Option<&Path>,
    runtime: Arc<Runtime>,
    metrics: Arc<Metrics>,
    watch_config: WatchConfig,
) -> anyhow::Result<Arc<PluginRegistry>> {
    let (policy_file, policies) = match policy {
        Some(path) => {
            let (file, policies) = PolicyFile::load(path)?;
            (Some(file), policies)
        }
        None => (None, PolicySet::default()),
    };
    let mut plugins = PluginDir::new(dir);
    let registry = Arc::new(PluginRegistry::new(
        runtime,
        policies.clone(),
        metrics,
        plugins.describe(),
    ));
    plugins.sync(&registry).await.with_context(|| {
        format!(
            "cannot read the plugins directory {}; create it or pass --plugins-dir",
            dir.display()
        )
    })?;
    let serving: Vec<String> = registry.serving().into_iter().map(|(n, _)| n).collect();
    for name in policies.plugin_names() {
        if !serving.iter().any(|s| s == name) {
            tracing::warn!(plugin = name, dir = %dir.display(), "the sandbox policy names a plugin that is not in the plugins directory (a typo?)");
        }
    }
    let watching = watch(plugins, policy_file, registry.clone(), watch_config)
        .with_context(|| format!("cannot watch {} for plugin changes", dir.display()))?;
    tokio::spawn(watching);
    Ok(registry)
}
