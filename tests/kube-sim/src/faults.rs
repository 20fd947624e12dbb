//! Fault injection, switchable at run time and deterministic for a given seed.
//!
//! The simulator consults these switches at the start of every request and in
//! every watch stream. The built-in controllers only obey `pause` (they play
//! kube-controller-manager, which talks to the API server without faults).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::error::ApiError;
use crate::store::Store;
use crate::util::Rng;

/// Status code a failing request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailWith {
    /// 500 InternalError.
    Internal,
    /// 429 TooManyRequests with `Retry-After: 1`.
    TooManyRequests,
    /// 409 Conflict.
    Conflict,
}

/// Fail a fraction of the requests matching `verbs` × `resources`.
#[derive(Debug, Clone)]
pub struct FailureRule {
    /// Kubernetes verbs (`get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`); empty = all.
    pub verbs: Vec<String>,
    /// Plural resource names (`persistentvolumes`); empty = all.
    pub resources: Vec<String>,
    /// Probability in [0, 1].
    pub fraction: f64,
    pub fail_with: FailWith,
}

impl FailureRule {
    pub fn new(fraction: f64, fail_with: FailWith) -> Self {
        FailureRule {
            verbs: Vec::new(),
            resources: Vec::new(),
            fraction,
            fail_with,
        }
    }

    pub fn verbs(mut self, verbs: &[&str]) -> Self {
        self.verbs = verbs.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn resources(mut self, resources: &[&str]) -> Self {
        self.resources = resources.iter().map(|s| s.to_string()).collect();
        self
    }

    fn matches(&self, verb: &str, resource: &str) -> bool {
        (self.verbs.is_empty() || self.verbs.iter().any(|v| v == verb))
            && (self.resources.is_empty() || self.resources.iter().any(|r| r == resource))
    }
}

/// What has been injected so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    pub failed_requests: u64,
    pub closed_watches: u64,
}

struct Inner {
    rng: Rng,
    rules: Vec<FailureRule>,
    latency: Duration,
    /// Ordinal of the last watch started (never reset: every stream has one).
    watches_started: u64,
    stats: FaultStats,
    /// Requests received (each watch counts once), see [`Faults::requests`].
    requests: u64,
}

struct Shared {
    inner: Mutex<Inner>,
    paused: watch::Sender<bool>,
    /// Bumped to close every open watch stream.
    drop_generation: watch::Sender<u64>,
    /// N of `close_every_nth_watch` (0 = off); open streams re-check it when it changes.
    close_nth: watch::Sender<u64>,
    store: Arc<Store>,
}

/// Handle to the fault switches (cheap to clone).
#[derive(Clone)]
pub struct Faults(Arc<Shared>);

