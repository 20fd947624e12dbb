//! Provisioning one claim: decide, call the backend, save the volume (with
//! retries, cleaning the backend up if it cannot be saved), report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{ConstantBuilder, Retryable};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::capacity;
use super::decide::{self, keys, ClaimDecision};
use super::finalizers;
use super::in_progress::{self, Finish};
use super::janitor;
use super::nodes;
use super::reasons::*;
use super::resize;
use super::{lock, AfterFailure, Context, Error};
use crate::metrics::Metrics;
use crate::provisioner::{DeleteState, PluginInfo, ProvisionOptions, ProvisionState, Provisioner};

/// How long a claim's missing class is taken for the class watch lagging
/// (the PV controller handed the claim over, so the class existed), and
/// how often it is looked for meanwhile; after that it was deleted, and the
/// claim fails like any other.
const CLASS_LAG_GRACE: Duration = Duration::from_secs(2);
const CLASS_LAG_RECHECK: Duration = Duration::from_millis(500);
/// How long to wait before looking again at a claim that cannot be
/// provisioned as it is.
const SLOW_RETRY: Duration = Duration::from_secs(300);

pub(super) async fn reconcile<P: Provisioner>(
    claim: Arc<PersistentVolumeClaim>,
    ctx: Arc<Context<P>>,
) -> Result<Action, Error> {
    let class_name = decide::claim_class(&claim).to_owned();
    // Another provisioner's claim: nothing to do, and no request.
    if !decide::is_ours(&claim, &ctx.config.names) {
        return Ok(Action::await_change());
    }
    // Node mode: another node's claim is its host's, and costs no request,
    // but for the elected janitor's checks.
    if !nodes::claim_is_here(&claim, ctx.config.node.as_ref()) {
        if ctx.is_janitor() {
            return janitor::claim(&claim, &ctx).await;
        }
        return Ok(Action::await_change());
    }
    let class = ctx.classes.get(&ObjectRef::new(&class_name));
    let decision = decide::claim(&claim, class.as_deref(), &ctx.config.names, |p| {
        ctx.provisioner.plugin(p)
    });
    let reference = claim.object_ref(&());
    if !matches!(decision, ClaimDecision::WaitForClass(_)) {
        lock(&ctx.class_missing_since).remove(&claim.uid().unwrap_or_default());
    }
    match decision {
        ClaimDecision::Ignore => Ok(resize::reconcile(&claim, &ctx).await),
        ClaimDecision::WaitForNode => Ok(Action::await_change()),
        ClaimDecision::WaitForClass(name) => Ok(class_missing(&claim, &name, &ctx).await),
        ClaimDecision::Refuse(message) => {
            ctx.events
                .warning(&reference, PROVISIONING_FAILED, "Provisioning", message);
            Ok(Action::requeue(SLOW_RETRY))
        }
        ClaimDecision::Provision { plugin, info } => {
            let class = class.ok_or_else(|| Error::Provision("class vanished".into()))?;
            provision(&claim, (*class).clone(), &plugin, &info, &ctx).await
        }
        ClaimDecision::DropFinalizer => {
            release(&claim, &ctx).await?;
            Ok(Action::await_change())
        }
        ClaimDecision::FinishDeleted { plugin } => {
            let class = class.ok_or_else(|| Error::Provision("class vanished".into()))?;
            finish_deleted(&claim, (*class).clone(), &plugin, &ctx).await
        }
    }
}

pub(super) fn error_policy<P: Provisioner>(
    claim: Arc<PersistentVolumeClaim>,
    error: &Error,
    ctx: Arc<Context<P>>,
) -> Action {
    let failure = failed(&claim, &ctx, &error.to_string());
    if let AfterFailure::GiveUp(n) = failure {
        give_up_event(&claim, &ctx, n, &error.to_string());
    }
    ctx.after(failure)
}

/// The version of what provisioning a claim depends on: the claim's spec
/// and annotations, and its class. A threshold gives up on one version; a
/// change means one more try. Not the claim's resourceVersion: the host's
/// own finalizer patches and status updates change that.
fn version<P>(claim: &PersistentVolumeClaim, ctx: &Context<P>) -> String {
    use std::hash::{Hash, Hasher};
    let class = ctx
        .classes
        .get(&ObjectRef::new(decide::claim_class(claim)))
        .and_then(|c| c.resource_version())
        .unwrap_or_default();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&(&claim.spec, &claim.metadata.annotations))
        .unwrap_or_default()
        .hash(&mut hasher);
    format!("{:016x}/{class}", hasher.finish())
}

