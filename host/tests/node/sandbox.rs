//! A plugin and a pod together must not reach the node, on the real node:
//! a tenant's busybox Pod makes in its volume what any Pod can (a link to
//! `/`, a FIFO, a socket, and with containerd's default CAP_MKNOD block and
//! character devices), and the `misbehave` test plugin, added to the
//! node host as an operator adds a node plugin, then tries each known way to
//! turn them against the node. Then a compile bomb arrives as the plugin's
//! next version, and the host restarts over the tenant's links.
//!
//! The plugin manages a pool (`requireVolumeName: false`) of its own,
//! [`POOL`], apart from the hostpath classes' directory: a pool inside
//! another grant would be that grant's layout, and the pod's link would
//! (rightly) make it unusable.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};
use test_cluster::{Cluster, NODE_NAME};
use wasmprov::wasm_provisioner::REFUSED_BY_POLICY;

use super::support::node::{
    apply, apply_in, metrics, node_hosts, ops_page, plugin_digest, replicas, rolled_out, run,
    LIMIT, NS,
};
use super::support::{self, eventually_within, workspace_root};
use super::{
    bound_volume, claim_on_the_node as claim, host_container, host_pid, namespace, node_of, running,
};

/// The pool the misbehave plugin is granted, on the node.
const POOL: &str = "/var/lib/wasmprov/misbehave-pool";
const TEST_NS: &str = "e2e-sandbox";
/// The moves of the three-step swap: the layout directory `s` (holding
/// volume B at `s/b`) away, tenant A's volume `a` (holding the pod's link
/// `b -> /`) into its place. Were both allowed, B's saved path would be `/`.
const SWAP: &str = "/data/s>/data/t;/data/a>/data/s";

/// Where this machine has `path` of the node the attacks run on (the
/// first: every claim here selects it).
fn on_node(cluster: &Cluster, path: &Path) -> PathBuf {
    cluster.node_view(NODE_NAME, path)
}

pub async fn a_plugin_and_a_tenants_pod_cannot_reach_the_node(cluster: &Cluster) {
    let client = cluster.client().await.unwrap();
    add_the_misbehave_plugin(cluster, &client).await;
    apply(cluster, &namespace(TEST_NS));
    let (classes, attacks) = classes();
    apply(cluster, &classes);

    // Volume A (the tenant's) and volume B (someone else's, nested).
    apply(cluster, &claim(TEST_NS, "a", "misbehave-pool-a"));
    apply(cluster, &claim(TEST_NS, "b", "misbehave-pool-b"));
    let b = host_path_of(&bound_volume(&client, TEST_NS, "b").await);
    assert_eq!(b, Path::new(POOL).join("s/b"));
    assert_eq!(
        host_path_of(&bound_volume(&client, TEST_NS, "a").await),
        Path::new(POOL).join("a")
    );
    apply(cluster, &tenant_pod());
    running(&client, TEST_NS, "tenant").await;
    the_tenants_files_are_on_the_node(cluster).await;
    apply(cluster, &attacks);

    // Provision, delete and the host's clean-up delete each try the swap.
    let failed = provisioning_failed(&client, "swap-provision").await;
    assert_refused(&failed, &["/data/s>/data/t", "/data/a>/data/s"]);
    apply(
        cluster,
        &claim(TEST_NS, "swap-delete", "misbehave-swap-delete"),
    );
    bound_volume(&client, TEST_NS, "swap-delete").await;
    delete_claim(&client, "swap-delete").await;
    let failed = provisioning_failed(&client, "swap-cleanup").await;
    assert!(failed.contains(REFUSED_BY_POLICY), "{failed}");
    assert_real_directory(&on_node(cluster, &b));
    assert!(
        !on_node(cluster, &Path::new(POOL).join("t")).exists(),
        "the layout moved"
    );

    // Special files: never moved, never opened, never a volume.
    let failed = provisioning_failed(&client, "move-special").await;
    assert_refused(
        &failed,
        &[
            "/data/a/fifo>/data/m1",
            "/data/a/blk>/data/m2",
            "/data/a/chr>/data/m3",
            "/data/a/sock>/data/m4",
        ],
    );
    for file in ["fifo", "fifo-write", "blk", "chr", "sock"] {
        let failed = provisioning_failed(&client, &format!("open-{file}")).await;
        assert!(
            failed.contains("open /data/a/") && !failed.contains(": read "),
            "open-{file}: {failed}"
        );
    }
    for (claim, kind) in [
        ("local-blk", "is a block device"),
        ("hostpath-fifo", "is a FIFO"),
    ] {
        let failed = provisioning_failed(&client, claim).await;
        assert!(failed.contains(kind), "{claim}: {failed}");
    }
    // No call blocked a host: all answer and stay ready.
    for pod in replicas(&client).await {
        assert!(ops_page(&client, &pod, "readyz").await.is_some(), "{pod}");
        assert_eq!(
            host_container(&client, &pod).await.restart_count,
            0,
            "{pod}"
        );
    }

    the_host_restarts_over_a_tenants_links(cluster, &client).await;
    a_compile_bomb_leaves_the_previous_version_serving(cluster, &client).await;

    // Claims and pods go; the pool's directories are the test's to remove.
    let pods: Api<Pod> = Api::namespaced(client.clone(), TEST_NS);
    pods.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), TEST_NS);
    claims
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    assert_real_directory(&on_node(cluster, &b));
    // The pool itself stays: the DaemonSet still mounts it (type
    // Directory), and a node host started later (node/capacity.rs restarts
    // them) could not start without it.
    for node in cluster.node_names() {
        let pool = cluster.node_view(&node, Path::new(POOL));
        for entry in std::fs::read_dir(&pool).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                std::fs::remove_dir_all(&path).unwrap();
            } else {
                std::fs::remove_file(&path).unwrap();
            }
        }
    }
}

