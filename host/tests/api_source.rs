//! The API source end to end on the simulated API server: plugins delivered
//! as ConfigMaps (single or chunked) load, update, get rejected with the old
//! version serving, and go away, as the registry and the ConfigMaps' events
//! show.

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use support::*;
use wasmprov::delivery::configmaps;
use wasmprov::delivery::encoding::Encoding;
use wasmprov::delivery::package::{self, PART_KEY, PLUGIN_LABEL};
use wasmprov::delivery::PluginDir;
use wasmprov::events::Reporter;
use wasmprov::metrics::Metrics;
use wasmprov::policy::PolicySet;
use wasmprov::provisioner::Provisioner;
use wasmprov::registry::{PluginRegistry, Reload};
use wasmprov::runtime::{Runtime, RuntimeConfig};

const NS: &str = "default";
const SOURCE_TOKEN: &str = "wasmprov-api-source";

/// A simulated cluster and a registry fed by the API source.
struct Harness {
    sim: kube_sim::Simulator,
    client: Client,
    registry: Arc<PluginRegistry>,
    source: tokio::task::JoinHandle<()>,
    markers: std::sync::atomic::AtomicUsize,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.source.abort();
    }
}

impl Harness {
    async fn start() -> Self {
        let sim = kube_sim::Simulator::start(kube_sim::Config {
            record_requests: true,
            ..kube_sim::Config::default()
        })
        .await
        .unwrap();
        let client = sim.client().unwrap();
        // The source has its own identity, to tell its requests apart.
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(&sim.kubeconfig_with_token(SOURCE_TOKEN)).unwrap();
        let source_client = Client::try_from(
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .unwrap(),
        )
        .unwrap();
        let registry = empty_registry();
        let (task, handle) = configmaps::watch(
            source_client,
            NS,
            registry.clone(),
            Reporter {
                controller: "wasmprov".into(),
                instance: None,
            },
        );
        let source = tokio::spawn(task);
        within(
            Duration::from_secs(30),
            "the first sync",
            handle.initial_sync(),
        )
        .await;
        Self {
            sim,
            client,
            registry,
            source,
            markers: Default::default(),
        }
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// Creates or updates `cm` as `kubectl apply --server-side` does.
    async fn apply(&self, cm: &ConfigMap) {
        let name = cm.name_any();
        self.config_maps()
            .patch(
                &name,
                &PatchParams::apply("api-source-test").force(),
                &Patch::Apply(cm),
            )
            .await
            .unwrap_or_else(|e| panic!("apply ConfigMap {name}: {e}"));
    }

    async fn apply_all(&self, cms: &[ConfigMap]) {
        for cm in cms {
            self.apply(cm).await;
        }
    }

    fn serving(&self, plugin: &str) -> Option<String> {
        self.registry
            .serving()
            .into_iter()
            .find(|(n, _)| n == plugin)
            .map(|(_, d)| d)
    }

    /// Waits until `plugin` serves version `digest`.
    async fn serves(&self, plugin: &str, digest: &str) {
        eventually(&format!("{plugin} serves {digest}"), || async {
            (self.serving(plugin).as_deref() == Some(digest)).then_some(())
        })
        .await;
    }

    /// Returns once the source has read every change made so far: a new
    /// plugin created now is loaded after everything before it was seen.
    async fn settle(&self) {
        let n = self
            .markers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("marker-{n}");
        let wasm = std::fs::read(plugin_path("hostpath")).unwrap();
        let packed = package::pack(
            &name,
            &wasm,
            Encoding::Zstd,
            Some(NS),
            package::DEFAULT_PART_SIZE,
        )
        .unwrap();
        self.apply_all(&packed.config_maps).await;
        self.serves(&name, &packed.digest).await;
    }

    /// The events on ConfigMap `name` with `reason`, as their notes.
    async fn events(&self, name: &str, reason: &str) -> Vec<String> {
        Api::<Event>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.involved_object.name.as_deref() == Some(name)
                    && e.involved_object.kind.as_deref() == Some("ConfigMap")
                    && e.reason.as_deref() == Some(reason)
            })
            .map(|e| e.message.unwrap_or_default())
            .collect()
    }

    /// Waits for an event on ConfigMap `name` with `reason` whose note
    /// contains `text`; returns the note.
    async fn event(&self, name: &str, reason: &str, text: &str) -> String {
        eventually(
            &format!("a {reason} event on {name} saying {text:?}"),
            || async {
                self.events(name, reason)
                    .await
                    .into_iter()
                    .find(|note| note.contains(text))
            },
        )
        .await
    }
}

