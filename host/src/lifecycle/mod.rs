//! The provisioning lifecycle: what `sig-storage-lib-external-provisioner`
//! does for Go drivers, for every StorageClass that names this host. It
//! watches claims and volumes, decides ([`decide`]), calls the
//! [`Provisioner`] (it knows nothing of Wasm), saves PersistentVolumes, and
//! reclaims released ones.
//!
//! Each claim and each volume is reconciled by one worker at a time (kube-runtime
//! `Controller`); failures are retried with per-object exponential backoff.

pub mod capacity;
mod claims;
pub mod decide;
mod finalizer_conflicts;
mod finalizers;
mod in_progress;
mod janitor;
pub mod nodes;
mod reasons;
pub mod resize;
pub mod throttle;
mod volumes;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};

use crate::events::{Events, Reporter};
use crate::metrics::Metrics;
use crate::provisioner::Provisioner;

/// How long a stopping lifecycle waits for its last events to be sent.
const EVENTS_FLUSH: Duration = Duration::from_secs(5);
pub use decide::Names;
pub use nodes::OwnNode;
pub use throttle::ApiLimits;

/// How the lifecycle behaves; the defaults follow the Go library.
#[derive(Debug, Clone)]
pub struct Config {
    pub names: Names,
    /// Node mode: the node this host runs on and serves alone (claims
    /// selected for it, volumes pinned to it). `None`: a central host,
    /// serving claims whatever their node.
    pub node: Option<OwnNode>,
    /// Node mode: `true` while this host is the node hosts' elected
    /// janitor, which looks after the claims no node host takes (a gone
    /// selected node, a class binding Immediately). `None`: never.
    pub janitor: Option<tokio::sync::watch::Receiver<bool>>,
    /// How long a node must have been gone before the janitor reports the
    /// Released volumes pinned to it (a node re-registering is not gone).
    pub gone_node_grace: Duration,
    /// Node mode: the janitor deletes the PersistentVolume objects of
    /// Released volumes whose node is gone (their storage went with it)
    /// instead of keeping them; a volume annotated
    /// `wasmprov.io/forget-when-node-gone: "true"` is forgotten either way.
    pub forget_gone_node_volumes: bool,
    /// Node mode: publish this node's room for each class as
    /// CSIStorageCapacity objects for the scheduler ([`capacity::publish`]).
    /// `None`: the host still refuses what its node cannot hold, but says
    /// nothing to the scheduler.
    pub publish_capacity: Option<capacity::publish::Publishing>,
    /// Node mode: where the node hosts' Leases are, so that the janitor can
    /// tell a node that has no live host.
    pub node_lease_namespace: String,
    /// Node mode: how long a selected node's host Lease may go unrenewed
    /// before the janitor warns on the claims waiting for that node.
    pub missing_host_grace: Duration,
    /// For volumes a replaced provisioner made under one of our names whose
    /// own class names no plugin: that provisioner name → the StorageClass
    /// whose plugin and parameters delete them (`--adopt-volumes`).
    pub adopt_volumes: std::collections::BTreeMap<String, String>,
    /// Claims (and volumes) reconciled at once (the Go library's `Threadiness`).
    pub workers: u16,
    /// Add `external-provisioner.volume.kubernetes.io/finalizer` to volumes.
    pub add_finalizer: bool,
    /// Hold a claim with `wasmprov.io/provisioning` while its storage is
    /// being made, so deleting it meanwhile (even while the host is down)
    /// cannot leak that storage.
    pub claim_finalizer: bool,
    /// Give up on a claim after this many failed provisions (0: never).
    pub failed_provision_threshold: u32,
    /// Give up on a volume after this many failed deletes (0: never).
    pub failed_delete_threshold: u32,
    /// First retry delay after a failure; doubles per failure up to
    /// `max_retry` (the Go library's 15 s and 1000 s: about 2.5 hours of
    /// retries before the default threshold gives up).
    pub retry_base: Duration,
    pub max_retry: Duration,
    /// Attempts to save a provisioned PersistentVolume before cleaning up,
    /// and then to delete its storage (the Go library's
    /// `CreateProvisionedPVRetryCount`); at least 1.
    pub save_attempts: usize,
    /// The wait between those attempts (`CreateProvisionedPVInterval`: the
    /// Go library's backoff there is linear).
    pub save_retry_interval: Duration,
    /// Reported as the source of events (`reportingController`).
    pub controller_name: String,
    /// How long a stopping host lets reconciles in progress finish.
    pub shutdown_grace: Duration,
    /// Every claim and volume is looked at again this often, and what was
    /// given up on is tried once more (the Go library's informer resync);
    /// zero: never.
    pub resync: Duration,
}

