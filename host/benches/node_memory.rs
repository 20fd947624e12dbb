//! A node host's memory next to the Go library's provisioner's, on the real
//! control plane:
//!
//! ```sh
//! bash plugins/build.sh --rust-only
//! cargo bench -p wasmprov --bench node_memory   # BENCH_CLAIMS, BENCH_OTHERS
//! ```
//!
//! Node mode runs a host on every node, so what one host keeps resident is
//! paid once per node. One control plane holds `BENCH_OTHERS` (default
//! 1,000) claims and as many volumes of other nodes, which every node host
//! watches and caches without serving, as on a real cluster. Then each
//! contender in turn, on a node of its own:
//!
//! - the Go library's hostpath provisioner (tests/go-peer,
//!   sig-storage-lib-external-provisioner v13), which has no node mode: one
//!   such process per node is what a node-local Go provisioner costs;
//! - `wasmprov run --node-name`, as deploy/daemonset.yaml runs it: the
//!   hostpath plugin (compiled in a child process into the compile cache,
//!   then loaded from it), both finalizers, leader election for its node's
//!   Lease and the janitor's.
//!
//! Each is measured at rest (ready, then 20 s with nothing to do), once
//! `BENCH_CLAIMS` (default 200) claims of its node are Bound, and at rest
//! again after they are deleted; with the peak of its resident set. Both
//! run at the same API limits (200 QPS, burst 400). The target (#28): a
//! node host at rest within 64 MiB.

#[path = "common/cluster.rs"]
mod cluster;
#[path = "common/process.rs"]
mod process;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use test_cluster::Options;

/// How long a contender is left alone before its resident set is read.
const SETTLE: Duration = Duration::from_secs(20);
const TIMEOUT: Duration = Duration::from_secs(600);

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} is a number")))
        .unwrap_or(default)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Go,
    Wasmprov,
}

/// A contender's resident set, in MiB.
struct Figures {
    at_rest: f64,
    loaded: f64,
    after: f64,
    peak: f64,
}

async fn run() {
    let claims = setting("BENCH_CLAIMS", 200);
    let others = setting("BENCH_OTHERS", 1000);
    let plugin = support::workspace_root().join("target/plugins/hostpath.wasm");
    assert!(
        plugin.is_file(),
        "{} is missing: run `bash plugins/build.sh --rust-only` first",
        plugin.display()
    );
    let bin = test_cluster::binaries().unwrap_or_else(|e| panic!("{e}"));
    let (cluster, client) = cluster::start(Options {
        controller_manager_qps: Some(1000),
        ..Options::default()
    })
    .await;
    let work = tempfile::tempdir().unwrap();
    let kubeconfig = work.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        cluster.kubeconfig_with_token(cluster.admin_token()),
    )
    .unwrap();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "node_memory: {others} claims and {others} volumes of other nodes in the cluster; {claims} claims per contender; load average before: {}",
        load.trim()
    );
    let started = Instant::now();
    other_nodes_claims_and_volumes(&client, others).await;
    println!(
        "the other nodes' claims and volumes made in {:.0?}",
        started.elapsed()
    );

    let mut results = Vec::new();
    for (name, kind) in [
        ("Go library (tests/go-peer)", Kind::Go),
        ("wasmprov node host", Kind::Wasmprov),
    ] {
        let figures = measure(
            &client,
            &bin,
            &plugin,
            &kubeconfig,
            work.path(),
            kind,
            claims,
        )
        .await;
        results.push((name, figures));
    }

    println!(
        "\n| contender | at rest | {claims} claims Bound | at rest after deleting them | peak |"
    );
    println!("|---|---|---|---|---|");
    for (name, f) in &results {
        println!(
            "| {name} | {:.0} MiB | {:.0} MiB | {:.0} MiB | {:.0} MiB |",
            f.at_rest, f.loaded, f.after, f.peak
        );
    }
    let (go, wasmprov) = (&results[0].1, &results[1].1);
    println!(
        "| wasmprov / Go | {:.2}× | {:.2}× | {:.2}× | {:.2}× |",
        wasmprov.at_rest / go.at_rest,
        wasmprov.loaded / go.loaded,
        wasmprov.after / go.after,
        wasmprov.peak / go.peak
    );
    println!(
        "\nnode host at rest: {:.0} MiB (target ≤ 64 MiB)",
        wasmprov.at_rest
    );
}

/// Pending claims and Available volumes that no contender serves: what the
/// rest of a cluster puts in every node host's caches.
async fn other_nodes_claims_and_volumes(client: &Client, n: usize) {
    let ns = "elsewhere";
    create_namespace(client, ns).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let (claims, volumes) = (claims.clone(), volumes.clone());
            async move {
                let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("other-{i:05}"), "annotations": {
                        "volume.kubernetes.io/selected-node": format!("other-node-{}", i % 50)}},
                    "spec": {"storageClassName": "elsewhere", "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}))
                .unwrap();
                claims.create(&PostParams::default(), &claim).await.unwrap();
                let volume: PersistentVolume = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("other-{i:05}"), "annotations": {
                        "pv.kubernetes.io/provisioned-by": "elsewhere.example.com/local"}},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "kept",
                        "hostPath": {"path": format!("/srv/other-{i:05}")}}}))
                .unwrap();
                volumes
                    .create(&PostParams::default(), &volume)
                    .await
                    .unwrap();
            }
        })
        .await;
}