/// Counts a failed provision of `claim` against the threshold, and logs.
fn failed<P>(claim: &PersistentVolumeClaim, ctx: &Context<P>, error: &str) -> AfterFailure {
    failed_at_least(claim, ctx, error, Duration::ZERO)
}

/// [`failed`], retrying no sooner than `min_delay`.
fn failed_at_least<P>(
    claim: &PersistentVolumeClaim,
    ctx: &Context<P>,
    error: &str,
    min_delay: Duration,
) -> AfterFailure {
    let threshold = ctx.config.failed_provision_threshold;
    let failure = ctx.fail_at_least(
        &claim.uid().unwrap_or_default(),
        threshold,
        &version(claim, ctx),
        min_delay,
    );
    match failure {
        AfterFailure::Retry { failures, after } => {
            tracing::warn!(claim = %key(claim), failures, retry_in = ?after, error, "provisioning failed; retrying")
        }
        AfterFailure::GiveUp(n) => {
            tracing::error!(claim = %key(claim), failures = n, threshold, error, "provisioning failed; giving up until the claim or its StorageClass changes")
        }
    }
    failure
}

/// A claim handed to this host whose class is not in the cache. Handed
/// over, so the PV controller saw the class: for a moment that is our
/// class watch lagging (looked at again from the cache, no request), after
/// that the class was deleted, and the claim fails like any other (event,
/// metric, backoff, give-up), as in the Go library. A recreated class wakes
/// the claim (the class watch) and is a new version to try at once.
async fn class_missing<P>(claim: &PersistentVolumeClaim, class: &str, ctx: &Context<P>) -> Action {
    let uid = claim.uid().unwrap_or_default();
    let since = *lock(&ctx.class_missing_since)
        .entry(uid.clone())
        .or_insert_with(Instant::now);
    if since.elapsed() < CLASS_LAG_GRACE {
        tracing::debug!(claim = %key(claim), class, "waiting for the claim's StorageClass");
        return Action::requeue(CLASS_LAG_RECHECK);
    }
    let this_version = version(claim, ctx);
    if ctx.given_up(&uid, &this_version) {
        return Action::await_change();
    }
    if let Some(left) = ctx.backing_off(&uid, &this_version) {
        return Action::requeue(left);
    }
    ctx.metrics
        .provision_failed_total
        .get_or_create(&Metrics::provision_labels(claim))
        .inc();
    let message = format!(
        "StorageClass {class:?} not found: it was deleted after the claim was handed to this \
         host; recreate the class, or recreate the claim with an existing class"
    );
    reported_failure(claim, ctx, &message, Duration::ZERO).await
}

/// The Warning that says the host stopped retrying, and how to make it retry.
fn give_up_event<P>(claim: &PersistentVolumeClaim, ctx: &Context<P>, failures: u32, error: &str) {
    let message = format!(
        "Gave up provisioning after {failures} failed attempts (--failed-provision-threshold={}); \
         the last error: {error}. The host tries again once {}each time the claim or its \
         StorageClass changes (e.g. `kubectl annotate pvc {} -n {} wasmprov.io/retry=\"$(date +%s)\" \
         --overwrite`), and from scratch if the claim is recreated or the host restarts.",
        ctx.config.failed_provision_threshold,
        ctx.resync_note(),
        claim.name_any(),
        claim.namespace().unwrap_or_default(),
    );
    ctx.events.warning(
        &claim.object_ref(&()),
        PROVISIONING_FAILED,
        "Provisioning",
        message,
    );
}

fn key(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        claim.namespace().unwrap_or_default(),
        claim.name_any()
    )
}

