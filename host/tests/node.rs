//! wasmprov as users run it, on a real node: `kubectl apply --server-side
//! -k deploy/` starts the central replicas and the node host from the image
//! built by `deploy/image/build.sh` (no container engine), with their
//! ServiceAccount tokens and the plugin ConfigMap mounted by the kubelet;
//! deploy/'s demo Pod and an app Pod write to the volumes the node host
//! makes; a plugin update arrives through the kubelet's `..data` swap;
//! sixty pods of several users, spread over the nodes by the scheduler,
//! write to volumes made on their own nodes; killing the node host's
//! container in a burst of claims loses and leaks nothing; a plugin and a
//! tenant's Pod together cannot reach the node (node/sandbox.rs); a backend
//! added to the central replicas serves pods on every node; and a node that
//! hangs and is deleted in the middle of a burst loses no claim; pods go
//! to the nodes whose disks hold their volumes (node/capacity.rs); and Helm
//! takes the install over, tests, upgrades and uninstalls it, then
//! installs it afresh from a registry with the node plugins in an image
//! volume (node/chart.rs).
//!
//! The cluster has three real nodes (test_cluster's: containerd, kubelet,
//! kube-proxy each, Debian's runc and CNI plugins; it needs root, as CI
//! has), and each has its own `/var/lib/wasmprov` (a directory of its own in
//! a mount namespace of its own), so a volume made on the wrong node, or a
//! file left on one, shows as such.

#[path = "node/capacity.rs"]
mod capacity;
#[path = "node/chart.rs"]
mod chart;
#[path = "node/sandbox.rs"]
mod sandbox;
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use support::node::{
    apply, apply_in, node_hosts, not_serving, plugin_digest, replicas, rolled_out, run,
    served_digest, LIMIT, NS,
};
use support::{eventually_within, workspace_root};
use test_cluster::{node_name, Cluster, NODE_NAME};

/// The hostpath classes' hostRoot (deploy/storageclasses.yaml).
const HOST_ROOT: &str = "/var/lib/wasmprov/hostpath";

/// One cluster, deploy/ applied once, the scenarios in turn (each watches
/// the whole install). The cluster is dropped at the end, even when a
/// scenario fails: its node's containers and mounts must not outlive the
/// test (a static would never be dropped).
#[tokio::test(flavor = "multi_thread")]
async fn deploy_runs_on_a_real_node() {
    let cluster =
        tokio::task::spawn_blocking(|| support::node::deploy(&workspace_root().join("deploy")))
            .await
            .expect("deploying on a real node");
    the_hosts_run_from_the_image_as_the_containerfile_says(&cluster).await;
    app_pods_write_to_volumes_the_node_host_made(&cluster).await;
    a_plugin_update_reaches_the_pods_through_the_kubelet(&cluster).await;
    sixty_pods_of_any_user_write_to_volumes_on_their_own_nodes(&cluster).await;
    killing_the_node_host_in_a_burst_of_claims_loses_and_leaks_nothing(&cluster).await;
    sandbox::a_plugin_and_a_tenants_pod_cannot_reach_the_node(&cluster).await;
    let share = tempfile::Builder::new()
        .prefix("wasmprov-share-")
        .tempdir_in("/var/lib")
        .unwrap();
    a_central_backend_serves_pods_on_every_node(&cluster, share.path()).await;
    // Gives each node a small disk of its own at the hostpath root.
    capacity::pods_go_where_their_volumes_fit(&cluster).await;
    // The cluster has a node less afterwards.
    a_node_that_hangs_and_is_deleted_mid_burst_loses_no_claim(&cluster).await;
    // Last: the install is Helm's, then gone; then installed again from a
    // registry, and gone.
    chart::helm_takes_over_tests_upgrades_and_uninstalls(&cluster).await;
    chart::a_fresh_install_from_a_registry_takes_its_plugins_from_an_image_volume(&cluster).await;
}

fn namespace(name: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n")
}

fn claim(ns: &str, name: &str, class: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  storageClassName: {class}\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 1Mi\n"
    )
}

/// A claim whose node is already chosen, as the scheduler writes it when a
/// pod of the claim is scheduled (the classes wait for a consumer): for
/// claims no pod uses. On the first node.
fn claim_on_the_node(ns: &str, name: &str, class: &str) -> String {
    claim_on(ns, name, class, NODE_NAME)
}

