//! Events on claims and volumes, with the Go library's reasons so existing
//! alerts and `kubectl describe` habits keep working.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

pub const PROVISIONING: &str = "Provisioning";
pub const PROVISIONING_SUCCEEDED: &str = "ProvisioningSucceeded";
pub const PROVISIONING_FAILED: &str = "ProvisioningFailed";
pub const PROVISIONING_CLEANUP_FAILED: &str = "ProvisioningCleanupFailed";
pub const VOLUME_FAILED_DELETE: &str = "VolumeFailedDelete";

/// Publishes events; a failure to publish is logged, never fatal.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    pub fn new(recorder: Recorder) -> Self {
        Self { recorder }
    }

    pub async fn normal(&self, object: &ObjectReference, reason: &str, action: &str, note: String) {
        self.publish(object, EventType::Normal, reason, action, note)
            .await;
    }

    pub async fn warning(
        &self,
        object: &ObjectReference,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.publish(object, EventType::Warning, reason, action, note)
            .await;
    }

    async fn publish(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            // The API server rejects notes over 1 KiB.
            note: Some(crate::text::truncate(&note, 1000).into_owned()),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, object).await {
            tracing::warn!(reason, object = ?object.name, error = %e, "cannot publish event");
        }
    }
}
