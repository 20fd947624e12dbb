//! wasmprov at scale, on the real control plane:
//!
//! ```sh
//! bash plugins/build.sh --rust-only
//! cargo bench -p wasmprov --bench scale
//! ```
//!
//! 1. **100 classes, 100 plugin versions**: `wasmprov run` with 100 distinct
//!    hostpath components (one per StorageClass). A first start fills the
//!    compile cache; the measured start is from that cache: time to
//!    `/readyz` (every plugin loaded), RSS then and its peak.
//! 2. **10,000 existing volumes**: the host starts on a cluster holding
//!    10,000 of its volumes (`BENCH_VOLUMES`): time to `/readyz`, time
//!    until a new claim is Bound (the host has listed the volumes first),
//!    and RSS then.
//!
//! Targets (issue #12): 100 classes ready within 1 s from the cache, with
//! RSS ≤ 150 MiB.

#[path = "common/cluster.rs"]
mod cluster;
#[path = "common/process.rs"]
mod process;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::PostParams;
use kube::{Api, Client};
use support::variant;
use test_cluster::Options;

const PROVISIONER: &str = "wasmprov.io/host";
const NODE: &str = "scale-node";
const CLASSES: usize = 100;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let volumes: usize = std::env::var("BENCH_VOLUMES")
        .ok()
        .map(|v| v.parse().expect("BENCH_VOLUMES is a number"))
        .unwrap_or(10_000);
    let hostpath = support::workspace_root().join("target/plugins/hostpath.wasm");
    let wasm = std::fs::read(&hostpath).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run `bash plugins/build.sh --rust-only` first",
            hostpath.display()
        )
    });
    let (cluster, client) = cluster::start(Options {
        controller_manager_qps: Some(1000),
        ..Options::default()
    })
    .await;
    support::create_node(&client, NODE).await;
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("volumes");
    let plugins = work.path().join("plugins");
    let cache = work.path().join("cache");
    for dir in [&root, &plugins, &cache] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let mut policy = String::from("plugins:\n");
    for i in 0..CLASSES {
        let name = format!("hostpath-{i:03}");
        std::fs::write(
            plugins.join(format!("{name}.wasm")),
            variant(&wasm, &i.to_string()),
        )
        .unwrap();
        policy += &format!(
            "  {name}:\n    preopens: [{{host: {dir}, guest: /volumes, mode: read-write}}]\n    \
             output: {{sources: [hostPath], paths: [{dir}]}}\n",
            dir = root.display()
        );
        let class: StorageClass = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "provisioner": PROVISIONER,
            "parameters": {"plugin": name, "hostRoot": root.display().to_string()},
            "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}))
        .unwrap();
        Api::<StorageClass>::all(client.clone())
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
    }
    let policy_file = work.path().join("policy.yaml");
    std::fs::write(&policy_file, policy).unwrap();
    let kubeconfig = work.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        cluster.kubeconfig_with_token(cluster.admin_token()),
    )
    .unwrap();
    let host = Host {
        kubeconfig,
        plugins,
        policy: policy_file,
        cache,
    };

    // 1. 100 classes: fill the cache, then start from it.
    let cold = host.start().await;
    println!(
        "100 plugin versions, empty compile cache: ready in {:.2?}",
        cold.ready_in
    );
    drop(cold);
    let warm = host.start().await;
    println!(
        "100 plugin versions, from the compile cache: ready in {:.2?}, RSS {:.0} MiB (peak {:.0} MiB)",
        warm.ready_in,
        warm.rss_mib(),
        warm.peak_rss_mib()
    );
    let first = Instant::now();
    bind_one(&client, "first", "hostpath-000").await;
    println!("  first claim Bound {:.2?} later", first.elapsed());
    drop(warm);

    // 2. 10,000 existing volumes.
    let started = Instant::now();
    make_volumes(&client, volumes, &root).await;
    println!(
        "made {volumes} volumes of this host in {:.1?} (Available, the binder done with them)",
        started.elapsed()
    );
    let host_run = host.start().await;
    let ready = host_run.ready_in;
    let claim_started = Instant::now();
    bind_one(&client, "after-volumes", "hostpath-001").await;
    println!(
        "with {volumes} existing volumes: ready in {ready:.2?}; a new claim Bound {:.2?} after that; RSS {:.0} MiB (peak {:.0} MiB)",
        claim_started.elapsed(),
        host_run.rss_mib(),
        host_run.peak_rss_mib()
    );
}

struct Host {
    kubeconfig: std::path::PathBuf,
    plugins: std::path::PathBuf,
    policy: std::path::PathBuf,
    cache: std::path::PathBuf,
}

/// A running `wasmprov run`, killed when dropped.
struct Running {
    child: Child,
    ready_in: Duration,
}

impl Host {
    async fn start(&self) -> Running {
        let port = support::free_port();
        let started = Instant::now();
        let child = Command::new(env!("CARGO_BIN_EXE_wasmprov"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--plugins-dir")
            .arg(&self.plugins)
            .arg("--policy")
            .arg(&self.policy)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(["--leader-election", "false", "--log", "warn"])
            .args(["--kube-api-qps", "200", "--kube-api-burst", "400"])
            .arg("--metrics-address")
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start wasmprov run");
        let mut running = Running {
            child,
            ready_in: Duration::ZERO,
        };
        let deadline = started + Duration::from_secs(600);
        while !process::ready(port) {
            assert!(Instant::now() < deadline, "wasmprov never became ready");
            if let Ok(Some(status)) = running.child.try_wait() {
                panic!("wasmprov run exited: {status}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        running.ready_in = started.elapsed();
        running
    }
}

impl Running {
    fn rss_mib(&self) -> f64 {
        process::status_mib(self.child.id(), "VmRSS")
    }

    fn peak_rss_mib(&self) -> f64 {
        process::status_mib(self.child.id(), "VmHWM")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn bind_one(client: &Client, name: &str, class: &str) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}}))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let c = claims.get(name).await.unwrap();
        if c.status.and_then(|s| s.phase).as_deref() == Some("Bound") {
            return;
        }
        assert!(Instant::now() < deadline, "claim {name} never bound");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `n` volumes this host made, Available, reclaimed by Retain so that
/// nothing deletes them.
async fn make_volumes(client: &Client, n: usize, root: &Path) {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let api = api.clone();
            async move {
                let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("pvc-existing-{i:05}"), "annotations": {
                        "pv.kubernetes.io/provisioned-by": PROVISIONER,
                        "wasmprov.io/plugin": "hostpath-000",
                        "wasmprov.io/parameters": "{}"}},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "existing",
                        "hostPath": {"path": root.join(format!("existing-{i:05}")).display().to_string()}},
                }))
                .unwrap();
                api.create(&PostParams::default(), &pv).await.unwrap();
            }
        })
        .await;
    // The PV binder marks each new volume Available, 10,000 status updates
    // that would otherwise delay the claim measured next: wait them out.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let available = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|pv| pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available"))
            .count();
        if available >= n {
            return;
        }
        assert!(Instant::now() < deadline, "volumes never became Available");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
