//! Plugin benchmark: every plugin in `target/plugins/`, measured in one run
//! with the class and sandbox it is conformance-tested with
//! (`plugins/<name>/conformance/`).
//!
//! Run: `bash plugins/build.sh && cargo bench -p wasmprov --bench plugins`
//! (`-- NAME...` measures only those plugins).
//!
//! For each plugin: component size, cold compile (Cranelift, no cache),
//! cached load (compile cache on disk), and the median `provision` through
//! the host's `WasmProvisioner` (fresh instance per call, validated
//! PersistentVolume) with the pooling allocator keeping 1 MiB, 16 MiB (the
//! runtime's default) or 64 MiB of linear memory resident between calls,
//! resetting only the pages a call dirtied (the default), and 16 MiB reset
//! with a memset of the resident part (what the runtime did before).
//! Repeated calls provision the same claim, so they measure the idempotent
//! "found it again" path of each backend.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use wasmprov::policy::PolicySet;
use wasmprov::provisioner::ProvisionOptions;
use wasmprov::runtime::{Runtime, RuntimeConfig};
use wasmprov::wasm_provisioner::WasmProvisioner;

const SCRATCH_PREFIX: &str = "/tmp/wasmprov/";
/// Pooling `linear_memory_keep_resident` and `reset_dirty_pages_only`
/// settings compared.
const POOLING: [(usize, bool); 4] = [
    (1 << 20, true),
    (16 << 20, true),
    (64 << 20, true),
    (16 << 20, false),
];

struct Row {
    name: String,
    size: usize,
    cold: Duration,
    cached: Duration,
    provision: Vec<(usize, Duration, Duration)>,
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned();
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let mut plugins: Vec<PathBuf> = std::fs::read_dir(root.join("target/plugins"))
        .unwrap_or_else(|e| {
            panic!("target/plugins: {e}; build the plugins first: bash plugins/build.sh")
        })
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        .collect();
    plugins.sort();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    for file in plugins {
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        if !only.is_empty() && !only.contains(&name) {
            continue;
        }
        let conformance = root.join("plugins").join(&name).join("conformance");
        if !conformance.is_dir() {
            eprintln!("skipping {name}: no plugins/{name}/conformance/");
            continue;
        }
        eprintln!("measuring {name}...");
        rows.push(rt.block_on(measure(&name, &file, &conformance)));
    }
    println!("| plugin | size | cold compile | cached load | provision, 1 MiB resident (median / p99) | 16 MiB resident | 64 MiB resident | 16 MiB, memset reset |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let calls = |i: usize| {
            r.provision
                .get(i)
                .map(|(n, med, p99)| format!("{med:.2?} / {p99:.2?} (n={n})"))
                .unwrap_or_default()
        };
        println!(
            "| {} | {} KiB | {:.2?} | {:.2?} | {} | {} | {} | {} |",
            r.name,
            r.size.div_ceil(1024),
            r.cold,
            r.cached,
            calls(0),
            calls(1),
            calls(2),
            calls(3)
        );
    }
}

async fn measure(name: &str, file: &Path, conformance: &Path) -> Row {
    let bytes = std::fs::read(file).unwrap();
    let big = bytes.len() > 4 << 20;
    let scratch = tempfile::tempdir().unwrap();
    let base = format!("{}/", scratch.path().display());
    let class_text = std::fs::read_to_string(conformance.join("sc.yaml"))
        .unwrap()
        .replace(SCRATCH_PREFIX, &base);
    let class: StorageClass = serde_yaml::from_str(&class_text).unwrap();
    let policy_text = std::fs::read_to_string(conformance.join("policy.yaml"))
        .unwrap()
        .replace(SCRATCH_PREFIX, &base);
    create_preopens(&policy_text);
    let fixtures = conformance.join("fixtures");
    if fixtures.is_dir() {
        copy_tree(&fixtures, scratch.path());
    }
    let policies = PolicySet::parse(&policy_text, &conformance.join("policy.yaml")).unwrap();
    let policy = policies.sandbox_for(name);

    // Cold compile: a fresh engine without cache, every time.
    let cold_runs = if big { 1 } else { 5 };
    let cold = median(
        (0..cold_runs)
            .map(|_| {
                let r = Runtime::new(RuntimeConfig::default()).unwrap();
                let t = Instant::now();
                black_box(r.compile(name, &bytes).unwrap());
                t.elapsed()
            })
            .collect(),
    );

    let cache = tempfile::tempdir().unwrap();
    let mut provision = Vec::new();
    let mut cached = Duration::ZERO;
    for (keep_resident, reset_dirty_pages_only) in POOLING {
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: Some(cache.path().to_owned()),
            keep_resident,
            reset_dirty_pages_only,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let compiled = runtime.compile(name, &bytes).unwrap(); // fills the cache
        if cached.is_zero() {
            cached = median(
                (0..20)
                    .map(|_| {
                        let t = Instant::now();
                        black_box(runtime.compile(name, &bytes).unwrap());
                        t.elapsed()
                    })
                    .collect(),
            );
        }
        let plugin = runtime
            .instantiate(name, compiled, policy.clone())
            .await
            .unwrap();
        let provisioner = WasmProvisioner::new(Arc::new(plugin), policies.output_for(name));
        let opts = options(class.clone());
        let (warmup, calls) = if big { (10, 100) } else { (100, 1000) };
        for _ in 0..warmup {
            provisioner.provision(&opts).await.unwrap();
        }
        let mut times = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            black_box(provisioner.provision(&opts).await.unwrap());
            times.push(t.elapsed());
        }
        times.sort();
        provision.push((calls, times[calls / 2], times[calls * 99 / 100]));
    }
    Row {
        name: name.to_owned(),
        size: bytes.len(),
        cold,
        cached,
        provision,
    }
}

fn options(class: StorageClass) -> ProvisionOptions {
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("bench".to_owned()),
            namespace: Some("bench".to_owned()),
            uid: Some("00000000-0000-0000-0000-00000000beef".to_owned()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity("1Gi".to_owned()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    };
    ProvisionOptions {
        pv_name: ProvisionOptions::pv_name_for(&claim).unwrap(),
        claim,
        class,
        selected_node: None,
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn create_preopens(policy: &str) {
    let policy: serde_yaml::Value = serde_yaml::from_str(policy).unwrap();
    let plugins = policy["plugins"].as_mapping().cloned().unwrap_or_default();
    for (_, spec) in plugins {
        for preopen in spec["preopens"].as_sequence().cloned().unwrap_or_default() {
            std::fs::create_dir_all(preopen["host"].as_str().unwrap()).unwrap();
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
