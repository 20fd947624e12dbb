//! Leader election against a Lease held by another replica whose clock is
//! wrong, and under write conflicts: what decides who leads is what this
//! replica observes, never the other machine's clock.

#[macro_use]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use kube::{Api, Client};
use support::*;
use wasmprov::leader::{run_as_leader, LeaseConfig};

const NAMESPACE: &str = "default";
const LEASE: &str = "wasmprov.io-host";

on_both_servers!(
    a_live_leader_with_a_slow_clock_keeps_the_lease,
    a_dead_leader_with_a_fast_clock_is_replaced_after_the_lease_duration,
);

fn config() -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
        ..LeaseConfig::new(NAMESPACE, LEASE, "candidate")
    }
}

/// Writes the lease as held by `other`, renewed at `renewed` by its clock.
async fn hold_as_other(leases: &Api<Lease>, renewed: Timestamp) {
    let spec = LeaseSpec {
        holder_identity: Some("other".into()),
        lease_duration_seconds: Some(2),
        renew_time: Some(MicroTime(renewed)),
        acquire_time: Some(MicroTime(renewed)),
        ..Default::default()
    };
    match leases.get_opt(LEASE).await.unwrap() {
        Some(mut lease) => {
            lease.spec = Some(spec);
            leases
                .replace(LEASE, &PostParams::default(), &lease)
                .await
                .unwrap();
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE.into()),
                    ..Default::default()
                },
                spec: Some(spec),
            };
            leases.create(&PostParams::default(), &lease).await.unwrap();
        }
    }
}

/// A server of the kind asked for, with an admin client.
async fn api(server: Server) -> (TestApi, Client) {
    TestApi::start(
        server,
        &[],
        kube_sim::Config::default(),
        test_cluster::Options::default(),
    )
    .await
}

/// Starts the candidate; the flag says whether it leads.
fn candidate(client: Client, config: LeaseConfig) -> Arc<AtomicBool> {
    let leading = Arc::new(AtomicBool::new(false));
    let flag = leading.clone();
    tokio::spawn(async move {
        let _ = run_as_leader(
            client,
            config,
            move |l| flag.store(l, Ordering::SeqCst),
            std::future::pending::<()>(),
        )
        .await;
    });
    leading
}

async fn a_live_leader_with_a_slow_clock_keeps_the_lease(server: Server) {
    let (_api, client) = api(server).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    // The other replica renews every 300 ms, but its clock is an hour slow:
    // by our clock its lease expired long ago.
    let an_hour = SignedDuration::from_hours(1);
    hold_as_other(&leases, Timestamp::now() - an_hour).await;
    let renewing = Arc::new(AtomicBool::new(true));
    let renewer = {
        let (leases, renewing) = (leases.clone(), renewing.clone());
        tokio::spawn(async move {
            while renewing.load(Ordering::SeqCst) {
                hold_as_other(&leases, Timestamp::now() - an_hour).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let leading = candidate(client, config());
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !leading.load(Ordering::SeqCst),
        "took a lease that its holder keeps renewing: two leaders"
    );
    // Once the other replica stops, the lease is ours after its duration.
    renewing.store(false, Ordering::SeqCst);
    renewer.await.unwrap();
    eventually("the candidate leads", || async {
        leading.load(Ordering::SeqCst).then_some(())
    })
    .await;
}

async fn a_dead_leader_with_a_fast_clock_is_replaced_after_the_lease_duration(server: Server) {
    let (_api, client) = api(server).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    // Its last renewal claims to be an hour in the future: by its clock the
    // lease would stay valid for an hour after it died.
    hold_as_other(&leases, Timestamp::now() + SignedDuration::from_hours(1)).await;
    let started = Instant::now();
    let leading = candidate(client, config());
    eventually("the candidate leads", || async {
        leading.load(Ordering::SeqCst).then_some(())
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "waited the lease duration first: {:?}",
        started.elapsed()
    );
    let lease = leases.get(LEASE).await.unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("candidate")
    );
}

/// Simulator only: half of the lease writes get a 409 Conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_keeps_the_lease_through_write_conflicts() {
    let sim = kube_sim::Simulator::start(kube_sim::Config::default())
        .await
        .unwrap();
    let client = sim.client().unwrap();
    let leading = candidate(client, config());
    eventually("the candidate leads", || async {
        leading.load(Ordering::SeqCst).then_some(())
    })
    .await;
    sim.faults().fail_requests(
        kube_sim::FailureRule::new(0.5, kube_sim::FailWith::Conflict)
            .verbs(&["update"])
            .resources(&["leases"]),
    );
    // About 20 renewals, half of them conflicts: a conflict is read again
    // and retried, not taken for a lost lease.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            leading.load(Ordering::SeqCst),
            "gave up leadership over a write conflict"
        );
    }
    assert!(sim.faults().stats().failed_requests >= 5);
}
