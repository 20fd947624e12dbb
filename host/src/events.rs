//! Publishing events (events.k8s.io/v1): the lifecycle's on claims and
//! volumes, the plugin source's on ConfigMaps.
//!
//! Publishing never waits for the API server: events are sent in the
//! background, as client-go's recorder (which the Go library uses) sends
//! them. They share the client's rate limit (`--kube-api-qps`) with the
//! lifecycle's own writes; awaited in a reconcile, a claim's `Provisioning`
//! event queued for a token before its volume's create did, and in a burst
//! volumes were made later than the Go library makes them. A few lanes
//! send, each one event at a time and in order; an object's events always
//! take the same lane, so they arrive in the order they happened and a
//! repeat finds the series its first event started. Each event keeps the
//! time it was published at. At most [`QUEUED`] events wait; past that new
//! ones are dropped and counted in the log (client-go drops them past
//! 1,000). [`Events::flush`] gives them a moment at shutdown.
//!
//! An event that only says work has begun ([`Events::starting`]: a claim's
//! `Provisioning`, `Resizing`) is not sent if the work's outcome (a later
//! event about the same object and action) is published while it still
//! waits: the outcome says everything it would have. When the API server
//! keeps up, both are sent, as the Go library sends them; in a burst that
//! holds the queue up, a claim costs one event instead of two, and no
//! outcome or failure is ever left out.
//!
//! Repeats of an event become a series (one object whose count grows), as
//! with kube-runtime's `Recorder`, but only when the note is the same too:
//! the Recorder keys a series on reason and action alone and keeps the first
//! note, so a claim's later `ProvisioningFailed` (a different error, or the
//! host giving up) would show the first, stale message. client-go's recorder,
//! which the Go library uses, keeps different messages apart as well.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::{mpsc, Notify};

/// How long a published event can still grow into a series (kube-runtime's
/// and client-go's value).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// Events sent at once: enough to keep up with a burst of claims (two
/// events each) without taking the lifecycle's share of the rate limit.
const LANES: usize = 4;
/// Events waiting to be sent, in all lanes; about 1 KiB each.
pub const QUEUED: usize = 10_000;

/// The reporting controller, as in events.k8s.io/v1.
#[derive(Debug, Clone)]
pub struct Reporter {
    pub controller: String,
    pub instance: Option<String>,
}

/// The object an event is about: uid, namespace, name, kind.
type Regarding = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// What makes two events the same series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    regarding: Regarding,
    type_: &'static str,
    reason: String,
    action: String,
    note: String,
}

impl Key {
    /// What an outcome shares with the start of its work.
    fn work(&self) -> Work {
        (self.regarding.clone(), self.action.clone())
    }
}

/// An object and an action: the work a [`Events::starting`] event begins.
type Work = (Regarding, String);

/// An event published and not sent yet.
struct Outgoing {
    object: ObjectReference,
    key: Key,
    at: Timestamp,
    seen: Instant,
    /// For a start of work: set once its outcome is published.
    superseded: Option<Arc<AtomicBool>>,
}

#[derive(Debug)]
struct Published {
    namespace: String,
    name: String,
    count: i32,
    last: Instant,
}

#[derive(Default)]
struct Cache {
    series: HashMap<Key, Published>,
    swept: Option<Instant>,
}

/// Publishes events; a failure to publish is logged, never fatal.
#[derive(Clone)]
pub struct Events {
    lanes: Arc<[mpsc::Sender<Outgoing>]>,
    queue: Arc<Queue>,
}

/// What the lanes have left to send.
#[derive(Default)]
struct Queue {
    waiting: AtomicUsize,
    dropped: AtomicU64,
    /// Starts of work left unsent because their outcome came first.
    superseded: AtomicU64,
    emptied: Notify,
    /// The starts of work waiting in the lanes, by object and action.
    unsent_starts: Mutex<HashMap<Work, Arc<AtomicBool>>>,
}

