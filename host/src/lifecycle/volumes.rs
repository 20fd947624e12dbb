//! Reclaiming one volume: delete its storage with the plugin that made it,
//! then the PersistentVolume, then our finalizer.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::decide::{self, keys, VolumeDecision};
use super::finalizer_conflicts::{Direction, Verdict};
use super::finalizers;
use super::janitor;
use super::nodes;
use super::reasons::{VOLUME_FAILED_DELETE, VOLUME_FINALIZER_CONFLICT};
use super::{AfterFailure, Context, Error};
use crate::metrics::Metrics;
use crate::provisioner::{
    annotations, missing_class, with_class_parameters, DeleteState, Provisioner,
};

pub(super) async fn reconcile<P: Provisioner>(
    pv: Arc<PersistentVolume>,
    ctx: Arc<Context<P>>,
) -> Result<Action, Error> {
    // Node mode: another node's volume is its host's, and costs no request,
    // but for the elected janitor's checks.
    if !nodes::volume_is_here(&pv, ctx.config.node.as_ref()) {
        if ctx.is_janitor() {
            return janitor::volume(&pv, &ctx).await;
        }
        return Ok(Action::await_change());
    }
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let plugin = match decide::volume(&pv, &ctx.config.names, ctx.config.add_finalizer) {
        VolumeDecision::Ignore => return Ok(Action::await_change()),
        VolumeDecision::AddFinalizer => {
            return write_finalizer(&volumes, &pv, &ctx, Direction::Add).await;
        }
        VolumeDecision::RemoveFinalizer => {
            return write_finalizer(&volumes, &pv, &ctx, Direction::Remove).await;
        }
        VolumeDecision::Delete { plugin } => plugin,
    };
    let name = pv.name_any();
    let uid = pv.uid().unwrap_or_default();
    if ctx.given_up(&uid, &version(&pv)) {
        tracing::debug!(volume = %name, "gave up deleting; waiting for a change");
        return Ok(Action::await_change());
    }
    let class_name = pv
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or_default();
    let class_label = Metrics::class(class_name);
    // The volume records only the parameters the policy grants; the plugin
    // gets the others from the class while it exists. A volume a replaced
    // provisioner made gets its plugin and parameters from a class too.
    // Either way in memory only, never written.
    let (plugin, pv, class_note) = match plugin {
        Some(plugin) => {
            let class = ctx.classes.get(&ObjectRef::new(class_name));
            let missing = missing_class(&pv, class.as_deref());
            let pv = Arc::new(with_class_parameters(&pv, class.as_deref()));
            (plugin, pv, missing)
        }
        None => match adopt(&pv, &ctx) {
            Ok((plugin, pv)) => (plugin, pv, None),
            Err(message) => {
                ctx.events.warning(
                    &pv.object_ref(&()),
                    VOLUME_FAILED_DELETE,
                    "Deleting",
                    message.clone(),
                );
                return Ok(after_failure(&pv, &ctx, &message).await);
            }
        },
    };
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
            let message = match class_note {
                Some(note) => format!("{note}. {}", e.message),
                None => e.message,
            };
            ctx.events.warning(
                &pv.object_ref(&()),
                VOLUME_FAILED_DELETE,
                "Deleting",
                message.clone(),
            );
            return Ok(after_failure(&pv, &ctx, &message).await);
        }
    }
    match volumes.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    finalizers::remove(&volumes, &pv, keys::PV_FINALIZER).await?;
    ctx.succeed(&uid);
    ctx.finalizer_conflicts.forget(&uid);
    ctx.metrics.delete_total.get_or_create(&class_label).inc();
    ctx.metrics
        .delete_duration
        .get_or_create(&class_label)
        .observe(started.elapsed().as_secs_f64());
    tracing::info!(volume = %name, plugin, "deleted volume and its storage");
    Ok(Action::await_change())
}

/// Adds or removes our finalizer as `--add-finalizer` says, unless another
/// controller keeps undoing it: then says so once and leaves it alone.
async fn write_finalizer<P>(
    volumes: &Api<PersistentVolume>,
    pv: &PersistentVolume,
    ctx: &Context<P>,
    direction: Direction,
) -> Result<Action, Error> {
    let uid = pv.uid().unwrap_or_default();
    match ctx
        .finalizer_conflicts
        .before(&uid, direction, Instant::now())
    {
        Verdict::Write => {}
        Verdict::Stopped => {
            tracing::debug!(volume = %pv.name_any(), "another controller keeps undoing our finalizer; left alone");
            return Ok(Action::await_change());
        }
        Verdict::Conflict { undone } => {
            finalizer_conflict(pv, ctx, direction, undone).await;
            return Ok(Action::await_change());
        }
    }
    let written = match direction {
        Direction::Add => {
            finalizers::add_written(volumes, pv, keys::PV_FINALIZER)
                .await?
                .1
        }
        Direction::Remove => finalizers::remove_written(volumes, pv, keys::PV_FINALIZER).await?,
    };
    // A write found unneeded on a fresher copy proves nothing.
    if written {
        ctx.finalizer_conflicts
            .wrote(&uid, direction, Instant::now());
        ctx.finalizer_conflicts
            .prune(|| ctx.volumes.state().iter().filter_map(|v| v.uid()).collect());
    }
    Ok(Action::await_change())
}