/// [`claim_on_the_node`], on node `node`.
fn claim_on(ns: &str, name: &str, class: &str, node: &str) -> String {
    claim(ns, name, class).replace(
        &format!("  namespace: {ns}\n"),
        &format!(
            "  namespace: {ns}\n  annotations:\n    volume.kubernetes.io/selected-node: {node}\n"
        ),
    )
}

/// A busybox Pod that writes `text` into `/data/hello` on the claim and
/// stays up.
fn writer_pod(ns: &str, name: &str, claim: &str, text: &str) -> String {
    writer_pod_as(ns, name, claim, text, "{}")
}

/// [`writer_pod`] with the pod's `securityContext` (JSON).
fn writer_pod_as(ns: &str, name: &str, claim: &str, text: &str, security: &str) -> String {
    pod_writing(ns, name, claim, "hello", text, security)
}

/// A busybox Pod, with `securityContext` `security` (JSON), that writes
/// `text` into `/data/FILE` on the claim and stays up.
fn pod_writing(
    ns: &str,
    name: &str,
    claim: &str,
    file: &str,
    text: &str,
    security: &str,
) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {security}
  containers:
    - name: app
      image: docker.io/library/busybox:1.37
      command: [sh, -c, "echo {text} > /data/{file} && exec sleep 3600"]
      volumeMounts:
        - name: data
          mountPath: /data
  volumes:
    - name: data
      persistentVolumeClaim:
        claimName: {claim}
"#
    )
}

async fn bound_volume(client: &Client, ns: &str, claim: &str) -> PersistentVolume {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let name = eventually_within(LIMIT, &format!("claim {ns}/{claim} to be Bound"), || {
        let claims = claims.clone();
        async move {
            let c = claims.get_opt(claim).await.ok().flatten()?;
            (c.status?.phase.as_deref() == Some("Bound")).then_some(())?;
            c.spec?.volume_name
        }
    })
    .await;
    volumes.get(&name).await.unwrap()
}

fn host_path(volume: &PersistentVolume) -> PathBuf {
    let spec = volume.spec.as_ref().unwrap();
    PathBuf::from(&spec.host_path.as_ref().expect("a hostPath volume").path)
}

/// The one node a volume is pinned to.
fn pinned_node(volume: &PersistentVolume) -> String {
    let affinity = serde_json::to_value(&volume.spec.as_ref().unwrap().node_affinity).unwrap();
    let terms = &affinity["required"]["nodeSelectorTerms"];
    assert_eq!(
        terms.as_array().map(Vec::len),
        Some(1),
        "one term: {affinity}"
    );
    let values = &terms[0]["matchExpressions"][0]["values"];
    assert_eq!(values.as_array().map(Vec::len), Some(1), "{affinity}");
    values[0].as_str().unwrap().to_owned()
}

/// Where this machine has a volume's directory: on the node it is pinned
/// to; and that no other node has it.
fn on_its_node(cluster: &Cluster, volume: &PersistentVolume) -> PathBuf {
    let node = pinned_node(volume);
    let path = host_path(volume);
    for other in cluster.node_names().iter().filter(|n| **n != node) {
        assert!(
            !cluster.node_view(other, &path).exists(),
            "{} is on node {other} too",
            path.display()
        );
    }
    cluster.node_view(&node, &path)
}

async fn running(client: &Client, ns: &str, pod: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually_within(LIMIT, &format!("pod {ns}/{pod} to run"), || {
        let pods = pods.clone();
        async move {
            let p = pods.get_opt(pod).await.ok().flatten()?;
            (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
        }
    })
    .await
}

/// Deletes the namespace's pods and claims; returns once their volumes
/// and the volumes' directories are gone.
async fn delete_all(client: &Client, ns: &str, dirs: &[PathBuf]) {
    delete_pods_and_claims(client, ns).await;
    volumes_deleted(client, ns, dirs).await;
}

async fn delete_pods_and_claims(client: &Client, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    pods.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    claims
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
}

/// Returns once the volumes of the namespace's claims and `dirs` are gone.
async fn volumes_deleted(client: &Client, ns: &str, dirs: &[PathBuf]) {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    eventually_within(LIMIT, &format!("the volumes of {ns} to be deleted"), || {
        let volumes = volumes.clone();
        async move {
            let left = volumes.list(&ListParams::default()).await.ok()?;
            left.items
                .iter()
                .all(|v| claim_namespace(v) != Some(ns))
                .then_some(())
        }
    })
    .await;
    for dir in dirs {
        assert!(
            !dir.exists(),
            "{} is left after its volume was deleted",
            dir.display()
        );
    }
}

/// The namespace of the claim a volume is for.
fn claim_namespace(volume: &PersistentVolume) -> Option<&str> {
    volume
        .spec
        .as_ref()?
        .claim_ref
        .as_ref()?
        .namespace
        .as_deref()
}

/// The volume directories under the hostpath root of every node, as
/// `node/name`.
fn volume_dirs(cluster: &Cluster) -> BTreeSet<String> {
    let mut dirs = BTreeSet::new();
    for node in cluster.node_names() {
        let root = cluster.node_view(&node, Path::new(HOST_ROOT));
        for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("pvc-") {
                dirs.insert(format!("{node}/{name}"));
            }
        }
    }
    dirs
}