impl Faults {
    pub(crate) fn new(seed: u64, store: Arc<Store>) -> Self {
        Faults(Arc::new(Shared {
            inner: Mutex::new(Inner {
                rng: Rng::new(seed ^ 0xFA17_5EED),
                rules: Vec::new(),
                latency: Duration::ZERO,
                watches_started: 0,
                stats: FaultStats::default(),
                requests: 0,
            }),
            paused: watch::channel(false).0,
            drop_generation: watch::channel(0).0,
            close_nth: watch::channel(0).0,
            store,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Add a failure rule (rules are checked in order; the first that fires wins).
    pub fn fail_requests(&self, rule: FailureRule) {
        self.lock().rules.push(rule);
    }

    /// Delay every request by `latency` (zero to disable).
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }

    /// Close every watch stream whose ordinal (1, 2, 3… in order of start) is a
    /// multiple of `n`: open ones at once, new ones right after their initial
    /// events or backlog. Clients re-watch and get new ordinals, so with
    /// `n > 1` the churn continues without starving them (0 disables).
    pub fn close_every_nth_watch(&self, n: u64) {
        self.0.close_nth.send_replace(n);
    }

    /// Close all currently open watch streams (clients re-watch from their last revision).
    pub fn drop_watches(&self) {
        self.0.drop_generation.send_modify(|g| *g += 1);
    }

    /// Forget the watch history: re-watching from any earlier revision gets 410 Gone.
    pub fn compact_history(&self) {
        self.0.store.compact();
    }

    /// Stop answering, like an unreachable API server: requests, watch
    /// deliveries and the built-in controllers wait until [`Faults::resume`].
    pub fn pause(&self) {
        self.0.paused.send_replace(true);
    }

    pub fn resume(&self) {
        self.0.paused.send_replace(false);
    }

    /// Remove every rule, latency and watch-closing switch, and resume.
    pub fn clear(&self) {
        {
            let mut inner = self.lock();
            inner.rules.clear();
            inner.latency = Duration::ZERO;
        }
        self.0.close_nth.send_replace(0);
        self.resume();
    }

    pub fn stats(&self) -> FaultStats {
        self.lock().stats
    }

    /// How many API requests have arrived so far (a watch counts once, when
    /// it starts; the built-in controllers make none): to check a client's
    /// request rate.
    pub fn requests(&self) -> u64 {
        self.lock().requests
    }

    pub(crate) async fn wait_unpaused(&self) {
        let mut rx = self.0.paused.subscribe();
        // Err only when the sender is gone, i.e. the simulator is shutting down.
        let _ = rx.wait_for(|paused| !*paused).await;
    }

    /// Run at the start of every request: pause, latency, then maybe an injected error.
    pub(crate) async fn before_request(&self, verb: &str, resource: &str) -> Result<(), ApiError> {
        self.lock().requests += 1;
        self.wait_unpaused().await;
        let (latency, failure) = {
            let mut inner = self.lock();
            let latency = inner.latency;
            let mut failure = None;
            for i in 0..inner.rules.len() {
                if !inner.rules[i].matches(verb, resource) {
                    continue;
                }
                let fraction = inner.rules[i].fraction;
                if inner.rng.next_f64() < fraction {
                    failure = Some(inner.rules[i].fail_with);
                    break;
                }
            }
            if failure.is_some() {
                inner.stats.failed_requests += 1;
            }
            (latency, failure)
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        match failure {
            None => Ok(()),
            Some(FailWith::Internal) => Err(ApiError::Internal(format!(
                "injected fault: internal error on {verb} {resource}"
            ))),
            Some(FailWith::TooManyRequests) => Err(ApiError::TooManyRequests(
                "injected fault: too many requests, please try again later".into(),
            )),
            Some(FailWith::Conflict) => Err(ApiError::Conflict {
                target: crate::error::Target::new("", resource, ""),
                message: "injected fault: the object has been modified; please apply your changes to the latest version and try again".into(),
            }),
        }
    }

    /// Called when a watch starts: its ordinal, and whether it is to be closed
    /// right after its initial events.
    pub(crate) fn watch_started(&self) -> (u64, bool) {
        let ordinal = {
            let mut inner = self.lock();
            inner.watches_started += 1;
            inner.watches_started
        };
        let close = Self::selected(*self.0.close_nth.borrow(), ordinal);
        if close {
            self.note_dropped_watch();
        }
        (ordinal, close)
    }

    fn selected(n: u64, ordinal: u64) -> bool {
        n > 0 && ordinal.is_multiple_of(n)
    }

    /// For an open stream: wait until `close_every_nth_watch` selects it.
    pub(crate) async fn nth_closes(&self, ordinal: u64) {
        let mut rx = self.0.close_nth.subscribe();
        // Err only when the simulator is shutting down: then never select.
        if rx.wait_for(|n| Self::selected(*n, ordinal)).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    pub(crate) fn drop_signal(&self) -> watch::Receiver<u64> {
        self.0.drop_generation.subscribe()
    }

    pub(crate) fn note_dropped_watch(&self) {
        self.lock().stats.closed_watches += 1;
    }
}