impl Config {
    pub fn new(provisioner_name: impl Into<String>) -> Self {
        Self {
            names: Names {
                primary: provisioner_name.into(),
                additional: Vec::new(),
            },
            node: None,
            janitor: None,
            gone_node_grace: Duration::from_secs(30),
            forget_gone_node_volumes: false,
            publish_capacity: None,
            node_lease_namespace: "default".to_owned(),
            missing_host_grace: Duration::from_secs(60),
            adopt_volumes: Default::default(),
            workers: 4,
            add_finalizer: false,
            claim_finalizer: false,
            failed_provision_threshold: 15,
            failed_delete_threshold: 15,
            retry_base: Duration::from_secs(15),
            max_retry: Duration::from_secs(1000),
            save_attempts: 5,
            save_retry_interval: Duration::from_secs(10),
            controller_name: "wasmprov".to_owned(),
            shutdown_grace: Duration::from_secs(10),
            resync: Duration::from_secs(15 * 60),
        }
    }
}

/// Why one reconcile failed; retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Provision(String),
}

/// Shared state of the reconcilers.
struct Context<P> {
    client: Client,
    provisioner: Arc<P>,
    config: Config,
    classes: Store<StorageClass>,
    /// The volumes as the volume controller's watch sees them (the Go
    /// library's volume informer cache).
    volumes: Store<PersistentVolume>,
    /// The claims as the claim controller's watch sees them.
    claims: Store<PersistentVolumeClaim>,
    events: Events,
    metrics: Arc<Metrics>,
    in_progress: in_progress::InProgress,
    /// Failures per object uid, for backoff and thresholds.
    failures: Mutex<HashMap<String, Failures>>,
    /// Our volume finalizer writes, to notice another controller undoing
    /// them (until the host restarts).
    finalizer_conflicts: finalizer_conflicts::FinalizerConflicts,
    /// Resyncs so far: giving up lasts until the next one.
    resyncs: tokio::sync::watch::Receiver<u64>,
    /// Claims (uid) whose last expansion attempt failed for sure (not
    /// in-background): the backend is not working on that size, so a
    /// smaller request may replace it (external-resizer's final errors;
    /// forgotten on restart, as there).
    resize_final_errors: Mutex<std::collections::HashSet<String>>,
    /// Claims (uid) handed to this host whose StorageClass is not in the
    /// cache, and since when: a brief miss is the class watch lagging, a
    /// longer one a deleted class.
    class_missing_since: Mutex<HashMap<String, std::time::Instant>>,
    /// Whether the cluster has more than one node (central guard).
    node_count: nodes::NodeCount,
    /// Claims (uid) the janitor has warned about: once each.
    janitor_warned: Mutex<std::collections::HashSet<String>>,
    /// Volumes (uid) whose node the janitor found gone: since when, and
    /// their class once reported (counted in `volumes_on_gone_nodes`).
    gone_nodes: Mutex<HashMap<String, janitor::GoneNode>>,
    /// Node hosts' Leases as the janitor last saw them, by node: their
    /// resourceVersion and since when it has not changed.
    node_hosts_seen: Mutex<HashMap<String, (String, std::time::Instant)>>,
    /// Claims (uid) whose volume this host saved moments ago, and when: the
    /// volume watch may not have delivered it yet, and the plugin must not
    /// be asked for it again meanwhile.
    recently_saved: Mutex<HashMap<String, std::time::Instant>>,
    /// Node mode: what this node's disks were promised ([`capacity`]).
    capacity: Arc<capacity::Ledger>,
}

