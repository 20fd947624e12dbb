//! Every fault switch, observed through kube-rs.

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use kube_sim::{FailWith, FailureRule};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}),
    )
    .unwrap()
}

/// One GET over a fresh connection; returns the whole response text.
async fn raw_get(sim: &kube_sim::Simulator, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

fn api(sim: &kube_sim::Simulator) -> Api<ConfigMap> {
    Api::namespaced(sim.client().unwrap(), "default")
}

#[tokio::test]
async fn failing_requests_by_verb_and_resource() {
    let sim = start().await;
    let cms = api(&sim);
    sim.faults().fail_requests(
        FailureRule::new(1.0, FailWith::Internal)
            .verbs(&["create"])
            .resources(&["configmaps"]),
    );
    let err = status_of(
        cms.create(&PostParams::default(), &cm("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    // Other verbs and resources are untouched.
    cms.list(&ListParams::default()).await.unwrap();
    sim.faults().clear();
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();

    sim.faults()
        .fail_requests(FailureRule::new(1.0, FailWith::TooManyRequests).verbs(&["get"]));
    // Raw HTTP: kube's client would retry 429s with backoff.
    let head = raw_get(&sim, "/api/v1/namespaces/default/configmaps/a").await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    sim.faults().clear();

    sim.faults()
        .fail_requests(FailureRule::new(1.0, FailWith::Conflict).verbs(&["patch", "update"]));
    let err = status_of(
        cms.replace("a", &PostParams::default(), &cms.get("a").await.unwrap())
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert_eq!(sim.faults().stats().failed_requests, 3);
}

/// Outcome pattern of 40 gets under a 30 % failure rule.
async fn pattern(seed: u64) -> Vec<bool> {
    let sim = start_with(kube_sim::Config {
        seed,
        ..kube_sim::Config::default()
    })
    .await;
    let cms = api(&sim);
    cms.create(&PostParams::default(), &cm("x")).await.unwrap();
    sim.faults()
        .fail_requests(FailureRule::new(0.3, FailWith::Internal).verbs(&["get"]));
    let mut out = Vec::new();
    for _ in 0..40 {
        out.push(cms.get("x").await.is_ok());
    }
    out
}

#[tokio::test]
async fn failures_are_deterministic_for_a_seed() {
    let a = pattern(7).await;
    assert_eq!(a, pattern(7).await);
    let failed = a.iter().filter(|ok| !**ok).count();
    assert!(
        (4..=20).contains(&failed),
        "about 30 % fail, got {failed}/40"
    );
    assert_ne!(a, pattern(8).await, "another seed, another pattern");
}

#[tokio::test]
async fn latency_delays_requests() {
    let sim = start().await;
    let cms = api(&sim);
    sim.faults().set_latency(Duration::from_millis(150));
    let t = Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(150));
    sim.faults().set_latency(Duration::ZERO);
    let t = Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    assert!(t.elapsed() < Duration::from_millis(150));
}

#[tokio::test]
async fn pause_holds_requests_until_resume() {
    let sim = start().await;
    let cms = api(&sim);
    sim.faults().pause();
    let pending = tokio::spawn({
        let cms = cms.clone();
        async move { cms.create(&PostParams::default(), &cm("late")).await }
    });
    // Nothing gets through while paused.
    assert!(tokio::time::timeout(Duration::from_millis(300), async {
        while sim
            .registry()
            .get(kube_sim::resources::CONFIG_MAP, "default", "late")
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_err());
    sim.faults().resume();
    let created = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(created.name_any(), "late");
}

#[tokio::test]
async fn compacted_history_makes_rewatch_expire() {
    let sim = start().await;
    let cms = api(&sim);
    let a = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    // Before compaction the history is there...
    let mut s = cms
        .watch(
            &WatchParams::default().timeout(5),
            &a.resource_version().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    assert!(matches!(s.next().await, Some(Ok(WatchEvent::Added(o))) if o.name_any() == "b"));
    // ...after it, the same request gets an in-stream 410.
    sim.faults().compact_history();
    let mut s = cms
        .watch(
            &WatchParams::default().timeout(5),
            &a.resource_version().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    assert!(matches!(s.next().await, Some(Ok(WatchEvent::Error(e))) if e.code == 410));
}

#[tokio::test]
async fn watches_can_be_dropped_or_closed_every_nth() {
    let sim = start().await;
    let cms = api(&sim);
    let list = cms.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();

    // drop_watches ends open streams cleanly.
    let mut s = cms
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .unwrap()
        .boxed();
    sim.faults().drop_watches();
    let end = tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("stream ends promptly");
    assert!(end.is_none(), "clean end of stream, got {end:?}");

    // Open streams are selected too when the switch is set (n = 1: all of them).
    let mut open = cms
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .unwrap()
        .boxed();
    sim.faults().close_every_nth_watch(1);
    let end = tokio::time::timeout(Duration::from_secs(5), open.next())
        .await
        .expect("open stream cut");
    assert!(end.is_none(), "clean end of stream, got {end:?}");

    // New watches are closed right away: the stream ends after its backlog.
    cms.create(&PostParams::default(), &cm("one"))
        .await
        .unwrap();
    let mut s = cms
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .unwrap()
        .boxed();
    assert!(matches!(s.next().await, Some(Ok(WatchEvent::Added(_)))));
    assert!(tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .unwrap()
        .is_none());

    // A kube-rs watcher keeps up when every second watch is cut.
    sim.faults().close_every_nth_watch(2);
    let mut w = watcher(cms.clone(), watcher::Config::default()).boxed();
    loop {
        if let Some(watcher::Event::InitDone) = w.try_next().await.unwrap() {
            break;
        }
    }
    for i in 0..5 {
        cms.create(&PostParams::default(), &cm(&format!("n{i}")))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < 5 {
        let ev = tokio::time::timeout(Duration::from_secs(10), w.try_next())
            .await
            .expect("event in time");
        if let Ok(Some(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) = ev {
            let n = o.name_any();
            if n.starts_with('n') && !seen.contains(&n) {
                seen.push(n);
            }
        }
    }
    assert!(sim.faults().stats().closed_watches >= 2);
}

#[tokio::test]
async fn reflector_converges_under_combined_faults() {
    use kube::runtime::{reflector, WatchStreamExt};
    let sim = start().await;
    let cms = api(&sim);
    for i in 0..5 {
        cms.create(&PostParams::default(), &cm(&format!("before-{i}")))
            .await
            .unwrap();
    }
    // A third of the lists fail, every third watch is cut, history is compacted.
    sim.faults()
        .fail_requests(FailureRule::new(0.3, FailWith::Internal).verbs(&["list"]));
    sim.faults().close_every_nth_watch(3);
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector(writer, watcher(cms.clone(), watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    for i in 0..10 {
        cms.create(&PostParams::default(), &cm(&format!("during-{i}")))
            .await
            .unwrap();
        if i == 5 {
            sim.faults().compact_history();
            sim.faults().drop_watches();
        }
    }
    eventually("reflector holds all 15 configmaps", || {
        let n = reader.state().len();
        async move { (n == 15).then_some(()) }
    })
    .await;
    assert!(sim.faults().stats().failed_requests > 0 || sim.faults().stats().closed_watches > 0);
    task.abort();
}

#[tokio::test]
async fn pause_freezes_the_controllers_too() {
    use k8s_openapi::api::core::v1::PersistentVolume;
    let sim = start().await;
    let pvs: Api<PersistentVolume> = Api::all(sim.client().unwrap());
    sim.faults().pause();
    // Written directly (no HTTP): the PV controller must not move it to Available while paused.
    let v = serde_json::to_value(pv("frozen", "manual", "1Gi")).unwrap();
    sim.registry()
        .create(kube_sim::resources::PV, "", v, &Default::default())
        .unwrap();
    let phase = || {
        let obj = sim
            .registry()
            .get(kube_sim::resources::PV, "", "frozen")
            .unwrap();
        obj["status"]["phase"].as_str().unwrap_or("").to_string()
    };
    let changed = tokio::time::timeout(Duration::from_millis(300), async {
        while phase() == "Pending" {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        changed.is_err(),
        "controllers stood still while paused, phase {}",
        phase()
    );
    sim.faults().resume();
    eventually("Available after resume", || {
        let pvs = pvs.clone();
        async move {
            (pvs.get("frozen").await.ok()?.status?.phase.as_deref() == Some("Available"))
                .then_some(())
        }
    })
    .await;
}
