//! Reload benchmark: how long after a plugin file is swapped the new version
//! serves, and what a loaded version costs in memory.
//!
//! Run: `bash plugins/build.sh && cargo bench -p wasmprov --bench reload`
//!
//! Each swap is a kubelet-style ConfigMap update (a new `..data` directory
//! swapped in by rename) of a plugins directory watched by the host exactly
//! as `wasmprov run` watches it (default debounce). The clock starts at the
//! rename and stops when the registry reports the new digest. "Cached" means
//! the compile cache already holds the version (e.g. another replica or an
//! earlier start compiled it); "uncached" compiles it with Cranelift.
//!
//! The API source is timed the same way: from the ConfigMap update request
//! (server-side apply of `wasmprov plugin pack`'s ConfigMaps; parts, then
//! the manifest, for a chunked plugin) on the simulated API server to the
//! new version serving.
//!
//! Memory: resident set growth of this process per version kept loaded
//! (compiled code, metadata, the instance-pre), for distinct versions.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use support::kubelet::KubeletVolume;
use support::{digest, variant};
use wasmprov::delivery::encoding::Encoding;
use wasmprov::delivery::{self, package, WatchConfig};
use wasmprov::metrics::Metrics;
use wasmprov::policy::PolicySet;
use wasmprov::registry::PluginRegistry;
use wasmprov::runtime::{Runtime, RuntimeConfig};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned();
    let plugins = root.join("target/plugins");
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "reload: kubelet-style swap → new version serving (debounce {:?})",
        WatchConfig::default().debounce
    );
    println!("| plugin | size | source, cache | swaps | median | max | RSS per loaded version |");
    println!("|---|---|---|---|---|---|---|");
    let mut breakdown = Vec::new();
    // (plugin, swaps measured cached, swaps measured uncached, versions kept for memory)
    for (name, cached, uncached, kept) in [("hostpath", 20, 10, 20), ("template", 5, 2, 3)] {
        let file = plugins.join(format!("{name}.wasm"));
        let Ok(wasm) = std::fs::read(&file) else {
            println!("| {name} | not built: bash plugins/build.sh | | | | | |");
            continue;
        };
        let cached_times = tokio.block_on(swap_times(name, &wasm, cached, true));
        let uncached_times = tokio.block_on(swap_times(name, &wasm, uncached, false));
        let api_times = tokio.block_on(configmap_times(name, &wasm, cached));
        let rss = tokio.block_on(rss_per_version(name, &wasm, kept));
        breakdown.push(tokio.block_on(steps(name, &wasm)));
        for (label, times) in [
            ("file, cached", &cached_times),
            ("file, uncached", &uncached_times),
            ("ConfigMap via API, cached", &api_times),
        ] {
            println!(
                "| {name} | {:.1} MiB | {label} | {} | {} | {} | {:.1} MiB |",
                wasm.len() as f64 / f64::from(1 << 20),
                times.len(),
                ms(median(times)),
                ms(*times.iter().max().unwrap()),
                rss / f64::from(1 << 20),
            );
        }
    }
    println!();
    for line in breakdown {
        println!("{line}");
    }
}

/// Where a cached reload's time goes, measured step by step.
async fn steps(name: &str, wasm: &[u8]) -> String {
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_owned()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    runtime.compile(name, wasm).unwrap();
    let t = Instant::now();
    let _ = digest(wasm);
    let sha = t.elapsed();
    let t = Instant::now();
    let compiled = runtime.compile(name, wasm).unwrap();
    let load = t.elapsed();
    let t = Instant::now();
    runtime
        .instantiate(name, compiled, PolicySet::default().sandbox_for(name))
        .await
        .unwrap();
    let probe = t.elapsed();
    format!(
        "{name}: sha256 {}, cached compile (incl. sha256, cache read and checksum) {}, probe call {}",
        ms(sha),
        ms(load),
        ms(probe)
    )
}