impl<P> Context<P> {
    /// Whether this host is the node hosts' janitor now.
    fn is_janitor(&self) -> bool {
        self.config.janitor.as_ref().is_some_and(|rx| *rx.borrow())
    }
}

/// The failures of one claim or volume.
#[derive(Debug, Default)]
struct Failures {
    count: u32,
    /// Set when the threshold was reached: the version (of the object and
    /// what it depends on) that was given up on, and in which resync. Like
    /// the Go library, the host tries once more when either changes.
    gave_up_at: Option<(String, u64)>,
    /// The version that last failed, and when it may be tried again. A
    /// reconcile before then of the same version (woken by a watch event of
    /// the host's own write, e.g. a finalizer patch) waits out the rest.
    retry: Option<(String, std::time::Instant)>,
}

/// What a failure leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterFailure {
    /// Retry after `after`, the backoff of this many failures.
    Retry { failures: u32, after: Duration },
    /// The threshold is reached after this many failures: stop retrying.
    GiveUp(u32),
}

impl<P> Context<P> {
    fn lock_failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, Failures>> {
        lock(&self.failures)
    }

    /// Records a failure of `uid` (at `version`) against `threshold` (0:
    /// never give up).
    fn fail(&self, uid: &str, threshold: u32, version: &str) -> AfterFailure {
        self.fail_at_least(uid, threshold, version, Duration::ZERO)
    }

    /// [`Context::fail`], retrying no sooner than `min_delay`.
    fn fail_at_least(
        &self,
        uid: &str,
        threshold: u32,
        version: &str,
        min_delay: Duration,
    ) -> AfterFailure {
        let mut all = self.lock_failures();
        let f = all.entry(uid.to_owned()).or_default();
        f.count = f.count.saturating_add(1);
        if threshold > 0 && f.count >= threshold {
            f.gave_up_at = Some((version.to_owned(), *self.resyncs.borrow()));
            f.retry = None;
            AfterFailure::GiveUp(f.count)
        } else {
            let delay = self.backoff(f.count).max(min_delay);
            f.retry = Some((version.to_owned(), std::time::Instant::now() + delay));
            AfterFailure::Retry {
                failures: f.count,
                after: delay,
            }
        }
    }

    /// How much longer `uid` backs off, if its last failure was of this
    /// same `version` (a changed object is tried at once, as the Go
    /// library's informer would).
    fn backing_off(&self, uid: &str, version: &str) -> Option<Duration> {
        let all = self.lock_failures();
        let (failed, at) = all.get(uid)?.retry.as_ref()?;
        let left = at.checked_duration_since(std::time::Instant::now())?;
        (failed == version && !left.is_zero()).then_some(left)
    }

    fn succeed(&self, uid: &str) {
        self.lock_failures().remove(uid);
    }

    /// Whether the host gave up on `uid` and nothing changed since.
    fn given_up(&self, uid: &str, version: &str) -> bool {
        let resync = *self.resyncs.borrow();
        self.lock_failures()
            .get(uid)
            .and_then(|f| f.gave_up_at.as_ref())
            .is_some_and(|(v, at)| v == version && *at == resync)
    }

    /// When a give-up ends by itself, for its event: "at each resync
    /// (--resync-period=15m) and ", or nothing without resyncs.
    fn resync_note(&self) -> String {
        if self.config.resync.is_zero() {
            String::new()
        } else {
            format!(
                "at each resync (--resync-period={}) and ",
                humantime::format_duration(self.config.resync)
            )
        }
    }

    /// The action after a failure: retry with backoff, or stop.
    fn after(&self, failure: AfterFailure) -> Action {
        match failure {
            AfterFailure::Retry { after, .. } => Action::requeue(after),
            AfterFailure::GiveUp(_) => Action::await_change(),
        }
    }

