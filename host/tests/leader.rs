//! Leader election against a Lease held by another replica whose clock is
//! wrong, and under write conflicts: what decides who leads is what this
//! replica observes, never the other machine's clock. A leader that cannot
//! renew stops at its renew deadline, however the API server fails.

#[macro_use]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
    a_leader_that_cannot_reach_the_api_stops_before_its_lease_could_be_taken,
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
    timed_candidate(client, config).leading
}

/// A candidate, and when it stopped leading.
struct Candidate {
    leading: Arc<AtomicBool>,
    stopped: Arc<Mutex<Option<Instant>>>,
}

fn timed_candidate(client: Client, config: LeaseConfig) -> Candidate {
    let leading = Arc::new(AtomicBool::new(false));
    let stopped = Arc::new(Mutex::new(None));
    let (flag, when) = (leading.clone(), stopped.clone());
    tokio::spawn(async move {
        let _ = run_as_leader(
            client,
            config,
            move |l| {
                flag.store(l, Ordering::SeqCst);
                if !l {
                    *when.lock().unwrap() = Some(Instant::now());
                }
            },
            std::future::pending::<()>(),
        )
        .await;
    });
    Candidate { leading, stopped }
}

/// Timings for the renew-deadline tests: a standby could take the lease 4 s
/// after the leader's last renewal; the leader must have stopped by then.
fn deadline_config() -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(200),
        ..LeaseConfig::new(NAMESPACE, LEASE, "candidate")
    }
}

/// Waits until `c` leads, lets it renew a few times, then breaks the API
/// server with `fault`. Returns how long after the fault it stopped leading.
async fn leads_then_stops_after(
    c: &Candidate,
    config: &LeaseConfig,
    fault: impl FnOnce(),
) -> Duration {
    eventually("the candidate leads", || async {
        c.leading.load(Ordering::SeqCst).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        c.leading.load(Ordering::SeqCst),
        "leads while the API answers"
    );
    fault();
    let broken = Instant::now();
    // Without a bound on the renewal it leads until the API recovers.
    let limit = config.lease_duration + Duration::from_secs(2);
    let stopped = eventually_within(limit, "the leader stops leading", || async {
        *c.stopped.lock().unwrap()
    })
    .await;
    let took = stopped.saturating_duration_since(broken);
    eprintln!("stopped leading {took:?} after the API server broke");
    took
}

/// The leader's last renewal was at most a retry period before the fault:
/// it stops at that renewal's deadline, not later (give or take a loaded
/// machine's late timers), and never once a standby could take the lease;
/// nor does it give up at the first failed renewal.
fn stopped_at_the_renew_deadline(took: Duration, config: &LeaseConfig) {
    let slack = Duration::from_millis(300);
    assert!(
        took <= config.renew_deadline + config.retry_period + slack,
        "stopped {took:?} after the fault: later than the renew deadline ({:?})",
        config.renew_deadline
    );
    assert!(took < config.lease_duration, "two leaders: {took:?}");
    assert!(
        took + config.retry_period + slack >= config.renew_deadline,
        "gave up before the renew deadline: {took:?}"
    );
}

/// Freezes the API server (SIGSTOP for the real one) until dropped.
struct Frozen<'a>(&'a TestApi);

impl<'a> Frozen<'a> {
    fn new(api: &'a TestApi) -> Self {
        match api {
            TestApi::Simulated(sim) => sim.faults().pause(),
            TestApi::Real(cluster) => cluster.pause("kube-apiserver"),
        }
        Frozen(api)
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        match self.0 {
            TestApi::Simulated(sim) => sim.faults().resume(),
            TestApi::Real(cluster) => cluster.resume("kube-apiserver"),
        }
    }
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

/// Requests hang: the renewal in flight is given up at the renew deadline.
async fn a_leader_that_cannot_reach_the_api_stops_before_its_lease_could_be_taken(server: Server) {
    let (api, client) = api(server).await;
    let config = deadline_config();
    let c = timed_candidate(client, config.clone());
    let mut frozen = None;
    let took = leads_then_stops_after(&c, &config, || frozen = Some(Frozen::new(&api))).await;
    drop(frozen);
    stopped_at_the_renew_deadline(took, &config);
}

/// Simulator only: every lease request is answered 429 with `Retry-After:
/// 1`, which kube's default client retries for about 15 s per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_answered_429_stops_at_its_renew_deadline() {
    let sim = kube_sim::Simulator::start(kube_sim::Config::default())
        .await
        .unwrap();
    let config = deadline_config();
    let c = timed_candidate(sim.client().unwrap(), config.clone());
    let took = leads_then_stops_after(&c, &config, || {
        sim.faults().fail_requests(
            kube_sim::FailureRule::new(1.0, kube_sim::FailWith::TooManyRequests)
                .resources(&["leases"]),
        )
    })
    .await;
    stopped_at_the_renew_deadline(took, &config);
    assert!(sim.faults().stats().failed_requests >= 1);
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