fn hostpath_wasm() -> Vec<u8> {
    std::fs::read(plugin_path("hostpath")).unwrap()
}

/// A chunked package of `wasm` (hostpath is ~60 KB compressed: 4 parts).
fn chunked(name: &str, wasm: &[u8]) -> package::Packed {
    let packed = package::pack(name, wasm, Encoding::Zstd, Some(NS), 16 * 1024).unwrap();
    assert!(packed.chunked && packed.config_maps.len() >= 4);
    packed
}

async fn within<T>(limit: Duration, what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("timed out after {limit:?} waiting for {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_config_map_loads_updates_rejects_and_goes() {
    let h = Harness::start().await;
    let cm_name = package::config_map_name("hostpath");
    let v1 = hostpath_wasm();
    let packed = package::pack(
        "hostpath",
        &v1,
        Encoding::Zstd,
        Some(NS),
        package::DEFAULT_PART_SIZE,
    )
    .unwrap();
    assert_eq!(packed.config_maps.len(), 1);
    h.apply_all(&packed.config_maps).await;
    h.serves("hostpath", &digest(&v1)).await;
    h.event(&cm_name, configmaps::PLUGIN_LOADED, &digest(&v1))
        .await;
    assert!(h.registry.plugin("hostpath").is_ok());

    // A new version (gzip this time) replaces it.
    let v2 = variant(&v1, "v2");
    let packed = package::pack(
        "hostpath",
        &v2,
        Encoding::Gzip,
        Some(NS),
        package::DEFAULT_PART_SIZE,
    )
    .unwrap();
    let mut cm = packed.config_maps[0].clone();
    // Server-side apply of the full intent drops the old zstd key.
    let started = std::time::Instant::now();
    h.apply(&cm).await;
    h.serves("hostpath", &digest(&v2)).await;
    eprintln!(
        "API source: ConfigMap update to new version serving in {:?}",
        started.elapsed()
    );
    let note = h
        .event(&cm_name, configmaps::PLUGIN_LOADED, &digest(&v2))
        .await;
    assert!(
        note.contains(&format!("replacing {}", digest(&v1))),
        "{note}"
    );

    // Bytes that do not decompress: rejected, v2 keeps serving.
    let data = cm.binary_data.as_mut().unwrap();
    let key = data.keys().next().unwrap().clone();
    data.get_mut(&key).unwrap().0 = b"definitely not gzip".to_vec();
    h.apply(&cm).await;
    let note = h
        .event(&cm_name, configmaps::PLUGIN_REJECTED, "not valid gzip")
        .await;
    assert!(
        note.contains(&format!("version {} keeps serving", digest(&v2))),
        "{note}"
    );
    assert_eq!(h.serving("hostpath"), Some(digest(&v2)));

    // A component of another world: the registry rejects it, v2 serves on.
    let wrong = std::fs::read(guest_path("other-world")).unwrap();
    let packed = package::pack(
        "hostpath",
        &wrong,
        Encoding::Zstd,
        Some(NS),
        package::DEFAULT_PART_SIZE,
    )
    .unwrap();
    h.apply_all(&packed.config_maps).await;
    let note = h
        .event(&cm_name, configmaps::PLUGIN_REJECTED, &digest(&v2))
        .await;
    assert!(note.contains("keeps serving"), "{note}");
    assert_eq!(h.serving("hostpath"), Some(digest(&v2)));
    assert!(h.registry.plugin("hostpath").is_ok());

    // Deleted: no longer serves new claims, with a message saying why.
    h.config_maps()
        .delete(&cm_name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("hostpath is removed", || async {
        h.serving("hostpath").is_none().then_some(())
    })
    .await;
    let err = h.registry.plugin("hostpath").unwrap_err();
    assert!(err.contains("was removed"), "{err}");

    // What the source did, in RBAC terms (for deploy/api-source/).
    let mut used: Vec<String> = h
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.user == SOURCE_TOKEN)
        .map(|r| {
            format!(
                "{} {}/{} in {}",
                r.verb, r.api_group, r.resource, r.namespace
            )
        })
        .collect();
    used.sort();
    used.dedup();
    assert_eq!(
        used,
        [
            "create events.k8s.io/events in default",
            "list /configmaps in default",
            "watch /configmaps in default",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_plugin_loads_only_when_complete() {
    let h = Harness::start().await;
    let v1 = variant(&hostpath_wasm(), "chunked-v1");
    let packed = chunked("big", &v1);
    let (manifest, parts) = packed.config_maps.split_last().unwrap();

    // The manifest first, then all parts but the last: not loaded.
    h.apply(manifest).await;
    for part in &parts[..parts.len() - 1] {
        h.apply(part).await;
    }
    h.settle().await;
    assert_eq!(h.serving("big"), None);
    let err = h.registry.plugin("big").unwrap_err();
    assert!(err.contains("no plugin named"), "{err}");

    // The last part completes it.
    h.apply(parts.last().unwrap()).await;
    h.serves("big", &digest(&v1)).await;
    h.event(
        &package::config_map_name("big"),
        configmaps::PLUGIN_LOADED,
        &digest(&v1),
    )
    .await;

    // A new version applied part by part (as kubectl does: parts first, then
    // the manifest): v1 serves until the new manifest arrives.
    let v2 = variant(&hostpath_wasm(), "chunked-v2 with a longer tag");
    let packed = chunked("big", &v2);
    let (manifest, parts) = packed.config_maps.split_last().unwrap();
    for part in parts {
        h.apply(part).await;
        h.settle().await;
        assert_eq!(h.serving("big"), Some(digest(&v1)));
    }
    h.apply(manifest).await;
    h.serves("big", &digest(&v2)).await;

    // A smaller version leaves unused parts behind: they do not matter.
    let v3 = variant(&hostpath_wasm(), "v3");
    let packed = package::pack(
        "big",
        &v3,
        Encoding::Zstd,
        Some(NS),
        package::DEFAULT_PART_SIZE,
    )
    .unwrap();
    assert!(!packed.chunked);
    h.apply_all(&packed.config_maps).await;
    h.serves("big", &digest(&v3)).await;
    let left = h
        .config_maps()
        .list(&ListParams::default().labels(&format!("{PLUGIN_LABEL}=big")))
        .await
        .unwrap();
    assert!(left.items.len() > 1);

    // Deleting every ConfigMap of the plugin removes it.
    h.config_maps()
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("{PLUGIN_LABEL}=big")),
        )
        .await
        .unwrap();
    eventually("big is removed", || async {
        h.serving("big").is_none().then_some(())
    })
    .await;
    assert!(h
        .registry
        .plugin("big")
        .unwrap_err()
        .contains("was removed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_part_with_a_wrong_digest_is_rejected() {
    let h = Harness::start().await;
    let wasm = variant(&hostpath_wasm(), "tampered");
    let mut packed = chunked("tampered", &wasm);
    let part = &mut packed.config_maps[1];
    part.binary_data
        .as_mut()
        .unwrap()
        .get_mut(PART_KEY)
        .unwrap()
        .0[10] ^= 0xff;
    let part_name = part.name_any();
    h.apply_all(&packed.config_maps).await;
    let note = h
        .event(
            &package::config_map_name("tampered"),
            configmaps::PLUGIN_REJECTED,
            "does not hold what the manifest lists",
        )
        .await;
    assert!(note.contains(&part_name), "{note}");
    assert_eq!(h.serving("tampered"), None);
    let err = h.registry.plugin("tampered").unwrap_err();
    assert!(
        err.contains("failed to load") && err.contains(&part_name),
        "{err}"
    );

    // Fixing the part loads it.
    let good = chunked("tampered", &wasm);
    h.apply(&good.config_maps[1]).await;
    h.serves("tampered", &digest(&wasm)).await;
}

/// The whole path a user takes: `wasmprov plugin pack` of the JavaScript
/// plugin (12 MB, split over several ConfigMaps) into real `kubectl apply
/// --server-side`, read by the API source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_javascript_plugin_applied_with_kubectl_loads() {
    let h = Harness::start().await;
    let file = plugin_path("template");
    let cache = workspace_root().join("target/test-compile-cache");
    let pack = std::process::Command::new(env!("CARGO_BIN_EXE_wasmprov"))
        .args(["plugin", "pack"])
        .arg(&file)
        .args(["--namespace", NS, "--cache-dir"])
        .arg(&cache)
        .output()
        .unwrap();
    assert!(
        pack.status.success(),
        "pack failed: {}",
        String::from_utf8_lossy(&pack.stderr)
    );
    let yaml = pack.stdout;
    let documents = String::from_utf8_lossy(&yaml).matches("\n---\n").count()
        + usize::from(yaml.starts_with(b"---\n"));
    assert!(documents >= 4, "{documents} ConfigMaps");

    kubectl_apply(&h.sim.url(), NS, &yaml);
    let wasm = std::fs::read(&file).unwrap();
    // Uncached, the JavaScript component compiles for a while.
    eventually_within(Duration::from_secs(600), "template serves", || async {
        (h.serving("template") == Some(digest(&wasm))).then_some(())
    })
    .await;
}

/// How `wasmprov run` starts the source: plugins already in the cluster
/// serve when `start` returns, so the host reports ready with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_present_at_start_serve_when_start_returns() {
    let sim = kube_sim::Simulator::start(kube_sim::Config::default())
        .await
        .unwrap();
    let client = sim.client().unwrap();
    let wasm = hostpath_wasm();
    let single = package::pack(
        "hostpath",
        &wasm,
        Encoding::Zstd,
        Some(NS),
        package::DEFAULT_PART_SIZE,
    )
    .unwrap();
    let big = variant(&wasm, "present at start");
    let chunks = chunked("big", &big);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    for cm in single.config_maps.iter().chain(&chunks.config_maps) {
        api.create(&Default::default(), cm).await.unwrap();
    }
    let registry = empty_registry();
    configmaps::start(
        client,
        NS,
        registry.clone(),
        Reporter {
            controller: "wasmprov".into(),
            instance: None,
        },
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        registry.serving(),
        [
            ("big".to_owned(), digest(&big)),
            ("hostpath".to_owned(), digest(&wasm))
        ]
    );
}

/// A plugin offered by a directory and by a ConfigMap: the source that
/// serves it keeps it, the other's version is rejected with an event naming
/// both, and it takes over (without a gap) once the first source drops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_in_two_sources_is_served_from_one_and_handed_over() {
    let h = Harness::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut plugins = PluginDir::new(dir.path());
    let from_dir = hostpath_wasm();
    let file = dir.path().join("hostpath.wasm");
    std::fs::write(&file, &from_dir).unwrap();
    plugins.sync(&h.registry).await.unwrap();
    h.serves("hostpath", &digest(&from_dir)).await;

    let from_api = variant(&from_dir, "configmap");
    let packed = package::pack(
        "hostpath",
        &from_api,
        Encoding::Zstd,
        Some(NS),
        package::DEFAULT_PART_SIZE,
    )
    .unwrap();
    h.apply_all(&packed.config_maps).await;
    let cm_name = package::config_map_name("hostpath");
    let note = h
        .event(&cm_name, configmaps::PLUGIN_REJECTED, "already served from")
        .await;
    for want in [
        dir.path().to_str().unwrap(),
        &format!("ConfigMap {NS}/{cm_name}"),
        "Give each plugin one source",
    ] {
        assert!(note.contains(want), "{want:?} in {note}");
    }
    assert_eq!(h.serving("hostpath"), Some(digest(&from_dir)));

    // The directory drops it: the ConfigMap's version serves at once.
    std::fs::remove_file(&file).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let removed = loop {
        let synced = plugins.sync(&h.registry).await.unwrap();
        assert!(
            h.serving("hostpath").is_some(),
            "hostpath serves throughout"
        );
        if !synced.removed.is_empty() {
            break synced.removed;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the directory never dropped hostpath"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(removed, ["hostpath"]);
    assert_eq!(h.serving("hostpath"), Some(digest(&from_api)));

    // Now the directory is the other source: its file is refused.
    std::fs::write(&file, &from_dir).unwrap();
    let synced = plugins.sync(&h.registry).await.unwrap();
    assert!(
        matches!(&synced.applied[..], [(_, Reload::Rejected { reason })] if reason.contains("already served from ConfigMaps")),
        "{:?}",
        synced.applied
    );
    assert_eq!(h.serving("hostpath"), Some(digest(&from_api)));
    // Removing the file of a plugin it does not serve changes nothing.
    std::fs::remove_file(&file).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    plugins.sync(&h.registry).await.unwrap();
    assert_eq!(h.serving("hostpath"), Some(digest(&from_api)));
}

/// A registry with no plugins yet, fed by the API source under test.
fn empty_registry() -> Arc<PluginRegistry> {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(workspace_root().join("target/test-compile-cache")),
        ..RuntimeConfig::default()
    })
    .unwrap();
    Arc::new(PluginRegistry::new(
        Arc::new(runtime),
        PolicySet::default(),
        Arc::new(Metrics::default()),
        configmaps::describe(NS),
    ))
}