impl Queue {
    fn done(&self) {
        if self.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.emptied.notify_waiters();
        }
    }

    fn unsent_starts(&self) -> std::sync::MutexGuard<'_, HashMap<Work, Arc<AtomicBool>>> {
        self.unsent_starts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `event` is still to be sent: not a start of work whose
    /// outcome was published since. A start about to be sent can no longer
    /// be superseded.
    fn still_wanted(&self, event: &Outgoing) -> bool {
        if event
            .superseded
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Acquire))
        {
            self.superseded.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.forget_start(event);
        true
    }

    /// Takes `event`, if a start of work, out of those an outcome
    /// supersedes: it is being sent, or was dropped.
    fn forget_start(&self, event: &Outgoing) {
        if let Some(flag) = &event.superseded {
            let mut starts = self.unsent_starts();
            let work = event.key.work();
            if starts.get(&work).is_some_and(|f| Arc::ptr_eq(f, flag)) {
                starts.remove(&work);
            }
        }
    }
}

/// What every lane sends with.
struct Sender {
    client: Client,
    reporter: Reporter,
    cache: Mutex<Cache>,
}

impl Events {
    /// Starts the lanes on the current Tokio runtime; they stop when the
    /// last clone of this is dropped.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        let sender = Arc::new(Sender {
            client,
            reporter,
            cache: Mutex::default(),
        });
        let queue = Arc::new(Queue::default());
        let lanes = (0..LANES)
            .map(|_| {
                let (tx, mut rx) = mpsc::channel::<Outgoing>(QUEUED / LANES);
                let (sender, queue) = (sender.clone(), queue.clone());
                tokio::spawn(async move {
                    while let Some(event) = rx.recv().await {
                        if queue.still_wanted(&event) {
                            sender.publish(event).await;
                        }
                        queue.done();
                    }
                });
                tx
            })
            .collect();
        Self { lanes, queue }
    }

    pub fn normal(&self, object: &ObjectReference, reason: &str, action: &str, note: String) {
        self.publish(object, "Normal", reason, action, note, false);
    }

    pub fn warning(&self, object: &ObjectReference, reason: &str, action: &str, note: String) {
        self.publish(object, "Warning", reason, action, note, false);
    }

    /// A Normal event saying that `action` on `object` has begun. Left
    /// unsent if the action's outcome (the next event about `object` with
    /// the same `action`) is published before it could be sent.
    pub fn starting(&self, object: &ObjectReference, reason: &str, action: &str, note: String) {
        self.publish(object, "Normal", reason, action, note, true);
    }

    /// Waits until every event published so far is sent (or failed), for at
    /// most `limit`; whether they all were.
    pub async fn flush(&self, limit: Duration) -> bool {
        let sent = async {
            loop {
                let emptied = self.queue.emptied.notified();
                if self.queue.waiting.load(Ordering::Acquire) == 0 {
                    return;
                }
                emptied.await;
            }
        };
        let flushed = tokio::time::timeout(limit, sent).await.is_ok();
        if !flushed {
            tracing::warn!(
                unsent = self.queue.waiting.load(Ordering::Acquire),
                "events still unsent after {limit:?}; dropping them"
            );
        }
        flushed
    }

    fn publish(
        &self,
        object: &ObjectReference,
        type_: &'static str,
        reason: &str,
        action: &str,
        note: String,
        start_of_work: bool,
    ) {
        // The API server rejects notes over 1 KiB. A note can quote a plugin:
        // no control character reaches `kubectl describe` or a log.
        let note = crate::text::untrusted(&note, 1000).into_owned();
        let key = Key {
            regarding: (
                object.uid.clone(),
                object.namespace.clone(),
                object.name.clone(),
                object.kind.clone(),
            ),
            type_,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note,
        };
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.regarding.hash(&mut hasher);
        let lane = &self.lanes[hasher.finish() as usize % self.lanes.len()];
        // Whatever comes next about this work supersedes a start of it
        // that still waits, a newer start included.
        let superseded = {
            let mut starts = self.queue.unsent_starts();
            let work = key.work();
            if let Some(earlier) = starts.remove(&work) {
                earlier.store(true, Ordering::Release);
            }
            start_of_work.then(|| {
                let flag = Arc::new(AtomicBool::new(false));
                starts.insert(work, flag.clone());
                flag
            })
        };
        self.queue.waiting.fetch_add(1, Ordering::AcqRel);
        let event = Outgoing {
            object: object.clone(),
            key,
            at: Timestamp::now(),
            seen: Instant::now(),
            superseded,
        };
        if let Err(refused) = lane.try_send(event) {
            let full = matches!(refused, mpsc::error::TrySendError::Full(_));
            self.queue.forget_start(&refused.into_inner());
            self.queue.done();
            let dropped = self.queue.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if full && (dropped == 1 || dropped.is_multiple_of(1000)) {
                tracing::warn!(
                    reason,
                    object = ?object.name,
                    namespace = ?object.namespace,
                    dropped,
                    "{QUEUED} events wait to be sent (is the API server slow, or \
                     --kube-api-qps low?); dropping new ones"
                );
            }
        }
    }
}

