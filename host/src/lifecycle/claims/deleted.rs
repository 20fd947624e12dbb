//! A claim deleted while our claim finalizer held it (`--claim-finalizer`):
//! whatever the backend made for it is removed (or saved, for Retain)
//! before the claim is let go.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::Api;

use super::super::decide::{keys, ClaimFacts};
use super::super::in_progress::{self, Finish};
use super::super::reasons::*;
use super::super::{Context, Error};
use super::{failures, release, save};
use crate::provisioner::{ProvisionOptions, Provisioner};

pub(super) async fn finish<P: Provisioner>(
    facts: &ClaimFacts<'_>,
    class: StorageClass,
    plugin: &str,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let (claim, uid) = (facts.claim, &facts.uid);
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
    if saved.is_some_and(|pv| save::claim_uid(&pv).as_deref() == Some(uid.as_str())) {
        release(claim, ctx).await?;
        return Ok(Action::await_change());
    }
    // The plugin is asked for the same volume again (provisioning is
    // idempotent by volume name), so that it can be deleted.
    let selected_node = match facts.selected_node {
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
            ctx.in_progress.forget(uid);
            ctx.succeed(uid);
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
                .normal(&facts.reference, PROVISIONING, "Provisioning", note);
            Ok(failures::after_failure(facts, ctx, &message, Duration::ZERO).await)
        }
        Err(e) => {
            let message = format!(
                "{e}. The claim is kept (finalizer {}) until this succeeds",
                keys::CLAIM_FINALIZER
            );
            ctx.events.warning(
                &facts.reference,
                PROVISIONING_CLEANUP_FAILED,
                "Provisioning",
                message.clone(),
            );
            Ok(failures::after_failure(facts, ctx, &message, Duration::ZERO).await)
        }
    }
}
