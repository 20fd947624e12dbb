//! Shared helpers for the host's integration tests: built plugin components
//! and Kubernetes objects to feed them.
#![allow(dead_code)] // each test binary uses a different subset

pub mod kubelet;
pub mod node;
pub mod registry;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use wasmprov::policy::{DirMode, OutputPolicy, PolicySet, Preopen, SandboxPolicy};
use wasmprov::provisioner::ProvisionOptions;
use wasmprov::runtime::{Runtime, RuntimeConfig};
use wasmprov::wasm_provisioner::WasmProvisioner;

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_owned()
}

/// The `wasmprov` command as the tests run it: the compile cache they share
/// (a plugin is compiled once, not once per test), and only warnings logged.
/// `wasmprov ARGS…`, run to the end.
pub fn wasmprov(args: &[&str]) -> std::process::Output {
    wasmprov_command()
        .args(args)
        .output()
        .expect("run wasmprov")
}

pub fn wasmprov_command() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_wasmprov"));
    command
        .env(
            "WASMPROV_CACHE_DIR",
            workspace_root().join("target/test-compile-cache"),
        )
        .env("WASMPROV_LOG", "warn");
    command
}

/// Builds every plugin and test guest from source (once per test process)
/// with the same command a developer uses.
fn build_components() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = workspace_root();
        let out = std::process::Command::new("bash")
            .arg(root.join("plugins/build.sh"))
            .arg("--quiet")
            .current_dir(&root)
            .output()
            .expect("run plugins/build.sh");
        assert!(
            out.status.success(),
            "plugins/build.sh failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// Builds the Rust plugins and test guests only (`plugins/build.sh
/// --rust-only`, what `wasmprov dev` and deploy/README.md use): needs nothing
/// but the wasm32-wasip2 target.
fn build_rust_components() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = workspace_root();
        let out = std::process::Command::new("bash")
            .arg(root.join("plugins/build.sh"))
            .args(["--quiet", "--rust-only"])
            .current_dir(&root)
            .output()
            .expect("run plugins/build.sh --rust-only");
        assert!(
            out.status.success(),
            "plugins/build.sh --rust-only failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// A built Rust plugin, `target/plugins/<name>.wasm`, without building the
/// C, JavaScript and Python ones.
pub fn rust_plugin_path(name: &str) -> PathBuf {
    build_rust_components();
    workspace_root().join(format!("target/plugins/{name}.wasm"))
}

/// A built plugin: `target/plugins/<name>.wasm`.
pub fn plugin_path(name: &str) -> PathBuf {
    build_components();
    workspace_root().join(format!("target/plugins/{name}.wasm"))
}

/// A built test guest, without building the C, JavaScript and Python
/// plugins (every test guest is in Rust).
pub fn rust_guest_path(name: &str) -> PathBuf {
    build_rust_components();
    workspace_root().join(format!("target/test-guests/{name}.wasm"))
}

/// A built test guest: `target/test-guests/<name>.wasm`.
pub fn guest_path(name: &str) -> PathBuf {
    build_components();
    workspace_root().join(format!("target/test-guests/{name}.wasm"))
}

/// One runtime per test process, with a compile cache shared across runs.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Runtime::new(RuntimeConfig {
            cache_dir: Some(workspace_root().join("target/test-compile-cache")),
            ..RuntimeConfig::default()
        })
        .expect("create the Wasm runtime")
    })
}

/// Loads a test guest. The sandbox also gets [`ok_preopen`], where the
/// misbehave guests make their healthy volumes' directories.
pub async fn load(
    name: &str,
    file: &Path,
    mut policy: SandboxPolicy,
    output: OutputPolicy,
) -> WasmProvisioner {
    policy.preopens.push(ok_preopen());
    let bytes = std::fs::read(file).expect("read component");
    let plugin = runtime()
        .load(name, &bytes, policy)
        .await
        .unwrap_or_else(|e| panic!("load {}: {e}", file.display()));
    WasmProvisioner::new(Arc::new(plugin), output)
}

/// Where the misbehave guests' healthy volumes are (`/tmp/ok/<pv>`): the
/// host refuses a hostPath it cannot see, so the guests make the directory
/// in this preopen.
pub const OK_ROOT: &str = "/tmp/ok";

/// [`OK_ROOT`] as the misbehave guests see it, read-write, in policy-file
/// YAML; the directory is made by [`misbehave_output`] and [`ok_preopen`].
pub const OK_PREOPEN: &str = "{host: /tmp/ok, guest: /ok, mode: read-write}";