impl Sender {
    async fn publish(&self, event: Outgoing) {
        let Outgoing {
            object,
            key,
            at,
            seen,
            superseded: _,
        } = event;
        let reason = key.reason.clone();
        if let Err(e) = self.send(&object, key, at, seen).await {
            tracing::warn!(reason, object = ?object.name, namespace = ?object.namespace, error = %e, "cannot publish event (the host needs create and patch on events.k8s.io events)");
        }
    }

    async fn send(
        &self,
        object: &ObjectReference,
        key: Key,
        timestamp: Timestamp,
        now: Instant,
    ) -> Result<(), kube::Error> {
        let repeat = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache
                .swept
                .is_none_or(|t| now.saturating_duration_since(t) > Duration::from_secs(60))
            {
                cache
                    .series
                    .retain(|_, p| now.saturating_duration_since(p.last) < SERIES_TTL);
                cache.swept = Some(now);
            }
            cache
                .series
                .get_mut(&key)
                .filter(|p| now.saturating_duration_since(p.last) < SERIES_TTL)
                .map(|p| {
                    p.count += 1;
                    p.last = now;
                    (p.namespace.clone(), p.name.clone(), p.count)
                })
        };
        if let Some((namespace, name, count)) = repeat {
            let patch = serde_json::json!({"series": EventSeries {
                count,
                last_observed_time: MicroTime(timestamp),
            }});
            let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // Expired on the server (events live an hour): start anew.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        // Cluster-scoped objects (volumes) get their events in "default".
        let namespace = object
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let name = format!(
            "{}.{:x}",
            object.name.as_deref().unwrap_or(&self.reporter.controller),
            timestamp.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(timestamp)),
            action: Some(key.action.clone()),
            reason: Some(key.reason.clone()),
            note: Some(key.note.clone()),
            type_: Some(key.type_.to_owned()),
            regarding: Some(object.clone()),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            ..Default::default()
        };
        Api::<Event>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &event)
            .await?;
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .series
            .insert(
                key,
                Published {
                    namespace,
                    name,
                    count: 1,
                    last: now,
                },
            );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ListParams;

    fn claim(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            namespace: Some("default".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        }
    }

    /// A simulated API server, a client of it and events published there.
    async fn publisher() -> (kube_sim::Simulator, Client, Events) {
        let sim = kube_sim::Simulator::start(kube_sim::Config::default())
            .await
            .unwrap();
        let client = sim.client().unwrap();
        let events = Events::new(
            client.clone(),
            Reporter {
                controller: "test".into(),
                instance: None,
            },
        );
        (sim, client, events)
    }

    /// The events sent so far about claim `name`, oldest first.
    async fn sent_about(client: &Client, name: &str) -> Vec<Event> {
        let mut of: Vec<Event> = Api::<Event>::namespaced(client.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().unwrap().name.as_deref() == Some(name))
            .collect();
        of.sort_by_key(|e| e.event_time.as_ref().unwrap().0);
        of
    }

    fn reasons(events: &[Event]) -> Vec<&str> {
        events
            .iter()
            .map(|e| e.reason.as_deref().unwrap())
            .collect()
    }

    /// Published events arrive, each object's in the order they happened,
    /// and a repeat grows the series its first event started.
    #[tokio::test]
    async fn events_are_sent_in_the_background_in_order() {
        let (_sim, client, events) = publisher().await;
        for i in 0..20 {
            let object = claim(&format!("c{i}"));
            events.normal(&object, "Provisioning", "Provisioning", "started".into());
            events.warning(&object, "ProvisioningFailed", "Provisioning", "no".into());
            events.warning(&object, "ProvisioningFailed", "Provisioning", "no".into());
            events.normal(
                &object,
                "ProvisioningSucceeded",
                "Provisioning",
                "made".into(),
            );
        }
        assert!(events.flush(Duration::from_secs(30)).await, "all sent");
        for i in 0..20 {
            let name = format!("c{i}");
            let of = sent_about(&client, &name).await;
            assert_eq!(
                reasons(&of),
                [
                    "Provisioning",
                    "ProvisioningFailed",
                    "ProvisioningSucceeded"
                ],
                "a repeat is no new event"
            );
            assert_eq!(of[1].series.as_ref().map(|s| s.count), Some(2), "{name}");
        }
    }

    /// A start of work whose outcome is published before the start could be
    /// sent is left out; one already sent is not, and nothing else is.
    #[tokio::test]
    async fn an_outcome_supersedes_its_unsent_start() {
        let (_sim, client, events) = publisher().await;
        // This test's runtime has one thread: nothing is sent before the
        // first await, so every start below still waits for its lane.
        for i in 0..20 {
            let object = claim(&format!("quick{i}"));
            events.starting(&object, "Provisioning", "Provisioning", "go".into());
            events.normal(
                &object,
                "ProvisioningSucceeded",
                "Provisioning",
                "made".into(),
            );
        }
        // Another action's start, and another object's, are not outcomes.
        let other = claim("other");
        events.starting(&other, "Resizing", "Resizing", "grow".into());
        events.normal(
            &other,
            "ProvisioningSucceeded",
            "Provisioning",
            "made".into(),
        );
        events.normal(
            &claim("third"),
            "ProvisioningSucceeded",
            "Provisioning",
            "made".into(),
        );
        assert!(events.flush(Duration::from_secs(30)).await, "all sent");
        // Sent before its outcome came: kept.
        let slow = claim("slow");
        events.starting(&slow, "Provisioning", "Provisioning", "go".into());
        assert!(events.flush(Duration::from_secs(30)).await, "sent");
        events.warning(&slow, "ProvisioningFailed", "Provisioning", "no".into());
        assert!(events.flush(Duration::from_secs(30)).await, "sent");

        for i in 0..20 {
            let of = sent_about(&client, &format!("quick{i}")).await;
            assert_eq!(reasons(&of), ["ProvisioningSucceeded"]);
        }
        let of = sent_about(&client, "other").await;
        assert_eq!(reasons(&of), ["Resizing", "ProvisioningSucceeded"]);
        let of = sent_about(&client, "third").await;
        assert_eq!(reasons(&of), ["ProvisioningSucceeded"]);
        let of = sent_about(&client, "slow").await;
        assert_eq!(reasons(&of), ["Provisioning", "ProvisioningFailed"]);
        assert_eq!(events.queue.superseded.load(Ordering::Relaxed), 20);
        assert!(
            events.queue.unsent_starts().is_empty(),
            "nothing left to supersede"
        );
    }

    /// Publishing never waits for the API server, and a full queue drops
    /// new events rather than growing.
    #[tokio::test]
    async fn an_api_server_that_never_answers_never_holds_up_the_publisher() {
        // Takes connections (the kernel's backlog), never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", silent.local_addr().unwrap());
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let events = Events::new(
            client,
            Reporter {
                controller: "test".into(),
                instance: None,
            },
        );
        let started = Instant::now();
        for i in 0..QUEUED + 100 {
            let object = claim(&format!("c{i}"));
            events.normal(&object, "Provisioning", "Provisioning", "x".into());
            // Let the lanes take their first event and hang on it.
            if i == 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let waiting = events.queue.waiting.load(Ordering::Acquire);
        let dropped = events.queue.dropped.load(Ordering::Relaxed) as usize;
        assert!(waiting <= QUEUED + LANES, "{waiting} wait");
        assert_eq!(waiting + dropped, QUEUED + 100);
        assert!(dropped >= 100 - LANES, "{dropped} dropped");
        assert!(
            !events.flush(Duration::from_millis(200)).await,
            "nothing is sent"
        );
    }
}
