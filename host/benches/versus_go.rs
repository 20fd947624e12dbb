//! wasmprov against the Go library, on real control planes:
//!
//! ```sh
//! bash plugins/build.sh --rust-only
//! cargo bench -p wasmprov --bench versus_go
//! ```
//!
//! Each contender's run gets a real control plane (tests/cluster) started
//! afresh for it, so that no run inherits another's history, and its own
//! provisioner name, namespace and ServiceAccount: the Go
//! library's hostpath provisioner (tests/go-peer) with client-go's default
//! API limits (what its example ships with) and with wasmprov's limits, and
//! `wasmprov run` with the hostpath plugin, without and with
//! `--claim-finalizer`. Each gets the same workloads over 10 StorageClasses:
//! a burst of `BENCH_CLAIMS` claims (default 1,000) created at once, then a
//! stream of 200 claims/s for 30 s; then all are deleted. The default-limits
//! peer, which needs minutes per hundred claims, gets a tenth of each.
//! Reported per contender: claims/s to Bound, claim→Bound p50/p99/max,
//! claim→PersistentVolume created (the provisioner's share, before the PV
//! binder's), delete→volume gone p50/p99, API requests per claim (the API
//! server's audit log, which records only service accounts' requests, by
//! the contender's user), CPU per claim, by thread too, and peak RSS of its
//! process; and ratios against the Go library at equal limits, from the
//! same run. The controller manager's API limit is lifted (see
//! `controller_manager_qps`), or its PV binder would be what is measured.
//! `BENCH_PERF=DIR` also records each contender's measured window with
//! `perf record` into `DIR/bench-N.perf.data`. `BENCH_CONTENDERS` picks
//! some (`go-defaults,go,wasmprov,native,finalizer`); `BENCH_ROUNDS=N`
//! runs them N times, each round starting with the next one, and reports
//! each figure's median and range, the ratios taken within each round.
//!
//! It also draws `target/bench/versus-go.svg`: the claim→Bound latency
//! distribution of each contender, and its throughput.
//!
//! A fifth contender is wasmprov's lifecycle with the hostpath logic as
//! native Rust (this program re-executed as `--native-host`): the cost of
//! the sandbox is its ratio to `wasmprov`. The 100-class and 10,000-volume
//! runs are `benches/scale.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use test_cluster::{Cluster, Options};

#[path = "common/cluster.rs"]
mod cluster;
#[path = "common/native.rs"]
mod native;
#[path = "common/process.rs"]
mod process;

use native::NativeHostPath;

const CLASSES: usize = 10;
const NODE: &str = "bench-node";
/// The API limits wasmprov is run with, and the Go peer "at equal limits".
const QPS: u32 = 200;
const BURST: u32 = 400;
/// Claims created at once by the benchmark's own client.
const CREATORS: usize = 32;
/// The stream: claims per second, for how long (`BENCH_STREAM_RATE`,
/// `BENCH_STREAM_SECONDS`).
const STREAM_RATE: u32 = 200;
const STREAM_SECONDS: u32 = 30;

/// A setting from the environment, or its default.
fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}
const TIMEOUT: Duration = Duration::from_secs(30 * 60);

#[derive(Clone, Copy)]
enum Kind {
    Go,
    Wasmprov {
        claim_finalizer: bool,
    },
    /// wasmprov's lifecycle with a native provider ([`native_host`]).
    Native,
}

struct Contender {
    name: &'static str,
    /// Its name in `BENCH_CONTENDERS`.
    key: &'static str,
    kind: Kind,
    qps: u32,
    burst: u32,
    /// Fraction of BENCH_CLAIMS it gets.
    share: usize,
}

struct Figures {
    burst: Phase,
    stream: Phase,
    /// Claims per second the stream offered.
    stream_rate: u32,
    gone: Vec<Duration>,
    requests_per_claim: f64,
    /// The same by verb and resource ("create persistentvolumes", …).
    requests_by_kind: Vec<(String, f64)>,
    cpu_s: f64,
    /// CPU seconds by thread name over the same window ("exited threads":
    /// what threads that ended before the window closed used).
    cpu_by_thread: Vec<(String, f64)>,
    peak_rss_mib: f64,
}

