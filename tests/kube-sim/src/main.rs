//! `kube-sim`: run the simulated Kubernetes API server standalone.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "kube-sim",
    about = "A simulated Kubernetes API server on loopback (for tests and development)"
)]
struct Args {
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Watch events retained; watches from older resourceVersions get 410 Gone.
    #[arg(long, default_value_t = 10_000)]
    history: usize,
    /// Seed for generated names, uids and fault injection.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Kubernetes minor version to report (1.N); the preinstalled kubectl dispatcher follows it.
    #[arg(long, default_value_t = 33)]
    minor_version: u32,
    /// Where to write a kubeconfig for this server (optional).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = kube_sim::Config {
        bind: SocketAddr::from(([127, 0, 0, 1], args.port)),
        history_window: args.history,
        seed: args.seed,
        minor_version: args.minor_version,
        ..kube_sim::Config::default()
    };
    let sim = kube_sim::Simulator::start(config)
        .await
        .context("starting the simulated API server")?;
    println!("kube-sim listening on {}", sim.url());
    match &args.kubeconfig {
        Some(path) => {
            std::fs::write(path, sim.kubeconfig())
                .with_context(|| format!("writing kubeconfig {}", path.display()))?;
            println!("try: kubectl --kubeconfig {} get pvc,pv,sc", path.display());
        }
        None => println!("try: kubectl --server {} get pvc,pv,sc", sim.url()),
    }
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    sim.shutdown().await;
    Ok(())
}