async fn provision<P: Provisioner>(
    claim: &PersistentVolumeClaim,
    class: StorageClass,
    plugin: &str,
    info: &PluginInfo,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let reference = claim.object_ref(&());
    let uid = claim.uid().unwrap_or_default();
    let Some(pv_name) = ProvisionOptions::pv_name_for(claim) else {
        return Ok(Action::await_change());
    };
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    if let Some(wait) = nothing_to_do_yet(claim, &pv_name, ctx).await? {
        return Ok(wait);
    }
    if info.node_local && ctx.config.node.is_none() {
        if let Some(refused) = node_local_refused_here(claim, plugin, ctx).await {
            return Ok(refused);
        }
    }
    let selected_node = match selected_node(claim, ctx).await? {
        Ok(node) => node,
        Err(gone) => return Ok(gone),
    };

    // Node mode: the room the claim asks for is promised to it until its
    // volume is saved, or let go.
    let promised = capacity::promise_room(
        claim,
        &pv_name,
        plugin,
        info,
        &class,
        selected_node.as_ref(),
        ctx,
    );
    let promise = match promised.await {
        Ok(promise) => promise,
        Err(refused) => {
            ctx.metrics
                .provision_failed_total
                .get_or_create(&Metrics::provision_labels(claim))
                .inc();
            return provision_failed(claim, refused, ctx).await;
        }
    };

    // From here the backend may make storage: with --claim-finalizer the
    // claim cannot disappear until that storage is saved or removed.
    let claim_now = if ctx.config.claim_finalizer {
        finalizers::add(&claims_api(claim, ctx), claim, keys::CLAIM_FINALIZER).await?
    } else {
        claim.clone()
    };
    ctx.events.starting(
        &reference,
        PROVISIONING,
        "Provisioning",
        format!(
            "External provisioner is provisioning volume for claim \"{}\"",
            key(claim)
        ),
    );
    let started = Instant::now();
    let class_label = Metrics::provision_labels(claim);
    let opts = ProvisionOptions {
        pv_name: pv_name.clone(),
        claim: claim.clone(),
        class,
        selected_node,
    };
    let mut pv = match ctx.provisioner.provision(plugin, &opts).await {
        Ok(pv) => pv,
        Err(e) => {
            ctx.metrics
                .provision_failed_total
                .get_or_create(&class_label)
                .inc();
            match e.state {
                ProvisionState::InBackground => ctx.in_progress.track(&uid, plugin, &opts),
                // "Nothing changed": whatever an earlier in-background
                // answer started may still be under way, so the claim stays
                // tracked if it was (the Go library leaves claimsInProgress
                // alone on ProvisioningNoChange). Forgetting it here would
                // leak that storage if the claim is deleted now.
                ProvisionState::NoChange => {}
                _ => ctx.in_progress.forget(&uid),
            }
            if !matches!(
                e.state,
                ProvisionState::InBackground | ProvisionState::NoChange
            ) {
                // A final answer: the backend made nothing.
                release_or_log(&claim_now, ctx).await;
            }
            return provision_failed(claim, e, ctx).await;
        }
    };
    ctx.in_progress.forget(&uid);
    if let Some(own) = &ctx.config.node {
        if let Err(refusal) = nodes::pin(&mut pv, own, plugin) {
            return discard(&claim_now, plugin, &pv, &opts, "was refused", refusal, ctx).await;
        }
    }
    // Only a volume reclaimed by deletion has storage to guard.
    let reclaim_delete = pv
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        == Some("Delete");
    if ctx.config.add_finalizer && reclaim_delete {
        pv.metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(keys::PV_FINALIZER.to_owned());
    }

    match save(&volumes, &pv, &uid, &ctx.config).await {
        Ok(()) => {
            if let Some(promise) = promise {
                promise.keep();
            }
            remember_saved(&uid, ctx);
            ctx.succeed(&uid);
            release_or_log(&claim_now, ctx).await;
            ctx.metrics
                .provision_total
                .get_or_create(&class_label)
                .inc();
            ctx.metrics
                .provision_duration
                .get_or_create(&class_label)
                .observe(started.elapsed().as_secs_f64());
            ctx.events.normal(
                &reference,
                PROVISIONING_SUCCEEDED,
                "Provisioning",
                format!("Successfully provisioned volume {pv_name}"),
            );
            tracing::info!(claim = %key(claim), volume = %pv_name, plugin, "provisioned");
            Ok(Action::await_change())
        }
        Err(save_error) => {
            let message = format!("failed to save PersistentVolume {pv_name}: {save_error}");
            discard(
                &claim_now,
                plugin,
                &pv,
                &opts,
                "could not be saved",
                message,
                ctx,
            )
            .await
        }
    }
}