/// The first argument that makes this program a native host (below).
const NATIVE_HOST: &str = "--native-host";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(NATIVE_HOST) {
        return native_host(&args[2..]);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

/// wasmprov's lifecycle with the hostpath logic as native Rust instead of
/// the Wasm plugin: what `wasmprov run` would be without the sandbox. Run
/// as a process of its own (this program, re-executed), so it is measured
/// like the others. Arguments: kubeconfig, provisioner name, root, QPS,
/// burst.
fn native_host(args: &[String]) {
    let [kubeconfig, provisioner, root, qps, burst] = args else {
        panic!("{NATIVE_HOST} KUBECONFIG PROVISIONER ROOT QPS BURST");
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let yaml = std::fs::read_to_string(kubeconfig).unwrap();
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let limits = wasmprov::lifecycle::ApiLimits {
            qps: qps.parse().unwrap(),
            burst: burst.parse().unwrap(),
        };
        let client = wasmprov::lifecycle::throttle::client(config, limits).unwrap();
        wasmprov::lifecycle::run(
            client,
            Arc::new(NativeHostPath(PathBuf::from(root))),
            wasmprov::lifecycle::Config::new(provisioner.as_str()),
            Arc::default(),
            std::future::pending(),
        )
        .await;
    });
}

async fn run() {
    let claims: usize = setting("BENCH_CLAIMS", 1000);
    let stream = (
        setting("BENCH_STREAM_RATE", STREAM_RATE),
        setting("BENCH_STREAM_SECONDS", STREAM_SECONDS),
    );
    let root = workspace_root();
    let plugin = root.join("target/plugins/hostpath.wasm");
    assert!(
        plugin.is_file(),
        "{} is missing: run `bash plugins/build.sh --rust-only` first",
        plugin.display()
    );
    let bin = test_cluster::binaries().unwrap_or_else(|e| panic!("{e}"));
    let work = tempfile::tempdir().unwrap();
    let contenders = [
        Contender {
            name: "go-library, client-go defaults",
            key: "go-defaults",
            kind: Kind::Go,
            qps: 5,
            burst: 10,
            share: 10,
        },
        Contender {
            name: "go-library, equal limits",
            key: "go",
            kind: Kind::Go,
            qps: QPS,
            burst: BURST,
            share: 1,
        },
        Contender {
            name: "wasmprov",
            key: "wasmprov",
            kind: Kind::Wasmprov {
                claim_finalizer: false,
            },
            qps: QPS,
            burst: BURST,
            share: 1,
        },
        Contender {
            name: "wasmprov, native provider",
            key: "native",
            kind: Kind::Native,
            qps: QPS,
            burst: BURST,
            share: 1,
        },
        Contender {
            name: "wasmprov --claim-finalizer",
            key: "finalizer",
            kind: Kind::Wasmprov {
                claim_finalizer: true,
            },
            qps: QPS,
            burst: BURST,
            share: 1,
        },
    ];
    let chosen: Vec<&Contender> = match std::env::var("BENCH_CONTENDERS") {
        Ok(keys) => keys
            .split(',')
            .map(|key| {
                contenders
                    .iter()
                    .find(|c| c.key == key.trim())
                    .unwrap_or_else(|| {
                        let known: Vec<&str> = contenders.iter().map(|c| c.key).collect();
                        panic!("BENCH_CONTENDERS: no contender {key:?}; known: {known:?}")
                    })
            })
            .collect(),
        Err(_) => contenders.iter().collect(),
    };
    let rounds: usize = setting("BENCH_ROUNDS", 1).max(1);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "versus_go: a burst of {claims} claims, then {} claims/s for {} s, over {CLASSES} classes per contender, {rounds} round(s); load average before: {}",
        stream.0,
        stream.1,
        load.trim()
    );
    let mut all_rounds = Vec::new();
    let mut run_index = 0;
    for round in 0..rounds {
        // Each round starts with the next contender, so that the control
        // plane's drift (history in etcd, caches) does not always favour
        // the same one.
        let mut order = chosen.clone();
        order.rotate_left(round % chosen.len());
        let mut results = Vec::new();
        for c in order {
            let n = (claims / c.share).max(10);
            let (cluster, client) = fresh_control_plane().await;
            let figures = measure(
                &cluster,
                &client,
                &bin,
                &plugin,
                work.path(),
                run_index,
                c,
                n,
                stream,
            )
            .await;
            run_index += 1;
            results.push((c, figures));
        }
        // Reported in a fixed order whatever order they ran in.
        results.sort_by_key(|(c, _)| chosen.iter().position(|k| k.key == c.key));
        if rounds > 1 {
            println!("\n== round {} of {rounds}", round + 1);
        }
        print_table(&results);
        all_rounds.push(results);
    }
    if rounds > 1 {
        print_spread(&all_rounds);
    }
    let results = all_rounds.pop().unwrap();
    let out = workspace_root().join("target/bench");
    std::fs::create_dir_all(&out).unwrap();
    let chart = out.join("versus-go.svg");
    std::fs::write(&chart, chart_svg(&results)).unwrap();
    println!("\nchart: {}", chart.display());
}

