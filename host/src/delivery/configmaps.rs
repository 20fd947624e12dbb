//! The API source: plugins read straight from ConfigMaps through the
//! Kubernetes API, with no kubelet sync delay, including plugins split over
//! several ConfigMaps (see [`package`] for the format).
//!
//! A reflector keeps every ConfigMap labelled `wasmprov.io/plugin` in the
//! host's namespace. After each change, the plugins whose ConfigMaps changed
//! are read again: a complete plugin is decoded and handed to the registry
//! (which validates it before it serves), an incomplete one is left for the
//! next change, and a plugin whose ConfigMap is deleted is removed. Each
//! loaded or rejected version gets an Event on its ConfigMap.
//!
//! The watch and the loading are separate tasks: the reflector keeps
//! following the API while a large plugin compiles (seconds, uncached), and
//! the loader then reads the latest state in one pass, so a burst of changes
//! (a chunked plugin being applied part by part) costs one load. Plugins are
//! loaded one after another; the registry compiles one version at a time
//! anyway.
//!
//! [`package`]: super::package

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::Notify;

use super::encoding;
use super::package::{self, Content, PLUGIN_LABEL};
use crate::events::{Events, Reporter};
use crate::registry::{Origin, PluginRegistry, Reload};

/// Event reason: a new version serves.
pub const PLUGIN_LOADED: &str = "PluginLoaded";
/// Event reason: a version cannot be used (the previous one keeps serving).
pub const PLUGIN_REJECTED: &str = "PluginRejected";
/// Event reason: several ConfigMaps carry the same plugin.
pub const PLUGIN_AMBIGUOUS: &str = "PluginAmbiguous";
/// The action of every event on plugin ConfigMaps.
const ACTION: &str = "LoadPlugin";

/// How users should deliver plugins this way, for the registry's messages.
pub fn describe(namespace: &str) -> String {
    format!("ConfigMaps labelled {PLUGIN_LABEL}=<name> in namespace {namespace} (made by `wasmprov plugin pack`)")
}

/// A handle on a running API source.
#[derive(Clone)]
pub struct ConfigMapSource {
    synced: tokio::sync::watch::Receiver<bool>,
    changed: Arc<Notify>,
    forget: Arc<AtomicBool>,
}

impl ConfigMapSource {
    /// Completes once the ConfigMaps present when the watch started have
    /// been read and their plugins loaded or rejected. Never completes while
    /// the ConfigMaps cannot be listed (e.g. missing RBAC): wait with a timeout.
    pub async fn initial_sync(&self) {
        let mut synced = self.synced.clone();
        // An error means the source was dropped: nothing more to wait for.
        let _ = synced.wait_for(|done| *done).await;
    }

    /// Reads every plugin again, even unchanged ones (e.g. after a sandbox
    /// policy change, when a version rejected before may now load).
    pub fn resync(&self) {
        self.forget.store(true, Ordering::SeqCst);
        self.changed.notify_one();
    }
}

/// Returns the task that keeps `registry` in step with the plugin
/// ConfigMaps in `namespace` until it is dropped, and a handle on it.
/// Events name `reporter` as their source.
pub fn watch(
    client: Client,
    namespace: &str,
    registry: Arc<PluginRegistry>,
    reporter: Reporter,
) -> (impl Future<Output = ()> + Send + 'static, ConfigMapSource) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let (reader, writer) = reflector::store();
    let changed = Arc::new(Notify::new());
    let forget = Arc::new(AtomicBool::new(false));
    let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
    let handle = ConfigMapSource {
        synced: synced_rx,
        changed: changed.clone(),
        forget: forget.clone(),
    };

    let follow = {
        let changed = changed.clone();
        let namespace = namespace.to_owned();
        let stream = reflector(
            writer,
            watcher(api, watcher::Config::default().labels(PLUGIN_LABEL)),
        )
        .default_backoff();
        async move {
            tracing::info!(%namespace, label = PLUGIN_LABEL, "watching ConfigMaps for plugins");
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone)
                    | Ok(watcher::Event::Apply(_))
                    | Ok(watcher::Event::Delete(_)) => changed.notify_one(),
                    Ok(watcher::Event::Init) | Ok(watcher::Event::InitApply(_)) => {}
                    Err(e) => tracing::warn!(
                        %namespace,
                        "cannot watch plugin ConfigMaps, retrying: {e} (the host needs list and \
                         watch on configmaps in namespace {namespace})"
                    ),
                }
            }
        }
    };

    let mut source = Source {
        namespace: namespace.to_owned(),
        registry,
        events: Events::new(client, reporter),
        tracked: BTreeMap::new(),
        ignored: HashSet::new(),
    };
    let load = async move {
        // The first pass waits for the initial list: a partial store would
        // look like deleted plugins.
        if reader.wait_until_ready().await.is_err() {
            return;
        }
        loop {
            changed.notified().await;
            if forget.swap(false, Ordering::SeqCst) {
                for tracked in source.tracked.values_mut() {
                    tracked.fingerprint.clear();
                    tracked.applied = None;
                }
            }
            let objects = reader.state();
            source.sync(&objects).await;
            synced_tx.send_replace(true);
        }
    };
    let task = async move {
        futures::future::join(follow, load).await;
    };
    (task, handle)
}