/// As an operator adds a node plugin: its ConfigMap, its policy (`runsOn:
/// node`), its directory on each node, and the DaemonSet's plugin volume
/// projecting it (a rollout). Returns once the new node hosts serve it.
async fn add_the_misbehave_plugin(cluster: &Cluster, client: &Client) {
    for node in cluster.node_names() {
        let pool = cluster.node_view(&node, Path::new(POOL));
        std::fs::create_dir_all(&pool).unwrap();
        std::os::unix::fs::chown(&pool, Some(65532), Some(65532)).unwrap();
    }
    let wasm = support::rust_guest_path("misbehave");
    let manifest = support::pack(
        Path::new(env!("CARGO_BIN_EXE_wasmprov")),
        &wasm,
        "misbehave",
    );
    apply_in(cluster, NS, &String::from_utf8(manifest).unwrap());
    apply_in(cluster, NS, &policy_with_misbehave());
    let patch = serde_json::json!([
        {"op": "test", "path": "/spec/template/spec/volumes/0/name", "value": "plugins"},
        {"op": "add", "path": "/spec/template/spec/volumes/0/projected/sources/-",
         "value": {"configMap": {"name": "wasmprov-plugin-misbehave"}}},
        {"op": "add", "path": "/spec/template/spec/volumes/-",
         "value": {"name": "misbehave-pool", "hostPath": {"path": POOL, "type": "Directory"}}},
        {"op": "add", "path": "/spec/template/spec/containers/0/volumeMounts/-",
         "value": {"name": "misbehave-pool", "mountPath": POOL}},
    ]);
    run(cluster
        .kubectl()
        .args([
            "-n",
            NS,
            "patch",
            "daemonset/wasmprov-node",
            "--type=json",
            "-p",
        ])
        .arg(patch.to_string()));
    rolled_out(cluster, "daemonset/wasmprov-node");
    let digest = support::digest(&std::fs::read(&wasm).unwrap());
    eventually_within(LIMIT, "the node hosts to serve misbehave", || {
        let (client, digest) = (client.clone(), digest.clone());
        async move {
            let pods = node_hosts(&client).await;
            for pod in &pods {
                if plugin_digest(&client, pod, "misbehave").await.as_deref() != Some(&digest) {
                    return None;
                }
            }
            (pods.len() == cluster.node_names().len()).then_some(())
        }
    })
    .await;
}