/// [`OK_PREOPEN`], made.
pub fn ok_preopen() -> Preopen {
    std::fs::create_dir_all(OK_ROOT).expect("create /tmp/ok");
    Preopen {
        host: OK_ROOT.into(),
        guest: "/ok".into(),
        mode: DirMode::ReadWrite,
    }
}

/// The output policy entry that lets the misbehave guest return its healthy
/// volume (a hostPath under /tmp/ok, annotations under misbehave.test/), in
/// policy-file YAML. The simulated nodes of a test share this machine's
/// filesystem, so /tmp/ok is the same on every node.
pub const MISBEHAVE_OUTPUT: &str = "{sources: [hostPath], paths: [/tmp/ok], \
     annotationPrefixes: [misbehave.test/], sharedFilesystem: true}";

/// [`MISBEHAVE_OUTPUT`], parsed.
pub fn misbehave_output() -> OutputPolicy {
    std::fs::create_dir_all(OK_ROOT).expect("create /tmp/ok");
    let yaml = format!("plugins: {{misbehave: {{output: {MISBEHAVE_OUTPUT}}}}}");
    PolicySet::parse(&yaml, Path::new("test"))
        .expect("the misbehave output policy")
        .output_for("misbehave")
}

pub fn class(name: &str, params: &[(&str, &str)]) -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        provisioner: "wasmprov.io/host".to_owned(),
        parameters: Some(
            params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        reclaim_policy: Some("Delete".to_owned()),
        ..Default::default()
    }
}

pub fn claim(name: &str, size: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            uid: Some(format!("00000000-0000-0000-0000-{:0>12}", name.len())),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(size.to_owned()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

pub fn options(
    pv_name: &str,
    class: StorageClass,
    claim: PersistentVolumeClaim,
) -> ProvisionOptions {
    ProvisionOptions {
        pv_name: pv_name.to_owned(),
        claim,
        class,
        selected_node: None,
    }
}

/// `wasm` with a custom section added: the same plugin, another digest.
pub fn variant(wasm: &[u8], tag: &str) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"wasmprov-test";
    let mut payload = Vec::new();
    leb(name.len(), &mut payload);
    payload.extend_from_slice(name);
    payload.extend_from_slice(tag.as_bytes());
    let mut out = wasm.to_vec();
    out.push(0); // custom section
    leb(payload.len(), &mut out);
    out.extend_from_slice(&payload);
    out
}

/// A plugin version's digest as the host reports it: `sha256:<hex>`.
pub fn digest(wasm: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(wasm)))
}

/// A local TCP port nobody listens on right now (bound, read, released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free local port")
        .port()
}

/// `kubectl --server URL apply --server-side -f -` of `yaml`, as a user runs
/// it; panics with kubectl's output if it fails.
pub fn kubectl_apply(server: &str, namespace: &str, yaml: &[u8]) {
    let mut kubectl = std::process::Command::new("kubectl");
    kubectl.args([
        "--server",
        server,
        "apply",
        "--server-side",
        "-n",
        namespace,
        "-f",
        "-",
    ]);
    pipe_to(kubectl, yaml)
}

/// Runs `kubectl` with `yaml` on its standard input; panics with its output
/// if it fails.
fn pipe_to(mut kubectl: std::process::Command, yaml: &[u8]) {
    use std::io::Write;
    let mut kubectl = kubectl
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kubectl");
    kubectl.stdin.take().unwrap().write_all(yaml).unwrap();
    let out = kubectl.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `wasmprov plugin pack FILE --name NAME` with the built binary: the YAML
/// it prints.
pub fn pack(wasmprov: &Path, file: &Path, name: &str) -> Vec<u8> {
    let out = std::process::Command::new(wasmprov)
        .args(["plugin", "pack"])
        .arg(file)
        .args(["--name", name, "--cache-dir"])
        .arg(workspace_root().join("target/test-compile-cache"))
        .output()
        .expect("run wasmprov plugin pack");
    assert!(
        out.status.success(),
        "wasmprov plugin pack failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Polls `f` until it returns Some, failing the test after 60 s (a bound
/// for a machine under load; passing tests return as soon as it holds).
pub async fn eventually<T, F, Fut>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_within(std::time::Duration::from_secs(60), what, f).await
}

/// [`eventually`] with its own time limit.
pub async fn eventually_within<T, F, Fut>(limit: std::time::Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting until {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Runs each listed scenario (`async fn NAME(server: Server)`) as two tests,
/// `real::NAME` and `simulated::NAME`.
#[allow(unused_macros)] // not every test file runs scenarios on both servers
macro_rules! on_both_servers {
    ($($name:ident),* $(,)?) => {
        mod real {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Server::Real).await
                }
            )*
        }
        mod simulated {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Server::Simulated).await
                }
            )*
        }
    };
}

