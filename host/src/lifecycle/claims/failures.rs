//! A failed provision: reported on the claim, counted against
//! `--failed-provision-threshold` for this version of the claim and its
//! class, retried with backoff, and given up on with a word on how to retry.

use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;

use super::super::decide::ClaimFacts;
use super::super::reasons::*;
use super::super::{lock, AfterFailure, Context};
use super::{reschedule, Error, SLOW_RETRY};
use crate::metrics::Metrics;
use crate::provisioner::{ProvisionError, ProvisionState};

/// How long a claim's missing class is taken for the class watch lagging
/// (the PV controller handed the claim over, so the class existed), and
/// how often it is looked for meanwhile; after that it was deleted, and the
/// claim fails like any other.
const CLASS_LAG_GRACE: Duration = Duration::from_secs(2);
const CLASS_LAG_RECHECK: Duration = Duration::from_millis(500);

/// The version of what provisioning a claim depends on: the claim's spec
/// and annotations, and its class. A threshold gives up on one version; a
/// change means one more try. Not the claim's resourceVersion: the host's
/// own finalizer patches and status updates change that.
fn version<P>(facts: &ClaimFacts, ctx: &Context<P>) -> String {
    use std::hash::{Hash, Hasher};
    let class = ctx
        .classes
        .get(&ObjectRef::new(facts.class))
        .and_then(|c| c.resource_version())
        .unwrap_or_default();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&(&facts.claim.spec, &facts.claim.metadata.annotations))
        .unwrap_or_default()
        .hash(&mut hasher);
    format!("{:016x}/{class}", hasher.finish())
}

/// Whether the claim, as it is now, was given up on or is backing off:
/// what to do instead of trying.
pub(super) fn waiting<P>(facts: &ClaimFacts, ctx: &Context<P>) -> Option<Action> {
    let this_version = version(facts, ctx);
    if ctx.given_up(&facts.uid, &this_version) {
        tracing::debug!(claim = %facts.key, "gave up provisioning; waiting for a change");
        return Some(Action::await_change());
    }
    // Woken during a backoff by a change that is not the claim's own (the
    // watch event of our finalizer patch): the backoff still holds.
    if let Some(left) = ctx.backing_off(&facts.uid, &this_version) {
        tracing::debug!(claim = %facts.key, retry_in = ?left, "backing off");
        return Some(Action::requeue(left));
    }
    None
}

/// Counts a failed provision against the threshold, retrying no sooner
/// than `min_delay`, and logs.
pub(super) fn count<P>(
    facts: &ClaimFacts,
    ctx: &Context<P>,
    error: &str,
    min_delay: Duration,
) -> AfterFailure {
    let threshold = ctx.config.failed_provision_threshold;
    let failure = ctx.fail_at_least(&facts.uid, threshold, &version(facts, ctx), min_delay);
    let claim = &facts.key;
    match failure {
        AfterFailure::Retry { failures, after } => {
            tracing::warn!(%claim, failures, retry_in = ?after, error, "provisioning failed; retrying")
        }
        AfterFailure::GiveUp(n) => {
            tracing::error!(%claim, failures = n, threshold, error, "provisioning failed; giving up until the claim or its StorageClass changes")
        }
    }
    failure
}

/// The Warning that says the host stopped retrying, and how to make it retry.
pub(super) fn give_up_event<P>(facts: &ClaimFacts, ctx: &Context<P>, failures: u32, error: &str) {
    let message = format!(
        "Gave up provisioning after {failures} failed attempts (--failed-provision-threshold={}); \
         the last error: {error}. The host tries again once {}each time the claim or its \
         StorageClass changes (e.g. `kubectl annotate pvc {} -n {} wasmprov.io/retry=\"$(date +%s)\" \
         --overwrite`), and from scratch if the claim is recreated or the host restarts.",
        ctx.config.failed_provision_threshold,
        ctx.resync_note(),
        facts.claim.name_any(),
        facts.claim.namespace().unwrap_or_default(),
    );
    ctx.events.warning(
        &facts.reference,
        PROVISIONING_FAILED,
        "Provisioning",
        message,
    );
}

