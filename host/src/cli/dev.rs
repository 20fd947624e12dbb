//! `wasmprov dev`: the whole system on one machine, no cluster needed. Starts
//! the simulated API server, loads the bundled plugins, creates the sample
//! StorageClasses and claims from `deploy/examples/`, and shows each claim
//! go from Pending to Bound, why it stays Pending (the host's Warning
//! events), and its volume and directory going away when it is deleted.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use super::run::{serve_plugins, shutdown_signal, LifecycleArgs};
use super::RuntimeArgs;
use crate::lifecycle;
use crate::ops::{self, Ops};
use crate::policy::RunsOn;

const SAMPLE_CLASSES: [&str; 2] = [
    include_str!("../../../deploy/examples/sc.yaml"),
    include_str!("../../../deploy/examples/sc-wffc.yaml"),
];
const SAMPLE_CLAIMS: [&str; 2] = [
    include_str!("../../../deploy/examples/pvc.yaml"),
    include_str!("../../../deploy/examples/pvc-wffc.yaml"),
];
/// The simulated cluster's only node; WaitForFirstConsumer claims go there.
const NODE: &str = "worker-1";

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Port of the simulated API server (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Directory for the volumes the hostpath plugin creates
    /// [default: a new temporary directory].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Directory of plugins [default: target/plugins, built by plugins/build.sh if missing].
    #[arg(long, value_name = "DIR")]
    pub plugins_dir: Option<PathBuf>,
    /// Directory for compiled components, so the next start skips compilation
    /// [default: ~/.cache/wasmprov/compiled].
    #[arg(long, value_name = "DIR", env = "WASMPROV_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Memory one plugin's compilation may use (as for `run`).
    #[arg(long, value_name = "QUANTITY", default_value = "512Mi", value_parser = super::parse_memory, env = "WASMPROV_COMPILE_MEMORY_LIMIT")]
    pub compile_memory_limit: u64,
    /// Time one plugin's compilation may take (as for `run`).
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = humantime::parse_duration, env = "WASMPROV_COMPILE_TIMEOUT")]
    pub compile_timeout: std::time::Duration,
    /// Address of the /metrics, /healthz and /readyz endpoints.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub metrics_address: std::net::SocketAddr,
    /// Exit once the sample claims are Bound (for scripts and tests) instead of serving.
    #[arg(long)]
    pub exit_when_bound: bool,
    #[command(flatten)]
    pub lifecycle: LifecycleArgs,
}

