//! Simulator throughput: PV creates/s through kube-rs with watchers attached,
//! and watch fan-out (1 vs 10 watchers). Run with
//! `cargo bench -p kube-sim --bench throughput`; `KUBE_SIM_BENCH_N` sets the
//! number of creates per scenario (default 20000).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::Api;
use serde_json::json;

const CONCURRENCY: usize = 32;

fn pv(name: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"bench": "yes"}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "bench",
            "hostPath": {"path": format!("/tmp/{name}")}
        }
    }))
    .expect("valid pv")
}

struct Outcome {
    creates_per_s: f64,
    /// Time until every watcher had seen every create.
    all_seen: Duration,
    events_per_s: f64,
}

/// How watchers consume the stream.
#[derive(Clone, Copy, PartialEq)]
enum Watchers {
    /// kube-rs `watcher()`: every event decoded into a typed PersistentVolume.
    KubeRs,
    /// Raw HTTP: ADDED lines counted, nothing decoded (the simulator's own fan-out cost).
    Raw,
}

/// A raw watch over its own connection, counting ADDED events into `counter`.
async fn raw_watch(
    addr: std::net::SocketAddr,
    rv: String,
    counter: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "GET /api/v1/persistentvolumes?watch=true&resourceVersion={rv}&timeoutSeconds=600 HTTP/1.1\r\nHost: bench\r\n\r\n"
    );
    conn.write_all(req.as_bytes()).await.expect("send watch");
    let mut buf = vec![0u8; 64 * 1024];
    // Wait for the response head: the watch is registered before it is sent.
    let first = conn.read(&mut buf).await.expect("watch response");
    assert!(buf[..first].starts_with(b"HTTP/1.1 200"), "watch accepted");
    tokio::spawn(async move {
        const NEEDLE: &[u8] = b"{\"type\":\"ADDED\"";
        let mut carry: Vec<u8> = buf[..first].to_vec();
        loop {
            let hits = carry.windows(NEEDLE.len()).filter(|w| *w == NEEDLE).count();
            counter.fetch_add(hits, Ordering::Relaxed);
            // Keep a tail shorter than the needle: a match cannot be counted twice.
            let keep = carry.len().saturating_sub(NEEDLE.len() - 1);
            carry.drain(..keep);
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(k) => carry.extend_from_slice(&buf[..k]),
            }
        }
    })
}

async fn scenario(n: usize, watchers: usize, kind: Watchers, controllers: bool) -> Outcome {
    let mut config = kube_sim::Config {
        history_window: n * 3,
        ..kube_sim::Config::default()
    };
    if !controllers {
        config.controllers = kube_sim::ControllerConfig {
            pv_binder: false,
            provisioner_annotations: false,
            protection: false,
            namespace: false,
            ..kube_sim::ControllerConfig::default()
        };
    }
    let sim = kube_sim::Simulator::start(config)
        .await
        .expect("simulator starts");
    let client = sim.client().expect("client");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());

    let seen: Vec<Arc<AtomicUsize>> = (0..watchers)
        .map(|_| Arc::new(AtomicUsize::new(0)))
        .collect();
    let mut tasks = Vec::new();
    if kind == Watchers::Raw {
        let rv = pvs
            .list(&kube::api::ListParams::default().limit(1))
            .await
            .expect("list")
            .metadata
            .resource_version
            .unwrap_or_default();
        for counter in &seen {
            tasks.push(raw_watch(sim.addr(), rv.clone(), counter.clone()).await);
        }
    }
    for counter in seen.iter().filter(|_| kind == Watchers::KubeRs) {
        let counter = counter.clone();
        // Each watcher has its own client (own connection), like separate controllers.
        let api: Api<PersistentVolume> = Api::all(sim.client().expect("client"));
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        // Wait for the initial list so the watch is established before we start.
        loop {
            if let Ok(Some(watcher::Event::InitDone)) = stream.try_next().await {
                break;
            }
        }
        tasks.push(tokio::spawn(async move {
            while let Some(ev) = stream.next().await {
                if let Ok(watcher::Event::Apply(pv)) = ev {
                    // Count first sightings only: creates are ADDED once, controller writes are MODIFIED.
                    if pv.metadata.resource_version.is_some()
                        && pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
                    {
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }

    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for _ in 0..CONCURRENCY {
        let pvs = pvs.clone();
        let next = next.clone();
        writers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                pvs.create(&PostParams::default(), &pv(&format!("pv-{i:06}")))
                    .await
                    .expect("create pv");
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    let created = start.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.iter().any(|c| c.load(Ordering::Relaxed) < n) {
        assert!(Instant::now() < deadline, "watchers did not catch up");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let all_seen = start.elapsed();
    for t in tasks {
        t.abort();
    }
    sim.shutdown().await;
    Outcome {
        creates_per_s: n as f64 / created.as_secs_f64(),
        all_seen,
        events_per_s: (n * watchers) as f64 / all_seen.as_secs_f64(),
    }
}

fn main() {
    let n: usize = std::env::var("KUBE_SIM_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    println!("kube-sim throughput: {n} PV creates per scenario, {CONCURRENCY} concurrent kube-rs writers, client and server in one process");
    println!();
    println!("| scenario | creates/s | all watchers caught up after | watch events delivered/s | creates/s vs. 1 watcher of the same kind |");
    println!("|---|---:|---:|---:|---:|");
    let mut base = None;
    for (label, watchers, kind, controllers) in [
        (
            "1 kube-rs watcher, controllers off",
            1,
            Watchers::KubeRs,
            false,
        ),
        (
            "1 kube-rs watcher, controllers on",
            1,
            Watchers::KubeRs,
            true,
        ),
        (
            "10 kube-rs watchers, controllers on",
            10,
            Watchers::KubeRs,
            true,
        ),
        ("1 raw watcher, controllers on", 1, Watchers::Raw, true),
        ("10 raw watchers, controllers on", 10, Watchers::Raw, true),
    ] {
        let o = rt.block_on(scenario(n, watchers, kind, controllers));
        let ratio = if watchers == 1 && controllers {
            base = Some(o.creates_per_s);
            "1.00".to_string()
        } else if watchers == 1 {
            String::new()
        } else {
            base.map(|b| format!("{:.2}", o.creates_per_s / b))
                .unwrap_or_default()
        };
        println!(
            "| {label} | {:.0} | {:.2} s | {:.0} | {ratio} |",
            o.creates_per_s,
            o.all_seen.as_secs_f64(),
            o.events_per_s
        );
    }
}