/// Says (once) that the host stopped writing the finalizer of `pv`.
async fn finalizer_conflict<P>(
    pv: &PersistentVolume,
    ctx: &Context<P>,
    direction: Direction,
    undone: u32,
) {
    let (undoing, ours) = match direction {
        Direction::Add => ("removing", "adding"),
        Direction::Remove => ("adding", "removing"),
    };
    let name = decide::provisioned_by(pv, &ctx.config.names).unwrap_or(&ctx.config.names.primary);
    let message = format!(
        "Another controller keeps {undoing} {finalizer} on this volume: it undid this host's \
         last {undone} writes. Is a replaced provisioner still running for {name} with a \
         different --add-finalizer (this host has --add-finalizer={flag})? This host stopped \
         {ours} it on this volume; stop the other provisioner or make the flags agree, then \
         restart this host.",
        finalizer = keys::PV_FINALIZER,
        flag = ctx.config.add_finalizer,
    );
    tracing::error!(volume = %pv.name_any(), finalizer = keys::PV_FINALIZER, undone, provisioner = name, "another controller keeps {undoing} our finalizer; stopped {ours} it on this volume until the host restarts");
    ctx.metrics
        .volume_finalizer_conflicts
        .get_or_create(&Metrics::class(
            pv.spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
                .unwrap_or_default(),
        ))
        .inc();
    ctx.events.warning(
        &pv.object_ref(&()),
        VOLUME_FINALIZER_CONFLICT,
        "Finalizing",
        message,
    );
}

/// The plugin that deletes an adopted volume, and the volume as it would
/// look had that plugin made it with its class's parameters.
fn adopt<P>(
    pv: &PersistentVolume,
    ctx: &Context<P>,
) -> Result<(String, Arc<PersistentVolume>), String> {
    let class = |name: &str| ctx.classes.get(&ObjectRef::new(name));
    let adoption = decide::adoption(pv, &ctx.config.names, &ctx.config.adopt_volumes, class)?;
    let mut as_made = pv.clone();
    as_made
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(annotations::PLUGIN.to_owned(), adoption.plugin.clone());
    // The adopting class, which may be another than the volume's own.
    let adopting = class(&adoption.class);
    let as_made = with_class_parameters(&as_made, adopting.as_deref());
    tracing::info!(volume = %pv.name_any(), plugin = %adoption.plugin, class = %adoption.class, "deleting a volume made by a replaced provisioner (adopted)");
    Ok((adoption.plugin, Arc::new(as_made)))
}

pub(super) fn error_policy<P: Provisioner>(
    pv: Arc<PersistentVolume>,
    error: &Error,
    ctx: Arc<Context<P>>,
) -> Action {
    let failure = failed(&pv, &ctx, &error.to_string());
    if let AfterFailure::GiveUp(n) = failure {
        // Error policies cannot wait: publish on the side.
        tokio::spawn(give_up_event(&pv, &ctx, n, &error.to_string()));
    }
    ctx.after(failure)
}

/// A threshold gives up on one version of the volume; a change means one
/// more try.
fn version(pv: &PersistentVolume) -> String {
    pv.resource_version().unwrap_or_default()
}

/// Counts a failed delete of `pv` against the threshold, and logs.
fn failed<P>(pv: &PersistentVolume, ctx: &Context<P>, error: &str) -> AfterFailure {
    let threshold = ctx.config.failed_delete_threshold;
    let failure = ctx.fail(&pv.uid().unwrap_or_default(), threshold, &version(pv));
    match failure {
        AfterFailure::Retry { failures, after } => {
            tracing::warn!(volume = %pv.name_any(), failures, retry_in = ?after, error, "deleting failed; retrying")
        }
        AfterFailure::GiveUp(n) => {
            tracing::error!(volume = %pv.name_any(), failures = n, threshold, error, "deleting failed; giving up until the volume changes")
        }
    }
    failure
}

/// Counts a failure; on giving up, says so on the volume.
async fn after_failure<P>(pv: &PersistentVolume, ctx: &Context<P>, error: &str) -> Action {
    let failure = failed(pv, ctx, error);
    if let AfterFailure::GiveUp(n) = failure {
        give_up_event(pv, ctx, n, error).await;
    }
    ctx.after(failure)
}

/// The Warning that says the host stopped retrying, and how to make it retry.
fn give_up_event<P>(
    pv: &PersistentVolume,
    ctx: &Context<P>,
    failures: u32,
    error: &str,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let message = format!(
        "Gave up deleting the storage after {failures} failed attempts (--failed-delete-threshold={}); \
         the last error: {error}. The volume and its storage are kept. The host tries again once \
         {}each time the volume changes (e.g. `kubectl annotate pv {} wasmprov.io/retry=\"$(date +%s)\" \
         --overwrite`), and from scratch when the host restarts.",
        ctx.config.failed_delete_threshold,
        ctx.resync_note(),
        pv.name_any(),
    );
    let events = ctx.events.clone();
    let reference = pv.object_ref(&());
    async move {
        events.warning(&reference, VOLUME_FAILED_DELETE, "Deleting", message);
    }
}
