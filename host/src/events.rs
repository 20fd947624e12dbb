//! Publishing events (events.k8s.io/v1): the lifecycle's on claims and
//! volumes, the plugin source's on ConfigMaps.
//!
//! Repeats of an event become a series (one object whose count grows), as
//! with kube-runtime's `Recorder`, but only when the note is the same too:
//! the Recorder keys a series on reason and action alone and keeps the first
//! note, so a claim's later `ProvisioningFailed` (a different error, or the
//! host giving up) would show the first, stale message. client-go's recorder,
//! which the Go library uses, keeps different messages apart as well.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

/// How long a published event can still grow into a series (kube-runtime's
/// and client-go's value).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// The reporting controller, as in events.k8s.io/v1.
#[derive(Debug, Clone)]
pub struct Reporter {
    pub controller: String,
    pub instance: Option<String>,
}

/// What makes two events the same series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    regarding: (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
    type_: &'static str,
    reason: String,
    action: String,
    note: String,
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
    client: Client,
    reporter: Reporter,
    cache: Arc<Mutex<Cache>>,
}

impl Events {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            cache: Arc::default(),
        }
    }

    pub async fn normal(&self, object: &ObjectReference, reason: &str, action: &str, note: String) {
        self.publish(object, "Normal", reason, action, note).await;
    }

    pub async fn warning(
        &self,
        object: &ObjectReference,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.publish(object, "Warning", reason, action, note).await;
    }

    async fn publish(
        &self,
        object: &ObjectReference,
        type_: &'static str,
        reason: &str,
        action: &str,
        note: String,
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
            note: note.clone(),
        };
        if let Err(e) = self.send(object, key, note).await {
            tracing::warn!(reason, object = ?object.name, namespace = ?object.namespace, error = %e, "cannot publish event (the host needs create and patch on events.k8s.io events)");
        }
    }

    async fn send(
        &self,
        object: &ObjectReference,
        key: Key,
        note: String,
    ) -> Result<(), kube::Error> {
        let now = Instant::now();
        let repeat = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache
                .swept
                .is_none_or(|t| now.duration_since(t) > Duration::from_secs(60))
            {
                cache
                    .series
                    .retain(|_, p| now.duration_since(p.last) < SERIES_TTL);
                cache.swept = Some(now);
            }
            cache
                .series
                .get_mut(&key)
                .filter(|p| now.duration_since(p.last) < SERIES_TTL)
                .map(|p| {
                    p.count += 1;
                    p.last = now;
                    (p.namespace.clone(), p.name.clone(), p.count)
                })
        };
        let timestamp = Timestamp::now();
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
            note: Some(note),
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
