//! Node mode: one host per node (`--node-name`), each serving the claims
//! selected for its node and the volumes pinned to it, beside the others;
//! and the central host's refusal to make node-local storage on a cluster
//! of several nodes. The hosts here share this machine's filesystem; the
//! real-node tests give each node its own. How a node host accounts for
//! its disk is in node_mode/capacity.rs.

#[macro_use]
mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use support::*;
use wasmprov::lifecycle::{self, OwnNode};
use wasmprov::metrics::Metrics;
use wasmprov::policy::{PolicySet, RunsOn};

#[path = "node_mode/capacity.rs"]
mod capacity;

const NODE_PROVISIONER: &str = "node.wasmprov.io";
const CENTRAL_PROVISIONER: &str = "wasmprov.io/host";
const NODES: [&str; 2] = ["n1", "n2"];

on_both_servers!(
    each_node_host_serves_only_its_nodes_claims_and_volumes,
    a_central_host_refuses_node_local_volumes_when_the_cluster_has_several_nodes,
    the_janitor_alone_warns_once_about_an_immediate_claim_of_a_node_class,
    the_janitor_asks_the_scheduler_again_when_the_selected_node_is_gone,
    the_janitor_lets_go_of_claims_a_gone_nodes_host_held,
    a_released_volume_whose_node_is_gone_is_reported_and_kept,
    the_janitor_warns_once_when_a_claims_node_has_no_live_host,
);

/// A host serving `dir` with the hostpath plugin (or another, [`Served`]):
/// on `node` (node mode, `runsOn: node`), or centrally.
struct Host {
    metrics: Arc<Metrics>,
    /// The plugin it serves.
    plugin: &'static str,
    /// Whether it is the node hosts' janitor (as if elected).
    janitor: tokio::sync::watch::Sender<bool>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Host {
    async fn start(client: Client, dir: &Path, node: Option<&str>) -> Self {
        Self::start_janitor(client, dir, node, false).await
    }

    async fn start_janitor(client: Client, dir: &Path, node: Option<&str>, janitor: bool) -> Self {
        Self::start_with(client, dir, node, janitor, |_| {}).await
    }

    /// [`Host::start_janitor`], its lifecycle's configuration changed by
    /// `configure` last.
    async fn start_with(
        client: Client,
        dir: &Path,
        node: Option<&str>,
        janitor: bool,
        configure: impl FnOnce(&mut lifecycle::Config),
    ) -> Self {
        Self::start_serving(client, Served::HOSTPATH, dir, node, janitor, configure).await
    }

    /// [`Host::start_with`] serving `served` in `dir`.
    async fn start_serving(
        client: Client,
        served: Served,
        dir: &Path,
        node: Option<&str>,
        janitor: bool,
        configure: impl FnOnce(&mut lifecycle::Config),
    ) -> Self {
        let (side, runs_on, provisioner) = match node {
            Some(_) => (RunsOn::Node, "node", NODE_PROVISIONER),
            None => (RunsOn::Central, "central", CENTRAL_PROVISIONER),
        };
        let policy = format!(
            "plugins:\n  {name}:\n    runsOn: {runs_on}\n    \
             preopens: [{{host: {dir}, guest: {guest}, mode: read-write}}]\n    \
             output: {{sources: [hostPath], paths: [{dir}]}}\n",
            name = served.name,
            guest = served.guest_dir,
            dir = dir.display()
        );
        let policies = PolicySet::parse_for(&policy, Path::new("policy.yaml"), side).unwrap();
        let plugins = tempfile::tempdir().unwrap();
        std::fs::copy(
            (served.wasm)(),
            plugins.path().join(format!("{}.wasm", served.name)),
        )
        .unwrap();
        let metrics = Arc::new(Metrics::default());
        let registry = wasmprov::delivery::load_dir(
            cached_runtime(),
            plugins.path(),
            &policies,
            metrics.clone(),
        )
        .await
        .unwrap();
        let mut config = lifecycle::Config::new(provisioner);
        if let Some(name) = node {
            config.node = Some(OwnNode::lookup(&client, name).await.unwrap());
        }
        let (janitor, elected) = tokio::sync::watch::channel(janitor);
        config.janitor = Some(elected);
        config.gone_node_grace = Duration::from_secs(1);
        config.retry_base = Duration::from_millis(100);
        config.max_retry = Duration::from_secs(1);
        config.shutdown_grace = Duration::from_secs(2);
        configure(&mut config);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let lifecycle =
            lifecycle::run(client, Arc::new(registry), config, metrics.clone(), async {
                let _ = rx.await;
            });
        Self {
            metrics,
            plugin: served.name,
            janitor,
            stop: Some(tx),
            task: tokio::spawn(lifecycle),
        }
    }

    /// Calls of the plugin's `call`, whatever their result.
    fn plugin_calls(&self, call: &str) -> u64 {
        plugin_calls(&self.metrics, self.plugin, call)
    }

    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = self.task.await;
    }
}