    /// Exponential backoff after `n` failures.
    fn backoff(&self, n: u32) -> Duration {
        let factor = 2u32.saturating_pow(n.saturating_sub(1).min(20));
        self.config
            .retry_base
            .saturating_mul(factor)
            .min(self.config.max_retry)
    }
}

/// Locks one of the context's maps; a panic elsewhere while it was held
/// leaves it usable (its entries are only hints for backoff).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the lifecycle until `shutdown` completes.
pub async fn run<P: Provisioner>(
    client: Client,
    provisioner: Arc<P>,
    config: Config,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let (classes, class_writer) = reflector::store();
    let ledger = Arc::new(capacity::Ledger::default());
    let class_changed = ledger.clone();
    let class_stream = reflector::reflector(
        class_writer,
        watcher(
            Api::<StorageClass>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .touched_objects()
    // A class came or changed: the capacity published for it follows.
    .for_each(move |_| {
        class_changed.touch();
        async {}
    });
    // Every task of the lifecycle lives in this set: dropping the lifecycle
    // future (e.g. when the leader lease is lost) aborts them all at once.
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(class_stream);
    // Decisions need the classes: do not start before they are known.
    if classes.wait_until_ready().await.is_err() {
        tracing::error!("the StorageClass watch stopped before it was ready");
        return;
    }

    let reporter = Reporter {
        controller: config.controller_name.clone(),
        instance: std::env::var("POD_NAME").ok(),
    };
    // Node mode: a volume of this node came, changed or went; the capacity
    // published for its disk follows.
    let volume_changed = ledger.clone();
    let own = config.node.clone();
    let volumes = controller_of(Api::<PersistentVolume>::all(client.clone()), move |pv| {
        if own.is_some() && pv.is_none_or(|pv| nodes::volume_is_here(pv, own.as_ref())) {
            volume_changed.touch();
        }
    });
    let claims = controller_of(Api::<PersistentVolumeClaim>::all(client.clone()), |_| {});
    let (resync_tx, resyncs) = tokio::sync::watch::channel(0u64);
    if !config.resync.is_zero() {
        let period = config.resync;
        tasks.spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                resync_tx.send_modify(|n| *n += 1);
            }
        });
    }
    let ctx = Arc::new(Context {
        events: Events::new(client.clone(), reporter),
        client: client.clone(),
        metrics,
        in_progress: Default::default(),
        provisioner,
        classes,
        volumes: volumes.store(),
        claims: claims.store(),
        failures: Mutex::default(),
        resize_final_errors: Mutex::default(),
        class_missing_since: Mutex::default(),
        node_count: Default::default(),
        janitor_warned: Mutex::default(),
        gone_nodes: Mutex::default(),
        node_hosts_seen: Mutex::default(),
        recently_saved: Mutex::default(),
        capacity: ledger,
        finalizer_conflicts: Default::default(),
        resyncs: resyncs.clone(),
        config: config.clone(),
    });
    if let (Some(own), Some(publishing)) = (&config.node, &config.publish_capacity) {
        tasks.spawn(capacity::publish::run(
            ctx.clone(),
            own.clone(),
            publishing.clone(),
        ));
    }
    if ctx.config.janitor.is_some() {
        tasks.spawn(janitor::recount_gone(ctx.clone()));
    }
    // The sweep only finds what is due (each claim keeps its own backoff),
    // so its tick need not follow the retry interval.
    tasks.spawn(in_progress::sweep(
        ctx.clone(),
        config
            .retry_base
            .clamp(Duration::from_millis(500), Duration::from_secs(1)),
    ));
    let controller_config = ControllerConfig::default().concurrency(config.workers);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    // A class created or changed (e.g. a fixed plugin parameter) wakes the
    // claims that name it, instead of waiting for their next retry.
    let claim_store = claims.store();
    let claims = claims
        .watches(
            Api::<StorageClass>::all(client.clone()),
            watcher::Config::default(),
            move |class| {
                let name = class.metadata.name.unwrap_or_default();
                claim_store
                    .state()
                    .into_iter()
                    .filter(|c| decide::claim_class(c) == name)
                    .map(|c| ObjectRef::from_obj(&*c))
                    .collect::<Vec<_>>()
            },
        )
        .reconcile_all_on(each_change(resyncs.clone()))
        .reconcile_all_on(on_plugin_change(ctx.provisioner.plugins_changed()))
        // Elected janitor: look at every claim (from the cache).
        .reconcile_all_on(on_janitor_change(config.janitor.clone()))
        .with_config(controller_config.clone())
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(claims::reconcile, claims::error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "claim reconcile");
            }
        });
    let volumes = volumes
        .reconcile_all_on(each_change(resyncs))
        .reconcile_all_on(on_plugin_change(ctx.provisioner.plugins_changed()))
        .reconcile_all_on(on_janitor_change(config.janitor.clone()))
        .with_config(controller_config)
        .graceful_shutdown_on(stopped(stop_rx))
        .run(volumes::reconcile, volumes::error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "volume reconcile");
            }
        });
    match &config.node {
        Some(node) => {
            tracing::info!(provisioner = %config.names.primary, workers = config.workers, node = %node.name, "provisioning lifecycle started for the claims and volumes of this node")
        }
        None => {
            tracing::info!(provisioner = %config.names.primary, workers = config.workers, "provisioning lifecycle started")
        }
    }
    let mut controllers = tokio::task::JoinSet::new();
    controllers.spawn(claims);
    controllers.spawn(volumes);
    tokio::select! {
        () = shutdown => {}
        _ = controllers.join_next() => tracing::error!("a controller stopped unexpectedly"),
    }
    // Let reconciles in progress finish (a provision half-way would leak),
    // but not forever: requeued work waits for the next start.
    let _ = stop_tx.send(true);
    let grace = config.shutdown_grace;
    let drained = tokio::time::timeout(grace, async {
        while controllers.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("reconciles still running after {grace:?}; stopping them");
    }
    controllers.abort_all();
    tasks.abort_all();
    // What the last reconciles said, before the process goes.
    ctx.events.flush(EVENTS_FLUSH).await;
    tracing::info!("provisioning lifecycle stopped");
}

