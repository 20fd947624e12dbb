//! How plugin versions and the sandbox policy reach the [`PluginRegistry`]:
//! files in a watched directory (a mounted ConfigMap, an image volume, any
//! directory), and labelled ConfigMaps read through the API. The registry
//! validates each version before it serves.
//!
//! Each plugin has one source: the one whose version serves it. A version of
//! it in another source is rejected, said so (a log line, and an event on
//! its ConfigMap), and takes over when the first source drops the plugin.
//!
//! [`PluginRegistry`]: crate::registry::PluginRegistry

pub mod configmaps;
pub mod directory;
pub mod encoding;
mod images;
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
use crate::policy::{PolicySet, RunsOn};
use crate::registry::PluginRegistry;
use crate::runtime::Runtime;

/// A registry loaded once from the plugin files in `dir`, without watching
/// it (tests, benchmarks).
pub async fn load_dir(
    runtime: Arc<Runtime>,
    dir: &Path,
    policies: &PolicySet,
    metrics: Arc<Metrics>,
) -> std::io::Result<PluginRegistry> {
    let mut plugins = PluginDir::new(dir);
    let registry = PluginRegistry::new(runtime, policies.clone(), metrics, plugins.describe());
    plugins.sync(&registry).await?;
    Ok(registry)
}

/// Where a host's plugins come from.
#[derive(Default)]
pub struct Sources<'a> {
    /// A directory of plugin files (a mounted ConfigMap, an image volume).
    pub dir: Option<&'a Path>,
    /// Labelled ConfigMaps in a namespace, read through the API.
    pub configmaps: Option<ConfigMapsSource>,
    /// The sandbox policy file.
    pub policy: Option<&'a Path>,
    /// Which of the policy's plugins this host serves (`runsOn`).
    pub side: RunsOn,
}

/// The API source's settings.
pub struct ConfigMapsSource {
    pub client: kube::Client,
    pub namespace: String,
    /// Names the host in the Events on plugin ConfigMaps.
    pub reporter: crate::events::Reporter,
    /// How long to wait at start for the plugins already there.
    pub initial_timeout: std::time::Duration,
}

/// Loads the plugins of every source under the sandbox policy, then keeps
/// following the sources and the policy file on background tasks: new
/// versions are validated and swapped in as they arrive.
pub async fn serve(
    sources: Sources<'_>,
    runtime: Arc<Runtime>,
    metrics: Arc<Metrics>,
    watch_config: WatchConfig,
) -> anyhow::Result<Arc<PluginRegistry>> {
    let (policy_file, policies) = match sources.policy {
        Some(path) => {
            let (file, policies) = PolicyFile::load(path, sources.side)?;
            (Some(file), policies)
        }
        None => (None, PolicySet::default()),
    };
    let mut plugins = sources.dir.map(PluginDir::new);
    let mut described: Vec<String> = plugins.iter().map(PluginDir::describe).collect();
    if let Some(cm) = &sources.configmaps {
        described.push(configmaps::describe(&cm.namespace));
    }
    if policies.images().next().is_some() {
        described.push(crate::registry::IMAGE_SOURCE.to_owned());
    }
    anyhow::ensure!(
        !described.is_empty(),
        "no plugin source: pass --plugins-dir DIR, --plugin-configmaps, or both, or name \
         plugins by image in the sandbox policy"
    );
    let registry = Arc::new(PluginRegistry::new(
        runtime,
        policies.clone(),
        metrics,
        described.join(", or "),
    ));
    if let Some(plugins) = plugins.as_mut() {
        plugins.sync(&registry).await.with_context(|| {
            format!(
                "cannot read the plugins directory {}; create it or pass another --plugins-dir",
                plugins.path().display()
            )
        })?;
    }
    let api_source = match sources.configmaps {
        Some(cm) => Some(
            configmaps::start(
                cm.client,
                &cm.namespace,
                registry.clone(),
                cm.reporter,
                cm.initial_timeout,
            )
            .await,
        ),
        None => None,
    };
    // Plugins by reference: a first look before the host reports ready
    // (bounded: a slow registry must not hold the host back for ever),
    // then followed whenever the policy names some (a reloaded policy may
    // add them).
    if policy_file.is_some() || policies.images().next().is_some() {
        let mut follower = images::Follower::new(registry.clone(), runtime_cache(&registry));
        if policies.images().next().is_some()
            && tokio::time::timeout(FIRST_IMAGE_LOOK, follower.round())
                .await
                .is_err()
        {
            tracing::warn!("the plugins named by image were not all looked up within {FIRST_IMAGE_LOOK:?}; serving without them until their registries answer");
        }
        supervise(&registry, "the OCI registry source", follower.run());
    }
    let serving: Vec<String> = registry.serving().into_iter().map(|(n, _)| n).collect();
    for name in policies.plugin_names() {
        if !serving.iter().any(|s| s == name) {
            tracing::warn!(
                plugin = name,
                "the sandbox policy names a plugin that is not loaded (a typo?); plugins are {}",
                described.join(", or ")
            );
        }
    }
    if plugins.is_some() || policy_file.is_some() {
        let watching = watch(
            plugins,
            policy_file,
            api_source,
            registry.clone(),
            watch_config,
        )
        .context("cannot watch the plugins directory and the policy file for changes")?;
        supervise(
            &registry,
            "the plugin directory and policy file watcher",
            watching,
        );
    }
    Ok(registry)
}

