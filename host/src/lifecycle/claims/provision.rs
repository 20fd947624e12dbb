//! Provisioning a claim: what must hold before the backend is asked, the
//! call itself, and keeping (or discarding) what it made.

use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::Api;

use super::super::capacity::{self, Promise};
use super::super::decide::{keys, ClaimFacts};
use super::super::finalizers;
use super::super::nodes;
use super::super::reasons::*;
use super::super::{lock, Context, Error};
use super::save::{self, Attempt};
use super::{claims_api, failures, release, release_or_log, reschedule, SLOW_RETRY};
use crate::metrics::Metrics;
use crate::provisioner::{
    PluginInfo, ProvisionError, ProvisionOptions, ProvisionState, Provisioner,
};

pub(super) async fn provision<P: Provisioner>(
    facts: &ClaimFacts<'_>,
    class: StorageClass,
    plugin: &str,
    info: &PluginInfo,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let Some(pv_name) = ProvisionOptions::pv_name_for(facts.claim) else {
        return Ok(Action::await_change());
    };
    if let Some(wait) = nothing_to_do_yet(facts, &pv_name, ctx).await? {
        return Ok(wait);
    }
    if info.node_local && ctx.config.node.is_none() {
        if let Some(refused) = node_local_refused_here(facts, plugin, ctx).await {
            return Ok(refused);
        }
    }
    let selected_node = match selected_node(facts, ctx).await? {
        Ok(node) => node,
        Err(gone) => return Ok(gone),
    };

    // Node mode: the room the claim asks for is promised to it until its
    // volume is saved, or let go.
    let promised = capacity::promise_room(
        facts.claim,
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
            failures::count_metric(facts, ctx);
            return failures::provision_failed(facts, refused, ctx).await;
        }
    };

    // From here the backend may make storage: with --claim-finalizer the
    // claim cannot disappear until that storage is saved or removed.
    let claim_now = if ctx.config.claim_finalizer {
        finalizers::add(
            &claims_api(facts.claim, ctx),
            facts.claim,
            keys::CLAIM_FINALIZER,
        )
        .await?
    } else {
        facts.claim.clone()
    };
    ctx.events.starting(
        &facts.reference,
        PROVISIONING,
        "Provisioning",
        format!(
            "External provisioner is provisioning volume for claim \"{}\"",
            facts.key
        ),
    );
    let attempt = Attempt {
        facts,
        claim_now,
        plugin,
        started: Instant::now(),
        opts: ProvisionOptions {
            pv_name,
            claim: facts.claim.clone(),
            class,
            selected_node,
        },
    };
    match ctx.provisioner.provision(plugin, &attempt.opts).await {
        Ok(pv) => {
            ctx.in_progress.forget(&facts.uid);
            keep(&attempt, pv, promise, ctx).await
        }
        Err(e) => backend_failed(&attempt, e, ctx).await,
    }
}

/// Whether the claim needs no plugin call now, and what to do instead: its
/// volume exists already (a restart or a lost answer), was saved moments
/// ago, or the claim is given up on or backing off.
async fn nothing_to_do_yet<P>(
    facts: &ClaimFacts<'_>,
    pv_name: &str,
    ctx: &Context<P>,
) -> Result<Option<Action>, Error> {
    let uid = &facts.uid;
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
        if save::claim_uid(&existing).as_deref() == Some(uid.as_str()) {
            if existing.metadata.deletion_timestamp.is_some() {
                // Reclaimed, the object not yet gone, and this view of the
                // claim is stale: provisioning now would make storage that
                // the dying volume cannot stand for. Look again shortly.
                tracing::info!(claim = %facts.key, volume = %pv_name, "the claim's volume is being deleted; waiting for it to go");
                return Ok(Some(Action::requeue(ctx.config.retry_base)));
            }
            lock(&ctx.recently_saved).remove(uid);
            ctx.succeed(uid);
            release(facts.claim, ctx).await?;
            return Ok(Some(Action::await_change()));
        }
    } else if let Some(left) = save::saved_moments_ago(uid, ctx) {
        tracing::debug!(claim = %facts.key, volume = %pv_name, "saved moments ago; waiting for the volume watch");
        return Ok(Some(Action::requeue(left)));
    }
    Ok(failures::waiting(facts, ctx))
}