/// Counts a failure, retrying no sooner than `min_delay`; on giving up,
/// says so on the claim.
pub(super) async fn after_failure<P>(
    facts: &ClaimFacts<'_>,
    ctx: &Context<P>,
    error: &str,
    min_delay: Duration,
) -> Action {
    let failure = count(facts, ctx, error, min_delay);
    if let AfterFailure::GiveUp(n) = failure {
        give_up_event(facts, ctx, n, error);
    }
    ctx.after(failure)
}

/// A failure the claim's events show: a Warning, then [`after_failure`].
pub(super) async fn reported<P>(
    facts: &ClaimFacts<'_>,
    ctx: &Context<P>,
    message: &str,
    min_delay: Duration,
) -> Action {
    ctx.events.warning(
        &facts.reference,
        PROVISIONING_FAILED,
        "Provisioning",
        message.to_owned(),
    );
    after_failure(facts, ctx, message, min_delay).await
}

/// `provision_failed_total` for the claim's class and data source.
pub(super) fn count_metric<P>(facts: &ClaimFacts, ctx: &Context<P>) {
    ctx.metrics
        .provision_failed_total
        .get_or_create(&Metrics::provision_labels(facts.claim))
        .inc();
}

/// What a plugin's (or the capacity check's) refusal means for the claim,
/// by its state: retry, retry slowly, or ask the scheduler for another node.
pub(super) async fn provision_failed<P: crate::provisioner::Provisioner>(
    facts: &ClaimFacts<'_>,
    e: ProvisionError,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let message = format!(
        "failed to provision volume with StorageClass {:?}: {}",
        facts.class, e.message
    );
    match e.state {
        ProvisionState::NoChange => Ok(after_failure(facts, ctx, &message, Duration::ZERO).await),
        ProvisionState::Reschedule if facts.selected_node.is_some() => {
            reschedule(facts, ctx, message).await?;
            Ok(Action::await_change())
        }
        ProvisionState::Reschedule => {
            // No scheduler chose a node (an Immediate class): there is
            // nobody to ask for another, so it is a failure to retry.
            let message = format!("{message} (the claim has no selected node to give up)");
            Ok(reported(facts, ctx, &message, Duration::ZERO).await)
        }
        // Nothing will change until the claim or class does: retry slowly,
        // and count it towards giving up like any failure.
        ProvisionState::InvalidArgument => Ok(reported(facts, ctx, &message, SLOW_RETRY).await),
        ProvisionState::Failed | ProvisionState::InBackground => {
            Ok(reported(facts, ctx, &message, Duration::ZERO).await)
        }
    }
}

/// A claim handed to this host whose class is not in the cache. Handed
/// over, so the PV controller saw the class: for a moment that is our
/// class watch lagging (looked at again from the cache, no request), after
/// that the class was deleted, and the claim fails like any other (event,
/// metric, backoff, give-up), as in the Go library. A recreated class wakes
/// the claim (the class watch) and is a new version to try at once.
pub(super) async fn class_missing<P>(facts: &ClaimFacts<'_>, ctx: &Context<P>) -> Action {
    let since = *lock(&ctx.class_missing_since)
        .entry(facts.uid.clone())
        .or_insert_with(Instant::now);
    if since.elapsed() < CLASS_LAG_GRACE {
        tracing::debug!(claim = %facts.key, class = facts.class, "waiting for the claim's StorageClass");
        return Action::requeue(CLASS_LAG_RECHECK);
    }
    if let Some(wait) = waiting(facts, ctx) {
        return wait;
    }
    count_metric(facts, ctx);
    let message = format!(
        "StorageClass {:?} not found: it was deleted after the claim was handed to this \
         host; recreate the class, or recreate the claim with an existing class",
        facts.class
    );
    reported(facts, ctx, &message, Duration::ZERO).await
}