/// The `wasmprov` container of a replica: its status.
async fn host_container(client: &Client, pod: &str) -> ContainerStatus {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = pods.get(pod).await.unwrap();
    pod.status
        .and_then(|s| s.container_statuses)
        .into_iter()
        .flatten()
        .find(|c| c.name == "wasmprov")
        .expect("a wasmprov container status")
}

/// The node a pod of the install runs on.
async fn node_of(client: &Client, pod: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.get(pod)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.node_name)
        .expect("a scheduled pod")
}

/// The machine's process ID of a host pod's running `wasmprov` container
/// on `node`.
fn host_pid(cluster: &Cluster, node: &str, container: &ContainerStatus) -> String {
    let tasks = run(cluster.ctr_on(node).args(["tasks", "ls"]));
    let id = container
        .container_id
        .as_deref()
        .unwrap()
        .trim_start_matches("containerd://");
    tasks
        .lines()
        .find(|l| l.starts_with(id))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("container {id} in `ctr tasks ls`:\n{tasks}"))
        .to_owned()
}

/// Both central replicas and a node host on each node ready and never
/// restarted (probes pass), from the image deploy/image/build.sh made,
/// their process running as 65532.
async fn the_hosts_run_from_the_image_as_the_containerfile_says(cluster: &Cluster) {
    let client = cluster.client().await.unwrap();
    let pods = replicas(&client).await;
    assert_eq!(pods.len(), 2 + support::node::NODES, "{pods:?}");
    let mut served = BTreeSet::new();
    for pod in node_hosts(&client).await {
        served.insert(node_of(&client, &pod).await);
    }
    assert_eq!(
        served,
        cluster.node_names().into_iter().collect(),
        "a node host on each node"
    );
    for pod in &pods {
        let c = host_container(&client, pod).await;
        assert!(c.ready, "{pod} is not ready: {c:?}");
        assert_eq!(c.restart_count, 0, "{pod} restarted: {c:?}");
        assert_eq!(
            c.image,
            concat!("ghcr.io/wasmprov/wasmprov:", env!("CARGO_PKG_VERSION"))
        );
        let pid = host_pid(cluster, &node_of(&client, pod).await, &c);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert_eq!(
            uid.split_whitespace().nth(1),
            Some("65532"),
            "{pod}'s host process: {uid}"
        );
    }
}

