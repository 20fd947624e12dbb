//! Runtime benchmark: what a plugin call costs, measured in one run so the
//! ratios hold on a noisy machine.
//!
//! Run: `bash plugins/build.sh && cargo bench -p wasmprov --bench runtime`
//!
//! Measures, for the hostpath plugin:
//! - cold compile (Cranelift) and cached load (compile cache on disk);
//! - one `provision` through the runtime with a fresh instance per call
//!   (median, p99), with several pooling keep-resident settings, resetting
//!   only the pages a call dirtied (the default) or memsetting the resident
//!   part of every memory, and a `capabilities` call that does no I/O (the
//!   sandbox's own cost);
//! - the same logic as a native Rust function, and the ratio.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmprov::policy::SandboxPolicy;
use wasmprov::policy::{DirMode, OutputPolicy, Preopen};
use wasmprov::provisioner::ProvisionOptions;
use wasmprov::runtime::bindings::types as wit;
use wasmprov::runtime::{Runtime, RuntimeConfig};
use wasmprov::wasm_provisioner::WasmProvisioner;

const CALLS: usize = 2000;
const WARMUP: usize = 200;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned();
    let component = root.join("target/plugins/hostpath.wasm");
    let bytes = std::fs::read(&component).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the plugins first: bash plugins/build.sh",
            component.display()
        )
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let volumes = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();

    println!("machine: {} cores, {}", cores(), cpu_model());
    println!("component: hostpath.wasm, {} bytes", bytes.len());

    // Compile: cold (no cache) and cached (a restart with a warm cache).
    let cold = median(&time_n(5, || {
        let r = Runtime::new(RuntimeConfig::default()).unwrap();
        black_box(r.compile("hostpath", &bytes).unwrap());
    }));
    let warm_runtime = runtime(Some(cache.path().to_owned()), 1 << 20);
    warm_runtime.compile("hostpath", &bytes).unwrap(); // fills the cache
    let cached = time_n(50, || {
        black_box(warm_runtime.compile("hostpath", &bytes).unwrap());
    });
    println!("cold compile:            {:>10.2?}", cold);
    println!(
        "cached load:             {:>10.2?} (median of 50)",
        median(&cached)
    );
    println!(
        "  compile/cached ratio:  {:>10.0}x",
        ratio(cold, median(&cached))
    );

    let policy = SandboxPolicy {
        preopens: vec![Preopen {
            host: volumes.path().to_owned(),
            guest: "/volumes".into(),
            mode: DirMode::ReadWrite,
        }],
        ..SandboxPolicy::default()
    };
    let opts = options(volumes.path());

    // Native: the same work (validate, create the directory idempotently,
    // build the source JSON) as plain Rust.
    let native = time_n(CALLS, || {
        black_box(native_provision(volumes.path(), &opts.pv_name).unwrap());
    });

    for (label, keep_resident, reset_dirty_pages_only) in [
        ("pooling, 16 MiB resident, memset reset", 16 << 20, false),
        ("pooling, 1 MiB resident", 1 << 20, true),
        ("pooling, 16 MiB resident", 16 << 20, true),
        ("pooling, 64 MiB resident", 64 << 20, true),
    ] {
        let r = Runtime::new(RuntimeConfig {
            cache_dir: Some(cache.path().to_owned()),
            keep_resident,
            reset_dirty_pages_only,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let plugin = rt
            .block_on(r.load("hostpath", &bytes, policy.clone()))
            .unwrap();
        let plugin = Arc::new(plugin);
        let request = wit_request(&opts);
        let output = OutputPolicy {
            sources: ["hostPath".to_owned()].into(),
            paths: vec![volumes.path().to_owned()],
            ..OutputPolicy::default()
        };
        let provisioner = WasmProvisioner::new(plugin.clone(), output);
        for _ in 0..WARMUP {
            rt.block_on(plugin.provision(&request)).unwrap().unwrap();
        }
        // A call that does no I/O: the sandbox's own cost per call.
        let empty = rt.block_on(async {
            let mut samples = Vec::with_capacity(CALLS);
            for _ in 0..CALLS {
                let t = Instant::now();
                black_box(plugin.call_capabilities().await.unwrap());
                samples.push(t.elapsed());
            }
            samples
        });
        let raw = rt.block_on(async {
            let mut samples = Vec::with_capacity(CALLS);
            for _ in 0..CALLS {
                let t = Instant::now();
                black_box(plugin.provision(&request).await.unwrap().unwrap());
                samples.push(t.elapsed());
            }
            samples
        });
        let full = rt.block_on(async {
            let mut samples = Vec::with_capacity(CALLS);
            for _ in 0..CALLS {
                let t = Instant::now();
                black_box(provisioner.provision(&opts).await.unwrap());
                samples.push(t.elapsed());
            }
            samples
        });
        println!("wasm calls ({label}), fresh instance per call:");
        report("  capabilities (no I/O)", &empty, &native);
        report("  plugin call", &raw, &native);
        report("  + PV conversion", &full, &native);
    }
    report("native Rust function", &native, &native);
}

fn runtime(cache_dir: Option<PathBuf>, keep_resident: usize) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir,
        keep_resident,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

fn options(root: &Path) -> ProvisionOptions {
    let class: k8s_openapi::api::storage::v1::StorageClass =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "hostpath"},
            "provisioner": "wasmprov.io/host",
            "parameters": {"plugin": "hostpath", "hostRoot": root.to_string_lossy()},
        }))
        .unwrap();
    let claim = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "default", "uid": "5d0c2f86-3c1b-4a8e-9d55-0a1b2c3d4e5f"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    ProvisionOptions {
        pv_name: "pvc-5d0c2f86-3c1b-4a8e-9d55-0a1b2c3d4e5f".into(),
        claim,
        class,
        selected_node: None,
    }
}

/// The request the runtime sends, built the way the host builds it.
fn wit_request(opts: &ProvisionOptions) -> wit::ProvisionRequest {
    wasmprov::wasm_provisioner::provision_request(opts).unwrap()
}

/// The hostpath plugin's provision logic as a native function.
fn native_provision(root: &Path, pv_name: &str) -> std::io::Result<String> {
    let valid = !pv_name.is_empty()
        && pv_name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !valid {
        return Err(std::io::Error::other("invalid name"));
    }
    let dir = root.join(pv_name);
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if !std::fs::symlink_metadata(&dir)?.is_dir() {
                return Err(std::io::Error::other("not a directory"));
            }
        }
        Err(e) => return Err(e),
    }
    Ok(serde_json::json!({"hostPath": {"path": dir, "type": "DirectoryOrCreate"}}).to_string())
}

fn time_n(n: usize, mut f: impl FnMut()) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect()
}

fn median(samples: &[Duration]) -> Duration {
    percentile(samples, 50.0)
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut s = samples.to_vec();
    s.sort();
    s[((s.len() - 1) as f64 * p / 100.0).round() as usize]
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn report(label: &str, samples: &[Duration], native: &[Duration]) {
    let (m, p99) = (median(samples), percentile(samples, 99.0));
    println!(
        "{label:<24} median {m:>9.2?}  p99 {p99:>9.2?}  ({:.1}x native median)",
        ratio(m, median(native))
    );
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
