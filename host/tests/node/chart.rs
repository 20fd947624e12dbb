//! The Helm chart (deploy/chart) on the real nodes, as an operator moves
//! to it: Helm takes over what `kubectl apply -k deploy/` installed,
//! `helm test` binds a claim from a pod that writes to it, `helm upgrade`
//! to a chart with a new plugin version reaches every node host without
//! losing a claim, and `helm uninstall` removes everything but the volumes;
//! then a fresh install from an `oci://` chart takes the node plugins from
//! an image volume.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use kube::api::ListParams;
use kube::Api;
use test_cluster::Cluster;

use super::support::node::{node_hosts, not_serving, run, LIMIT, NS};
use super::support::registry::Registry;
use super::support::{eventually_within, workspace_root};
use super::{apply, bound_volume, claim_on_the_node, namespace, running, writer_pod};

const RELEASE: &str = "wasmprov";

fn helm(cluster: &Cluster) -> std::process::Command {
    let bin = test_cluster::binaries().expect("helm (tests/cluster/build.sh)");
    let home = cluster.dir().join("helm");
    let mut command = std::process::Command::new(bin.join("helm"));
    command
        .env("KUBECONFIG", cluster.kubeconfig_path())
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .args(["--namespace", NS]);
    command
}

/// A copy of the chart whose bundled hostpath plugin is `manifest` (what
/// `wasmprov plugin pack` made): a new release of the chart.
fn chart_with_plugin(manifest: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    // -L: the copy holds the plugin file, not the link to deploy/'s.
    run(std::process::Command::new("cp")
        .arg("-RL")
        .arg(workspace_root().join("deploy/chart"))
        .arg(dir.path().join("chart")));
    std::fs::write(
        dir.path().join("chart/files/plugin-hostpath.yaml"),
        manifest,
    )
    .unwrap();
    dir
}

pub async fn helm_takes_over_tests_upgrades_and_uninstalls(cluster: &Cluster) {
    let client = cluster.client().await.unwrap();
    let chart = workspace_root().join("deploy/chart");
    let timeout = format!("--timeout={}s", LIMIT.as_secs());

    // Take over deploy/'s objects: same names, now the release's.
    run(helm(cluster)
        .args(["upgrade", "--install", RELEASE])
        .arg(&chart)
        .args(["--take-ownership", "--force-conflicts", "--wait", &timeout]));
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    let ds = daemonsets.get("wasmprov-node").await.unwrap();
    assert_eq!(
        ds.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
        "Helm"
    );

    // helm test: its claim is bound and written to, then removed.
    // (No --logs: this cluster's API server cannot reach the kubelets' logs.)
    let out = run(helm(cluster).args(["test", RELEASE, &timeout]));
    assert!(out.contains("Phase:") && out.contains("Succeeded"), "{out}");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    eventually_within(
        LIMIT,
        "the test claim to be deleted after it passed",
        || {
            let claims = claims.clone();
            async move {
                claims
                    .get_opt(&format!("{RELEASE}-test"))
                    .await
                    .ok()?
                    .is_none()
                    .then_some(())
            }
        },
    )
    .await;

    // A claim in use across the upgrade.
    let ns = "e2e-helm";
    apply(cluster, &namespace(ns));
    apply(cluster, &claim_on_the_node(ns, "kept", "hostpath"));
    apply(cluster, &writer_pod(ns, "writer", "kept", "before-upgrade"));
    running(&client, ns, "writer").await;
    let kept = bound_volume(&client, ns, "kept").await;

    // A new chart release with a new plugin version.
    let wasm = std::fs::read(super::support::rust_plugin_path("hostpath")).unwrap();
    let next = super::support::variant(&wasm, &format!("helm-{}", std::process::id()));
    let next_digest = super::support::digest(&next);
    let file = tempfile::tempdir().unwrap();
    std::fs::write(file.path().join("hostpath.wasm"), &next).unwrap();
    let manifest = super::support::pack(
        Path::new(env!("CARGO_BIN_EXE_wasmprov")),
        &file.path().join("hostpath.wasm"),
        "hostpath",
    );
    let next_chart = chart_with_plugin(&manifest);
    // --force-conflicts: kubectl still co-owns the fields it applied with
    // the same values (server-side apply), so Helm changing one conflicts.
    run(helm(cluster)
        .args(["upgrade", RELEASE])
        .arg(next_chart.path().join("chart"))
        .args(["--force-conflicts", "--wait", &timeout]));
    every_node_host_serves(&client, &next_digest, "the upgraded plugin").await;
    let still = bound_volume(&client, ns, "kept").await;
    assert_eq!(
        still.metadata.name, kept.metadata.name,
        "the claim kept its volume"
    );
    apply(cluster, &claim_on_the_node(ns, "after", "hostpath"));
    let after = bound_volume(&client, ns, "after").await;

    // Uninstall: the release's objects go; the volumes stay.
    run(helm(cluster).args(["uninstall", RELEASE, "--wait", &timeout]));
    gone(
        Api::<DaemonSet>::namespaced(client.clone(), NS),
        "wasmprov-node",
    )
    .await;
    gone(
        Api::<Deployment>::namespaced(client.clone(), NS),
        "wasmprov",
    )
    .await;
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), NS);
    gone(configmaps.clone(), "wasmprov-policy").await;
    gone(configmaps, "wasmprov-plugin-hostpath").await;
    gone(Api::<ClusterRole>::all(client.clone()), "wasmprov-node").await;
    gone(Api::<StorageClass>::all(client.clone()), "hostpath").await;
    gone(Api::<CSIDriver>::all(client.clone()), "node.wasmprov.io").await;
    let left: Vec<PathBuf> = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|pv| Some(PathBuf::from(&pv.spec.as_ref()?.host_path.as_ref()?.path)))
        .collect();
    for volume in [&kept, &after] {
        let path = volume.spec.as_ref().unwrap().host_path.as_ref().unwrap();
        assert!(
            left.contains(&PathBuf::from(&path.path)),
            "{:?} was removed with the release",
            volume.metadata.name
        );
    }
    eprintln!("node e2e: helm took over deploy/, tested, upgraded the plugin and uninstalled; the volumes stayed");
}