/// deploy/'s policy ConfigMap, with the misbehave plugin's entry added.
fn policy_with_misbehave() -> String {
    let shipped = std::fs::read_to_string(workspace_root().join("deploy/policy.yaml")).unwrap();
    let mut configmap: serde_yaml::Value = serde_yaml::from_str(&shipped).unwrap();
    let file = configmap["data"]["policy.yaml"].as_str().unwrap();
    let mut policy: serde_yaml::Value = serde_yaml::from_str(file).unwrap();
    policy["plugins"]["misbehave"] = serde_yaml::from_str(&format!(
        "{{runsOn: node, timeout: 5s, preopens: [{{host: {POOL}, guest: /data, mode: read-write}}],
          output: {{sources: [hostPath, local], paths: [{POOL}], requireVolumeName: false, anyNodeAffinity: true}}}}"
    ))
    .unwrap();
    configmap["data"]["policy.yaml"] = serde_yaml::to_string(&policy).unwrap().into();
    serde_yaml::to_string(&configmap).unwrap()
}

/// One StorageClass per thing the plugin tries, and the claims that make
/// it try (those of the attacks: made once the tenant's files are there).
fn classes() -> (String, String) {
    let pool = |dir: &str| {
        format!(
            r#"{{"behavior": "return", "mkdir": "/data/{dir}", "source": {source:?}}}"#,
            source = serde_json::json!({"hostPath": {"path": format!("{POOL}/{dir}")}}).to_string()
        )
    };
    let returned = |kind: &str, file: &str| {
        let source = serde_json::json!({kind: {"path": format!("{POOL}/a/{file}")}}).to_string();
        format!(r#"{{"behavior": "return", "source": {source:?}, "pin-to": "{NODE_NAME}"}}"#)
    };
    let open = |file: &str, write: bool| {
        let write = if write { r#", "write": "yes""# } else { "" };
        format!(r#"{{"behavior": "open", "path": "/data/a/{file}"{write}}}"#)
    };
    let moves =
        "/data/a/fifo>/data/m1;/data/a/blk>/data/m2;/data/a/chr>/data/m3;/data/a/sock>/data/m4";
    let outside = serde_json::json!({"hostPath": {"path": "/etc"}}).to_string();
    let classes = [
        ("pool-a", pool("a"), false),
        ("pool-b", pool("s/b"), false),
        (
            "swap-provision",
            format!(r#"{{"behavior": "rename", "renames": "{SWAP}"}}"#),
            true,
        ),
        (
            "swap-delete",
            format!(
                r#"{{"behavior": "return", "mkdir": "/data/d", "source": {:?}, "delete-renames": "{SWAP}"}}"#,
                serde_json::json!({"hostPath": {"path": format!("{POOL}/d")}}).to_string()
            ),
            false,
        ),
        (
            "swap-cleanup",
            format!(
                r#"{{"behavior": "return", "source": {outside:?}, "delete-renames": "{SWAP}"}}"#
            ),
            true,
        ),
        (
            "move-special",
            format!(r#"{{"behavior": "rename", "renames": "{moves}"}}"#),
            true,
        ),
        ("open-fifo", open("fifo", false), true),
        ("open-fifo-write", open("fifo", true), true),
        ("open-blk", open("blk", true), true),
        ("open-chr", open("chr", false), true),
        ("open-sock", open("sock", false), true),
        ("local-blk", returned("local", "blk"), true),
        ("hostpath-fifo", returned("hostPath", "fifo"), true),
        ("ok", pool("ok"), false),
    ];
    let (mut classes_yaml, mut attacks) = (String::new(), String::new());
    for (name, parameters, attack) in classes {
        let mut parameters: serde_json::Value = serde_json::from_str(&parameters).unwrap();
        parameters["plugin"] = "misbehave".into();
        classes_yaml += &format!(
            "---\napiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: misbehave-{name}\nprovisioner: node.wasmprov.io\nparameters: {parameters}\nreclaimPolicy: Delete\nvolumeBindingMode: WaitForFirstConsumer\n"
        );
        if attack {
            attacks += &format!(
                "---\n{}",
                claim(TEST_NS, name, &format!("misbehave-{name}"))
            );
        }
    }
    (classes_yaml, attacks)
}

/// The tenant: everything a Pod may make in its own volume, then sleeps.
/// busybox's syslogd makes its socket where `/dev/log` points.
fn tenant_pod() -> String {
    let script = "cd /data && ln -s / b && mkfifo fifo && mknod blk b 7 0 && mknod chr c 1 3 \
         && mkdir -p releases/2 && ln -s releases/2 current \
         && ln -s /data/sock /dev/log && syslogd -O /dev/null && exec sleep 3600";
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: tenant
  namespace: {TEST_NS}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: docker.io/library/busybox:1.37
      command: [sh, -c, "{script}"]
      volumeMounts:
        - name: data
          mountPath: /data
  volumes:
    - name: data
      persistentVolumeClaim:
        claimName: a
"#
    )
}

async fn the_tenants_files_are_on_the_node(cluster: &Cluster) {
    use std::os::unix::fs::FileTypeExt;
    let a = on_node(cluster, &Path::new(POOL).join("a"));
    eventually_within(LIMIT, "the tenant's files on the node", || {
        let a = a.clone();
        async move {
            let kind = |name: &str| {
                std::fs::symlink_metadata(a.join(name))
                    .ok()
                    .map(|m| m.file_type())
            };
            let all = [
                kind("b")?.is_symlink(),
                kind("fifo")?.is_fifo(),
                kind("blk")?.is_block_device(),
                kind("chr")?.is_char_device(),
                kind("sock")?.is_socket(),
                kind("current")?.is_symlink(),
            ];
            all.iter().all(|ok| *ok).then_some(())
        }
    })
    .await;
}

fn host_path_of(volume: &k8s_openapi::api::core::v1::PersistentVolume) -> PathBuf {
    let spec = volume.spec.as_ref().unwrap();
    PathBuf::from(&spec.host_path.as_ref().expect("a hostPath volume").path)
}

/// The note of the claim's `ProvisioningFailed` event, once there is one.
async fn provisioning_failed(client: &Client, claim: &str) -> String {
    let events: Api<Event> = Api::namespaced(client.clone(), TEST_NS);
    eventually_within(
        LIMIT,
        &format!("ProvisioningFailed of claim {claim}"),
        || {
            let events = events.clone();
            async move {
                let list = events.list(&ListParams::default()).await.ok()?;
                list.items.into_iter().find_map(|e| {
                    let about = e.regarding.as_ref()?.name.as_deref() == Some(claim);
                    (about && e.reason.as_deref() == Some("ProvisioningFailed")).then_some(e.note?)
                })
            }
        },
    )
    .await
}

fn assert_refused(message: &str, moves: &[&str]) {
    for pair in moves {
        assert!(
            message.contains(&format!("{pair}: Operation not permitted")),
            "{pair} must be refused: {message}"
        );
    }
}

/// `path` is still a real directory, and resolves to itself.
fn assert_real_directory(path: &Path) {
    let meta =
        std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(meta.is_dir(), "{} is no longer a directory", path.display());
    assert_eq!(
        std::fs::canonicalize(path).unwrap(),
        path,
        "{} resolves elsewhere",
        path.display()
    );
}

/// Deletes a claim; returns once its volume is gone.
async fn delete_claim(client: &Client, name: &str) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), TEST_NS);
    let volume = claims
        .get(name)
        .await
        .unwrap()
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    claims.delete(name, &DeleteParams::default()).await.unwrap();
    let volumes: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client.clone());
    eventually_within(LIMIT, &format!("volume {volume} to be deleted"), || {
        let (volumes, volume) = (volumes.clone(), volume.clone());
        async move { volumes.get_opt(&volume).await.ok()?.is_none().then_some(()) }
    })
    .await;
}