pub async fn run(args: DevArgs) -> anyhow::Result<ExitCode> {
    let plugins_dir = match &args.plugins_dir {
        Some(dir) => dir.clone(),
        None => bundled_plugins()?,
    };
    let _temp;
    let data_dir = match &args.data_dir {
        // Absolute, so that the printed paths work from any directory.
        Some(d) => {
            std::path::absolute(d).with_context(|| format!("cannot resolve {}", d.display()))?
        }
        None => {
            _temp = tempfile::Builder::new().prefix("wasmprov-dev-").tempdir()?;
            _temp.path().to_owned()
        }
    };
    let host_root = data_dir.join("hostpath");
    std::fs::create_dir_all(&host_root)
        .with_context(|| format!("cannot create {}", host_root.display()))?;
    let policy_file = data_dir.join("policy.yaml");
    // The hostpath plugins (Rust and its Go twin) manage the same directory.
    let mut policy = String::from("plugins:\n");
    for plugin in ["hostpath", "hostpath-go"] {
        policy += &format!(
            "  {plugin}:\n    preopens:\n      - {{host: {root}, guest: /volumes, mode: read-write}}\n    \
             recordParameters: [hostRoot, root]\n    \
             output: {{sources: [hostPath], paths: [{root}]}}\n",
            root = host_root.display()
        );
    }
    std::fs::write(&policy_file, policy)?;

    let sim = kube_sim::Simulator::start(kube_sim::Config {
        bind: ([127, 0, 0, 1], args.port).into(),
        nodes: vec![NODE.to_owned()],
        ..kube_sim::Config::default()
    })
    .await?;
    let client = sim.client()?;
    let kubeconfig = data_dir.join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig())?;

    let ops = Arc::new(Ops::default());
    let ops_listener = ops::bind(args.metrics_address).await?;
    let metrics_address = ops_listener.local_addr()?;
    let ops_server = tokio::spawn(ops::serve(ops_listener, ops.clone()));
    let registry = serve_plugins(
        Some(&plugins_dir),
        None,
        &RuntimeArgs {
            policy: Some(policy_file),
            cache_dir: args.cache_dir.clone(),
            no_cache: false,
            compile_memory_limit: args.compile_memory_limit,
            compile_timeout: args.compile_timeout,
            compiler: None,
        },
        RunsOn::Central,
        ops.metrics.clone(),
    )
    .await?;
    let mut config = args.lifecycle.config(false)?;
    // A plugin author is watching: retry failures within seconds, not the
    // production defaults' minutes.
    config.retry_base = Duration::from_millis(500);
    config.max_retry = Duration::from_secs(30);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // The lifecycle keeps to --kube-api-qps/--kube-api-burst and
    // --kube-api-timeout, as in `run`.
    let lifecycle_client = lifecycle::throttle::client_with_timeout(
        kube::Config::new(sim.url().parse()?),
        args.lifecycle.api_limits(),
        args.lifecycle.api_timeout(),
    )?;
    let lifecycle_task = tokio::spawn(lifecycle::run(
        lifecycle_client,
        registry,
        config,
        ops.metrics.clone(),
        async move {
            let _ = stop_rx.await;
        },
    ));

    // Sample classes point at this run's data directory.
    let classes: Api<StorageClass> = Api::all(client.clone());
    let mut wffc_classes = Vec::new();
    let mut immediate_class = None;
    for yaml in SAMPLE_CLASSES {
        let mut class: StorageClass = serde_yaml::from_str(yaml)?;
        class.provisioner = args.lifecycle.provisioner_name(false);
        if let Some(p) = class.parameters.as_mut() {
            p.insert("hostRoot".into(), host_root.display().to_string());
        }
        if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") {
            wffc_classes.push(class.name_any());
        } else {
            immediate_class.get_or_insert_with(|| class.name_any());
        }
        classes.create(&PostParams::default(), &class).await?;
    }
    let mut samples = Vec::new();
    for yaml in SAMPLE_CLAIMS {
        let claim: PersistentVolumeClaim = serde_yaml::from_str(yaml)?;
        let ns = claim.namespace().unwrap_or_else(|| "default".into());
        Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &claim)
            .await?;
        samples.push((ns, claim.name_any()));
    }

    println!("wasmprov dev: simulated API server at {}", sim.url());
    ops.set_ready(true);
    println!("  plugins:  {}", plugins_dir.display());
    println!("  metrics:  http://{metrics_address}/metrics");
    println!("  volumes:  {}", host_root.display());
    // Lines to paste into another shell, from any directory: the kubeconfig
    // is an absolute path, the claim comes inline (no file to find or edit),
    // and `create` needs none of the OpenAPI that `apply` checks against.
    let class = immediate_class.context("no sample class binds immediately")?;
    println!("Create, list and delete claims from another shell (paste these lines):\n");
    println!("{}\n", try_lines(&kubeconfig, &class));
    let outcome = tokio::select! {
        r = follow(&client, &sim, &wffc_classes, &samples, args.exit_when_bound) => r,
        _ = shutdown_signal() => Ok(ExitCode::SUCCESS),
    };
    let _ = stop_tx.send(());
    let _ = lifecycle_task.await;
    ops_server.abort();
    sim.shutdown().await;
    outcome
}

/// The bundled plugins: `target/plugins` of this checkout, built if missing.
fn bundled_plugins() -> anyhow::Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("cannot locate the source checkout; pass --plugins-dir")?;
    let dir = root.join("target/plugins");
    if !dir.join("hostpath.wasm").exists() {
        println!("building the Rust plugins (bash plugins/build.sh --rust-only)…");
        let status = std::process::Command::new("bash")
            .arg(root.join("plugins/build.sh"))
            // Rust plugins need only the wasm32-wasip2 target; the others
            // need C/JS/Python toolchains a fresh machine may lack.
            .args(["--quiet", "--rust-only"])
            .current_dir(root)
            .status()
            .context("cannot run plugins/build.sh")?;
        anyhow::ensure!(
            status.success(),
            "plugins/build.sh failed; fix the error above or pass --plugins-dir"
        );
    }
    Ok(dir)
}