/// A controller of every object of `api`, as `Controller::new` makes it,
/// but whose cache drops what the host never reads: `managedFields`, often
/// more than half of a claim or volume once parsed. Every host caches every
/// claim and volume of the cluster, so in node mode that is paid once per
/// node (BENCHMARKS.md, "Node host memory"). Only the cached copy loses
/// them: updates are patches, never the cached object written back.
///
/// `changed` hears of every object the watch delivers, deleted ones too
/// (`None`: the watch started over).
fn controller_of<K>(api: Api<K>, changed: impl Fn(Option<&K>) + Send + 'static) -> Controller<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .modify(|object| object.meta_mut().managed_fields = None)
        .map_ok(move |event| {
            match &event {
                watcher::Event::Apply(o) | watcher::Event::Delete(o) => changed(Some(o)),
                watcher::Event::InitDone => changed(None),
                watcher::Event::Init | watcher::Event::InitApply(_) => {}
            }
            event
        })
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(stream, store)
}

/// One item per plugin version loaded: claims refused for a missing plugin
/// (and volumes whose plugin was gone) are looked at again at once. Only
/// the cache is read for the others: no API request.
fn on_plugin_change(
    changes: Option<tokio::sync::watch::Receiver<u64>>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    match changes {
        Some(rx) => each_change(rx).left_stream(),
        None => futures::stream::empty().right_stream(),
    }
}

/// One item each time this host becomes the janitor.
fn on_janitor_change(
    janitor: Option<tokio::sync::watch::Receiver<bool>>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    let Some(rx) = janitor else {
        return futures::stream::empty().right_stream();
    };
    futures::stream::unfold((rx, false), |(mut rx, was_janitor)| async move {
        if was_janitor {
            rx.wait_for(|j| !*j).await.ok()?;
        }
        rx.wait_for(|j| *j).await.ok()?;
        Some(((), (rx, true)))
    })
    .left_stream()
}