/// Whether the claim needs no plugin call now, and what to do instead: its
/// volume exists already (a restart or a lost answer), was saved moments
/// ago, or the claim is given up on or backing off.
async fn nothing_to_do_yet<P>(
    claim: &PersistentVolumeClaim,
    pv_name: &str,
    ctx: &Context<P>,
) -> Result<Option<Action>, Error> {
    let uid = claim.uid().unwrap_or_default();
    // Like the Go library, look in the watch's cache rather than ask the
    // API server; if the cache lags (or is still filling at start), the
    // plugin is asked again for the same volume and saving it finds our
    // own (AlreadyExists is success). A volume this host saved moments ago
    // is not asked for again while the watch catches up.
    //
    // Do not wait for the cache here: `Store::wait_until_ready` (kube-runtime
    // 5) wakes only the last of several concurrent waiters, and the volumes
    // controller itself waits on this store, so a reconcile waiting here at
    // start could hang forever (seen under CPU load: a claim never bound).
    if let Some(existing) = ctx.volumes.get(&ObjectRef::new(pv_name)) {
        if claim_uid(&existing).as_deref() == Some(uid.as_str()) {
            if existing.metadata.deletion_timestamp.is_some() {
                // Reclaimed, the object not yet gone, and this view of the
                // claim is stale: provisioning now would make storage that
                // the dying volume cannot stand for. Look again shortly.
                tracing::info!(claim = %key(claim), volume = %pv_name, "the claim's volume is being deleted; waiting for it to go");
                return Ok(Some(Action::requeue(ctx.config.retry_base)));
            }
            lock(&ctx.recently_saved).remove(&uid);
            ctx.succeed(&uid);
            release(claim, ctx).await?;
            return Ok(Some(Action::await_change()));
        }
    } else if let Some(left) = saved_moments_ago(&uid, ctx) {
        tracing::debug!(claim = %key(claim), volume = %pv_name, "saved moments ago; waiting for the volume watch");
        return Ok(Some(Action::requeue(left)));
    }

    let this_version = version(claim, ctx);
    if ctx.given_up(&uid, &this_version) {
        tracing::debug!(claim = %key(claim), "gave up provisioning; waiting for a change");
        return Ok(Some(Action::await_change()));
    }
    // Woken during a backoff by a change that is not the claim's own (the
    // watch event of our finalizer patch): the backoff still holds.
    if let Some(left) = ctx.backing_off(&uid, &this_version) {
        tracing::debug!(claim = %key(claim), retry_in = ?left, "backing off");
        return Ok(Some(Action::requeue(left)));
    }
    Ok(None)
}

/// The Node the scheduler selected for the claim (WaitForFirstConsumer),
/// whose labels go to the plugin; if it no longer exists, the claim is
/// handed back to the scheduler and the action to take is the error.
async fn selected_node<P>(
    claim: &PersistentVolumeClaim,
    ctx: &Context<P>,
) -> Result<Result<Option<Node>, Action>, Error> {
    let Some(node) = decide::selected_node(claim) else {
        return Ok(Ok(None));
    };
    if let Some(found) = Api::<Node>::all(ctx.client.clone()).get_opt(node).await? {
        return Ok(Ok(Some(found)));
    }
    let message =
        format!("the selected node {node} does not exist; asking the scheduler for another one");
    ctx.events.warning(
        &claim.object_ref(&()),
        PROVISIONING_FAILED,
        "Provisioning",
        message,
    );
    unselect_node(claim, ctx).await?;
    Ok(Err(Action::await_change()))
}

/// The storage of a volume that will not be saved (it could not be, or it
/// was refused) would never be found again: remove it, with the retries of
/// the save (the Go library's backoffStore), and report why it went.
async fn discard<P: Provisioner>(
    claim_now: &PersistentVolumeClaim,
    plugin: &str,
    pv: &PersistentVolume,
    opts: &ProvisionOptions,
    what_happened: &str,
    message: String,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let reference = opts.claim.object_ref(&());
    ctx.metrics
        .provision_failed_total
        .get_or_create(&Metrics::provision_labels(&opts.claim))
        .inc();
    let with_class = crate::provisioner::with_class_parameters(pv, Some(&opts.class));
    match clean_up(plugin, &with_class, ctx).await {
        Ok(()) => release_or_log(claim_now, ctx).await,
        Err(e) => {
            let tries = if e.state == DeleteState::Failed {
                let n = ctx.config.save_attempts.max(1);
                let s = if n == 1 { "" } else { "s" };
                format!(" (tried {n} time{s}, --save-attempts)")
            } else {
                String::new()
            };
            let cleanup_failed = format!(
                "Volume {} {what_happened} and deleting its storage failed too{tries}; \
                 it may have leaked: {e}",
                opts.pv_name
            );
            ctx.events.warning(
                &reference,
                PROVISIONING_CLEANUP_FAILED,
                "Provisioning",
                cleanup_failed,
            );
        }
    }
    ctx.events.warning(
        &reference,
        PROVISIONING_FAILED,
        "Provisioning",
        message.clone(),
    );
    Err(Error::Provision(message))
}

