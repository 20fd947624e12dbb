//! `wasmprov dev`: the whole system on one machine, no cluster needed. Starts
//! the simulated API server, loads the bundled plugins, creates the sample
//! StorageClasses and claims from `deploy/examples/`, and shows each claim
//! go from Pending to Bound.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use super::run::{serve_plugins, shutdown_signal, LifecycleArgs};
use super::RuntimeArgs;
use crate::lifecycle;
use crate::ops::{self, Ops};

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
        Some(d) => d.clone(),
        None => {
            _temp = tempfile::Builder::new().prefix("wasmprov-dev-").tempdir()?;
            _temp.path().to_owned()
        }
    };
    let host_root = data_dir.join("hostpath");
    std::fs::create_dir_all(&host_root)
        .with_context(|| format!("cannot create {}", host_root.display()))?;
    let policy_file = data_dir.join("policy.yaml");
    std::fs::write(
        &policy_file,
        format!(
            "plugins:\n  hostpath:\n    preopens:\n      - {{host: {}, guest: /volumes, mode: read-write}}\n",
            host_root.display()
        ),
    )?;

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
        },
        ops.metrics.clone(),
    )
    .await?;
    let mut config = args.lifecycle.config();
    config.retry_base = Duration::from_millis(500);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // The lifecycle keeps to --kube-api-qps/--kube-api-burst, as in `run`.
    let lifecycle_client = lifecycle::throttle::client(
        kube::Config::new(sim.url().parse()?),
        args.lifecycle.api_limits(),
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
    for yaml in SAMPLE_CLASSES {
        let mut class: StorageClass = serde_yaml::from_str(yaml)?;
        class.provisioner = args.lifecycle.provisioner_name.clone();
        if let Some(p) = class.parameters.as_mut() {
            p.insert("hostRoot".into(), host_root.display().to_string());
        }
        if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") {
            wffc_classes.push(class.name_any());
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
    println!(
        "  try:      kubectl --server {} get storageclass,pvc,pv",
        sim.url()
    );
    println!(
        "            kubectl --server {} apply -f deploy/examples/pvc.yaml   # edit the name first",
        sim.url()
    );
    println!("  (or: export KUBECONFIG={})", kubeconfig.display());

    let outcome = tokio::select! {
        r = follow_claims(&client, &sim, &wffc_classes, &samples, args.exit_when_bound) => r,
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

/// Prints claims as they change; acts as the scheduler for
/// WaitForFirstConsumer claims (they go to the one node).
async fn follow_claims(
    client: &kube::Client,
    sim: &kube_sim::Simulator,
    wffc_classes: &[String],
    samples: &[(String, String)],
    exit_when_bound: bool,
) -> anyhow::Result<ExitCode> {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let mut phases: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut stream = watcher(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        watcher::Config::default(),
    )
    .boxed();
    let deadline = tokio::time::sleep(Duration::from_secs(120));
    tokio::pin!(deadline);
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = &mut deadline, if exit_when_bound => {
                eprintln!("error: the sample claims were not Bound within 120 s");
                return Ok(ExitCode::FAILURE);
            }
        };
        let Some(event) = event else { break };
        let claim = match event {
            Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => c,
            Ok(watcher::Event::Delete(c)) => {
                println!(
                    "claim {}/{}: deleted",
                    c.namespace().unwrap_or_default(),
                    c.name_any()
                );
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "claim watch");
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
                let path = volumes
                    .get_opt(&pv_name)
                    .await?
                    .and_then(|pv| pv.spec?.host_path.map(|h| h.path))
                    .unwrap_or_default();
                println!(
                    "claim {}/{}: Bound to {pv_name} (directory {path})",
                    key.0, key.1
                );
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
