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
//! Memory: resident set growth of this process per version kept loaded
//! (compiled code, metadata, the instance-pre), for distinct versions.

#[path = "../tests/support/kubelet.rs"]
mod kubelet;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubelet::{variant, KubeletVolume};
use sha2::{Digest, Sha256};
use wasmprov::delivery::{self, WatchConfig};
use wasmprov::metrics::Metrics;
use wasmprov::registry::PluginRegistry;
use wasmprov::runtime::{PolicySet, Runtime, RuntimeConfig};

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
    println!("| plugin | size | cache | swaps | median | max | RSS per loaded version |");
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
        let rss = tokio.block_on(rss_per_version(name, &wasm, kept));
        breakdown.push(tokio.block_on(steps(name, &wasm)));
        for (label, times) in [("cached", &cached_times), ("uncached", &uncached_times)] {
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
        .instantiate(name, compiled, PolicySet::default().for_plugin(name))
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
    let versions: Vec<Vec<u8>> = (0..=n).map(|i| variant(wasm, i + 1)).collect();
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
    let policy = PolicySet::default().for_plugin(name);
    // One load first, so one-time costs (engine, pool, code paths) are not counted.
    let first = runtime
        .load(name, &variant(wasm, 0), policy.clone())
        .await
        .unwrap();
    let before = rss_bytes();
    let mut kept = vec![first];
    for i in 1..=n {
        kept.push(
            runtime
                .load(name, &variant(wasm, i), policy.clone())
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

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}