/// A central host asked to make node-local storage (`hostPath`, `local`)
/// in a cluster of several nodes refuses: the storage would be made on the
/// node the host runs on, whatever node the claim's pods run on. The
/// refusal, if any, counts as a failure (slow retries, giving up).
async fn node_local_refused_here<P>(
    facts: &ClaimFacts<'_>,
    plugin: &str,
    ctx: &Context<P>,
) -> Option<Action> {
    let class = facts.class;
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
    failures::count_metric(facts, ctx);
    Some(failures::reported(facts, ctx, &message, SLOW_RETRY).await)
}

/// The Node the scheduler selected for the claim (WaitForFirstConsumer),
/// whose labels go to the plugin; if it no longer exists, the claim is
/// handed back to the scheduler and the action to take is the error.
async fn selected_node<P>(
    facts: &ClaimFacts<'_>,
    ctx: &Context<P>,
) -> Result<Result<Option<Node>, Action>, Error> {
    let Some(node) = facts.selected_node else {
        return Ok(Ok(None));
    };
    if let Some(found) = Api::<Node>::all(ctx.client.clone()).get_opt(node).await? {
        return Ok(Ok(Some(found)));
    }
    let message =
        format!("the selected node {node} does not exist; asking the scheduler for another one");
    reschedule(facts, ctx, message).await?;
    Ok(Err(Action::await_change()))
}

/// The backend made no volume: whatever it may still be making is tracked
/// (or forgotten), the claim let go if nothing was made, and the failure
/// taken by its state.
async fn backend_failed<P: Provisioner>(
    attempt: &Attempt<'_>,
    e: ProvisionError,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let (facts, uid) = (attempt.facts, &attempt.facts.uid);
    failures::count_metric(facts, ctx);
    match e.state {
        ProvisionState::InBackground => ctx.in_progress.track(uid, attempt.plugin, &attempt.opts),
        // "Nothing changed": whatever an earlier in-background answer
        // started may still be under way, so the claim stays tracked if it
        // was (the Go library leaves claimsInProgress alone on
        // ProvisioningNoChange). Forgetting it here would leak that storage
        // if the claim is deleted now.
        ProvisionState::NoChange => {}
        _ => ctx.in_progress.forget(uid),
    }
    if !matches!(
        e.state,
        ProvisionState::InBackground | ProvisionState::NoChange
    ) {
        // A final answer: the backend made nothing.
        release_or_log(&attempt.claim_now, ctx).await;
    }
    failures::provision_failed(facts, e, ctx).await
}

/// The backend made `pv`: pin it to this node (node mode), guard its
/// storage with our finalizer, and save it; storage that cannot be saved,
/// or was made where it may not be, is removed again.
async fn keep<P: Provisioner>(
    attempt: &Attempt<'_>,
    mut pv: PersistentVolume,
    promise: Option<Promise<'_>>,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let (facts, plugin, pv_name) = (attempt.facts, attempt.plugin, &attempt.opts.pv_name);
    if let Some(own) = &ctx.config.node {
        if let Err(refusal) = nodes::pin(&mut pv, own, plugin) {
            return save::discard(attempt, &pv, "was refused", refusal, ctx).await;
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

    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    if let Err(save_error) = save::save(&volumes, &pv, &facts.uid, &ctx.config).await {
        let message = format!("failed to save PersistentVolume {pv_name}: {save_error}");
        return save::discard(attempt, &pv, "could not be saved", message, ctx).await;
    }
    if let Some(promise) = promise {
        promise.keep();
    }
    save::remember_saved(&facts.uid, ctx);
    ctx.succeed(&facts.uid);
    release_or_log(&attempt.claim_now, ctx).await;
    let labels = Metrics::provision_labels(facts.claim);
    ctx.metrics.provision_total.get_or_create(&labels).inc();
    ctx.metrics
        .provision_duration
        .get_or_create(&labels)
        .observe(attempt.started.elapsed().as_secs_f64());
    ctx.events.normal(
        &facts.reference,
        PROVISIONING_SUCCEEDED,
        "Provisioning",
        format!("Successfully provisioned volume {pv_name}"),
    );
    tracing::info!(claim = %facts.key, volume = %pv_name, plugin, "provisioned");
    Ok(Action::await_change())
}