/// The kubectl lines `dev` prints: point kubectl at the simulated cluster,
/// create a claim `mine` of `class`, list claims and volumes, grow it,
/// delete it.
fn try_lines(kubeconfig: &Path, class: &str) -> String {
    format!(
        "export KUBECONFIG={kubeconfig}
kubectl create -f - <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: mine
spec:
  storageClassName: {class}
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
EOF
kubectl get storageclass,pvc,pv
kubectl patch pvc mine -p '{{\"spec\":{{\"resources\":{{\"requests\":{{\"storage\":\"2Gi\"}}}}}}}}'
kubectl delete pvc mine",
        kubeconfig = shell_quote(&kubeconfig.display().to_string()),
    )
}

/// `word` as one POSIX shell word.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// What the console follows: claims, volumes and events. One at a time
/// passes through, so a volume's larger size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
enum Change {
    Claim(watcher::Result<watcher::Event<PersistentVolumeClaim>>),
    Volume(watcher::Result<watcher::Event<PersistentVolume>>),
    Event(watcher::Result<watcher::Event<Event>>),
}

/// A bound claim's volume, remembered to report its removal.
struct Volume {
    claim: (String, String),
    directory: String,
    reclaim_policy: String,
}

/// Prints claims as they change, the Warning events about claims and their
/// volumes (once per distinct note: repeats only grow an event's series),
/// and a deleted claim's volume and directory going away; acts as the
/// scheduler for WaitForFirstConsumer claims (they go to the one node).
async fn follow(
    client: &kube::Client,
    sim: &kube_sim::Simulator,
    wffc_classes: &[String],
    samples: &[(String, String)],
    exit_when_bound: bool,
) -> anyhow::Result<ExitCode> {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let mut phases: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut capacities: BTreeMap<(String, String), Option<String>> = BTreeMap::new();
    let mut bound: BTreeMap<String, Volume> = BTreeMap::new();
    let mut warned: HashSet<(String, String, String)> = HashSet::new();
    let mut stream = futures::stream::select_all([
        watcher(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            watcher::Config::default(),
        )
        .map(Change::Claim)
        .boxed(),
        watcher(volumes.clone(), watcher::Config::default())
            .map(Change::Volume)
            .boxed(),
        watcher(
            Api::<Event>::all(client.clone()),
            watcher::Config::default(),
        )
        .map(Change::Event)
        .boxed(),
    ]);
    let deadline = tokio::time::sleep(Duration::from_secs(120));
    tokio::pin!(deadline);
    loop {
        let change = tokio::select! {
            c = stream.next() => c,
            _ = &mut deadline, if exit_when_bound => {
                eprintln!("error: the sample claims were not Bound within 120 s");
                return Ok(ExitCode::FAILURE);
            }
        };
        let Some(change) = change else { break };
        let claim = match change {
            Change::Claim(Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c))) => c,
            Change::Claim(Ok(watcher::Event::Delete(c))) => {
                let key = (c.namespace().unwrap_or_default(), c.name_any());
                phases.remove(&key);
                let volume = c
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .and_then(|v| bound.get_key_value(v));
                match volume {
                    Some((name, v)) if v.reclaim_policy == "Delete" => println!(
                        "claim {}/{}: deleted; removing its volume {name} and directory {}",
                        key.0, key.1, v.directory
                    ),
                    Some((name, v)) => println!(
                        "claim {}/{}: deleted; its volume {name} (directory {}) is kept: reclaim policy {}",
                        key.0, key.1, v.directory, v.reclaim_policy
                    ),
                    None => println!("claim {}/{}: deleted", key.0, key.1),
                }
                continue;
            }
            Change::Volume(Ok(watcher::Event::Apply(pv) | watcher::Event::InitApply(pv))) => {
                if let Some(v) = bound.get_mut(&pv.name_any()) {
                    v.reclaim_policy = reclaim_policy(&pv);
                }
                continue;
            }
            Change::Volume(Ok(watcher::Event::Delete(pv))) => {
                if let Some(v) = bound.remove(&pv.name_any()) {
                    let (ns, name) = &v.claim;
                    let pv = pv.name_any();
                    if Path::new(&v.directory).exists() {
                        println!(
                            "claim {ns}/{name}: volume {pv} removed; its directory {} is still there",
                            v.directory
                        );
                    } else {
                        println!(
                            "claim {ns}/{name}: volume {pv} and directory {} removed",
                            v.directory
                        );
                    }
                }
                continue;
            }
            Change::Event(Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e))) => {
                if let Some(line) = warning_line(&e, &mut warned) {
                    println!("{line}");
                }
                continue;
            }
            Change::Claim(Ok(_)) | Change::Volume(Ok(_)) | Change::Event(Ok(_)) => continue,
            Change::Claim(Err(e)) | Change::Volume(Err(e)) | Change::Event(Err(e)) => {
                tracing::warn!(error = %e, "watch for the dev console");
                continue;
            }
        };
        let key = (claim.namespace().unwrap_or_default(), claim.name_any());
        let phase = claim
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".into());
        let class = claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
            .unwrap_or_default();
        let selected = claim
            .annotations()
            .contains_key(lifecycle::decide::keys::SELECTED_NODE);
        if phase == "Pending" && !selected && wffc_classes.contains(&class) {
            println!(
                "claim {}/{}: waiting for a consumer; scheduling it to node {NODE}",
                key.0, key.1
            );
            sim.schedule_claim(&key.0, &key.1, NODE).await?;
        }
        // A bound claim whose capacity changed: its volume grew.
        let capacity = claim
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref()?.get("storage"))
            .map(|q| q.0.clone());
        if phase == "Bound" {
            let before = capacities.insert(key.clone(), capacity.clone());
            if let (Some(Some(before)), Some(now)) = (before, &capacity) {
                if before != *now {
                    println!("claim {}/{}: grown to {now} (was {before})", key.0, key.1);
                }
            }
        }
        if phases.get(&key) == Some(&phase) {
            continue;
        }
        phases.insert(key.clone(), phase.clone());
        let volume = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty());
        match (&*phase, volume) {
            ("Bound", Some(pv_name)) => {
                let pv = volumes.get_opt(&pv_name).await?;
                let path = pv
                    .as_ref()
                    .and_then(|pv| pv.spec.as_ref()?.host_path.as_ref())
                    .map(|h| h.path.clone())
                    .unwrap_or_default();
                println!(
                    "claim {}/{}: Bound to {pv_name} (directory {path})",
                    key.0, key.1
                );
                if let Some(pv) = pv {
                    bound.insert(
                        pv_name,
                        Volume {
                            claim: key.clone(),
                            directory: path,
                            reclaim_policy: reclaim_policy(&pv),
                        },
                    );
                }
            }
            (phase, _) => println!("claim {}/{}: {phase} (class {class})", key.0, key.1),
        }
        let all_bound = samples
            .iter()
            .all(|s| phases.get(s).map(String::as_str) == Some("Bound"));
        if exit_when_bound && all_bound {
            println!("all sample claims are Bound");
            return Ok(ExitCode::SUCCESS);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn reclaim_policy(pv: &PersistentVolume) -> String {
    pv.spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.clone())
        .unwrap_or_else(|| "Delete".into())
}

/// The console line of a Warning event about a claim or volume, unless a
/// line with the same object, reason and note was printed already (a
/// repeated event comes back as its series grows, or as a new event once the
/// series expired).
fn warning_line(event: &Event, warned: &mut HashSet<(String, String, String)>) -> Option<String> {
    if event.type_.as_deref() != Some("Warning") {
        return None;
    }
    let about = event.regarding.as_ref()?;
    let name = about.name.as_deref().unwrap_or_default();
    let subject = match about.kind.as_deref() {
        Some("PersistentVolumeClaim") => format!(
            "claim {}/{name}",
            about.namespace.as_deref().unwrap_or("default")
        ),
        Some("PersistentVolume") => format!("volume {name}"),
        _ => return None,
    };
    let reason = event.reason.clone().unwrap_or_default();
    let note = event.note.clone().unwrap_or_default();
    // A claim deleted and created again under its name is a new object.
    let object = about.uid.clone().unwrap_or_else(|| subject.clone());
    let line = format!("{subject}: {reason}: {note}");
    warned.insert((object, reason, note)).then_some(line)
}