/// Waits until every node host serves the plugin of `digest` (`what`).
async fn every_node_host_serves(client: &kube::Client, digest: &str, what: &str) {
    let pods = node_hosts(client).await;
    eventually_within(LIMIT, &format!("every node host to serve {what}"), || {
        let (client, pods, digest) = (client.clone(), pods.clone(), digest.to_owned());
        async move {
            not_serving(&client, &pods, &digest)
                .await
                .is_empty()
                .then_some(())
        }
    })
    .await;
}

/// Panics if `api` still has object `name`.
async fn gone<K>(api: Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let found = api.get_opt(name).await.unwrap();
    assert!(
        found.is_none(),
        "{} {name} outlived the release",
        K::kind(&Default::default())
    );
}

/// A fresh install as an operator of an air-gapped or private registry
/// makes it: the chart from an `oci://` reference, and the node hosts'
/// plugins from an image volume (`wasmprov plugin push --image`), both
/// from a registry the nodes pull from; `helm test` binds and writes
/// through the plugin the image holds; uninstalled after.
pub async fn a_fresh_install_from_a_registry_takes_its_plugins_from_an_image_volume(
    cluster: &Cluster,
) {
    let client = cluster.client().await.unwrap();
    let timeout = format!("--timeout={}s", LIMIT.as_secs());
    let registry = Registry::on_every_address();
    // This machine pushes over loopback; the nodes pull through their link.
    let first = &cluster.node_names()[0];
    let for_nodes = format!("{}:{}", cluster.machine_address(first), registry.port);
    cluster.trust_plain_http_registry(&for_nodes).unwrap();

    // The plugins image: a hostpath build of its own digest.
    let wasm = std::fs::read(super::support::rust_plugin_path("hostpath")).unwrap();
    let plugin = super::support::variant(&wasm, &format!("image-{}", std::process::id()));
    let files = tempfile::tempdir().unwrap();
    let file = files.path().join("hostpath.wasm");
    std::fs::write(&file, &plugin).unwrap();
    run(std::process::Command::new(env!("CARGO_BIN_EXE_wasmprov"))
        .args(["plugin", "push", "--image"])
        .arg(&file)
        .arg(registry.reference("wasmprov/plugins:1"))
        .arg("--plain-http"));

    // The chart, packaged and pushed as a release is.
    run(helm(cluster)
        .arg("package")
        .arg(workspace_root().join("deploy/chart"))
        .arg("--destination")
        .arg(files.path()));
    let version = "0.1.0";
    let charts = format!("oci://{}/charts", registry.addr);
    run(helm(cluster)
        .arg("push")
        .arg(files.path().join(format!("wasmprov-{version}.tgz")))
        .args([&charts, "--plain-http"]));

    run(helm(cluster).args([
        "install",
        RELEASE,
        &format!("{charts}/wasmprov"),
        "--version",
        version,
        "--plain-http",
        "--set",
        "plugins.node=null",
        "--set",
        "plugins.bundledHostpath=false",
        "--set",
        &format!("plugins.nodeImage.reference={for_nodes}/wasmprov/plugins:1"),
        "--wait",
        &timeout,
    ]));
    let digest = super::support::digest(&plugin);
    every_node_host_serves(&client, &digest, "the plugin from the image volume").await;
    let out = run(helm(cluster).args(["test", RELEASE, &timeout]));
    assert!(out.contains("Phase:") && out.contains("Succeeded"), "{out}");
    run(helm(cluster).args(["uninstall", RELEASE, "--wait", &timeout]));
    gone(
        Api::<DaemonSet>::namespaced(client.clone(), NS),
        "wasmprov-node",
    )
    .await;
    eprintln!(
        "node e2e: a fresh install from oci://, the node plugins from an image volume, passed helm test"
    );
}
