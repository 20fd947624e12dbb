//! `test-cluster`: starts the real control plane (and with `--node` a real
//! node) for a person, prints how to point kubectl and `wasmprov run` at it,
//! and stops it on Ctrl-C.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// Start a Kubernetes control plane (etcd, kube-apiserver,
/// kube-controller-manager, kube-scheduler) on loopback, built from source
/// on first use (tests/cluster/build.sh: about 8 minutes once, then cached).
#[derive(Parser)]
#[command(name = "test-cluster")]
struct Args {
    /// Directory for the cluster's data, keys, kubeconfig and logs
    /// [default: target/test-cluster]
    #[arg(long)]
    dir: Option<PathBuf>,
    /// How long a pod waits for its WaitForFirstConsumer claims to bind
    /// before the scheduler tries again (VolumeBinding bindTimeoutSeconds)
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    bind_timeout: Duration,
    /// Also start a node (containerd, kubelet, kube-proxy) that runs pods;
    /// needs root, Debian's runc and containernetworking-plugins
    #[arg(long)]
    node: bool,
    /// An OCI image tarball to load into the node (repeatable), e.g. what
    /// `deploy/image/build.sh` makes; implies --node
    #[arg(long = "image", value_name = "TARBALL")]
    images: Vec<PathBuf>,
    /// Start this many nodes (implies --node); with more than one, each
    /// has its own /var/lib/wasmprov (a directory of its own in a mount
    /// namespace of its own), as real nodes do
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=8))]
    nodes: u8,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = args
        .dir
        .unwrap_or_else(|| test_cluster::target_dir().join("test-cluster"));
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    eprintln!("starting the control plane in {}", dir.display());
    let cluster = test_cluster::Cluster::start(test_cluster::Options {
        dir: Some(dir),
        bind_timeout: args.bind_timeout,
        node: (args.node || !args.images.is_empty() || args.nodes > 1).then(|| {
            test_cluster::NodeOptions {
                images: args.images.clone(),
                count: args.nodes.into(),
                private_paths: if args.nodes > 1 {
                    vec![PathBuf::from("/var/lib/wasmprov")]
                } else {
                    Vec::new()
                },
            }
        }),
        ..Default::default()
    })?;
    let kubeconfig = cluster.kubeconfig_path().display();
    println!(
        "control plane ready at {} in {:.1} s; logs in {}",
        cluster.url(),
        cluster.started_in().as_secs_f64(),
        cluster.dir().join("logs").display()
    );
    println!();
    println!("  export KUBECONFIG={kubeconfig}");
    println!("  kubectl get --raw /version");
    for name in cluster.node_names() {
        if args.nodes > 1 {
            println!(
                "  # node {name}'s /var/lib/wasmprov, from this machine: {}",
                cluster
                    .node_view(&name, std::path::Path::new("/var/lib/wasmprov"))
                    .display()
            );
        }
    }
    println!("  cargo run -p wasmprov -- run --kubeconfig {kubeconfig} --plugins-dir target/plugins --metrics-address 127.0.0.1:8080");
    println!();
    println!("Ctrl-C stops it.");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                r = tokio::signal::ctrl_c() => r,
                _ = term.recv() => Ok(()),
            }
        })?;
    eprintln!("stopping");
    cluster.stop();
    Ok(())
}