/// The plugin a test host serves.
#[derive(Clone, Copy)]
struct Served {
    name: &'static str,
    wasm: fn() -> std::path::PathBuf,
    /// Where it sees its read-write directory.
    guest_dir: &'static str,
}

impl Served {
    const HOSTPATH: Self = Self {
        name: "hostpath",
        wasm: || rust_plugin_path("hostpath"),
        guest_dir: "/volumes",
    };
}

async fn create_class(client: &Client, name: &str, provisioner: &str, dir: &Path, binding: &str) {
    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": binding,
        "parameters": {"plugin": "hostpath", "hostRoot": dir.display().to_string()},
    }))
    .unwrap();
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
}

/// A claim of `class`; `node` is what the scheduler would have selected.
async fn create_claim(client: &Client, name: &str, class: &str, node: Option<&str>) {
    let mut claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    if let Some(node) = node {
        claim.metadata.annotations = Some(
            [(
                "volume.kubernetes.io/selected-node".to_owned(),
                node.to_owned(),
            )]
            .into_iter()
            .collect(),
        );
    }
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
}

/// A merge patch of claim `name`, as `kubectl patch --type merge` sends.
async fn merge_into_claim(client: &Client, name: &str, patch: serde_json::Value) {
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default")
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

async fn bound_volume(client: &Client, claim: &str) -> PersistentVolume {
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default");
    let name = eventually(&format!("claim {claim} is Bound"), || async {
        let c = claims.get(claim).await.ok()?;
        (c.status?.phase? == "Bound").then_some(c.spec?.volume_name?)
    })
    .await;
    Api::<PersistentVolume>::all(client.clone())
        .get(&name)
        .await
        .unwrap()
}

/// The nodes a volume may be used on, as its affinity's terms say.
fn pinned_to(pv: &PersistentVolume) -> Vec<serde_json::Value> {
    let affinity = serde_json::to_value(&pv.spec.as_ref().unwrap().node_affinity).unwrap();
    affinity["required"]["nodeSelectorTerms"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Two node hosts side by side: each provisions exactly the claims selected
/// for its node, pins each volume to that node (the plugin returned no
/// affinity), deletes only its own node's volumes, and sends no request
/// about the other node's claims and volumes.
async fn each_node_host_serves_only_its_nodes_claims_and_volumes(server: Server) {
    let (api, admin, dir, hosts) = two_node_hosts(server, None).await;
    create_class(
        &admin,
        "local",
        NODE_PROVISIONER,
        dir.path(),
        "WaitForFirstConsumer",
    )
    .await;
    let claims: Vec<(String, &str)> = (0..6)
        .map(|i| (format!("data-{i}"), NODES[i % 2]))
        .collect();
    for (claim, node) in &claims {
        create_claim(&admin, claim, "local", Some(node)).await;
    }
    let mut volumes = Vec::new();
    for (claim, node) in &claims {
        let pv = bound_volume(&admin, claim).await;
        assert_eq!(
            pinned_to(&pv),
            [serde_json::json!({"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]})],
            "{claim}'s volume is pinned to {node}, and only to it"
        );
        assert_eq!(
            pv.annotations()
                .get("pv.kubernetes.io/provisioned-by")
                .map(String::as_str),
            Some(NODE_PROVISIONER)
        );
        volumes.push((pv.name_any(), *node));
    }
    for host in &hosts {
        assert_eq!(
            host.plugin_calls("provision"),
            3,
            "each host provisions its node's three claims, once each"
        );
    }
    if let TestApi::Simulated(sim) = &api {
        for (node, other) in [("n1", "n2"), ("n2", "n1")] {
            let theirs: Vec<&str> = claims
                .iter()
                .filter(|(_, n)| *n == other)
                .map(|(c, _)| c.as_str())
                .chain(
                    volumes
                        .iter()
                        .filter(|(_, n)| *n == other)
                        .map(|(v, _)| v.as_str()),
                )
                .collect();
            let touched: Vec<String> = sim
                .requests()
                .into_iter()
                .filter(|r| r.user == node && theirs.contains(&r.name.as_str()))
                .map(|r| format!("{} {} {}", r.verb, r.resource, r.name))
                .collect();
            assert!(
                touched.is_empty(),
                "host {node} sent requests about {other}'s claims and volumes: {touched:?}"
            );
        }
    }

    let claims_api = Api::<PersistentVolumeClaim>::namespaced(admin.clone(), "default");
    for (claim, _) in &claims {
        claims_api
            .delete(claim, &DeleteParams::default())
            .await
            .unwrap();
    }
    let volumes_api = Api::<PersistentVolume>::all(admin.clone());
    eventually("every volume is reclaimed", || async {
        volumes_api
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "every directory is removed"
    );
    for host in hosts {
        assert_eq!(
            host.plugin_calls("delete"),
            3,
            "each host deletes its node's three volumes and no other"
        );
        host.stop().await;
    }
}

/// A central host serving a plugin that makes hostPath volumes would make
/// them on its own node: with two nodes, it refuses and says what to do,
/// and makes nothing.
async fn a_central_host_refuses_node_local_volumes_when_the_cluster_has_several_nodes(
    server: Server,
) {
    let (_api, admin) =
        TestApi::start(server, &NODES, Default::default(), Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let host = Host::start(admin.clone(), dir.path(), None).await;
    create_class(
        &admin,
        "shared",
        CENTRAL_PROVISIONER,
        dir.path(),
        "Immediate",
    )
    .await;
    create_claim(&admin, "data", "shared", None).await;
    let message = eventually("the claim is refused with a Warning", || async {
        events_about(&admin, "default", "data")
            .await?
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("ProvisioningFailed"))
            .find_map(|e| e.message)
    })
    .await;
    assert!(
        message.contains("plugin hostpath (StorageClass shared) makes hostPath/local volumes")
            && message.contains("more than one node")
            && message.contains("runsOn: node"),
        "{message}"
    );
    assert_eq!(host.plugin_calls("provision"), 0, "no storage was made");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    assert!(Api::<PersistentVolume>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
    host.stop().await;
}

/// A runtime with the tests' compile cache.
fn cached_runtime() -> Arc<wasmprov::runtime::Runtime> {
    let config = wasmprov::runtime::RuntimeConfig {
        cache_dir: Some(workspace_root().join("target/test-compile-cache")),
        ..Default::default()
    };
    Arc::new(wasmprov::runtime::Runtime::new(config).unwrap())
}

/// Two node hosts on `server`, `janitor` the janitor (as if elected). On
/// the simulator each host has a token of its own (its node's name), so its
/// requests can be told apart.
async fn two_node_hosts(
    server: Server,
    janitor: Option<&str>,
) -> (TestApi, Client, tempfile::TempDir, Vec<Host>) {
    let sim = kube_sim::Config {
        record_requests: true,
        ..Default::default()
    };
    let (api, admin) = TestApi::start(server, &NODES, sim, Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut hosts = Vec::new();
    for node in NODES {
        let client = match &api {
            TestApi::Simulated(sim) => client_of(&sim.kubeconfig_with_token(node)).await,
            TestApi::Real(_) => admin.clone(),
        };
        let elected = janitor == Some(node);
        hosts.push(Host::start_janitor(client, dir.path(), Some(node), elected).await);
    }
    (api, admin, dir, hosts)
}

/// The Warnings `reason` on claim `claim`, with their counts.
async fn warnings(client: &Client, claim: &str) -> Vec<(String, i32)> {
    events_about(client, "default", claim)
        .await
        .expect("listing events")
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| (e.message.unwrap_or_default(), e.count.unwrap_or(1)))
        .collect()
}

/// A claim of a node class that binds Immediately has no selected node, so
/// no node host takes it: the janitor says why on the claim, once, and no
/// other host says anything.
async fn the_janitor_alone_warns_once_about_an_immediate_claim_of_a_node_class(server: Server) {
    let (_api, admin, dir, hosts) = two_node_hosts(server, Some("n1")).await;
    create_class(&admin, "now", NODE_PROVISIONER, dir.path(), "Immediate").await;
    create_claim(&admin, "data", "now", None).await;
    let message = eventually("the janitor's Warning", || async {
        warnings(&admin, "data").await.into_iter().next()
    })
    .await;
    assert!(
        message.0.contains("StorageClass now binds Immediately")
            && message
                .0
                .contains("volumeBindingMode: WaitForFirstConsumer"),
        "{message:?}"
    );
    // Nothing more: a claim change (a label) wakes every host again.
    merge_into_claim(
        &admin,
        "data",
        serde_json::json!({"metadata": {"labels": {"touched": "yes"}}}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        warnings(&admin, "data").await,
        [(message.0.clone(), 1)],
        "one Warning, once"
    );
    for host in &hosts {
        assert_eq!(host.plugin_calls("provision"), 0);
    }
    for host in hosts {
        host.stop().await;
    }
}

/// The scheduler keeps a claim on its selected node until someone clears
/// it: when that node is gone, no node host can, so the janitor does (as
/// soon as one is elected), with a Warning, and the claim is provisioned on
/// the node chosen next.
async fn the_janitor_asks_the_scheduler_again_when_the_selected_node_is_gone(server: Server) {
    let (_api, admin, dir, hosts) = two_node_hosts(server, None).await;
    create_class(
        &admin,
        "local",
        NODE_PROVISIONER,
        dir.path(),
        "WaitForFirstConsumer",
    )
    .await;
    create_claim(&admin, "data", "local", Some("gone-node")).await;
    let claims = Api::<PersistentVolumeClaim>::namespaced(admin.clone(), "default");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let claim = claims.get("data").await.unwrap();
    assert_eq!(
        claim.annotations()["volume.kubernetes.io/selected-node"],
        "gone-node",
        "no janitor yet: node hosts leave other nodes' claims alone"
    );
    assert!(warnings(&admin, "data").await.is_empty());
    hosts[0].janitor.send_replace(true);
    eventually("the selected node is cleared", || async {
        let claim = claims.get("data").await.ok()?;
        (!claim
            .annotations()
            .contains_key("volume.kubernetes.io/selected-node"))
        .then_some(())
    })
    .await;
    // Events are sent apart from the work: the Warning may come a moment
    // after the annotation went.
    eventually("the janitor's Warning on the claim", || async {
        warnings(&admin, "data")
            .await
            .iter()
            .any(|(m, _)| m.contains("the selected node gone-node does not exist"))
            .then_some(())
    })
    .await;
    // The scheduler's next choice.
    let next = serde_json::json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n2"}}});
    merge_into_claim(&admin, "data", next).await;
    let pv = bound_volume(&admin, "data").await;
    assert_eq!(
        pinned_to(&pv),
        [serde_json::json!({"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]})]
    );
    assert_eq!(hosts[1].plugin_calls("provision"), 1);
    assert_eq!(hosts[0].plugin_calls("provision"), 0);
    for host in hosts {
        host.stop().await;
    }
}

/// A node host holds a claim with its finalizer while it provisions
/// (`--claim-finalizer`); a node that goes in the middle leaves the claim
/// held. The janitor lets go of it: a claim whose selected node is gone is
/// sent back to the scheduler unheld, and a deleted one is deleted, with a
/// word on what was lost with the node. A claim still held for a node that
/// exists is left to that node's host.
async fn the_janitor_lets_go_of_claims_a_gone_nodes_host_held(server: Server) {
    let (_api, admin, dir, hosts) = two_node_hosts(server, None).await;
    create_class(
        &admin,
        "local",
        NODE_PROVISIONER,
        dir.path(),
        "WaitForFirstConsumer",
    )
    .await;
    // A node no host runs on (yet).
    support::create_node(&admin, "n3").await;
    let held = serde_json::json!({"metadata": {
        "finalizers": ["wasmprov.io/provisioning"],
        "annotations": {"volume.kubernetes.io/storage-provisioner": NODE_PROVISIONER}}});
    for (name, node) in [
        ("waiting", "gone-node"),
        ("deleted", "gone-node"),
        ("alive", "n3"),
    ] {
        create_claim(&admin, name, "local", Some(node)).await;
        merge_into_claim(&admin, name, held.clone()).await;
    }
    let claims = Api::<PersistentVolumeClaim>::namespaced(admin.clone(), "default");
    for name in ["deleted", "alive"] {
        claims.delete(name, &Default::default()).await.unwrap();
    }
    hosts[0].janitor.send_replace(true);
    eventually(
        "the waiting claim is sent back to the scheduler, unheld",
        || async {
            let claim = claims.get("waiting").await.ok()?;
            // The real API server adds kubernetes.io/pvc-protection.
            (!claim
                .finalizers()
                .iter()
                .any(|f| f == "wasmprov.io/provisioning")
                && !claim
                    .annotations()
                    .contains_key("volume.kubernetes.io/selected-node"))
            .then_some(())
        },
    )
    .await;
    eventually("the deleted claim is gone", || async {
        claims
            .get_opt("deleted")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    eventually("a word on the deleted claim", || async {
        events_about(&admin, "default", "deleted")
            .await?
            .into_iter()
            .any(|e| {
                e.message.as_deref().is_some_and(|m| {
                    m.contains("its selected node gone-node does not exist")
                        && m.contains("finalizer wasmprov.io/provisioning removed")
                })
            })
            .then_some(())
    })
    .await;
    // n3 exists: its host, not the janitor, lets go of that claim.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let alive = claims.get("alive").await.unwrap();
    assert!(
        alive
            .finalizers()
            .contains(&"wasmprov.io/provisioning".to_owned()),
        "{:?}",
        alive.finalizers()
    );
    for host in hosts {
        host.stop().await;
    }
}

/// A node removed from the cluster takes its storage with it: the Released
/// volumes pinned to it can be deleted by nobody. The janitor reports each
/// once (a VolumeNodeGone Warning, a gauge) after the grace period and
/// keeps it; no plugin is asked to delete storage it cannot reach.
async fn a_released_volume_whose_node_is_gone_is_reported_and_kept(server: Server) {
    let (_api, admin, dir, mut hosts) = two_node_hosts(server, Some("n1")).await;
    create_class(
        &admin,
        "local",
        NODE_PROVISIONER,
        dir.path(),
        "WaitForFirstConsumer",
    )
    .await;
    create_claim(&admin, "data", "local", Some("n2")).await;
    let pv = bound_volume(&admin, "data").await;
    // A second volume there, which its owner asks to forget.
    create_claim(&admin, "old", "local", Some("n2")).await;
    let forgotten = bound_volume(&admin, "old").await.name_any();
    let forget = serde_json::json!({"metadata": {"annotations": {"wasmprov.io/forget-when-node-gone": "true"}}});
    Api::<PersistentVolume>::all(admin.clone())
        .patch(
            &forgotten,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&forget),
        )
        .await
        .unwrap();
    // Node n2 goes, with its host.
    hosts.pop().unwrap().stop().await;
    Api::<k8s_openapi::api::core::v1::Node>::all(admin.clone())
        .delete("n2", &DeleteParams::default())
        .await
        .unwrap();
    for claim in ["data", "old"] {
        Api::<PersistentVolumeClaim>::namespaced(admin.clone(), "default")
            .delete(claim, &DeleteParams::default())
            .await
            .unwrap();
    }
    let name = pv.name_any();
    let message = eventually("the volume's VolumeNodeGone Warning", || async {
        events_about(&admin, "default", &name)
            .await?
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("VolumeNodeGone"))?
            .message
    })
    .await;
    assert!(
        message.contains("its storage is on node n2, which no longer exists")
            && message.contains(&format!("kubectl delete pv {name}")),
        "{message}"
    );
    let janitor = &hosts[0];
    eventually("the gauge counts it", || async {
        janitor
            .metrics
            .encode()
            .contains("wasmprov_volumes_on_gone_nodes{class=\"local\"} 1")
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kept = Api::<PersistentVolume>::all(admin.clone())
        .get(&name)
        .await
        .unwrap();
    assert_eq!(
        kept.status.unwrap().phase.as_deref(),
        Some("Released"),
        "kept"
    );
    assert_eq!(janitor.plugin_calls("delete"), 0, "no plugin is asked");
    assert!(
        dir.path().join(&name).is_dir(),
        "n2's storage is left as it was"
    );
    // The annotated one: its object deleted, its storage untouched.
    eventually("the annotated volume is forgotten", || async {
        Api::<PersistentVolume>::all(admin.clone())
            .get_opt(&forgotten)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(dir.path().join(&forgotten).is_dir());
    assert_eq!(janitor.plugin_calls("delete"), 0, "no plugin is asked");
    for host in hosts {
        host.stop().await;
    }
}

/// A claim's selected node exists but no node host runs there (the
/// DaemonSet's tolerations or nodeSelector leave it out): the claim would
/// wait for ever without a word. The janitor tells by the node's host Lease
/// going unrenewed, and warns once, naming the node and the likely cause.
async fn the_janitor_warns_once_when_a_claims_node_has_no_live_host(server: Server) {
    use k8s_openapi::api::coordination::v1::Lease;
    let (_api, admin) =
        TestApi::start(server, &NODES, Default::default(), Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let janitor = Host::start_with(admin.clone(), dir.path(), Some("n1"), true, |c| {
        c.missing_host_grace = Duration::from_secs(2);
    })
    .await;
    create_class(
        &admin,
        "local",
        NODE_PROVISIONER,
        dir.path(),
        "WaitForFirstConsumer",
    )
    .await;
    // n2's host is alive for a while: its Lease is renewed.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "default");
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{NODE_PROVISIONER}.n2")},
        "spec": {"holderIdentity": "wasmprov-node-n2", "leaseDurationSeconds": 15},
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let renewing = tokio::spawn({
        let leases = leases.clone();
        async move {
            for i in 0.. {
                let renew = serde_json::json!({"metadata": {"labels": {"renewal": i.to_string()}}});
                let _ = leases
                    .patch(
                        &format!("{NODE_PROVISIONER}.n2"),
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(&renew),
                    )
                    .await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    });
    create_claim(&admin, "data", "local", Some("n2")).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        warnings(&admin, "data").await.is_empty(),
        "n2 has a live host"
    );
    // It stops.
    renewing.abort();
    let message = eventually("the janitor's Warning", || async {
        warnings(&admin, "data").await.into_iter().next()
    })
    .await;
    assert!(
        message
            .0
            .contains("no wasmprov node host is running on node n2")
            && message.0.contains("default/node.wasmprov.io.n2")
            && message.0.contains("tolerations and nodeSelector"),
        "{message:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        warnings(&admin, "data").await,
        [(message.0.clone(), 1)],
        "once"
    );
    assert_eq!(janitor.plugin_calls("provision"), 0);
    janitor.stop().await;
}

async fn client_of(kubeconfig: &str) -> Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// `wasmprov run --node-name NODE` against `api`, with short lease timings
/// and no plugin.
fn node_host_command(api: &TestApi, dir: &Path, node: &str) -> std::process::Command {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, "plugins: {}\n").unwrap();
    let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_wasmprov"));
    run.args(["run", "--metrics-address", "127.0.0.1:0"])
        .args(["--leader-election-lease-duration", "2s"])
        .args(["--leader-election-renew-deadline", "1500ms"])
        .args(["--leader-election-retry-period", "200ms"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--plugins-dir")
        .arg(dir)
        .arg("--policy")
        .arg(&policy)
        .args(["--node-name", node])
        .env("POD_NAMESPACE", "default");
    run
}

/// A second host started for a node another host serves (two DaemonSets,
/// a copy run by hand) stops, naming the node and the holder, once the
/// first has kept its node's Lease for twice the lease duration; the
/// first keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_host_for_the_same_node_stops_and_says_who_serves_it() {
    let (api, admin) = TestApi::start(
        Server::Simulated,
        &NODES,
        Default::default(),
        Default::default(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut first = node_host_command(&api, dir.path(), "n1")
        .env("POD_NAME", "first")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(admin, "default");
    eventually("the first host holds n1's Lease", || async {
        let lease = leases.get_opt("node.wasmprov.io.n1").await.ok()??;
        (lease.spec?.holder_identity? == "first").then_some(())
    })
    .await;
    let mut second = node_host_command(&api, dir.path(), "n1");
    second.env("POD_NAME", "second");
    let started = std::time::Instant::now();
    let out = tokio::task::spawn_blocking(move || second.output().unwrap())
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("another wasmprov host already serves node n1")
            && err.contains("held by first"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first host keeps serving"
    );
    let janitor = leases.get("node.wasmprov.io-janitor").await.unwrap();
    assert_eq!(
        janitor.spec.unwrap().holder_identity.as_deref(),
        Some("first"),
        "the one node host is the node hosts' janitor"
    );
    let _ = first.kill();
    let _ = first.wait();
}

/// `--node-name` naming no Node (a typo, or a value not from the downward
/// API) stops the host at start, saying so, before any plugin loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_host_for_a_node_that_does_not_exist_stops_with_the_fix() {
    let (api, _admin) = TestApi::start(
        Server::Simulated,
        &NODES,
        Default::default(),
        Default::default(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut run = node_host_command(&api, dir.path(), "n9");
    let out = tokio::task::spawn_blocking(move || run.output().unwrap())
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--node-name n9: there is no Node named n9; pass the pod's spec.nodeName"),
        "{err}"
    );
}

/// One policy file serves both sides: each host loads only its side's
/// plugins, and a claim reaching the wrong side is told which side serves
/// its plugin.
#[tokio::test]
async fn each_side_loads_only_the_plugins_the_policy_gives_it() {
    use wasmprov::provisioner::Provisioner;
    let dir = tempfile::tempdir().unwrap();
    let plugins = tempfile::tempdir().unwrap();
    for name in ["hostpath", "shared"] {
        std::fs::copy(
            rust_plugin_path("hostpath"),
            plugins.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    let policy = format!(
        "plugins:\n  hostpath:\n    runsOn: node\n    \
         preopens: [{{host: {dir}, guest: /volumes, mode: read-write}}]\n    \
         output: {{sources: [hostPath], paths: [{dir}]}}\n",
        dir = dir.path().display()
    );
    for (side, serves, not_here, why) in [
        (
            RunsOn::Central,
            "shared",
            "hostpath",
            "plugin hostpath is served by node hosts (runsOn: node) as the sandbox policy says",
        ),
        (
            RunsOn::Node,
            "hostpath",
            "shared",
            "plugin shared has no entry with runsOn: node in the sandbox policy",
        ),
    ] {
        let policies = PolicySet::parse_for(&policy, Path::new("policy.yaml"), side).unwrap();
        let registry = wasmprov::delivery::load_dir(
            cached_runtime(),
            plugins.path(),
            &policies,
            Arc::default(),
        )
        .await
        .unwrap();
        assert!(registry.plugin(serves).is_ok(), "{side:?} serves {serves}");
        let refusal = registry.plugin(not_here).unwrap_err();
        assert!(refusal.contains(why), "{side:?}: {refusal}");
    }
}
