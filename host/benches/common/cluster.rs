//! A real control plane (tests/cluster) for a benchmark.

use kube::Client;
use test_cluster::{Cluster, Options};

/// Starts a control plane with `options` (off the async runtime: it blocks
/// for seconds) and a client of it; panics, saying why, if it cannot.
pub async fn start(options: Options) -> (Cluster, Client) {
    let cluster = tokio::task::spawn_blocking(move || Cluster::start(options))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().await.unwrap();
    (cluster, client)
}
