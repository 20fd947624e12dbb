//! Reclaiming one volume: delete its storage with the plugin that made it,
//! then the PersistentVolume, then our finalizer.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use super::decide::{self, keys, VolumeDecision};
use super::events::VOLUME_FAILED_DELETE;
use super::{Context, Error};
use crate::metrics::Metrics;
use crate::provisioner::{DeleteState, Provisioner};

pub(super) async fn reconcile<P: Provisioner>(
    pv: Arc<PersistentVolume>,
    ctx: Arc<Context<P>>,
) -> Result<Action, Error> {
    let VolumeDecision::Delete { plugin } = decide::volume(&pv, &ctx.config.names) else {
        return Ok(Action::await_change());
    };
    let name = pv.name_any();
    let uid = pv.uid().unwrap_or_default();
    let threshold = ctx.config.failed_delete_threshold;
    if threshold > 0 && ctx.failures(&uid) >= threshold {
        tracing::warn!(volume = %name, "giving up after {threshold} failed deletes");
        return Ok(Action::await_change());
    }
    let class_label = Metrics::class(
        pv.spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
            .unwrap_or_default(),
    );
    let started = Instant::now();
    match ctx.provisioner.delete(&plugin, &pv).await {
        Ok(()) => {}
        Err(e) if e.state == DeleteState::Ignored => {
            tracing::info!(volume = %name, plugin, "plugin ignored the volume: {}", e.message);
            return Ok(Action::await_change());
        }
        Err(e) => {
            ctx.metrics
                .delete_failed_total
                .get_or_create(&class_label)
                .inc();
            ctx.events
                .warning(
                    &pv.object_ref(&()),
                    VOLUME_FAILED_DELETE,
                    "Deleting",
                    e.message.clone(),
                )
                .await;
            return Err(Error::Delete(e.message));
        }
    }
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    match volumes.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    remove_finalizer(&volumes, &pv).await?;
    ctx.succeed(&uid);
    ctx.metrics.delete_total.get_or_create(&class_label).inc();
    ctx.metrics
        .delete_duration
        .get_or_create(&class_label)
        .observe(started.elapsed().as_secs_f64());
    tracing::info!(volume = %name, plugin, "deleted volume and its storage");
    Ok(Action::await_change())
}

pub(super) fn error_policy<P: Provisioner>(
    pv: Arc<PersistentVolume>,
    error: &Error,
    ctx: Arc<Context<P>>,
) -> Action {
    let n = ctx.fail(&pv.uid().unwrap_or_default());
    tracing::warn!(volume = %pv.name_any(), failures = n, error = %error, "deleting failed; retrying");
    Action::requeue(ctx.backoff(n))
}

/// Removes our finalizer with a JSON patch that tests its position first, so
/// a concurrent change to the list is a conflict, not a lost finalizer.
async fn remove_finalizer(
    volumes: &Api<PersistentVolume>,
    pv: &PersistentVolume,
) -> Result<(), Error> {
    let Some(index) = pv.finalizers().iter().position(|f| f == keys::PV_FINALIZER) else {
        return Ok(());
    };
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": keys::PV_FINALIZER},
        {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
    ]))
    .map_err(|e| Error::Delete(e.to_string()))?;
    match volumes
        .patch(
            &pv.name_any(),
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