async fn app_pods_write_to_volumes_the_node_host_made(cluster: &Cluster) {
    let client = cluster.client().await.unwrap();

    // deploy/claim.yaml's demo claim and pod: the pod's output is on the node.
    let demo = bound_volume(&client, NS, "demo").await;
    running(&client, NS, "demo").await;
    let demo_file = on_its_node(cluster, &demo).join("hello");
    eventually_within(LIMIT, "the demo pod's file on the node", || {
        let file = demo_file.clone();
        async move { std::fs::read_to_string(file).ok().filter(|t| !t.is_empty()) }
    })
    .await;

    // Provisioned for, and pinned to, the pod's node by its node host.
    let ns = "e2e-app";
    apply(cluster, &namespace(ns));
    apply(cluster, &claim(ns, "data", "hostpath"));
    apply(
        cluster,
        &writer_pod(ns, "writer", "data", "hello-from-a-pod"),
    );
    let volume = bound_volume(&client, ns, "data").await;
    let pod = running(&client, ns, "writer").await;
    let node = pod.spec.unwrap().node_name.unwrap();
    assert_eq!(pinned_node(&volume), node);
    assert!(
        host_path(&volume).starts_with(HOST_ROOT),
        "{}",
        host_path(&volume).display()
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let selected = claims
        .get("data")
        .await
        .unwrap()
        .annotations()
        .get("volume.kubernetes.io/selected-node")
        .cloned();
    assert_eq!(selected.as_deref(), Some(node.as_str()));
    let file = on_its_node(cluster, &volume).join("hello");
    let text = eventually_within(LIMIT, "the pod's file on the node", || {
        let file = file.clone();
        async move { std::fs::read_to_string(file).ok() }
    })
    .await;
    assert_eq!(text.trim(), "hello-from-a-pod");

    let dirs = vec![on_its_node(cluster, &volume)];
    delete_all(&client, ns, &dirs).await;
}

async fn a_plugin_update_reaches_the_pods_through_the_kubelet(cluster: &Cluster) {
    let client = cluster.client().await.unwrap();
    let pods = node_hosts(&client).await;
    assert_eq!(pods.len(), cluster.node_names().len(), "{pods:?}");

    let wasm = std::fs::read(support::rust_plugin_path("hostpath")).unwrap();
    let tag = format!("node-e2e-{}", std::process::id());
    let next = support::variant(&wasm, &tag);
    let next_digest = support::digest(&next);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hostpath.wasm");
    std::fs::write(&file, &next).unwrap();
    let manifest = support::pack(Path::new(env!("CARGO_BIN_EXE_wasmprov")), &file, "hostpath");
    for pod in &pods {
        let digest = served_digest(&client, pod).await;
        assert!(digest.is_some(), "{pod} reports no hostpath version");
        assert_ne!(digest.as_deref(), Some(next_digest.as_str()));
    }

    let ns = "e2e-reload";
    apply(cluster, &namespace(ns));
    let started = Instant::now();
    apply_in(cluster, NS, &String::from_utf8(manifest).unwrap());
    // Claims made while the update travels are served by one version or
    // the other, never lost.
    let mut n = 0;
    let mut waiting: Vec<String> = pods.clone();
    while !waiting.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{waiting:?} still serve the old version {:?} after the update",
            started.elapsed()
        );
        apply(
            cluster,
            &claim_on_the_node(ns, &format!("during-{n}"), "hostpath"),
        );
        n += 1;
        waiting = not_serving(&client, &waiting, &next_digest).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!(
        "node e2e: every node host served the new plugin version {:.0} s after kubectl apply",
        started.elapsed().as_secs_f64()
    );
    let mut dirs = Vec::new();
    for i in 0..n {
        let volume = bound_volume(&client, ns, &format!("during-{i}")).await;
        dirs.push(on_its_node(cluster, &volume));
    }
    delete_all(&client, ns, &dirs).await;

    // Back to the shipped version.
    run(cluster
        .kubectl()
        .args(["apply", "--server-side", "--force-conflicts", "-f"])
        .arg(workspace_root().join("deploy/plugin-hostpath.yaml"))
        .args(["-n", NS]));
}