/// Runs the API source on its own task and waits, at most `initial_timeout`,
/// for its first pass, so the host reports ready with the plugins that exist.
/// If the ConfigMaps cannot be read by then (missing RBAC, API down), the
/// host starts without them and they load as soon as they can be read.
pub async fn start(
    client: Client,
    namespace: &str,
    registry: Arc<PluginRegistry>,
    reporter: Reporter,
    initial_timeout: std::time::Duration,
) -> ConfigMapSource {
    let (task, source) = watch(client, namespace, registry.clone(), reporter);
    super::supervise(&registry, "the plugin ConfigMaps loader", task);
    if tokio::time::timeout(initial_timeout, source.initial_sync())
        .await
        .is_err()
    {
        tracing::error!(
            %namespace,
            "plugin ConfigMaps could not be read within {initial_timeout:?}; starting without \
             them, they load once readable (the host needs list and watch on configmaps \
             in namespace {namespace}: deploy/api-source/)"
        );
    }
    source
}

/// What was last seen of one plugin.
#[derive(Debug, Default)]
struct Tracked {
    /// The plugin's ConfigMaps (and the parts they list) by name and
    /// resourceVersion: unchanged means nothing to do.
    fingerprint: Vec<(String, String)>,
    /// The plugin's ConfigMap, for messages when it is gone.
    head: String,
    /// sha256 of the encoded bytes last handed to the registry.
    applied: Option<String>,
}

struct Source {
    namespace: String,
    registry: Arc<PluginRegistry>,
    events: Events,
    tracked: BTreeMap<String, Tracked>,
    /// ConfigMaps already warned about (bad label), by name and resourceVersion.
    ignored: HashSet<(String, String)>,
}

fn rv(cm: &ConfigMap) -> String {
    cm.metadata.resource_version.clone().unwrap_or_default()
}

impl Source {
    /// Brings the registry in line with `objects`, the labelled ConfigMaps.
    async fn sync(&mut self, objects: &[Arc<ConfigMap>]) {
        let by_name: HashMap<&str, &ConfigMap> = objects
            .iter()
            .filter_map(|cm| Some((cm.metadata.name.as_deref()?, cm.as_ref())))
            .collect();
        let mut heads: BTreeMap<&str, Vec<&ConfigMap>> = BTreeMap::new();
        for cm in objects {
            let Some(plugin) = package::plugin_of(cm) else {
                continue;
            };
            if !encoding::valid_name(plugin) {
                if self.ignored.insert((cm.name_any(), rv(cm))) {
                    tracing::warn!(configmap = %cm.name_any(), namespace = %self.namespace, "ignoring ConfigMap: {PLUGIN_LABEL}={plugin:?} is not a valid plugin name (lowercase letters, digits, '-')");
                }
                continue;
            }
            if !package::is_part(cm) {
                heads.entry(plugin).or_default().push(cm);
            }
        }
        for (name, heads) in &heads {
            let mut fingerprint: Vec<(String, String)> =
                heads.iter().map(|cm| (cm.name_any(), rv(cm))).collect();
            if let [head] = heads.as_slice() {
                for part in package::referenced_parts(head) {
                    let version = by_name
                        .get(part.as_str())
                        .map_or_else(String::new, |p| rv(p));
                    fingerprint.push((part, version));
                }
            }
            let tracked = self.tracked.entry((*name).to_owned()).or_default();
            if tracked.fingerprint == fingerprint {
                continue;
            }
            tracked.fingerprint = fingerprint;
            let applied = tracked.applied.clone();
            match heads.as_slice() {
                [head] => {
                    let outcome = self.load(name, head, &by_name, applied).await;
                    let tracked = self.tracked.get_mut(*name).expect("tracked above");
                    tracked.head = head.name_any();
                    tracked.applied = outcome;
                }
                several => self.ambiguous(name, several).await,
            }
        }
        let gone: Vec<String> = self
            .tracked
            .keys()
            .filter(|name| !heads.contains_key(name.as_str()))
            .cloned()
            .collect();
        for name in gone {
            let tracked = self.tracked.remove(&name).expect("listed above");
            let origin = Origin::new(
                describe(&self.namespace),
                format!(
                    "ConfigMap {}/{} (deleted)",
                    self.namespace,
                    if tracked.head.is_empty() {
                        package::config_map_name(&name)
                    } else {
                        tracked.head
                    }
                ),
            );
            self.registry.remove(&name, &origin).await;
        }
    }