async fn measure(
    client: &Client,
    bin: &Path,
    plugin: &Path,
    kubeconfig: &Path,
    work: &Path,
    kind: Kind,
    claims: usize,
) -> Figures {
    let (key, provisioner) = match kind {
        Kind::Go => ("go", "go.example.com/hostpath"),
        Kind::Wasmprov => ("wasmprov", "node.wasmprov.io"),
    };
    let node = format!("{key}-node");
    support::create_node(client, &node).await;
    create_namespace(client, key).await;
    let volumes_dir = work.join(format!("{key}-volumes"));
    std::fs::create_dir_all(&volumes_dir).unwrap();
    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": key}, "provisioner": provisioner,
        "parameters": {"plugin": "hostpath", "hostRoot": volumes_dir.display().to_string()},
        "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"}))
    .unwrap();
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();

    let contender = match kind {
        Kind::Go => Contender::go(bin, kubeconfig, provisioner, &volumes_dir, &node, work),
        Kind::Wasmprov => Contender::wasmprov(plugin, kubeconfig, &volumes_dir, &node, work).await,
    };
    tokio::time::sleep(SETTLE).await;
    let at_rest = contender.rss("VmRSS");

    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), key);
    let started = Instant::now();
    futures::stream::iter(0..claims)
        .for_each_concurrent(32, |i| {
            let (api, node) = (api.clone(), node.clone());
            async move {
                let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("claim-{i:04}"), "annotations": {
                        "volume.kubernetes.io/selected-node": node}},
                    "spec": {"storageClassName": key, "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}))
                .unwrap();
                api.create(&PostParams::default(), &claim).await.unwrap();
            }
        })
        .await;
    wait_until(&format!("{claims} claims Bound"), || async {
        let bound = api
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .count();
        (bound == claims).then_some(())
    })
    .await;
    let loaded = contender.rss("VmRSS");
    println!("{key}: {claims} claims Bound in {:.1?}", started.elapsed());

    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    wait_until("their volumes deleted", || async {
        let left = volumes
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .filter(|v| {
                v.spec
                    .as_ref()
                    .and_then(|s| s.storage_class_name.as_deref())
                    == Some(key)
            })
            .count();
        (left == 0).then_some(())
    })
    .await;
    tokio::time::sleep(SETTLE).await;
    let after = contender.rss("VmRSS");
    let peak = contender.rss("VmHWM");
    drop(contender);
    Figures {
        at_rest,
        loaded,
        after,
        peak,
    }
}

async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

async fn wait_until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let deadline = Instant::now() + TIMEOUT;
    while f().await.is_none() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A contender's process; killed when dropped.
struct Contender(process::Process);

impl Contender {
    fn go(
        bin: &Path,
        kubeconfig: &Path,
        provisioner: &str,
        volumes_dir: &Path,
        node: &str,
        work: &Path,
    ) -> Self {
        let child = Command::new(bin.join("hostpath-peer"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--provisioner-name", provisioner])
            .arg("--root")
            .arg(volumes_dir)
            .args(["--node", node])
            .args(["--kube-api-qps", "200", "--kube-api-burst", "400"])
            .stdout(Stdio::null())
            .stderr(log(work, "go"))
            .spawn()
            .expect("start the Go peer");
        Self(process::Process(child))
    }

    /// `wasmprov run` in node mode, once ready.
    async fn wasmprov(
        plugin: &Path,
        kubeconfig: &Path,
        volumes_dir: &Path,
        node: &str,
        work: &Path,
    ) -> Self {
        let plugins = work.join("plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        std::fs::copy(plugin, plugins.join("hostpath.wasm")).unwrap();
        let policy = work.join("policy.yaml");
        std::fs::write(
            &policy,
            format!(
                "plugins:\n  hostpath:\n    runsOn: node\n    \
                 preopens: [{{host: {dir}, guest: /volumes, mode: read-write}}]\n    \
                 output: {{sources: [hostPath], paths: [{dir}]}}\n",
                dir = volumes_dir.display()
            ),
        )
        .unwrap();
        let port = support::free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_wasmprov"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--plugins-dir")
            .arg(&plugins)
            .arg("--policy")
            .arg(&policy)
            .arg("--cache-dir")
            .arg(work.join("cache"))
            .args(["--node-name", node, "--identity", "bench-node-host"])
            .args(["--leader-election-namespace", "default"])
            .args(["--add-finalizer", "--claim-finalizer"])
            .args(["--compile-memory-limit", "192Mi"])
            .args(["--kube-api-qps", "200", "--kube-api-burst", "400"])
            .args(["--log", "warn"])
            .arg("--metrics-address")
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log(work, "wasmprov"))
            .spawn()
            .expect("start wasmprov run");
        let mut contender = Self(process::Process(child));
        let deadline = Instant::now() + TIMEOUT;
        while !process::ready(port) {
            assert!(Instant::now() < deadline, "wasmprov never became ready");
            if let Ok(Some(status)) = contender.0 .0.try_wait() {
                panic!("wasmprov run exited: {status}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        contender
    }

    fn rss(&self, field: &str) -> f64 {
        process::status_mib(self.0 .0.id(), field)
    }
}

fn log(work: &Path, name: &str) -> std::fs::File {
    let path: PathBuf = work.join(format!("{name}.log"));
    std::fs::File::create(path).unwrap()
}