/// The bomb (a few KiB that need over a gigabyte to compile) delivered as
/// misbehave's next version: the node host rejects it without a restart,
/// its own memory stays small, and the version before it keeps serving.
async fn a_compile_bomb_leaves_the_previous_version_serving(cluster: &Cluster, client: &Client) {
    let pods = node_hosts(client).await;
    let serving = plugin_digest(client, &pods[0], "misbehave").await;
    let mut restarts = Vec::new();
    for pod in &pods {
        restarts.push(host_container(client, pod).await.restart_count);
    }
    // `wasmprov plugin pack` refuses to pack it (it compiles what it
    // packs): the ConfigMap is written as anyone could.
    let bomb = zstd::encode_all(&support::compile_bomb(600, 600)[..], 19).unwrap();
    let configmap = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "wasmprov-plugin-misbehave", "labels": {"wasmprov.io/plugin": "misbehave"}},
        "binaryData": {"misbehave.wasm.zst": k8s_openapi::ByteString(bomb)},
    });
    apply_in(cluster, NS, &configmap.to_string());
    for (pod, restarts) in pods.iter().zip(restarts) {
        eventually_within(
            Duration::from_secs(300),
            &format!("{pod} to reject the bomb"),
            || async move {
                let text = metrics(client, pod).await?;
                text.lines()
                    .any(|l| {
                        l.starts_with("wasmprov_plugin_reload_total{")
                            && l.contains("plugin=\"misbehave\"")
                            && l.contains("result=\"rejected\"")
                    })
                    .then_some(())
            },
        )
        .await;
        assert_eq!(
            plugin_digest(client, pod, "misbehave").await,
            serving,
            "{pod}"
        );
        let c = host_container(client, pod).await;
        assert!(c.ready && c.restart_count == restarts, "{pod}: {c:?}");
        let node = node_of(client, pod).await;
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", host_pid(cluster, &node, &c)))
                .unwrap();
        let peak_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        assert!(
            peak_kib < 256 << 10,
            "{pod}'s host peaked at {} MiB",
            peak_kib >> 10
        );
    }
    apply(cluster, &claim(TEST_NS, "after-bomb", "misbehave-ok"));
    bound_volume(client, TEST_NS, "after-bomb").await;
}