async fn killing_the_node_host_in_a_burst_of_claims_loses_and_leaks_nothing(cluster: &Cluster) {
    let client = cluster.client().await.unwrap();
    let ns = "e2e-burst";
    apply(cluster, &namespace(ns));
    let before = volume_dirs(cluster);

    // The first node's host, holding its node's Lease.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let leader = leases
        .get(&format!("node.wasmprov.io.{NODE_NAME}"))
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
        .expect("the node host holds its node's Lease");
    assert!(node_hosts(&client).await.contains(&leader), "{leader}");
    assert_eq!(node_of(&client, &leader).await, NODE_NAME);
    let container = host_container(&client, &leader).await;
    let restarts = container.restart_count;
    let id = container
        .container_id
        .as_deref()
        .and_then(|id| id.strip_prefix("containerd://"))
        .expect("a containerd container ID")
        .to_owned();

    // Over both nodes.
    const CLAIMS: usize = 30;
    let all: String = (0..CLAIMS)
        .map(|i| {
            format!(
                "---\n{}",
                claim_on(ns, &format!("burst-{i}"), "hostpath", &node_name(i % 2))
            )
        })
        .collect();
    apply(cluster, &all);
    // Kill it mid-burst: as soon as it has made the first volume.
    let all_volumes: Api<PersistentVolume> = Api::all(client.clone());
    let made_before_kill = eventually_within(LIMIT, "the burst's first volume", || {
        let volumes = all_volumes.clone();
        async move {
            let list = volumes.list(&ListParams::default()).await.ok()?;
            let n = list
                .items
                .iter()
                .filter(|v| claim_namespace(v) == Some(ns))
                .count();
            (n > 0).then_some(n)
        }
    })
    .await;
    run(cluster
        .ctr_on(NODE_NAME)
        .args(["tasks", "kill", "--signal", "SIGKILL", &id]));
    assert!(
        made_before_kill < CLAIMS,
        "all {CLAIMS} volumes were made before the kill: make the burst larger"
    );
    eprintln!("node e2e: killed the node host after {made_before_kill} of {CLAIMS} volumes");

    let mut volumes = BTreeSet::new();
    let mut dirs = Vec::new();
    let mut expected = BTreeSet::new();
    for i in 0..CLAIMS {
        let v = bound_volume(&client, ns, &format!("burst-{i}")).await;
        assert_eq!(pinned_node(&v), node_name(i % 2), "burst-{i}");
        dirs.push(on_its_node(cluster, &v));
        expected.insert(format!("{}/{}", node_name(i % 2), v.name_any()));
        assert!(
            volumes.insert(v.name_any()),
            "two claims share {}",
            v.name_any()
        );
    }
    // The kubelet restarted the killed container.
    eventually_within(LIMIT, "the killed container to be restarted", || {
        let client = client.clone();
        let leader = leader.clone();
        async move {
            let c = host_container(&client, &leader).await;
            (c.restart_count > restarts && c.ready).then_some(())
        }
    })
    .await;
    // One volume per claim, and one directory per volume: nothing made
    // twice by the restarted host.
    let of_burst = all_volumes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|v| claim_namespace(v) == Some(ns))
        .count();
    assert_eq!(of_burst, CLAIMS, "volumes for {CLAIMS} claims");
    let made: BTreeSet<String> = volume_dirs(cluster).difference(&before).cloned().collect();
    assert_eq!(made, expected, "directories made for the burst, by node");

    delete_all(&client, ns, &dirs).await;
    let left: BTreeSet<String> = volume_dirs(cluster).difference(&before).cloned().collect();
    assert!(left.is_empty(), "directories leaked: {left:?}");
}

