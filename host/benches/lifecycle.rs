//! Lifecycle benchmark: 1,000 claims over 10 StorageClasses on the simulated
//! API server, until every claim is Bound. Compares, in one run, the host
//! with the Wasm hostpath plugin, the same host with a native Rust
//! implementation of the same `Provisioner` trait, and the simulator's raw
//! PersistentVolume create rate (the ceiling).
//!
//! Run: `bash plugins/build.sh && cargo bench -p wasmprov --bench lifecycle`
//!
//! Also the Wasm host with `--claim-finalizer`, which adds two claim patches
//! per claim: its cost as a ratio to the plain Wasm host.
//!
//! Each host runs twice, alternating, and the better run of each counts.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use wasmprov::lifecycle;
use wasmprov::metrics::Metrics;
use wasmprov::policy::PolicySet;
use wasmprov::provisioner::{
    DeleteError, PluginInfo, ProvisionError, ProvisionOptions, Provisioner,
};
use wasmprov::runtime::{Runtime, RuntimeConfig};
#[path = "common/native.rs"]
mod native;

use native::NativeHostPath;

const CLAIMS: usize = 1000;
const CLASSES: usize = 10;
/// Clients creating claims at once (a burst, like a StatefulSet scale-up).
const CREATORS: usize = 16;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_owned();
        println!(
            "{CLAIMS} claims over {CLASSES} classes, {CREATORS} concurrent creators, 4 workers"
        );
        let raw = raw_create_rate().await;
        println!("simulator raw PV creates:  {raw:>8.0}/s");
        // Alternate the two twice and keep each one's better run, so a burst
        // of load on the machine does not decide the ratio.
        let mut native = Vec::new();
        let mut wasm = Vec::new();
        let mut held = Vec::new();
        let plugins = root.join("target/plugins");
        for _ in 0..2 {
            native.push(run(Backend::Native, false).await);
            wasm.push(run(Backend::Wasm(plugins.clone()), false).await);
            held.push(run(Backend::Wasm(plugins.clone()), true).await);
        }
        let best = |runs: Vec<Outcome>| {
            runs.into_iter()
                .max_by(|a, b| a.claims_per_sec.total_cmp(&b.claims_per_sec))
                .unwrap()
        };
        let (native, wasm, held) = (best(native), best(wasm), best(held));
        report("native Rust provisioner", &native, raw);
        report("Wasm hostpath plugin", &wasm, raw);
        report("Wasm, --claim-finalizer", &held, raw);
        println!(
            "Wasm / native throughput:  {:>8.2}x",
            wasm.claims_per_sec / native.claims_per_sec
        );
        println!(
            "claim finalizer / without: {:>8.2}x",
            held.claims_per_sec / wasm.claims_per_sec
        );
    });
}

enum Backend {
    Native,
    Wasm(PathBuf),
}

struct Outcome {
    claims_per_sec: f64,
    /// Provision calls per claim: above 1 is work repeated for claims whose
    /// volume already exists (a stale watch cache) or retried.
    calls_per_claim: f64,
    p50: Duration,
    p99: Duration,
}

fn report(label: &str, o: &Outcome, raw: f64) {
    println!(
        "{label:<26} {:>8.0} claims/s ({:.2}x raw creates)  claim→Bound p50 {:>8.2?}  p99 {:>8.2?}  {:.2} provision calls/claim",
        o.claims_per_sec,
        o.claims_per_sec / raw,
        o.p50,
        o.p99,
        o.calls_per_claim
    );
}

async fn simulator() -> (kube_sim::Simulator, Client) {
    let sim = kube_sim::Simulator::start(kube_sim::Config {
        history_window: 100_000,
        ..kube_sim::Config::default()
    })
    .await
    .unwrap();
    let client = sim.client().unwrap();
    (sim, client)
}

/// PersistentVolume creates per second straight to the simulator.
async fn raw_create_rate() -> f64 {
    let (_sim, client) = simulator().await;
    let pvs: Api<PersistentVolume> = Api::all(client);
    let started = Instant::now();
    stream::iter(0..CLAIMS)
        .for_each_concurrent(CREATORS, |i| {
            let pvs = pvs.clone();
            async move {
                let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("raw-{i}")},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                        "hostPath": {"path": format!("/tmp/raw-{i}")}},
                }))
                .unwrap();
                pvs.create(&PostParams::default(), &pv).await.unwrap();
            }
        })
        .await;
    CLAIMS as f64 / started.elapsed().as_secs_f64()
}