/// A control plane of its own for one contender's run. On one shared by all,
/// runs inherited the history of earlier ones (thousands of events and
/// deleted objects in etcd): on 2026-12-06, six runs in two rotated rounds,
/// the first run on the fresh control plane was the fastest of the six
/// (the Go library's, 78 claims/s to Bound) and the same contender's sixth
/// run 21% slower (62). Starting afresh costs seconds per run.
async fn fresh_control_plane() -> (Cluster, Client) {
    let (cluster, client) = cluster::start(Options {
        audit: true,
        // Only the contenders' requests (service accounts): auditing the
        // PV binder's and this program's too costs the API server CPU that
        // the 2 cores share with everyone.
        audit_groups: vec!["system:serviceaccounts".into()],
        // The PV binder at its default 20 QPS binds about five claims a
        // second: lifted, so the provisioners are what is measured.
        controller_manager_qps: Some(1000),
        ..Options::default()
    })
    .await;
    create(
        &Api::<Node>::all(client.clone()),
        serde_json::json!({"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}}),
    )
    .await;
    (cluster, client)
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    cluster: &Cluster,
    client: &Client,
    bin: &Path,
    plugin: &Path,
    work: &Path,
    index: usize,
    contender: &Contender,
    claims: usize,
    (stream_rate, stream_seconds): (u32, u32),
) -> Figures {
    let ns = format!("bench-{index}");
    let provisioner = format!("bench-{index}.example.com/hostpath");
    let volumes_dir = work.join(&ns);
    std::fs::create_dir_all(&volumes_dir).unwrap();
    create(
        &Api::<Namespace>::all(client.clone()),
        serde_json::json!({"metadata": {"name": ns}}),
    )
    .await;
    create(
        &Api::<ServiceAccount>::namespaced(client.clone(), &ns),
        serde_json::json!({"metadata": {"name": "provisioner"}}),
    )
    .await;
    create(
        &Api::<ClusterRoleBinding>::all(client.clone()),
        serde_json::json!({"metadata": {"name": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "provisioner", "namespace": ns}]}),
    )
    .await;
    let user = format!("system:serviceaccount:{ns}:provisioner");
    let token = cluster
        .service_account_token(&ns, "provisioner")
        .await
        .unwrap();
    let kubeconfig = work.join(format!("{ns}.kubeconfig"));
    std::fs::write(&kubeconfig, cluster.kubeconfig_with_token(&token)).unwrap();
    let root = volumes_dir.display().to_string();
    for c in 0..CLASSES {
        let parameters = match contender.kind {
            Kind::Go => serde_json::json!({}),
            Kind::Wasmprov { .. } | Kind::Native => {
                serde_json::json!({"plugin": "hostpath", "hostRoot": root})
            }
        };
        create(
            &Api::<StorageClass>::all(client.clone()),
            serde_json::json!({"metadata": {"name": format!("{ns}-{c}")},
                "provisioner": provisioner, "parameters": parameters,
                "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}),
        )
        .await;
    }
    let mut process = process::Process(spawn(
        contender,
        bin,
        plugin,
        work,
        &ns,
        &provisioner,
        &kubeconfig,
        &volumes_dir,
    ));
    let claims_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    // Ready: a first claim is Bound (not counted).
    let tracker = Tracker::watch(client.clone(), &ns);
    create_claim(&claims_api, "warmup", &format!("{ns}-0")).await;
    tracker.wait_bound(1, TIMEOUT).await;
    let (cpu0, requests0) = (cpu_seconds(process.0.id()), requests_of(cluster, &user));
    let threads0 = thread_cpu_seconds(process.0.id());
    let profile = std::env::var_os("BENCH_PERF").map(|dir| {
        Profiler::attach(
            process.0.id(),
            &Path::new(&dir).join(format!("{ns}.perf.data")),
        )
    });

    // The burst: every claim at once.
    let burst: Vec<String> = (0..claims).map(|i| format!("burst-{i:05}")).collect();
    let started = Instant::now();
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    futures::stream::iter(burst.iter().enumerate())
        .for_each_concurrent(CREATORS, |(i, name)| {
            let (api, created, ns) = (claims_api.clone(), created.clone(), ns.clone());
            async move {
                let at = Instant::now();
                create_claim(&api, name, &format!("{ns}-{}", i % CLASSES)).await;
                created.lock().unwrap().insert(name.clone(), at);
            }
        })
        .await;
    tracker.wait_bound(claims + 1, TIMEOUT).await;
    let burst_figures = Phase::of(&burst, &created.lock().unwrap(), &tracker, started);

    // The stream: a steady rate for STREAM_SECONDS.
    let rate = (stream_rate / contender.share as u32).max(1);
    let stream: Vec<String> = (0..(rate * stream_seconds) as usize)
        .map(|i| format!("stream-{i:05}"))
        .collect();
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let started = Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / rate);
    let mut creating = tokio::task::JoinSet::new();
    for (i, name) in stream.iter().enumerate() {
        ticks.tick().await;
        let (api, created, ns, name) = (
            claims_api.clone(),
            created.clone(),
            ns.clone(),
            name.clone(),
        );
        creating.spawn(async move {
            let at = Instant::now();
            create_claim(&api, &name, &format!("{ns}-{}", i % CLASSES)).await;
            created.lock().unwrap().insert(name, at);
        });
    }
    creating.join_all().await;
    tracker.wait_bound(claims + stream.len() + 1, TIMEOUT).await;
    let stream_figures = Phase::of(&stream, &created.lock().unwrap(), &tracker, started);
    let names: Vec<String> = burst.into_iter().chain(stream).collect();

    // Delete every claim; a volume is gone when its object is.
    let volume_of: HashMap<String, String> = tracker.volumes.lock().unwrap().clone();
    let deleted: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    futures::stream::iter(names.iter())
        .for_each_concurrent(CREATORS, |name| {
            let (api, deleted, volume_of) = (claims_api.clone(), deleted.clone(), &volume_of);
            async move {
                api.delete(name, &DeleteParams::default()).await.unwrap();
                deleted
                    .lock()
                    .unwrap()
                    .insert(volume_of[name].clone(), Instant::now());
            }
        })
        .await;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let names_deleted: Vec<String> = deleted.lock().unwrap().keys().cloned().collect();
    let gone_at = wait_gone(&volumes, names_deleted).await;
    let deleted = deleted.lock().unwrap().clone();
    let mut gone: Vec<Duration> = gone_at
        .iter()
        .map(|(pv, at)| at.saturating_duration_since(deleted[pv]))
        .collect();
    gone.sort();
    let cpu = cpu_seconds(process.0.id()) - cpu0;
    let cpu_by_thread = thread_cpu_delta(&threads0, &thread_cpu_seconds(process.0.id()), cpu);
    if let Some(p) = profile {
        p.finish();
    }
    let mut requests_by_kind: Vec<(String, f64)> = requests_of(cluster, &user)
        .into_iter()
        .map(|(kind, n)| {
            let before = requests0.get(&kind).copied().unwrap_or(0);
            (kind, (n - before) as f64 / names.len() as f64)
        })
        .filter(|(_, per_claim)| *per_claim > 0.0)
        .collect();
    requests_by_kind.sort_by(|a, b| b.1.total_cmp(&a.1));
    let requests: f64 = requests_by_kind.iter().map(|(_, n)| n).sum();
    let peak_rss_mib = process::status_mib(process.0.id(), "VmHWM");
    process.stop();
    Figures {
        burst: burst_figures,
        stream: stream_figures,
        stream_rate: rate,
        gone,
        requests_per_claim: requests,
        requests_by_kind,
        cpu_s: cpu,
        cpu_by_thread,
        peak_rss_mib,
    }
}

/// What one workload came to.
#[derive(Default)]
struct Phase {
    claims: usize,
    /// Claims over the time from the first create to the last Bound.
    claims_per_s: f64,
    /// Each claim's create → Bound, sorted.
    bound: Vec<Duration>,
    /// Each claim's create → its PersistentVolume created, sorted.
    provisioned: Vec<Duration>,
}

impl Phase {
    fn of(
        names: &[String],
        created: &HashMap<String, Instant>,
        tracker: &Tracker,
        started: Instant,
    ) -> Self {
        let bound_at = tracker.bound.lock().unwrap();
        let mut bound: Vec<Duration> = names.iter().map(|n| bound_at[n] - created[n]).collect();
        bound.sort();
        // A PV is seen before its claim is Bound, but the watch may deliver
        // it a moment after: every claim here is Bound, so its PV exists.
        let pv_at = tracker.provisioned.lock().unwrap();
        let mut provisioned: Vec<Duration> = names
            .iter()
            .map(|n| {
                pv_at
                    .get(n)
                    .unwrap_or(&bound_at[n])
                    .saturating_duration_since(created[n])
            })
            .collect();
        provisioned.sort();
        let last = names.iter().map(|n| bound_at[n]).max().unwrap_or(started);
        Phase {
            claims: names.len(),
            claims_per_s: names.len() as f64 / (last - started).as_secs_f64().max(1e-9),
            bound,
            provisioned,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn spawn(
    contender: &Contender,
    bin: &Path,
    plugin: &Path,
    work: &Path,
    ns: &str,
    provisioner: &str,
    kubeconfig: &Path,
    volumes_dir: &Path,
) -> Child {
    let log = std::fs::File::create(work.join(format!("{ns}.log"))).unwrap();
    let (qps, burst) = (contender.qps.to_string(), contender.burst.to_string());
    let flags = |c: &mut Command| {
        c.arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--provisioner-name")
            .arg(provisioner)
            .args(["--kube-api-qps", &qps, "--kube-api-burst", &burst]);
    };
    let mut command = match contender.kind {
        Kind::Go => {
            let mut c = Command::new(bin.join("hostpath-peer"));
            c.arg("--root").arg(volumes_dir).args(["--node", NODE]);
            flags(&mut c);
            c
        }
        Kind::Wasmprov { claim_finalizer } => {
            let plugins = work.join(format!("{ns}-plugins"));
            std::fs::create_dir_all(&plugins).unwrap();
            std::fs::copy(plugin, plugins.join("hostpath.wasm")).unwrap();
            let policy = work.join(format!("{ns}-policy.yaml"));
            std::fs::write(
                &policy,
                format!(
                    "plugins:\n  hostpath:\n    maxConcurrentCalls: 16\n    \
                     preopens: [{{host: {dir}, guest: /volumes, mode: read-write}}]\n    \
                     output: {{sources: [hostPath], paths: [{dir}]}}\n",
                    dir = volumes_dir.display()
                ),
            )
            .unwrap();
            let mut c = Command::new(env!("CARGO_BIN_EXE_wasmprov"));
            c.arg("run")
                .arg("--plugins-dir")
                .arg(&plugins)
                .arg("--policy")
                .arg(&policy)
                .args(["--leader-election", "false"])
                .args(["--metrics-address", "127.0.0.1:0", "--log", "warn"]);
            if claim_finalizer {
                c.arg("--claim-finalizer");
            }
            flags(&mut c);
            c
        }
        Kind::Native => {
            let mut c = Command::new(std::env::current_exe().unwrap());
            c.arg(NATIVE_HOST)
                .arg(kubeconfig)
                .arg(provisioner)
                .arg(volumes_dir)
                .args([&qps, &burst]);
            c
        }
    };
    command
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", contender.name))
}

/// When each claim of a namespace was first seen Bound, and its volume;
/// and when a PersistentVolume for it was first seen: the provisioner's own
/// share of claim→Bound, before the PV binder's.
struct Tracker {
    bound: Arc<Mutex<HashMap<String, Instant>>>,
    volumes: Arc<Mutex<HashMap<String, String>>>,
    provisioned: Arc<Mutex<HashMap<String, Instant>>>,
    _tasks: [tokio::task::JoinHandle<()>; 2],
}

impl Tracker {
    fn watch(client: Client, ns: &str) -> Self {
        let provisioned: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let (p, namespace) = (provisioned.clone(), ns.to_owned());
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let pv_task = tokio::spawn(async move {
            let mut events = watcher(pvs, watcher::Config::default()).boxed();
            while let Ok(Some(event)) = events.try_next().await {
                let (watcher::Event::Apply(pv) | watcher::Event::InitApply(pv)) = event else {
                    continue;
                };
                let claim = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
                if let Some(c) = claim.filter(|c| c.namespace.as_deref() == Some(&namespace)) {
                    let name = c.name.clone().unwrap_or_default();
                    p.lock().unwrap().entry(name).or_insert_with(Instant::now);
                }
            }
        });
        let api: Api<PersistentVolumeClaim> = Api::namespaced(client, ns);
        let bound: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let volumes: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let (b, v) = (bound.clone(), volumes.clone());
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Ok(Some(event)) = events.try_next().await {
                let claims = match event {
                    watcher::Event::Apply(c) | watcher::Event::InitApply(c) => vec![c],
                    _ => continue,
                };
                for c in claims {
                    let phase = c.status.as_ref().and_then(|s| s.phase.as_deref());
                    if phase == Some("Bound") {
                        let name = c.name_any();
                        b.lock()
                            .unwrap()
                            .entry(name.clone())
                            .or_insert_with(Instant::now);
                        if let Some(pv) = c.spec.as_ref().and_then(|s| s.volume_name.clone()) {
                            v.lock().unwrap().insert(name, pv);
                        }
                    }
                }
            }
        });
        Self {
            bound,
            volumes,
            provisioned,
            _tasks: [task, pv_task],
        }
    }

    async fn wait_bound(&self, n: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.bound.lock().unwrap().len() < n {
            assert!(
                Instant::now() < deadline,
                "timed out: not every claim bound"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// When each of `names` stopped existing.
async fn wait_gone(api: &Api<PersistentVolume>, names: Vec<String>) -> HashMap<String, Instant> {
    let mut left: std::collections::HashSet<String> = names.into_iter().collect();
    let mut gone = HashMap::new();
    let deadline = Instant::now() + TIMEOUT;
    while !left.is_empty() {
        assert!(Instant::now() < deadline, "timed out: volumes not deleted");
        let present: std::collections::HashSet<String> = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|pv| pv.name_any())
            .collect();
        let now = Instant::now();
        left.retain(|pv| {
            let still = present.contains(pv);
            if !still {
                gone.insert(pv.clone(), now);
            }
            still
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gone
}

async fn create<K>(api: &Api<K>, json: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(json).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

async fn create_claim(api: &Api<PersistentVolumeClaim>, name: &str, class: &str) {
    create(
        api,
        serde_json::json!({"metadata": {"name": name},
            "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
}

/// The requests `user` made so far, by verb and resource.
fn requests_of(cluster: &Cluster, user: &str) -> HashMap<String, usize> {
    let mut by_kind = HashMap::new();
    for e in cluster.audit_events().iter().filter(|e| e.user == user) {
        let resource = match e.subresource.as_str() {
            "" => e.resource.clone(),
            sub => format!("{}/{sub}", e.resource),
        };
        *by_kind.entry(format!("{} {resource}", e.verb)).or_default() += 1;
    }
    by_kind
}

/// User + system CPU of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    cpu_seconds_of(Path::new(&format!("/proc/{pid}/stat")))
}

/// User + system CPU from a `/proc/…/stat` file, in seconds.
fn cpu_seconds_of(path: &Path) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // Fields after the command (which may hold spaces) start past ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat (11 and 12 past ')'),
    // in clock ticks: Linux's USER_HZ, 100 on every architecture it runs on.
    (ticks(11) + ticks(12)) / 100.0
}

/// User + system CPU seconds of each live thread of a process, by thread
/// id: (name, seconds).
fn thread_cpu_seconds(pid: u32) -> HashMap<u32, (String, f64)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return HashMap::new();
    };
    tasks
        .filter_map(|t| {
            let t = t.ok()?;
            let tid: u32 = t.file_name().to_str()?.parse().ok()?;
            let name = std::fs::read_to_string(t.path().join("comm")).ok()?;
            let cpu = cpu_seconds_of(&t.path().join("stat"));
            Some((tid, (name.trim().to_owned(), cpu)))
        })
        .collect()
}

/// What each thread name used between two samples, largest first, with
/// what threads gone by the second sample used as "exited threads".
fn thread_cpu_delta(
    before: &HashMap<u32, (String, f64)>,
    after: &HashMap<u32, (String, f64)>,
    total: f64,
) -> Vec<(String, f64)> {
    let mut by_name: HashMap<String, f64> = HashMap::new();
    for (tid, (name, cpu)) in after {
        let base = before.get(tid).map_or(0.0, |(_, c)| *c);
        *by_name.entry(name.clone()).or_default() += cpu - base;
    }
    let live: f64 = by_name.values().sum();
    if total - live > 0.005 {
        by_name.insert("exited threads".into(), total - live);
    }
    let mut rows: Vec<(String, f64)> = by_name.into_iter().filter(|(_, c)| *c > 0.0).collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    rows
}

/// `perf record` attached to a contender for the measured window
/// (`BENCH_PERF=DIR`): `perf report -i DIR/bench-N.perf.data` then shows
/// where its CPU went.
struct Profiler(Child);

impl Profiler {
    fn attach(pid: u32, out: &Path) -> Self {
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let child = Command::new("perf")
            .args(["record", "-F", "999", "-g", "-p", &pid.to_string(), "-o"])
            .arg(out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("BENCH_PERF is set but perf did not start: {e}"));
        Self(child)
    }

    /// Stops recording (perf writes its file on SIGINT).
    fn finish(mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn print_table(results: &[(&Contender, Figures)]) {
    let reference = results
        .iter()
        .find(|(c, _)| c.name == "go-library, equal limits")
        .map(|(_, f)| f);
    println!(
        "\n| contender | API limits | burst: claims, claims/s to Bound | burst claim→Bound p50 / p99 / max | burst claim→PV created p50 / p99 | stream: offered/s, claims/s to Bound | stream claim→Bound p50 / p99 | stream claim→PV created p50 / p99 | delete→gone p50 / p99 | API requests per claim | CPU ms per claim | peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (c, f) in results {
        let claims = (f.burst.claims + f.stream.claims) as f64;
        println!(
            "| {} | {}/{} | {}, {:.1} | {:.2?} / {:.2?} / {:.2?} | {:.2?} / {:.2?} | {}, {:.1} | {:.2?} / {:.2?} | {:.2?} / {:.2?} | {:.2?} / {:.2?} | {:.1} | {:.2} | {:.0} MiB |",
            c.name,
            c.qps,
            c.burst,
            f.burst.claims,
            f.burst.claims_per_s,
            percentile(&f.burst.bound, 0.5),
            percentile(&f.burst.bound, 0.99),
            f.burst.bound.last().copied().unwrap_or_default(),
            percentile(&f.burst.provisioned, 0.5),
            percentile(&f.burst.provisioned, 0.99),
            f.stream_rate,
            f.stream.claims_per_s,
            percentile(&f.stream.bound, 0.5),
            percentile(&f.stream.bound, 0.99),
            percentile(&f.stream.provisioned, 0.5),
            percentile(&f.stream.provisioned, 0.99),
            percentile(&f.gone, 0.5),
            percentile(&f.gone, 0.99),
            f.requests_per_claim,
            f.cpu_s * 1000.0 / claims,
            f.peak_rss_mib,
        );
    }
    if let Some(go) = reference {
        let p99 = |p: &Phase| percentile(&p.bound, 0.99).as_secs_f64();
        let pv_p99 = |p: &Phase| percentile(&p.provisioned, 0.99).as_secs_f64();
        let cpu = |f: &Figures| f.cpu_s / (f.burst.claims + f.stream.claims) as f64;
        println!("\nRatios against the Go library at equal limits (same run):");
        for (c, f) in results {
            println!(
                "  {:<32} burst throughput {:>5.2}x  burst p99 {:>5.2}x  burst claim→PV p99 {:>5.2}x  stream p99 {:>5.2}x  CPU per claim {:>5.2}x",
                c.name,
                f.burst.claims_per_s / go.burst.claims_per_s,
                p99(&f.burst) / p99(&go.burst),
                pv_p99(&f.burst) / pv_p99(&go.burst),
                p99(&f.stream) / p99(&go.stream),
                cpu(f) / cpu(go),
            );
        }
    }
    println!("\nAPI requests per claim by verb and resource:");
    for (c, f) in results {
        let rows: Vec<String> = f
            .requests_by_kind
            .iter()
            .map(|(kind, n)| format!("{kind} {n:.2}"))
            .collect();
        println!("  {:<32} {}", c.name, rows.join(", "));
    }
    println!("\nCPU ms per claim by thread:");
    for (c, f) in results {
        let claims = (f.burst.claims + f.stream.claims) as f64;
        let rows: Vec<String> = f
            .cpu_by_thread
            .iter()
            .map(|(name, s)| format!("{name} {:.2}", s * 1000.0 / claims))
            .collect();
        println!("  {:<32} {}", c.name, rows.join(", "));
    }
}

/// Across rounds: each figure's median and range, and each ratio to the Go
/// library at equal limits taken within a round (both ran minutes apart on
/// the same control plane) before its median and range.
fn print_spread(rounds: &[Vec<(&Contender, Figures)>]) {
    fn spread(mut values: Vec<f64>) -> String {
        values.sort_by(f64::total_cmp);
        let median = values[values.len() / 2];
        format!(
            "{median:.2} [{:.2}–{:.2}]",
            values[0],
            values[values.len() - 1]
        )
    }
    let p99 = |p: &Phase| percentile(&p.bound, 0.99).as_secs_f64();
    println!(
        "\nOver {} rounds, median [min–max]; ratios against the Go library at equal limits in the same round:",
        rounds.len()
    );
    println!("\n| contender | burst claims/s | × Go burst throughput | × Go burst p99 | stream claims/s | × Go stream throughput | × Go stream p99 |");
    println!("|---|---|---|---|---|---|---|");
    for (c, _) in &rounds[0] {
        let mine = |round: &Vec<(&Contender, Figures)>| {
            let f = &round.iter().find(|(k, _)| k.key == c.key).unwrap().1;
            let go = round.iter().find(|(k, _)| k.key == "go").map(|(_, g)| g);
            (
                f.burst.claims_per_s,
                f.stream.claims_per_s,
                go.map(|g| {
                    [
                        f.burst.claims_per_s / g.burst.claims_per_s,
                        p99(&f.burst) / p99(&g.burst),
                        f.stream.claims_per_s / g.stream.claims_per_s,
                        p99(&f.stream) / p99(&g.stream),
                    ]
                }),
            )
        };
        let figures: Vec<_> = rounds.iter().map(mine).collect();
        let ratio = |i: usize| {
            let values: Vec<f64> = figures.iter().filter_map(|f| f.2.map(|r| r[i])).collect();
            if values.is_empty() {
                "–".to_owned()
            } else {
                spread(values)
            }
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            c.name,
            spread(figures.iter().map(|f| f.0).collect()),
            ratio(0),
            ratio(1),
            spread(figures.iter().map(|f| f.1).collect()),
            ratio(2),
            ratio(3),
        );
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The chart: per contender, the share of claims Bound within t (a CDF of
/// claim→Bound latency), and claims/s to Bound as bars. Plain SVG, so it
/// needs no font or plotting library.
fn chart_svg(results: &[(&Contender, Figures)]) -> String {
    const COLORS: &[&str] = &["#9e9e9e", "#1f77b4", "#d62728", "#ff7f0e", "#2ca02c"];
    let (w, h) = (960.0, 440.0);
    let (left, top, plot_w, plot_h) = (70.0, 40.0, 560.0, 320.0);
    let max_s = results
        .iter()
        .filter_map(|(_, f)| f.burst.bound.last())
        .map(Duration::as_secs_f64)
        .fold(0.0, f64::max)
        .max(0.001);
    let x = |s: f64| left + s / max_s * plot_w;
    let y = |share: f64| top + (1.0 - share) * plot_h;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"24\" font-size=\"14\">Burst: claims Bound within t (claim created → Bound)</text>\n"
    );
    // Axes and ticks.
    svg += &format!(
        "<path d=\"M{left},{top} V{} H{}\" stroke=\"black\" fill=\"none\"/>\n",
        top + plot_h,
        left + plot_w
    );
    for i in 0..=4 {
        let share = i as f64 / 4.0;
        let t = max_s * share;
        svg += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0}%</text>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{:.1} s</text>\n",
            left - 6.0,
            y(share) + 4.0,
            share * 100.0,
            x(t),
            top + plot_h + 18.0,
            t
        );
    }
    // One CDF line per contender, with its legend entry.
    for (i, (c, f)) in results.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let n = f.burst.bound.len().max(1) as f64;
        let points: Vec<String> = f
            .burst
            .bound
            .iter()
            .enumerate()
            .map(|(k, d)| format!("{:.1},{:.1}", x(d.as_secs_f64()), y((k + 1) as f64 / n)))
            .collect();
        svg += &format!(
            "<polyline points=\"{} {}\" stroke=\"{color}\" stroke-width=\"2\" fill=\"none\"/>\n",
            format_args!("{:.1},{:.1}", x(0.0), y(0.0)),
            points.join(" ")
        );
        let ly = top + 16.0 * i as f64 + 200.0;
        svg += &format!(
            "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"3\" fill=\"{color}\"/>\n\
             <text x=\"{}\" y=\"{}\">{} ({} claims)</text>\n",
            left + plot_w - 250.0,
            ly - 4.0,
            left + plot_w - 232.0,
            ly,
            c.name,
            f.burst.claims
        );
    }
    // Throughput bars.
    let bx = left + plot_w + 60.0;
    let bar_w = w - bx - 20.0;
    let max_rate = results
        .iter()
        .map(|(_, f)| f.burst.claims_per_s)
        .fold(0.0, f64::max)
        .max(0.001);
    svg += &format!("<text x=\"{bx}\" y=\"24\" font-size=\"14\">Burst: claims/s to Bound</text>\n");
    for (i, (_, f)) in results.iter().enumerate() {
        let by = top + 40.0 * i as f64;
        let len = f.burst.claims_per_s / max_rate * (bar_w - 50.0);
        svg += &format!(
            "<rect x=\"{bx}\" y=\"{by}\" width=\"{len:.1}\" height=\"24\" fill=\"{}\"/>\n\
             <text x=\"{:.1}\" y=\"{}\">{:.1}</text>\n",
            COLORS[i % COLORS.len()],
            bx + len + 4.0,
            by + 16.0,
            f.burst.claims_per_s
        );
    }
    svg += "</svg>\n";
    svg
}