/// One item per change of `resyncs` (a resync, or another counter).
fn each_change(
    resyncs: tokio::sync::watch::Receiver<u64>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(resyncs, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> Context<()> {
        let (classes, _) = reflector::store();
        let client =
            Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        Context {
            events: Events::new(
                client.clone(),
                Reporter {
                    controller: "test".into(),
                    instance: None,
                },
            ),
            client,
            provisioner: Arc::new(()),
            config: Config::new("test"),
            classes,
            volumes: reflector::store().0,
            claims: reflector::store().0,
            metrics: Arc::default(),
            in_progress: Default::default(),
            failures: Mutex::default(),
            resize_final_errors: Mutex::default(),
            class_missing_since: Mutex::default(),
            node_count: Default::default(),
            janitor_warned: Mutex::default(),
            gone_nodes: Mutex::default(),
            node_hosts_seen: Mutex::default(),
            recently_saved: Mutex::default(),
            capacity: Arc::default(),
            finalizer_conflicts: Default::default(),
            resyncs: tokio::sync::watch::channel(0).1,
        }
    }

    fn retries(failures: u32) -> AfterFailure {
        AfterFailure::Retry {
            failures,
            after: context().backoff(failures),
        }
    }

    #[tokio::test]
    async fn the_default_backoff_is_the_go_librarys() {
        let ctx = context();
        let waits: Vec<u64> = (1..=14).map(|n| ctx.backoff(n).as_secs()).collect();
        assert_eq!(
            waits,
            [15, 30, 60, 120, 240, 480, 960, 1000, 1000, 1000, 1000, 1000, 1000, 1000]
        );
        // The waits before the default threshold (15) gives up: ~2.5 hours.
        assert_eq!(ctx.config.failed_provision_threshold, 15);
        assert_eq!(waits.iter().sum::<u64>(), 8905);
    }

    #[tokio::test]
    async fn a_threshold_gives_up_until_the_object_changes() {
        let ctx = context();
        assert_eq!(ctx.fail("u", 3, "v1"), retries(1));
        assert_eq!(ctx.fail("u", 3, "v1"), retries(2));
        assert!(!ctx.given_up("u", "v1"));
        assert_eq!(ctx.fail("u", 3, "v1"), AfterFailure::GiveUp(3));
        assert!(ctx.given_up("u", "v1"));
        // The object changed: one more attempt, which fails again.
        assert!(!ctx.given_up("u", "v2"));
        assert_eq!(ctx.fail("u", 3, "v2"), AfterFailure::GiveUp(4));
        assert!(ctx.given_up("u", "v2"));
        // A success starts over.
        ctx.succeed("u");
        assert!(!ctx.given_up("u", "v2"));
        assert_eq!(ctx.fail("u", 3, "v2"), retries(1));
        // 0: never give up.
        for n in 1..100 {
            assert_eq!(ctx.fail("w", 0, "v"), retries(n));
        }
    }

    #[tokio::test]
    async fn a_failed_version_backs_off_until_its_retry_and_a_changed_one_does_not() {
        let ctx = context();
        assert_eq!(ctx.backing_off("u", "v1"), None, "nothing failed yet");
        ctx.fail("u", 0, "v1");
        let left = ctx
            .backing_off("u", "v1")
            .expect("backs off after a failure");
        assert!(left <= ctx.backoff(1) && left > Duration::ZERO, "{left:?}");
        assert_eq!(
            ctx.backing_off("u", "v2"),
            None,
            "a changed claim is tried at once"
        );
        ctx.fail_at_least("u", 0, "v1", Duration::from_secs(300));
        assert!(ctx.backing_off("u", "v1").unwrap() > Duration::from_secs(299));
        ctx.succeed("u");
        assert_eq!(ctx.backing_off("u", "v1"), None, "a success ends it");
    }
}
