//! Plugin update latency on a real node: from the start of `kubectl apply`
//! of a new plugin version's ConfigMap to deploy/'s node hosts (the
//! DaemonSet's pods on the two nodes, which serve hostpath) serving it
//! (their `wasmprov_plugin_info` digest, read through the API server's pod
//! proxy every 100 ms).
//!
//! Run: `cargo bench -p wasmprov --bench node_reload` (needs root, like the
//! node: tests/cluster/README.md).
//!
//! With kubelet's defaults, on a cluster of its own each:
//! - **directory** (deploy/ as shipped): the kubelet rewrites the projected
//!   volume (its `..data` swap) when it next syncs the pod, then the host
//!   reloads;
//! - **directory, pods annotated**: the same, with `kubectl annotate` of
//!   the pods right after the apply (an update of a pod makes the kubelet
//!   sync it, and remount its ConfigMap volumes, at once);
//! - **API** (deploy/ with the api-source component): the host watches the
//!   ConfigMap itself.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::node::{apply_in, deploy, node_hosts, not_serving, run, NODES, NS};
use support::workspace_root;
use test_cluster::Cluster;

const UPDATES: usize = 5;

#[derive(Clone, Copy, PartialEq)]
enum Nudge {
    None,
    AnnotatePods,
}

fn main() {
    let wasm = std::fs::read(support::rust_plugin_path("hostpath")).expect("build hostpath");
    let wasmprov = Path::new(env!("CARGO_BIN_EXE_wasmprov"));
    let root = workspace_root();

    let overlay = root.join("target/node-bench/api-source");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "namespace: wasmprov\nresources: [../../../deploy]\ncomponents: [../../../deploy/api-source]\n",
    )
    .unwrap();

    let mut rows = Vec::new();
    let cluster = deploy(&root.join("deploy"));
    for (source, nudge) in [
        ("directory (kubelet sync)", Nudge::None),
        ("directory, pods annotated", Nudge::AnnotatePods),
    ] {
        rows.push((source, updates(&cluster, &wasm, wasmprov, source, nudge)));
    }
    drop(cluster);
    let cluster = deploy(&overlay);
    let source = "API (--plugin-configmaps)";
    rows.push((
        source,
        updates(&cluster, &wasm, wasmprov, source, Nudge::None),
    ));
    drop(cluster);

    println!("| source | updates | median | min | max | of which `kubectl apply` (median) |");
    println!("|---|---|---|---|---|---|");
    for (source, mut times) in rows {
        times.sort();
        let mid = times[times.len() / 2];
        let mut applies: Vec<Duration> = times.iter().map(|t| t.1).collect();
        applies.sort();
        println!(
            "| {source} | {} | {:.1} s | {:.1} s | {:.1} s | {:.2} s |",
            times.len(),
            mid.0.as_secs_f64(),
            times[0].0.as_secs_f64(),
            times[times.len() - 1].0.as_secs_f64(),
            applies[applies.len() / 2].as_secs_f64()
        );
    }
}

/// Applies `UPDATES` new versions, one after the other; for each, the time
/// until every node host serves it and the time `kubectl apply` itself took.
fn updates(
    cluster: &Cluster,
    wasm: &[u8],
    wasmprov: &Path,
    source: &str,
    nudge: Nudge,
) -> Vec<(Duration, Duration)> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(cluster.client()).unwrap();
    let pods = runtime.block_on(node_hosts(&client));
    assert_eq!(pods.len(), NODES, "a node host per node: {pods:?}");
    let dir = tempfile::tempdir().unwrap();
    let mut times = Vec::new();
    for i in 0..UPDATES {
        let tag = format!("node-bench-{}-{source}-{i}", std::process::id());
        let next = support::variant(wasm, &tag);
        let digest = support::digest(&next);
        let file = dir.path().join("hostpath.wasm");
        std::fs::write(&file, &next).unwrap();
        let manifest = String::from_utf8(support::pack(wasmprov, &file, "hostpath")).unwrap();
        let started = Instant::now();
        apply_in(cluster, NS, &manifest);
        let applied = started.elapsed();
        if nudge == Nudge::AnnotatePods {
            run(cluster
                .kubectl()
                .args(["-n", NS, "annotate", "pods", "--overwrite"])
                .args(["-l", "app.kubernetes.io/component=node"])
                .arg(format!("wasmprov.io/plugins-updated={i}")));
        }
        let mut waiting = pods.clone();
        while !waiting.is_empty() {
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "{source}: {waiting:?} do not serve the new version after 300 s"
            );
            waiting = runtime.block_on(not_serving(&client, &waiting, &digest));
            std::thread::sleep(Duration::from_millis(100));
        }
        let took = started.elapsed();
        eprintln!("{source}: update {i} served by every node host after {took:.1?}");
        times.push((took, applied));
    }
    times
}
