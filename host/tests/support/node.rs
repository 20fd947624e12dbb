//! wasmprov deployed on test_cluster's real node: images, `kubectl apply`,
//! and what the replicas report (shared by tests/node.rs and
//! benches/node_reload.rs).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use test_cluster::{Cluster, NodeOptions, Options};

use super::workspace_root;

/// deploy/'s namespace.
pub const NS: &str = "wasmprov";
/// How long anything on the node may take: image unpacking, a container
/// start and a kubelet sync on a loaded 2-core machine.
pub const LIMIT: Duration = Duration::from_secs(180);

/// Runs a command, panicking with its output when it fails; its stdout.
pub fn run(command: &mut std::process::Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `deploy/image/build.sh ARGS…`: the OCI tarball it prints.
pub fn image(args: &[&str]) -> PathBuf {
    let out = run(std::process::Command::new("bash")
        .arg(workspace_root().join("deploy/image/build.sh"))
        .args(args)
        .current_dir(workspace_root()));
    PathBuf::from(out.trim())
}

/// How many real nodes [`deploy`] starts.
pub const NODES: usize = 3;

/// A cluster with [`NODES`] nodes, each with its own `/var/lib/wasmprov`, the
/// kustomization `dir` (deploy/ or an overlay of it) applied and its
/// Deployment and DaemonSet available. Blocks: call it from a thread of
/// its own in async code.
pub fn deploy(dir: &Path) -> Cluster {
    // The binary cargo built for these tests: a release build as well
    // would add minutes to a cold run (deploy/image/build.sh --binary).
    let images = vec![
        image(&["--binary", env!("CARGO_BIN_EXE_wasmprov")]),
        image(&["--busybox"]),
    ];
    let cluster = Cluster::start(Options {
        node: Some(NodeOptions {
            images,
            count: NODES,
            private_paths: vec![PathBuf::from("/var/lib/wasmprov")],
        }),
        ..Options::default()
    })
    .unwrap_or_else(|e| panic!("starting the cluster with a node: {e}"));
    run(cluster
        .kubectl()
        .args(["apply", "--server-side", "-k"])
        .arg(dir));
    for workload in ["deployment/wasmprov", "daemonset/wasmprov-node"] {
        rolled_out(&cluster, workload);
    }
    cluster
}

/// Waits for `kubectl rollout status WORKLOAD`; panics with the pods'
/// description when it does not finish in time.
pub fn rolled_out(cluster: &Cluster, workload: &str) {
    let status = cluster
        .kubectl()
        .args(["-n", NS, "rollout", "status", workload])
        .arg(format!("--timeout={}s", LIMIT.as_secs()))
        .output()
        .unwrap();
    if !status.status.success() {
        let pods = cluster
            .kubectl()
            .args(["-n", NS, "describe", "pods"])
            .output()
            .unwrap();
        panic!(
            "deploy/'s {workload} did not become available: {}\n{}\nkubelet log: {}",
            String::from_utf8_lossy(&status.stderr),
            String::from_utf8_lossy(&pods.stdout),
            cluster.log_path("kubelet").display()
        );
    }
}

/// `kubectl apply --server-side -f -`, as a user runs it.
pub fn apply(cluster: &Cluster, yaml: &str) {
    apply_with(cluster, &[], yaml)
}

/// [`apply`] of objects that name no namespace into `ns`.
pub fn apply_in(cluster: &Cluster, ns: &str, yaml: &str) {
    apply_with(cluster, &["-n", ns], yaml)
}

fn apply_with(cluster: &Cluster, args: &[&str], yaml: &str) {
    use std::io::Write;
    let mut child = cluster
        .kubectl()
        .args(["apply", "--server-side", "--force-conflicts", "-f", "-"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `wasmprov_plugin_info`'s digest for hostpath, as one replica reports it.
pub async fn served_digest(client: &Client, pod: &str) -> Option<String> {
    plugin_digest(client, pod, "hostpath").await
}

/// `wasmprov_plugin_info`'s digest for `plugin`, as one replica reports it.
pub async fn plugin_digest(client: &Client, pod: &str, plugin: &str) -> Option<String> {
    let text = metrics(client, pod).await?;
    let label = format!("plugin=\"{plugin}\"");
    text.lines()
        .find(|l| l.starts_with("wasmprov_plugin_info{") && l.contains(&label))
        .and_then(|l| l.split("digest=\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .map(str::to_owned)
}

/// One replica's `/metrics`, through the API server's pod proxy.
pub async fn metrics(client: &Client, pod: &str) -> Option<String> {
    ops_page(client, pod, "metrics").await
}

/// One of a replica's ops pages (`metrics`, `healthz`, `readyz`), through
/// the API server's pod proxy; `None` when it cannot be read or is not 200.
pub async fn ops_page(client: &Client, pod: &str, page: &str) -> Option<String> {
    let path = format!("/api/v1/namespaces/{NS}/pods/{pod}:8080/proxy/{page}");
    let request = hyper::Request::get(path).body(Vec::new()).unwrap();
    client.request_text(request).await.ok()
}

/// Those of `pods` that do not serve hostpath's `digest` yet.
pub async fn not_serving(client: &Client, pods: &[String], digest: &str) -> Vec<String> {
    let mut left = Vec::new();
    for pod in pods {
        if served_digest(client, pod).await.as_deref() != Some(digest) {
            left.push(pod.clone());
        }
    }
    left
}

/// The pods of every wasmprov host: the central replicas and the node hosts.
pub async fn replicas(client: &Client) -> Vec<String> {
    pods_labelled(client, "app.kubernetes.io/name=wasmprov").await
}

/// The pods of the node DaemonSet (one per node).
pub async fn node_hosts(client: &Client) -> Vec<String> {
    pods_labelled(
        client,
        "app.kubernetes.io/name=wasmprov,app.kubernetes.io/component=node",
    )
    .await
}

async fn pods_labelled(client: &Client, selector: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect()
}