/// A tenant's links inside a pool volume (`current -> releases/2`, and
/// `b -> /`) are the tenant's business: a restarted host starts, serves
/// every plugin and reports nothing unusable.
async fn the_host_restarts_over_a_tenants_links(cluster: &Cluster, client: &Client) {
    // The host of the node holding the tenant's links.
    let mut pod = None;
    for p in node_hosts(client).await {
        if node_of(client, &p).await == NODE_NAME {
            pod = Some(p);
        }
    }
    let pod = pod.expect("a node host on the first node");
    let container = host_container(client, &pod).await;
    let id = container
        .container_id
        .as_deref()
        .unwrap()
        .trim_start_matches("containerd://");
    run(cluster
        .ctr_on(NODE_NAME)
        .args(["tasks", "kill", "--signal", "SIGKILL", id]));
    eventually_within(LIMIT, "the killed container to be restarted", || {
        let (client, pod) = (client.clone(), pod.clone());
        let restarts = container.restart_count;
        async move {
            let c = host_container(&client, &pod).await;
            (c.restart_count > restarts && c.ready).then_some(())
        }
    })
    .await;
    let ready = ops_page(client, &pod, "readyz").await.expect("ready");
    assert!(!ready.contains("note:"), "{pod}'s /readyz: {ready}");
    assert!(plugin_digest(client, &pod, "misbehave").await.is_some());
    assert!(plugin_digest(client, &pod, "hostpath").await.is_some());
}