/// A central host asked to make node-local storage (`hostPath`, `local`)
/// in a cluster of several nodes refuses: the storage would be made on the
/// node the host runs on, whatever node the claim's pods run on. The
/// refusal, if any, counts as a failure (slow retries, giving up).
async fn node_local_refused_here<P>(
    claim: &PersistentVolumeClaim,
    plugin: &str,
    ctx: &Context<P>,
) -> Option<Action> {
    let class = decide::claim_class(claim);
    let message = match ctx.node_count.more_than_one(&ctx.client).await {
        Ok(false) => return None,
        Ok(true) => format!(
            "plugin {plugin} (StorageClass {class}) makes hostPath/local volumes, which a central \
             host makes on the node it runs on, and this cluster has more than one node: serve \
             the class from the node side (give the plugin's policy entry `runsOn: node`, and \
             the class the node hosts' provisioner name; see deploy/README.md)"
        ),
        Err(e) => format!(
            "plugin {plugin} (StorageClass {class}) makes hostPath/local volumes, which are right \
             only on a single-node cluster when made by a central host, and the cluster's nodes \
             cannot be counted ({e}): allow this host to list nodes, or serve the class from the \
             node side (`runsOn: node`)"
        ),
    };
    ctx.metrics
        .provision_failed_total
        .get_or_create(&Metrics::provision_labels(claim))
        .inc();
    Some(reported_failure(claim, ctx, &message, SLOW_RETRY).await)
}

async fn provision_failed<P: Provisioner>(
    claim: &PersistentVolumeClaim,
    e: crate::provisioner::ProvisionError,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let reference = claim.object_ref(&());
    let message = format!(
        "failed to provision volume with StorageClass {:?}: {}",
        decide::claim_class(claim),
        e.message
    );
    match e.state {
        ProvisionState::NoChange => Ok(after_failure(claim, ctx, &message).await),
        ProvisionState::Reschedule if decide::selected_node(claim).is_some() => {
            ctx.events
                .warning(&reference, PROVISIONING_FAILED, "Provisioning", message);
            unselect_node(claim, ctx).await?;
            Ok(Action::await_change())
        }
        ProvisionState::Reschedule => {
            // No scheduler chose a node (an Immediate class): there is
            // nobody to ask for another, so it is a failure to retry.
            let message = format!("{message} (the claim has no selected node to give up)");
            Ok(reported_failure(claim, ctx, &message, Duration::ZERO).await)
        }
        // Nothing will change until the claim or class does: retry slowly,
        // and count it towards giving up like any failure.
        ProvisionState::InvalidArgument => {
            Ok(reported_failure(claim, ctx, &message, SLOW_RETRY).await)
        }
        ProvisionState::Failed | ProvisionState::InBackground => {
            Ok(reported_failure(claim, ctx, &message, Duration::ZERO).await)
        }
    }
}

/// A failure the claim's events show: a Warning, then [`after_failure`].
async fn reported_failure<P>(
    claim: &PersistentVolumeClaim,
    ctx: &Context<P>,
    message: &str,
    min_delay: Duration,
) -> Action {
    ctx.events.warning(
        &claim.object_ref(&()),
        PROVISIONING_FAILED,
        "Provisioning",
        message.to_owned(),
    );
    after_failure_at_least(claim, ctx, message, min_delay).await
}

/// Counts a failure; on giving up, says so on the claim.
async fn after_failure<P>(claim: &PersistentVolumeClaim, ctx: &Context<P>, error: &str) -> Action {
    after_failure_at_least(claim, ctx, error, Duration::ZERO).await
}