/// Which API server a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    Simulated,
    /// A real control plane (tests/cluster), the ground truth.
    Real,
}

/// A running API server of either kind, with `nodes` registered.
pub enum TestApi {
    Simulated(kube_sim::Simulator),
    /// A control plane of its own: tests change cluster-wide objects.
    Real(test_cluster::Cluster),
}

impl TestApi {
    /// Starts `server` (the simulator with `sim`, a real control plane with
    /// `real`) and returns it with an admin client.
    pub async fn start(
        server: Server,
        nodes: &[&str],
        sim: kube_sim::Config,
        real: test_cluster::Options,
    ) -> (TestApi, kube::Client) {
        match server {
            Server::Simulated => {
                let sim = kube_sim::Simulator::start(kube_sim::Config {
                    nodes: nodes.iter().map(|n| n.to_string()).collect(),
                    ..sim
                })
                .await
                .unwrap();
                let client = sim.client().unwrap();
                (TestApi::Simulated(sim), client)
            }
            Server::Real => {
                let cluster = tokio::task::spawn_blocking(|| test_cluster::Cluster::start(real))
                    .await
                    .expect("the cluster start task panicked")
                    .unwrap_or_else(|e| panic!("starting a real test cluster: {e}"));
                let client = cluster.client().await.unwrap();
                for node in nodes {
                    create_node(&client, node).await;
                }
                (TestApi::Real(cluster), client)
            }
        }
    }

    /// The simulator, for a test that injects faults or reads its request log.
    pub fn sim(&self) -> &kube_sim::Simulator {
        match self {
            TestApi::Simulated(sim) => sim,
            TestApi::Real(_) => panic!("this test needs the simulated API server"),
        }
    }

    /// An admin kubeconfig (YAML), e.g. for a `wasmprov run` process.
    pub fn kubeconfig(&self) -> String {
        match self {
            TestApi::Simulated(sim) => sim.kubeconfig(),
            TestApi::Real(cluster) => cluster.kubeconfig_with_token(cluster.admin_token()),
        }
    }

    /// `kubectl apply --server-side -n NAMESPACE -f -` of `yaml`, as a user
    /// runs it (on the real server with the kubectl of its release).
    pub fn kubectl_apply(&self, namespace: &str, yaml: &[u8]) {
        match self {
            TestApi::Simulated(sim) => kubectl_apply(&sim.url(), namespace, yaml),
            TestApi::Real(cluster) => {
                let mut kubectl = cluster.kubectl();
                kubectl.args(["apply", "--server-side", "-n", namespace, "-f", "-"]);
                pipe_to(kubectl, yaml)
            }
        }
    }

    /// `kubectl ARGS…` as a user runs it (on the real server with the
    /// kubectl of its release); panics with its output if it fails.
    pub fn kubectl(&self, args: &[&str]) {
        let mut kubectl = match self {
            TestApi::Simulated(sim) => {
                let mut kubectl = std::process::Command::new("kubectl");
                kubectl.args(["--server", &sim.url()]);
                kubectl
            }
            TestApi::Real(cluster) => cluster.kubectl(),
        };
        kubectl.args(args);
        pipe_to(kubectl, b"")
    }

    /// What makes the scheduler pick a node for WaitForFirstConsumer claim
    /// `claim`: on the real server a pod using it (named after the claim),
    /// which the real scheduler places; on the simulator the test acts as
    /// the scheduler and picks `node`.
    pub async fn use_claim_in_a_pod(
        &self,
        client: &kube::Client,
        namespace: &str,
        claim: &str,
        node: &str,
    ) {
        match self {
            TestApi::Simulated(sim) => sim.schedule_claim(namespace, claim, node).await.unwrap(),
            TestApi::Real(_) => create_pod(client, namespace, claim, claim).await,
        }
    }
}

/// A schedulable Node, as kubelet would register it: its hostname label
/// and room for pods. (No kubelet runs: pods bound to it stay Pending.)
pub async fn create_node(client: &kube::Client, name: &str) {
    use k8s_openapi::api::core::v1::Node;
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }))
    .expect("a valid Node");
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    match nodes.create(&Default::default(), &node).await {
        Ok(_) => {}
        // The simulator makes its nodes at start.
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create node {name}: {e}"),
    }
}

/// A Pod that mounts claim `claim`: what makes the scheduler choose a node
/// for a WaitForFirstConsumer claim.
pub async fn create_pod(client: &kube::Client, namespace: &str, name: &str, claim: &str) {
    create_pod_preferring(client, namespace, name, claim, None).await
}

