//! The Go provisioner the benchmarks compare wasmprov with
//! (tests/go-peer, on sig-storage-lib-external-provisioner) does the job on
//! the real control plane: a claim gets a bound hostPath volume with node
//! affinity in its own directory, and deleting the claim removes both.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use test_cluster::{Cluster, Options};

const NODE: &str = "worker-1";

/// Kills the peer when the test ends, however it ends.
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn object<T: k8s_openapi::serde::de::DeserializeOwned>(json: serde_json::Value) -> T {
    serde_json::from_value(json).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_peer_provisions_and_deletes_a_hostpath_volume() {
    let bin = test_cluster::binaries().unwrap_or_else(|e| panic!("{e}"));
    let cluster = tokio::task::spawn_blocking(|| Cluster::start(Options::default()))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().await.unwrap();
    Api::<Node>::all(client.clone())
        .create(
            &PostParams::default(),
            &object(serde_json::json!({"metadata": {"name": NODE,
                "labels": {"kubernetes.io/hostname": NODE}}})),
        )
        .await
        .unwrap();
    Api::<StorageClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &object(serde_json::json!({"metadata": {"name": "go-hostpath"},
                "provisioner": "example.com/hostpath", "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate"})),
        )
        .await
        .unwrap();
    let root = tempfile::tempdir().unwrap();
    let _peer = Peer(
        Command::new(bin.join("hostpath-peer"))
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig_path())
            .arg("--root")
            .arg(root.path())
            .args(["--node", NODE])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start hostpath-peer"),
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    claims
        .create(
            &PostParams::default(),
            &object(serde_json::json!({"metadata": {"name": "data"},
                "spec": {"storageClassName": "go-hostpath", "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}})),
        )
        .await
        .unwrap();
    let volume = eventually("the claim is Bound", || async {
        let c = claims.get("data").await.ok()?;
        (c.status?.phase.as_deref() == Some("Bound")).then_some(c.spec?.volume_name?)
    })
    .await;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pv = volumes.get(&volume).await.unwrap();
    let spec = pv.spec.unwrap();
    let dir = root.path().join(&volume);
    assert_eq!(spec.host_path.unwrap().path, dir.display().to_string());
    assert!(dir.is_dir());
    let terms = spec
        .node_affinity
        .unwrap()
        .required
        .unwrap()
        .node_selector_terms;
    assert_eq!(
        terms[0].match_expressions.as_ref().unwrap()[0].values,
        Some(vec![NODE.to_owned()])
    );

    claims
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the volume and its directory are gone", || async {
        let gone = volumes.get_opt(&volume).await.ok()?.is_none();
        (gone && !dir.exists()).then_some(())
    })
    .await;
}