/// [`after_failure`], retrying no sooner than `min_delay`.
async fn after_failure_at_least<P>(
    claim: &PersistentVolumeClaim,
    ctx: &Context<P>,
    error: &str,
    min_delay: Duration,
) -> Action {
    let failure = failed_at_least(claim, ctx, error, min_delay);
    if let AfterFailure::GiveUp(n) = failure {
        give_up_event(claim, ctx, n, error);
    }
    ctx.after(failure)
}

/// Finishes the provisioning of a claim deleted while it carried our
/// finalizer (`--claim-finalizer`): whatever the backend made for it is
/// removed (or saved, for Retain) before the claim is let go.
async fn finish_deleted<P: Provisioner>(
    claim: &PersistentVolumeClaim,
    class: StorageClass,
    plugin: &str,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let uid = claim.uid().unwrap_or_default();
    let Some(pv_name) = ProvisionOptions::pv_name_for(claim) else {
        return Ok(Action::await_change());
    };
    // Saved before the claim went: the claim's deletion releases the volume
    // and reclaiming it removes the storage.
    let saved = match ctx.volumes.get(&ObjectRef::new(&pv_name)) {
        Some(pv) => Some(pv),
        None => Api::<PersistentVolume>::all(ctx.client.clone())
            .get_opt(&pv_name)
            .await?
            .map(Arc::new),
    };
    if saved.is_some_and(|pv| claim_uid(&pv).as_deref() == Some(uid.as_str())) {
        release(claim, ctx).await?;
        return Ok(Action::await_change());
    }
    // The plugin is asked for the same volume again (provisioning is
    // idempotent by volume name), so that it can be deleted.
    let selected_node = match decide::selected_node(claim) {
        Some(node) => Api::<Node>::all(ctx.client.clone()).get_opt(node).await?,
        None => None,
    };
    let opts = ProvisionOptions {
        pv_name,
        claim: claim.clone(),
        class,
        selected_node,
    };
    match in_progress::finish(ctx, plugin, &opts).await {
        Ok(Finish::Done) => {
            ctx.in_progress.forget(&uid);
            ctx.succeed(&uid);
            release(claim, ctx).await?;
            Ok(Action::await_change())
        }
        Ok(Finish::Pending(message)) => {
            // `kubectl delete` is waiting on this claim: say why, once (a
            // repeat only grows the event's series).
            let note = format!(
                "The claim is deleted, but its backend is still creating its storage ({message}); \
                 the host removes that storage once it exists, then lets the claim go (finalizer {})",
                keys::CLAIM_FINALIZER
            );
            ctx.events
                .normal(&claim.object_ref(&()), PROVISIONING, "Provisioning", note);
            Ok(after_failure(claim, ctx, &message).await)
        }
        Err(e) => {
            let message = format!(
                "{e}. The claim is kept (finalizer {}) until this succeeds",
                keys::CLAIM_FINALIZER
            );
            ctx.events.warning(
                &claim.object_ref(&()),
                PROVISIONING_CLEANUP_FAILED,
                "Provisioning",
                message.clone(),
            );
            Ok(after_failure(claim, ctx, &message).await)
        }
    }
}

fn claims_api<P>(claim: &PersistentVolumeClaim, ctx: &Context<P>) -> Api<PersistentVolumeClaim> {
    Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default())
}

/// Lets the claim go: its storage is a saved volume now, or does not exist.
/// `claim` must be as recent as the finalizer it carries.
pub(super) async fn release<P>(
    claim: &PersistentVolumeClaim,
    ctx: &Context<P>,
) -> Result<(), kube::Error> {
    finalizers::remove(&claims_api(claim, ctx), claim, keys::CLAIM_FINALIZER).await
}

/// [`release`] where a failure is not this reconcile's: the claim's next
/// change (binding, deletion) comes back to it.
async fn release_or_log<P>(claim: &PersistentVolumeClaim, ctx: &Context<P>) {
    if let Err(e) = release(claim, ctx).await {
        tracing::warn!(claim = %key(claim), error = %e, "cannot remove the claim finalizer yet");
    }
}