/// [`create_pod`], preferring node `prefer` when it exists (a soft node
/// affinity: other nodes stay possible).
pub async fn create_pod_preferring(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    claim: &str,
    prefer: Option<&str>,
) {
    use k8s_openapi::api::core::v1::Pod;
    let mut pod = serde_json::json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [{"name": "app", "image": "registry.invalid/app",
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    });
    if let Some(node) = prefer {
        pod["spec"]["affinity"] = serde_json::json!({"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
                "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}}]}});
    }
    let pod: Pod = serde_json::from_value(pod).expect("a valid Pod");
    kube::Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&Default::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("create pod {namespace}/{name}: {e}"));
}

/// The node the scheduler bound pod `name` to, once it has.
pub async fn pod_node(client: &kube::Client, namespace: &str, name: &str) -> String {
    use k8s_openapi::api::core::v1::Pod;
    let pods = kube::Api::<Pod>::namespaced(client.clone(), namespace);
    eventually(&format!("pod {namespace}/{name} is scheduled"), || async {
        pods.get(name).await.ok()?.spec?.node_name
    })
    .await
}

/// A few kilobytes that take about 1.3 GB to compile: `depth` nested blocks
/// each passing `width` values, all reached from one `br_table`, so every
/// edge carries every value.
pub fn compile_bomb(width: usize, depth: usize) -> Vec<u8> {
    let results = "i64 ".repeat(width);
    let mut body = format!(
        "{} (br_table {} (local.get 0))",
        "(i64.const 0) ".repeat(width),
        (0..depth)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    for _ in 0..depth {
        body = format!("(block (result {results}) {body})");
    }
    let text = format!(
        "(component (core module (func (export \"f\") (param i32) {body} {})))",
        "drop ".repeat(width)
    );
    wat::parse_str(text).unwrap()
}

/// Calls of `plugin`'s `call` a host's metrics count, whatever their result.
#[allow(dead_code)] // not every test file counts plugin calls
pub fn plugin_calls(metrics: &wasmprov::metrics::Metrics, plugin: &str, call: &str) -> u64 {
    let prefix = format!("wasmprov_plugin_calls_total{{plugin=\"{plugin}\",call=\"{call}\",");
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Appends to deploy/'s policy ConfigMap (`wasmprov-policy` in
/// `configmaps`' namespace) the entry "Add a backend" gives the stand-in
/// NFS backend: plugin `name`, the hostpath plugin packed under that name,
/// granted the share `root`, which every node mounts at the same path.
pub async fn add_shared_backend_policy(
    configmaps: &kube::Api<k8s_openapi::api::core::v1::ConfigMap>,
    name: &str,
    root: &str,
) {
    let mut policy = configmaps.get("wasmprov-policy").await.unwrap();
    let text = policy
        .data
        .as_mut()
        .unwrap()
        .get_mut("policy.yaml")
        .unwrap();
    assert!(
        text.contains("\nplugins:\n"),
        "plugins: is the policy's last key"
    );
    text.push_str(&format!(
        "  {name}:
    preopens:
      - host: {root}
        guest: /volumes
        mode: read-write
    recordParameters: [hostRoot, root]
    output:
      sources: [hostPath]
      paths: [{root}]
      sharedFilesystem: true
"
    ));
    configmaps
        .replace("wasmprov-policy", &Default::default(), &policy)
        .await
        .unwrap();
}

/// The events about the object `name` in `namespace` (`default` for
/// volumes and other cluster-wide objects); `None` when they cannot be
/// listed, for a caller that polls.
pub async fn events_about(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Option<Vec<k8s_openapi::api::core::v1::Event>> {
    let events: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(client.clone(), namespace);
    let listed = events.list(&Default::default()).await.ok()?.items;
    Some(
        listed
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .collect(),
    )
}

/// Of the claims named `prefix…`, those bound to a volume and those handed
/// back to the scheduler (their selected node cleared), by name.
pub fn bound_and_handed_back(
    claims: &[PersistentVolumeClaim],
    prefix: &str,
) -> (
    std::collections::BTreeSet<String>,
    std::collections::BTreeSet<String>,
) {
    let ours = || {
        claims.iter().filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
        })
    };
    let name = |c: &PersistentVolumeClaim| c.metadata.name.clone().unwrap_or_default();
    let bound = ours()
        .filter(|c| {
            c.spec
                .as_ref()
                .and_then(|s| s.volume_name.as_ref())
                .is_some()
        })
        .map(name)
        .collect();
    let handed_back = ours()
        .filter(|c| {
            !c.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("volume.kubernetes.io/selected-node"))
        })
        .map(name)
        .collect();
    (bound, handed_back)
}
