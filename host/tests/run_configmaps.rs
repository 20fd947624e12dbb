//! `wasmprov run --plugin-configmaps` end to end, as a user runs it: the real
//! binary against a real control plane and the simulator, the hostpath
//! plugin shipped with
//! `wasmprov plugin pack | kubectl apply --server-side -f -`, a corrupt
//! update rejected (a Warning event on the ConfigMap, a metric) while the
//! old version keeps provisioning.

mod support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::ByteString;
use kube::{Api, ResourceExt};
use serde_json::json;
use support::{eventually, workspace_root, Server, TestApi};

const NS: &str = "default";
const CONFIGMAP: &str = "wasmprov-plugin-hostpath";

/// The host as a child process; killed when dropped.
struct Host {
    child: Child,
    log: PathBuf,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("the host's log: {}", self.log.display());
    }
}

fn wasmprov() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wasmprov"));
    // Only what the test passes: no $POD_NAMESPACE, no WASMPROV_* settings.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("WASMPROV_") || key.starts_with("POD_") || key == "KUBECONFIG" {
            c.env_remove(key);
        }
    }
    c
}

/// `GET /metrics` of the host on `port`: the body.
fn metrics(port: u16) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

fn claim(name: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {"storageClassName": "hostpath", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap()
}

/// The claim's volume once it is Bound.
async fn bound(client: &kube::Client, name: &str) -> PersistentVolume {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let pv = eventually(&format!("claim {name} is Bound"), || async {
        let c = claims.get(name).await.ok()?;
        (c.status?.phase? == "Bound").then_some(c.spec?.volume_name?)
    })
    .await;
    Api::<PersistentVolume>::all(client.clone())
        .get(&pv)
        .await
        .unwrap()
}

fn digest_of(pv: &PersistentVolume) -> String {
    pv.annotations()
        .get("wasmprov.io/plugin-digest")
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_a_packed_plugin_and_keeps_it_through_a_corrupt_update() {
    serves_a_packed_plugin_and_keeps_it_through_a_corrupt_update(Server::Real).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_simulator_run_serves_a_packed_plugin_and_keeps_it_through_a_corrupt_update() {
    serves_a_packed_plugin_and_keeps_it_through_a_corrupt_update(Server::Simulated).await;
}

async fn serves_a_packed_plugin_and_keeps_it_through_a_corrupt_update(server: Server) {
    let (api, client) = TestApi::start(server, &[], Default::default(), Default::default()).await;
    let work = tempfile::tempdir().unwrap();
    let volumes = work.path().join("volumes");
    std::fs::create_dir(&volumes).unwrap();

    // Ship the plugin as a user does.
    let wasm_file = support::rust_plugin_path("hostpath");
    let v1 = support::digest(&std::fs::read(&wasm_file).unwrap());
    let packed = support::pack(
        Path::new(env!("CARGO_BIN_EXE_wasmprov")),
        &wasm_file,
        "hostpath",
    );
    api.kubectl_apply(NS, &packed);

    // The host: plugins from ConfigMaps only (no --plugins-dir).
    let kubeconfig = work.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let policy = work.path().join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "plugins:\n  hostpath:\n    preopens: [{{host: {dir}, guest: /volumes, mode: read-write}}]\n    \
             output: {{sources: [hostPath], paths: [{dir}]}}\n",
            dir = volumes.display()
        ),
    )
    .unwrap();
    let port = support::free_port();
    let log = work.path().join("host.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let child = wasmprov()
        .arg("run")
        .arg("--plugin-configmaps")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--leader-election=false", "--metrics-address"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--policy")
        .arg(&policy)
        .arg("--cache-dir")
        .arg(workspace_root().join("target/test-compile-cache"))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .expect("start wasmprov run");
    let _host = Host { child, log };

    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "hostpath"},
        "provisioner": "wasmprov.io/host",
        "parameters": {"plugin": "hostpath", "hostRoot": volumes.to_str().unwrap()},
        "reclaimPolicy": "Delete",
    }))
    .unwrap();
    Api::<StorageClass>::all(client.clone())
        .create(&Default::default(), &class)
        .await
        .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    claims
        .create(&Default::default(), &claim("first"))
        .await
        .unwrap();
    let pv = bound(&client, "first").await;
    assert_eq!(digest_of(&pv), v1);
    assert!(volumes.join(pv.name_any()).is_dir());

    // A corrupt update: the same ConfigMap, bytes that are not zstd.
    let mut cm: ConfigMap = serde_yaml::from_slice(&packed).unwrap();
    let data = cm.binary_data.as_mut().unwrap();
    assert_eq!(data.len(), 1);
    *data.values_mut().next().unwrap() = ByteString(b"definitely not zstd".to_vec());
    let corrupt = serde_yaml::to_string(&cm).unwrap();
    api.kubectl_apply(NS, corrupt.as_bytes());

    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let note = eventually("a PluginRejected Warning on the ConfigMap", || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("PluginRejected")
                    && e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ConfigMap")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(CONFIGMAP)
            })?
            .note
    })
    .await;
    assert!(
        note.contains(&format!("version {v1} keeps serving")),
        "{note}"
    );

    // The old version still provisions.
    claims
        .create(&Default::default(), &claim("second"))
        .await
        .unwrap();
    assert_eq!(digest_of(&bound(&client, "second").await), v1);

    let want = "wasmprov_plugin_reload_total{plugin=\"hostpath\",result=\"rejected\"} 1";
    let body = eventually("the metrics endpoint answers", || async { metrics(port) }).await;
    assert!(
        body.lines().any(|l| l == want),
        "{want} in:\n{}",
        body.lines()
            .filter(|l| l.contains("plugin_reload"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn run_without_a_plugin_source_says_what_is_missing() {
    let out = wasmprov()
        .args(["run", "--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Both sources are named, so either fix is evident.
    assert!(
        stderr.contains("the following required arguments were not provided")
            && stderr.contains("--plugins-dir <DIR>|--plugin-configmaps"),
        "{stderr}"
    );
}