/// Asks the scheduler for another node (the `reschedule` state): removes
/// the node this claim was provisioned for, unless the scheduler has chosen
/// again meanwhile (the patch tests the value first; its new choice gets a
/// reconcile of its own).
pub(super) async fn unselect_node<P>(
    claim: &PersistentVolumeClaim,
    ctx: &Context<P>,
) -> Result<(), Error> {
    let Some(node) = decide::selected_node(claim) else {
        return Ok(());
    };
    let path = format!(
        "/metadata/annotations/{}",
        keys::SELECTED_NODE.replace('~', "~0").replace('/', "~1")
    );
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": path, "value": node},
        {"op": "remove", "path": path},
    ]))
    .map_err(|e| Error::Provision(format!("building the selected-node patch: {e}")))?;
    match claims_api(claim, ctx)
        .patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // The test failed: the scheduler picked another node already.
        Err(kube::Error::Api(e)) if e.code == 422 => {
            tracing::info!(claim = %key(claim), node, "the scheduler selected another node meanwhile");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

fn claim_uid(pv: &PersistentVolume) -> Option<String> {
    pv.spec.as_ref()?.claim_ref.as_ref()?.uid.clone()
}

/// The retries of saving a volume and of deleting its storage when it
/// cannot be saved: `--save-attempts` tries, `--save-retry-interval` apart
/// (the Go library's `CreateProvisionedPVRetryCount` and
/// `CreateProvisionedPVInterval`, a linear backoff).
fn save_retries(config: &super::Config) -> ConstantBuilder {
    ConstantBuilder::default()
        .with_delay(config.save_retry_interval)
        .with_max_times(config.save_attempts.saturating_sub(1))
}

/// Deletes the storage of a volume that could not be saved, retrying
/// failures as [`save_retries`] says. `ignored` is a final answer.
async fn clean_up<P: Provisioner>(
    plugin: &str,
    pv: &PersistentVolume,
    ctx: &Context<P>,
) -> Result<(), crate::provisioner::DeleteError> {
    let delete = || ctx.provisioner.delete(plugin, pv);
    delete
        .retry(save_retries(&ctx.config))
        .when(|e| e.state == DeleteState::Failed)
        .notify(|e, after| {
            tracing::warn!(volume = %pv.name_any(), error = %e, retry_in = ?after, "deleting the storage of an unsaved volume failed; retrying");
        })
        .await
}

/// How long a saved volume is trusted to be on its way through the volume
/// watch: a few seconds at most on a loaded API server.
const SAVED_MEMORY: std::time::Duration = std::time::Duration::from_secs(30);

fn remember_saved<P>(uid: &str, ctx: &Context<P>) {
    let mut saved = lock(&ctx.recently_saved);
    saved.retain(|_, at| at.elapsed() < SAVED_MEMORY);
    saved.insert(uid.to_owned(), std::time::Instant::now());
}

/// Whether this host saved the claim's volume within [`SAVED_MEMORY`]:
/// how much of it is left.
fn saved_moments_ago<P>(uid: &str, ctx: &Context<P>) -> Option<std::time::Duration> {
    let at = *lock(&ctx.recently_saved).get(uid)?;
    SAVED_MEMORY.checked_sub(at.elapsed())
}

/// Creates the volume, retrying transient API errors as [`save_retries`]
/// says. AlreadyExists is success when the existing volume is this claim's
/// (a previous attempt whose answer was lost) and is not being deleted.
async fn save(
    volumes: &Api<PersistentVolume>,
    pv: &PersistentVolume,
    claim_uid_want: &str,
    config: &super::Config,
) -> Result<(), kube::Error> {
    let create = || async {
        match volumes.create(&PostParams::default(), pv).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(mut s)) if s.code == 409 => {
                match volumes.get_opt(&pv.name_any()).await? {
                    Some(existing) if claim_uid(&existing).as_deref() == Some(claim_uid_want) => {
                        if existing.metadata.deletion_timestamp.is_none() {
                            return Ok(());
                        }
                        // Reclaimed already, the object not yet gone: a stale
                        // view of the claim provisioned it again. Counting
                        // that as saved would leak the storage just made
                        // (kubernetes-csi/external-provisioner#1469); failing
                        // the save has it removed.
                        s.message = format!(
                            "{} and is being deleted (its storage was reclaimed)",
                            s.message
                        );
                        Err(kube::Error::Api(s))
                    }
                    _ => Err(kube::Error::Api(s)),
                }
            }
            Err(e) => Err(e),
        }
    };
    create
        .retry(save_retries(config))
        .when(is_transient)
        .notify(|e, after| {
            tracing::warn!(volume = %pv.name_any(), error = %e, retry_in = ?after, "saving the volume failed; retrying");
        })
        .await
}

fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}
