//! One claim's trip through the lifecycle: read its facts once, decide
//! what to do (`decide/`), then provision it (provision.rs), save or
//! discard what the backend made (save.rs), finish a claim deleted while
//! it was provisioned (deleted.rs), and count failures towards giving up
//! (failures.rs).

mod deleted;
mod failures;
mod provision;
mod save;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use super::decide::{self, keys, ClaimDecision, ClaimFacts};
use super::finalizers;
use super::janitor;
use super::nodes;
use super::reasons::*;
use super::resize;
use super::{lock, AfterFailure, Context, Error};
use crate::provisioner::Provisioner;

/// How long to wait before looking again at a claim that cannot be
/// provisioned as it is.
const SLOW_RETRY: Duration = Duration::from_secs(300);

pub(super) async fn reconcile<P: Provisioner>(
    claim: Arc<PersistentVolumeClaim>,
    ctx: Arc<Context<P>>,
) -> Result<Action, Error> {
    let facts = ClaimFacts::read(&claim, &ctx.config.names);
    // Another provisioner's claim: nothing to do, and no request.
    if !facts.ours {
        return Ok(Action::await_change());
    }
    // Node mode: another node's claim is its host's, and costs no request,
    // but for the elected janitor's checks.
    if !nodes::claim_is_here(facts.selected_node, ctx.config.node.as_ref()) {
        if ctx.is_janitor() {
            return janitor::claim(&facts, &ctx).await;
        }
        return Ok(Action::await_change());
    }
    let class = ctx.classes.get(&ObjectRef::new(facts.class));
    let decision = decide::claim(&facts, class.as_deref(), &ctx.config.names, |p| {
        ctx.provisioner.plugin(p)
    });
    if !matches!(decision, ClaimDecision::WaitForClass(_)) {
        lock(&ctx.class_missing_since).remove(&facts.uid);
    }
    let class_vanished = || Error::Provision("class vanished".into());
    match decision {
        ClaimDecision::Ignore => Ok(resize::reconcile(&facts, &ctx).await),
        ClaimDecision::WaitForNode => Ok(Action::await_change()),
        ClaimDecision::WaitForClass(_) => Ok(failures::class_missing(&facts, &ctx).await),
        ClaimDecision::Refuse(message) => {
            ctx.events.warning(
                &facts.reference,
                PROVISIONING_FAILED,
                "Provisioning",
                message,
            );
            Ok(Action::requeue(SLOW_RETRY))
        }
        ClaimDecision::Provision { plugin, info } => {
            let class = class.ok_or_else(class_vanished)?;
            provision::provision(&facts, (*class).clone(), &plugin, &info, &ctx).await
        }
        ClaimDecision::DropFinalizer => {
            release(&claim, &ctx).await?;
            Ok(Action::await_change())
        }
        ClaimDecision::FinishDeleted { plugin } => {
            let class = class.ok_or_else(class_vanished)?;
            deleted::finish(&facts, (*class).clone(), &plugin, &ctx).await
        }
    }
}

pub(super) fn error_policy<P: Provisioner>(
    claim: Arc<PersistentVolumeClaim>,
    error: &Error,
    ctx: Arc<Context<P>>,
) -> Action {
    let facts = ClaimFacts::read(&claim, &ctx.config.names);
    let error = error.to_string();
    let failure = failures::count(&facts, &ctx, &error, Duration::ZERO);
    if let AfterFailure::GiveUp(n) = failure {
        failures::give_up_event(&facts, &ctx, n, &error);
    }
    ctx.after(failure)
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
        let key = format!(
            "{}/{}",
            claim.namespace().unwrap_or_default(),
            claim.name_any()
        );
        tracing::warn!(claim = %key, error = %e, "cannot remove the claim finalizer yet");
    }
}

/// Says why on the claim, then asks the scheduler for another node
/// ([`unselect_node`]).
pub(super) async fn reschedule<P>(
    facts: &ClaimFacts<'_>,
    ctx: &Context<P>,
    why: String,
) -> Result<(), Error> {
    ctx.events
        .warning(&facts.reference, PROVISIONING_FAILED, "Provisioning", why);
    unselect_node(facts, ctx).await
}

/// Asks the scheduler for another node (the `reschedule` state): removes
/// the node this claim was provisioned for, unless the scheduler has chosen
/// again meanwhile (the patch tests the value first; its new choice gets a
/// reconcile of its own).
async fn unselect_node<P>(facts: &ClaimFacts<'_>, ctx: &Context<P>) -> Result<(), Error> {
    let Some(node) = facts.selected_node else {
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
    match claims_api(facts.claim, ctx)
        .patch(
            &facts.claim.name_any(),
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // The test failed: the scheduler picked another node already.
        Err(kube::Error::Api(e)) if e.code == 422 => {
            tracing::info!(claim = %facts.key, node, "the scheduler selected another node meanwhile");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}