/// Times `n` swaps of `name` to fresh versions, each compiled beforehand
/// into the cache if `cached`.
async fn swap_times(name: &str, wasm: &[u8], n: u32, cached: bool) -> Vec<Duration> {
    let cache = tempfile::tempdir().unwrap();
    let runtime = || {
        Runtime::new(RuntimeConfig {
            cache_dir: Some(cache.path().to_owned()),
            ..RuntimeConfig::default()
        })
        .unwrap()
    };
    // A fresh cache directory per run: "uncached" really compiles.
    let versions: Vec<Vec<u8>> = (0..=n)
        .map(|i| variant(wasm, &(i + 1).to_string()))
        .collect();
    if cached {
        let warm = runtime();
        for v in &versions {
            warm.compile(name, v).unwrap();
        }
    }
    let file = format!("{name}.wasm");
    let mut mount = KubeletVolume::new(&[(&file, &versions[0])]);
    let registry = delivery::serve_directory(
        mount.path(),
        None,
        Arc::new(runtime()),
        Arc::new(Metrics::default()),
        WatchConfig::default(),
    )
    .await
    .unwrap();
    let mut times = Vec::new();
    for v in &versions[1..] {
        let started = mount.update(&[(&file, v)]);
        wait_for(&registry, name, &digest(v)).await;
        times.push(started.elapsed());
    }
    times
}

/// Times `n` updates of the plugin's ConfigMap(s) on the simulated API
/// server, from the update request to the new version serving (API source,
/// versions already in the compile cache).
async fn configmap_times(name: &str, wasm: &[u8], n: u32) -> Vec<Duration> {
    const NS: &str = "default";
    let sim = kube_sim::Simulator::start(kube_sim::Config::default())
        .await
        .unwrap();
    let client = sim.client().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let runtime = Arc::new(
        Runtime::new(RuntimeConfig {
            cache_dir: Some(cache.path().to_owned()),
            ..RuntimeConfig::default()
        })
        .unwrap(),
    );
    let versions: Vec<Vec<u8>> = (0..=n)
        .map(|i| variant(wasm, &(100 + i).to_string()))
        .collect();
    for v in &versions {
        runtime.compile(name, v).unwrap();
    }
    let sources = delivery::Sources {
        configmaps: Some(delivery::ConfigMapsSource {
            client: client.clone(),
            namespace: NS.to_owned(),
            reporter: wasmprov::events::Reporter {
                controller: "wasmprov-bench".into(),
                instance: None,
            },
            initial_timeout: Duration::from_secs(30),
        }),
        ..delivery::Sources::default()
    };
    let registry = delivery::serve(
        sources,
        runtime,
        Arc::new(Metrics::default()),
        WatchConfig::default(),
    )
    .await
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, NS);
    let mut times = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let packed = package::pack(
            name,
            v,
            Encoding::Zstd,
            Some(NS),
            package::DEFAULT_PART_SIZE,
        )
        .unwrap();
        let started = Instant::now();
        for cm in &packed.config_maps {
            api.patch(
                &cm.name_any(),
                &PatchParams::apply("wasmprov-bench").force(),
                &Patch::Apply(cm),
            )
            .await
            .unwrap();
        }
        wait_for(&registry, name, &packed.digest).await;
        if i > 0 {
            times.push(started.elapsed());
        }
    }
    sim.shutdown().await;
    times
}

async fn wait_for(registry: &PluginRegistry, name: &str, digest: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let want = (name.to_owned(), digest.to_owned());
    while !registry.serving().contains(&want) {
        assert!(Instant::now() < deadline, "{name} never served {digest}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Resident memory added per distinct version kept loaded.
async fn rss_per_version(name: &str, wasm: &[u8], n: u32) -> f64 {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let policy = PolicySet::default().sandbox_for(name);
    // One load first, so one-time costs (engine, pool, code paths) are not counted.
    let first = runtime
        .load(name, &variant(wasm, "0"), policy.clone())
        .await
        .unwrap();
    let before = rss_bytes();
    let mut kept = vec![first];
    for i in 1..=n {
        kept.push(
            runtime
                .load(name, &variant(wasm, &i.to_string()), policy.clone())
                .await
                .unwrap(),
        );
    }
    let after = rss_bytes();
    drop(kept);
    (after.saturating_sub(before)) as f64 / f64::from(n)
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}