/// The longest a host waits at start for the plugins its policy names by
/// image.
const FIRST_IMAGE_LOOK: std::time::Duration = std::time::Duration::from_secs(30);

/// The compile cache directory of the registry's runtime.
fn runtime_cache(registry: &PluginRegistry) -> Option<std::path::PathBuf> {
    registry.runtime().cache_dir().map(Path::to_path_buf)
}

/// Runs a plugin loader on its own task. Loaders run for the life of the
/// host: one that ends or panics would leave every later version unloaded,
/// so it is logged and makes the host unready (`/readyz` says which and why)
/// instead of going unnoticed.
pub(crate) fn supervise(
    registry: &Arc<PluginRegistry>,
    what: &'static str,
    loader: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let task = tokio::spawn(loader);
    let registry = Arc::downgrade(registry);
    tokio::spawn(async move {
        let why = match task.await {
            Ok(()) => format!("{what} stopped"),
            Err(e) if e.is_panic() => {
                let payload = e.into_panic();
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".to_owned());
                format!("{what} crashed: {message}")
            }
            // Cancelled: the runtime is shutting down.
            Err(_) => return,
        };
        tracing::error!("{why}; no new plugin version will load until the host restarts");
        if let Some(registry) = registry.upgrade() {
            registry.report_loader_stopped(format!(
                "{why}; new plugin versions no longer load: restart the host (and report the crash)"
            ));
        }
    });
}

/// [`serve`] with a plugins directory only.
pub async fn serve_directory(
    dir: &Path,
    policy: Option<&Path>,
    runtime: Arc<Runtime>,
    metrics: Arc<Metrics>,
    watch_config: WatchConfig,
) -> anyhow::Result<Arc<PluginRegistry>> {
    let sources = Sources {
        dir: Some(dir),
        policy,
        ..Sources::default()
    };
    serve(sources, runtime, metrics, watch_config).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Ops;
    use crate::runtime::RuntimeConfig;
    use http_body_util::BodyExt;
    use std::time::Duration;

    async fn readyz(ops: &Ops) -> (u16, String) {
        let response = ops.respond("/readyz");
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_loader_that_crashes_or_ends_makes_the_host_unready() {
        for (loader, want) in [
            (
                Box::pin(async { panic!("manifest part sizes overflowed") })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
                "the test loader crashed: manifest part sizes overflowed",
            ),
            (Box::pin(async {}), "the test loader stopped"),
        ] {
            let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
            let registry = Arc::new(PluginRegistry::new(
                runtime,
                PolicySet::default(),
                Arc::new(Metrics::default()),
                "test",
            ));
            let ops = Ops::default();
            ops.check_readiness({
                let registry = registry.clone();
                Box::new(move || registry.loader_stopped())
            });
            ops.set_ready(true);
            assert_eq!(readyz(&ops).await.0, 200);
            supervise(&registry, "the test loader", loader);
            for _ in 0..100 {
                if registry.loader_stopped().is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let (status, body) = readyz(&ops).await;
            assert_eq!(status, 503, "{body}");
            assert!(
                body.contains(want) && body.contains("restart the host"),
                "{body}"
            );
        }
    }
}