/// The users writer pods run as: non-root UIDs, with and without
/// `fsGroup` (which the kubelet does not apply to hostPath volumes), and
/// root.
const USERS: [(&str, &str); 4] = [
    ("uid-1000", r#"{"runAsUser": 1000, "runAsGroup": 1000}"#),
    (
        "uid-2000-fsgroup",
        r#"{"runAsUser": 2000, "runAsGroup": 2000, "fsGroup": 3000}"#,
    ),
    ("nobody", r#"{"runAsUser": 65534, "runAsGroup": 65534}"#),
    ("root", r#"{"runAsUser": 0}"#),
];

/// The Warning events of namespace `ns` but the kubelets' and the
/// scheduler's: under a burst on this small machine those report passing
/// states they retry (a PreBind wait that ran out, a claim not yet seen
/// Bound, the test nodes' missing cluster DNS), and a pod that never runs
/// or writes fails the test anyway.
async fn warnings(client: &Client, ns: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    let kubernetes = |e: &k8s_openapi::api::core::v1::Event| {
        let source = e.source.as_ref().and_then(|s| s.component.as_deref());
        let reporter = e.reporting_component.as_deref();
        [source, reporter]
            .into_iter()
            .flatten()
            .any(|c| c == "kubelet" || c == "default-scheduler")
    };
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| !kubernetes(e))
        .map(|e| {
            format!(
                "{:?} {:?}: {:?}",
                e.involved_object.name, e.reason, e.message
            )
        })
        .collect()
}

/// Sixty claims over both shipped classes, each used by a writer pod that
/// the scheduler places and that runs as one of [`USERS`]: every pod
/// writes; each file is on its pod's node and on no other; no Warning
/// from wasmprov.
/// Deleting the claims removes `hostpath`'s directories from every node and
/// keeps `hostpath-retain`'s, with their data, until their operator
/// deletes the volumes.
async fn sixty_pods_of_any_user_write_to_volumes_on_their_own_nodes(cluster: &Cluster) {
    let client = cluster.client().await.unwrap();
    let ns = "e2e-sixty";
    apply(cluster, &namespace(ns));
    const CLAIMS: usize = 60;
    let name = |i: usize| format!("c-{i}");
    let class = |i: usize| {
        if i % 5 == 4 {
            "hostpath-retain"
        } else {
            "hostpath"
        }
    };
    let text = |i: usize| format!("{}-{i}", USERS[i % USERS.len()].0);
    let all: String = (0..CLAIMS)
        .map(|i| {
            let security = USERS[i % USERS.len()].1;
            format!(
                "---\n{}---\n{}",
                claim(ns, &name(i), class(i)),
                writer_pod_as(ns, &name(i), &name(i), &text(i), security)
            )
        })
        .collect();
    let started = Instant::now();
    apply(cluster, &all);

    let mut used = BTreeSet::new();
    let mut deleted_with_claim = Vec::new();
    let mut retained = Vec::new();
    for i in 0..CLAIMS {
        let volume = bound_volume(&client, ns, &name(i)).await;
        let pod = running(&client, ns, &name(i)).await;
        let node = pod.spec.unwrap().node_name.unwrap();
        assert_eq!(pinned_node(&volume), node, "{}", name(i));
        let dir = on_its_node(cluster, &volume);
        let file = dir.join("hello");
        let written = eventually_within(LIMIT, &format!("the file of pod {}", name(i)), || {
            let file = file.clone();
            async move { std::fs::read_to_string(file).ok() }
        })
        .await;
        assert_eq!(written.trim(), text(i));
        used.insert(node);
        match class(i) {
            "hostpath" => deleted_with_claim.push(dir),
            _ => retained.push((volume.name_any(), dir)),
        }
    }
    eprintln!(
        "node e2e: {CLAIMS} pods ran and wrote to their volumes {:.0} s after kubectl apply",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        used,
        cluster.node_names().into_iter().collect(),
        "the scheduler placed the pods on every node"
    );
    let warnings = warnings(&client, ns).await;
    assert!(warnings.is_empty(), "{warnings:?}");

    delete_pods_and_claims(&client, ns).await;
    // Released and kept, data and all, until the operator deletes them.
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for (pv, dir) in &retained {
        eventually_within(LIMIT, &format!("volume {pv} to be Released"), || {
            let volumes = volumes.clone();
            async move {
                let v = volumes.get(pv).await.ok()?;
                (v.status?.phase.as_deref() == Some("Released")).then_some(())
            }
        })
        .await;
        assert!(dir.join("hello").is_file(), "{pv}: {}", dir.display());
        volumes.delete(pv, &DeleteParams::default()).await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }
    volumes_deleted(&client, ns, &deleted_with_claim).await;
}

/// deploy/README's "Add a backend", done as a user does it with kubectl, on
/// the central side next to the node hosts: the hostpath plugin packed as
/// `shared` stands in for an NFS backend, `share` for the export every
/// node mounts at the same path (the nodes share it, as they would an NFS
/// mount). One claim of its class, used by a pod on every node at once:
/// each pod's file is in the same directory, made by a central replica.
async fn a_central_backend_serves_pods_on_every_node(cluster: &Cluster, share: &Path) {
    const SHARED: &str = "shared";
    let client = cluster.client().await.unwrap();
    let root = share.display().to_string();
    // The export, writable by the host's user as its administrator made it.
    std::os::unix::fs::chown(share, Some(65532), Some(65532)).unwrap();

    // 2. The plugin's ConfigMap, listed in the Deployment's plugins volume
    // (shipped empty), and the share mounted.
    let manifest = support::pack(
        Path::new(env!("CARGO_BIN_EXE_wasmprov")),
        &support::rust_plugin_path("hostpath"),
        SHARED,
    );
    apply_in(cluster, NS, &String::from_utf8(manifest).unwrap());
    let patch = serde_json::json!([
        {"op": "add", "path": "/spec/template/spec/volumes/0/projected/sources",
         "value": [{"configMap": {"name": format!("wasmprov-plugin-{SHARED}")}}]},
        {"op": "add", "path": "/spec/template/spec/volumes/-",
         "value": {"name": "share", "hostPath": {"path": root, "type": "Directory"}}},
        {"op": "add", "path": "/spec/template/spec/containers/0/volumeMounts/-",
         "value": {"name": "share", "mountPath": root}},
    ]);
    run(cluster
        .kubectl()
        .args([
            "-n",
            NS,
            "patch",
            "deployment",
            "wasmprov",
            "--type",
            "json",
            "-p",
        ])
        .arg(patch.to_string()));
    // 3. Its policy entry.
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), NS);
    support::add_shared_backend_policy(&configmaps, SHARED, &root).await;
    // 4. A class naming it.
    apply(
        cluster,
        &format!(
            r#"apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: {SHARED}
provisioner: wasmprov.io/host
parameters:
  plugin: {SHARED}
  hostRoot: {root}
  wasmprov.io/mode: "0777"
reclaimPolicy: Delete
volumeBindingMode: Immediate
"#
        ),
    );
    rolled_out(cluster, "deployment/wasmprov");
    // An old replica (no plugin) may still hold the leader Lease for a
    // moment while it stops: claims wait for a new one that serves it.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    eventually_within(LIMIT, "a replica serving the plugin leads", || async {
        let holder = leases
            .get_opt("wasmprov.io-host")
            .await
            .ok()??
            .spec?
            .holder_identity?;
        let serving = replicas(&client).await.contains(&holder)
            && plugin_digest(&client, &holder, SHARED).await.is_some();
        serving.then_some(())
    })
    .await;

    let ns = "e2e-central";
    apply(cluster, &namespace(ns));
    apply(
        cluster,
        &claim(ns, "together", SHARED).replace("ReadWriteOnce", "ReadWriteMany"),
    );
    let volume = bound_volume(&client, ns, "together").await;
    let spec = volume.spec.as_ref().unwrap();
    assert!(
        spec.node_affinity.is_none(),
        "pinned: {:?}",
        spec.node_affinity
    );
    assert_eq!(
        volume.annotations().get("pv.kubernetes.io/provisioned-by"),
        Some(&"wasmprov.io/host".to_owned())
    );
    let dir = host_path(&volume);
    assert_eq!(dir.parent(), Some(share));
    for (i, node) in cluster.node_names().iter().enumerate() {
        let pod = pod_writing(ns, &format!("on-{i}"), "together", node, node, USERS[0].1).replace(
            "  securityContext:",
            &format!("  nodeSelector: {{kubernetes.io/hostname: {node}}}\n  securityContext:"),
        );
        apply(cluster, &pod);
    }
    for (i, node) in cluster.node_names().iter().enumerate() {
        running(&client, ns, &format!("on-{i}")).await;
        let file = dir.join(node);
        let text = eventually_within(LIMIT, &format!("the file of the pod on {node}"), || {
            let file = file.clone();
            async move { std::fs::read_to_string(file).ok() }
        })
        .await;
        assert_eq!(text.trim(), node);
    }
    let warnings = warnings(&client, ns).await;
    assert!(warnings.is_empty(), "{warnings:?}");
    delete_all(&client, ns, &[dir]).await;
}