    /// Reads plugin `name` from `head` and hands it to the registry if it is
    /// complete and new; returns the digest of the encoded bytes now applied.
    async fn load(
        &self,
        name: &str,
        head: &ConfigMap,
        by_name: &HashMap<&str, &ConfigMap>,
        applied: Option<String>,
    ) -> Option<String> {
        let origin = Origin::new(
            describe(&self.namespace),
            format!("ConfigMap {}/{}", self.namespace, head.name_any()),
        );
        let (encoding, bytes, sha256) = match package::read(name, head, |n| by_name.get(n).copied())
        {
            Content::Complete {
                encoding,
                bytes,
                sha256,
            } => (encoding, bytes, sha256),
            Content::Waiting(why) => {
                tracing::info!(plugin = name, %origin, "plugin not complete yet, waiting: {why}");
                return applied;
            }
            Content::Invalid(why) => {
                let reason = format!("plugin {name}: {why}");
                self.registry.reject(name, &reason);
                self.rejected(name, head, &reason).await;
                return None;
            }
        };
        if applied.as_deref() == Some(sha256.as_str()) {
            return applied; // only metadata changed
        }
        let decoded = tokio::task::spawn_blocking(move || encoding::decode(encoding, bytes))
            .await
            .expect("decode task panicked");
        let wasm = match decoded {
            Ok(wasm) => wasm,
            Err(e) => {
                let reason = format!("plugin {name}: {origin}: {e}");
                self.registry.reject(name, &reason);
                self.rejected(name, head, &reason).await;
                return None;
            }
        };
        let previous = self.serving(name);
        match self.registry.apply(name, wasm, &origin).await {
            Reload::Loaded { digest } => {
                let note = match previous {
                    Some(old) => format!("plugin {name} version {digest} serves, replacing {old}"),
                    None => format!("plugin {name} version {digest} serves"),
                };
                self.events
                    .normal(&head.object_ref(&()), PLUGIN_LOADED, ACTION, note);
            }
            Reload::Unchanged | Reload::NotHere { .. } => {}
            Reload::Rejected { reason } => self.rejected(name, head, &reason).await,
        }
        Some(sha256)
    }

    fn serving(&self, name: &str) -> Option<String> {
        self.registry
            .serving()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, digest)| digest)
    }

    async fn rejected(&self, name: &str, head: &ConfigMap, reason: &str) {
        let note = match self.serving(name) {
            Some(old) => format!("{reason}; version {old} keeps serving"),
            None => reason.to_owned(),
        };
        self.events
            .warning(&head.object_ref(&()), PLUGIN_REJECTED, ACTION, note);
    }

    async fn ambiguous(&self, name: &str, heads: &[&ConfigMap]) {
        let names: Vec<String> = heads.iter().map(|cm| cm.name_any()).collect();
        let note = format!(
            "several ConfigMaps carry plugin {name}: {}; keep one (until then none of them is loaded and what serves stays)",
            names.join(", ")
        );
        tracing::error!(plugin = name, namespace = %self.namespace, "{note}");
        for head in heads {
            self.events.warning(
                &head.object_ref(&()),
                PLUGIN_AMBIGUOUS,
                ACTION,
                note.clone(),
            );
        }
    }
}
