//! Watching the plugins directory and the policy file with `notify`.
//!
//! Changes are debounced: a pass starts once the directory has been quiet
//! for [`WatchConfig::debounce`] (or after `max_delay` of constant change),
//! so a file being copied in is read once, whole. Watching the directory
//! rather than single files is what catches kubelet's `..data` symlink swap;
//! that swap is atomic, so it starts a pass at once, without the debounce.
//! A periodic full pass covers filesystems whose changes inotify misses.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::Notify;

use super::configmaps::ConfigMapSource;
use super::{PluginDir, PolicyFile};
use crate::registry::PluginRegistry;

/// The symlink kubelet swaps to publish a ConfigMap update atomically.
const KUBELET_COMMIT: &str = "..data";

/// Timings of the watch.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Quiet time after a change before the directory is read.
    pub debounce: Duration,
    /// Longest wait for quiet before reading anyway.
    pub max_delay: Duration,
    /// A full pass even without change events.
    pub rescan: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            debounce: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
            rescan: Duration::from_secs(60),
        }
    }
}

/// Sets up the watch, and returns the task that keeps `registry` in step
/// with the plugins directory and the policy file until it is dropped. A
/// policy change also makes `api_source` read every plugin again.
pub fn watch(
    mut plugins: Option<PluginDir>,
    mut policy: Option<PolicyFile>,
    api_source: Option<ConfigMapSource>,
    registry: Arc<PluginRegistry>,
    config: WatchConfig,
) -> notify::Result<impl std::future::Future<Output = ()> + Send> {
    let changed = Arc::new(Notify::new());
    let committed = Arc::new(Notify::new());
    let (on_change, on_commit) = (changed.clone(), committed.clone());
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        match event {
            // kubelet renames `..data` once every file of the update is in
            // place: nothing more to wait for.
            Ok(e) if e.paths.iter().any(|p| p.ends_with(KUBELET_COMMIT)) => on_commit.notify_one(),
            // Reads (ours included) are not changes.
            Ok(e)
                if matches!(
                    e.kind,
                    EventKind::Access(notify::event::AccessKind::Open(_))
                        | EventKind::Access(notify::event::AccessKind::Read)
                        | EventKind::Access(notify::event::AccessKind::Close(
                            notify::event::AccessMode::Read
                        ))
                ) => {}
            // Anything else, including a queue overflow, may be a change.
            _ => on_change.notify_one(),
        }
    })?;
    let mut dirs: Vec<PathBuf> = plugins.iter().map(|p| p.path().to_owned()).collect();
    if let Some(p) = &policy {
        dirs.push(parent(p.path()));
    }
    dirs.dedup();
    for dir in &dirs {
        watcher.watch(dir, RecursiveMode::NonRecursive)?;
    }
    tracing::info!(dirs = ?dirs, "watching for new plugin versions and policy changes");

    Ok(async move {
        let _watcher = watcher;
        let mut next_pass = config.rescan;
        loop {
            tokio::select! {
                () = changed.notified() => debounce(&changed, &committed, &config).await,
                () = committed.notified() => {}
                () = tokio::time::sleep(next_pass) => {}
            }
            next_pass = config.rescan;
            if let Some(update) = policy.as_mut().and_then(PolicyFile::changed) {
                let file = policy.as_ref().map(|p| p.path().display().to_string());
                let applied = match update {
                    Ok(policies) => registry.set_policies(policies).await,
                    Err(e) => Err(e),
                };
                match applied {
                    Ok(()) => {
                        tracing::info!(file, "sandbox policy reloaded");
                        registry.policy_reloaded("loaded");
                        // Versions rejected under the old policy get another try.
                        if let Some(plugins) = plugins.as_mut() {
                            plugins.forget();
                        }
                        if let Some(api) = &api_source {
                            api.resync();
                        }
                    }
                    Err(e) => {
                        tracing::error!(
                            file,
                            "sandbox policy rejected, the previous policy stays: {e}"
                        );
                        registry.policy_reloaded("rejected");
                    }
                }
            }
            let Some(plugins) = plugins.as_mut() else {
                continue;
            };
            match plugins.sync(&registry).await {
                Ok(synced) => {
                    if synced.unsettled {
                        changed.notify_one();
                    }
                    if let Some(recheck) = synced.recheck_in {
                        next_pass = recheck.min(config.rescan);
                    }
                }
                Err(e) => {
                    tracing::error!(dir = %plugins.path().display(), "cannot read the plugins directory; plugins stay as they are: {e}")
                }
            }
        }
    })
}

/// Waits until no change arrived for `debounce` (at most `max_delay`), or
/// until kubelet commits an update.
async fn debounce(changed: &Notify, committed: &Notify, config: &WatchConfig) {
    let deadline = tokio::time::Instant::now() + config.max_delay;
    loop {
        let quiet = tokio::time::sleep(config.debounce);
        tokio::select! {
            () = changed.notified() => {}
            () = committed.notified() => return,
            () = quiet => return,
            () = tokio::time::sleep_until(deadline) => return,
        }
    }
}

fn parent(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}