async fn run(backend: Backend, claim_finalizer: bool) -> Outcome {
    let (_sim, client) = simulator().await;
    let volumes = tempfile::tempdir().unwrap();
    let root = volumes.path().display().to_string();
    let classes: Api<StorageClass> = Api::all(client.clone());
    for c in 0..CLASSES {
        let class: StorageClass = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("class-{c}")},
            "provisioner": "wasmprov.io/host",
            "parameters": {"plugin": "hostpath", "hostRoot": root},
        }))
        .unwrap();
        classes
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
    }
    let metrics = Arc::new(Metrics::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut config = lifecycle::Config::new("wasmprov.io/host");
    config.claim_finalizer = claim_finalizer;
    let calls = Arc::new(AtomicU64::new(0));
    let host = match backend {
        Backend::Native => tokio::spawn(lifecycle::run(
            client.clone(),
            Arc::new(Counted {
                inner: NativeHostPath(volumes.path().to_owned()),
                calls: calls.clone(),
            }),
            config,
            metrics,
            async move {
                let _ = stopped.await;
            },
        )),
        Backend::Wasm(plugins) => {
            let dir = tempfile::tempdir().unwrap();
            std::fs::copy(
                plugins.join("hostpath.wasm"),
                dir.path().join("hostpath.wasm"),
            )
            .expect("build the plugins first: bash plugins/build.sh");
            let policy = format!(
                "plugins:\n  hostpath:\n    maxConcurrentCalls: 16\n    preopens: [{{host: {root}, guest: /volumes, mode: read-write}}]\n    \
                 output: {{sources: [hostPath], paths: [{root}]}}\n"
            );
            let policies = PolicySet::parse(&policy, Path::new("policy.yaml")).unwrap();
            let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
            let registry = wasmprov::delivery::load_dir(
                Arc::new(runtime),
                dir.path(),
                &policies,
                metrics.clone(),
            )
            .await
            .unwrap();
            tokio::spawn(lifecycle::run(
                client.clone(),
                Arc::new(Counted {
                    inner: registry,
                    calls: calls.clone(),
                }),
                config,
                metrics,
                async move {
                    let _ = stopped.await;
                    drop(dir);
                },
            ))
        }
    };

    // Watch claims to time each one from creation to Bound.
    let created: Arc<std::sync::Mutex<HashMap<String, Instant>>> = Arc::default();
    let watch_created = created.clone();
    let claims_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let watch = tokio::spawn(async move {
        let mut latencies = Vec::with_capacity(CLAIMS);
        let mut bound = BTreeMap::new();
        let mut events = watcher(claims_api, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = events.next().await {
            if let watcher::Event::Apply(c) = event {
                let phase = c.status.as_ref().and_then(|s| s.phase.as_deref());
                if phase == Some("Bound") && !bound.contains_key(&c.name_any()) {
                    let t = watch_created.lock().unwrap().get(&c.name_any()).copied();
                    if let Some(t) = t {
                        latencies.push(t.elapsed());
                    }
                    bound.insert(c.name_any(), ());
                    if bound.len() == CLAIMS {
                        break;
                    }
                }
            }
        }
        latencies
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let started = Instant::now();
    stream::iter(0..CLAIMS)
        .for_each_concurrent(CREATORS, |i| {
            let claims = claims.clone();
            let created = created.clone();
            async move {
                let name = format!("claim-{i}");
                let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name},
                    "spec": {"storageClassName": format!("class-{}", i % CLASSES),
                        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                }))
                .unwrap();
                created.lock().unwrap().insert(name, Instant::now());
                claims.create(&PostParams::default(), &claim).await.unwrap();
            }
        })
        .await;
    let mut latencies = tokio::time::timeout(Duration::from_secs(600), watch)
        .await
        .expect("every claim bound within 10 minutes")
        .unwrap();
    let elapsed = started.elapsed();
    let _ = stop.send(());
    let _ = host.await;
    latencies.sort();
    Outcome {
        claims_per_sec: CLAIMS as f64 / elapsed.as_secs_f64(),
        calls_per_claim: calls.load(Ordering::Relaxed) as f64 / CLAIMS as f64,
        p50: latencies[latencies.len() / 2],
        p99: latencies[latencies.len() * 99 / 100],
    }
}

/// Counts the provision calls of the provisioner it wraps.
struct Counted<P> {
    inner: P,
    calls: Arc<AtomicU64>,
}

impl<P: Provisioner> Provisioner for Counted<P> {
    fn plugin(&self, plugin: &str) -> Result<PluginInfo, String> {
        self.inner.plugin(plugin)
    }

    async fn provision(
        &self,
        plugin: &str,
        opts: &ProvisionOptions,
    ) -> Result<PersistentVolume, ProvisionError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.provision(plugin, opts).await
    }

    async fn delete(&self, plugin: &str, pv: &PersistentVolume) -> Result<(), DeleteError> {
        self.inner.delete(plugin, pv).await
    }
}