/// A node that hangs in the middle of a burst (its kubelet and containers
/// stop, its host too, with claims the scheduler sent there waiting) and
/// is then switched off and its Node deleted, as its operator does with a
/// machine that will not come back: every claim that had selected it is
/// Bound on another node within two minutes, with one volume each, and its
/// pod runs there; nothing is made on it.
async fn a_node_that_hangs_and_is_deleted_mid_burst_loses_no_claim(cluster: &Cluster) {
    let client = cluster.client().await.unwrap();
    let ns = "e2e-gone";
    apply(cluster, &namespace(ns));
    let gone = node_name(support::node::NODES - 1);
    let before = volume_dirs(cluster);

    // Volumes on it already.
    const KEPT: usize = 2;
    for i in 0..KEPT {
        apply(
            cluster,
            &claim_on(ns, &format!("kept-{i}"), "hostpath", &gone),
        );
    }
    let mut kept = Vec::new();
    for i in 0..KEPT {
        let v = bound_volume(&client, ns, &format!("kept-{i}")).await;
        kept.push((v.name_any(), on_its_node(cluster, &v)));
    }

    // It hangs; then the burst: pods the scheduler places, some on it, which
    // nothing there provisions for.
    cluster.freeze_node(&gone);
    const CLAIMS: usize = 30;
    let name = |i: usize| format!("burst-{i}");
    let all: String = (0..CLAIMS)
        .map(|i| {
            format!(
                "---\n{}---\n{}",
                claim(ns, &name(i), "hostpath"),
                writer_pod_as(ns, &name(i), &name(i), &name(i), USERS[0].1)
            )
        })
        .collect();
    apply(cluster, &all);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let sent_there = eventually_within(
        LIMIT,
        "the scheduler to choose a node for every claim",
        || {
            let claims = claims.clone();
            let gone = gone.clone();
            async move {
                let mut there = BTreeSet::new();
                for i in 0..CLAIMS {
                    let c = claims.get(&name(i)).await.ok()?;
                    let node = c.annotations().get("volume.kubernetes.io/selected-node")?;
                    if *node == gone {
                        there.insert(name(i));
                    }
                }
                Some(there)
            }
        },
    )
    .await;
    assert!(
        !sent_there.is_empty(),
        "the scheduler sent none of {CLAIMS} pods to {gone}: nothing to show"
    );

    // Switched off, and its Node deleted.
    tokio::task::block_in_place(|| cluster.stop_node(&gone));
    run(cluster.kubectl().args(["delete", "node", &gone]));
    let deleted = Instant::now();
    let mut expected = BTreeSet::new();
    for i in 0..CLAIMS {
        let v = bound_volume(&client, ns, &name(i)).await;
        let node = pinned_node(&v);
        assert_ne!(node, gone, "{}", name(i));
        let pod = running(&client, ns, &name(i)).await;
        assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some(node.as_str()));
        on_its_node(cluster, &v);
        assert!(expected.insert(format!("{node}/{}", v.name_any())));
    }
    let took = deleted.elapsed();
    eprintln!(
        "node e2e: the {} claims sent to {gone} were Bound elsewhere, their pods running, {:.0} s after its Node was deleted",
        sent_there.len(),
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(120), "took {took:?}");
    // One volume per claim: nothing made twice, nothing made on the gone node.
    let made: BTreeSet<String> = volume_dirs(cluster).difference(&before).cloned().collect();
    let kept_dirs = kept.iter().map(|(pv, _)| format!("{gone}/{pv}"));
    assert_eq!(made, expected.into_iter().chain(kept_dirs).collect());

    // Its volumes, once their claims go: kept (their storage went with the
    // node), reported by the janitor, forgotten when their owner says so.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for i in 0..KEPT {
        claims
            .delete(&format!("kept-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    for (pv, _) in &kept {
        let report = eventually_within(LIMIT * 2, "a VolumeNodeGone Warning", || async {
            support::events_about(&client, "default", pv)
                .await?
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("VolumeNodeGone"))?
                .message
        });
        let Ok(message) = tokio::time::timeout(LIMIT, report).await else {
            panic!(
                "no VolumeNodeGone Warning for {pv} within {LIMIT:?}: {}",
                janitor_state(&client, pv).await
            );
        };
        assert!(
            message.contains(&format!(
                "its storage is on node {gone}, which no longer exists"
            )),
            "{message}"
        );
    }
    let janitor = janitor(&client).await;
    eventually_within(LIMIT, "the janitor's gauge counts them", || async {
        support::node::metrics(&client, &janitor)
            .await?
            .contains(&format!(
                "wasmprov_volumes_on_gone_nodes{{class=\"hostpath\"}} {KEPT}"
            ))
            .then_some(())
    })
    .await;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for (pv, _) in &kept {
        let volume = volumes.get(pv).await.unwrap();
        assert_eq!(
            volume.status.unwrap().phase.as_deref(),
            Some("Released"),
            "{pv} kept"
        );
        let forget = serde_json::json!({"metadata": {"annotations": {"wasmprov.io/forget-when-node-gone": "true"}}});
        volumes
            .patch(
                pv,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&forget),
            )
            .await
            .unwrap();
    }
    for (pv, _) in &kept {
        eventually_within(LIMIT, &format!("{pv} forgotten"), || async {
            volumes.get_opt(pv).await.ok()?.is_none().then_some(())
        })
        .await;
    }
}

/// The node hosts' janitor now: the holder of its Lease.
async fn janitor(client: &Client) -> String {
    Api::<Lease>::namespaced(client.clone(), NS)
        .get("node.wasmprov.io-janitor")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
        .expect("a janitor")
}

/// What a missing janitor report is explained by: the janitor, the volume
/// and its claim.
async fn janitor_state(client: &Client, pv: &str) -> String {
    let janitor = janitor(client).await;
    let volume = Api::<PersistentVolume>::all(client.clone())
        .get_opt(pv)
        .await
        .ok()
        .flatten();
    let claim = match volume
        .as_ref()
        .and_then(|v| v.spec.as_ref()?.claim_ref.clone())
    {
        Some(r) => Api::<PersistentVolumeClaim>::namespaced(
            client.clone(),
            &r.namespace.unwrap_or_default(),
        )
        .get_opt(&r.name.unwrap_or_default())
        .await
        .ok()
        .flatten(),
        None => None,
    };
    format!(
        "janitor {janitor}; volume {:?}; claim {:?}",
        volume.map(|v| (v.status, v.metadata.annotations, v.metadata.finalizers)),
        claim.map(|c| (
            c.status,
            c.metadata.deletion_timestamp,
            c.metadata.finalizers
        ))
    )
}
