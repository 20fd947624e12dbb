//! Growing a bound claim's volume when the claim asks for more: what CSI's
//! external-resizer does (with Kubernetes' recovery from failed expansion),
//! for the volumes this host provisioned.
//!
//! The claim's status says where an expansion stands, as Kubernetes expects:
//! `allocatedResources` holds the size being made, `allocatedResourceStatuses`
//! `ControllerResizeInProgress` or `ControllerResizeInfeasible` (the user may
//! then ask for less, down to the current size, and the host grows to that),
//! and the `Resizing`, `ControllerResizeError` and `FileSystemResizePending`
//! conditions show it in `kubectl describe`. The plugin is called after the
//! claim is marked in progress, and the volume's capacity is saved before
//! the claim is marked done, so a restart at any point resumes where it
//! stopped (the plugin's `resize` is idempotent).

#[cfg(test)]
mod fixtures;
mod plan;
mod status;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;

pub use plan::{plan, ResizePlan};
use status::{finish, mark_error, mark_in_progress, save_capacity};

use super::capacity;
use super::decide::ClaimFacts;
use super::nodes;
use super::reasons::*;
use super::{lock, AfterFailure, Context, Error};
use crate::metrics::Metrics;
use crate::provisioner::{Provisioner, ResizeOptions, ResizeState};
use crate::quantity::{self, Bytes};

/// Keys and values Kubernetes defines for expansion.
pub mod keys {
    /// The claim annotation naming who resizes its volume.
    pub const STORAGE_RESIZER: &str = "volume.kubernetes.io/storage-resizer";
    /// Set on a claim whose expansion needed no node step, so the kubelet
    /// does not try to grow the filesystem again.
    pub const NODE_EXPANSION_NOT_REQUIRED: &str =
        "volume.kubernetes.io/node-expansion-not-required";
    /// Set on a volume whose filesystem must still grow: its size before.
    pub const PRE_RESIZE_CAPACITY: &str = "volume.alpha.kubernetes.io/pre-resize-capacity";
    pub const CONTROLLER_RESIZE_IN_PROGRESS: &str = "ControllerResizeInProgress";
    pub const CONTROLLER_RESIZE_INFEASIBLE: &str = "ControllerResizeInfeasible";
    pub const NODE_RESIZE_PENDING: &str = "NodeResizePending";
    pub const RESIZING: &str = "Resizing";
    pub const CONTROLLER_RESIZE_ERROR: &str = "ControllerResizeError";
    pub const FILE_SYSTEM_RESIZE_PENDING: &str = "FileSystemResizePending";
    pub const NODE_RESIZE_ERROR: &str = "NodeResizeError";
}

/// How long to wait before looking again at an expansion that cannot
/// happen as asked (the user must change something).
const INFEASIBLE_RETRY: Duration = Duration::from_secs(300);

/// How soon to look again at an expansion whose volume is not yet in the
/// cache (a restart or failover: the claims can be seen before the volumes).
const WAIT_FOR_VOLUME: Duration = Duration::from_secs(1);

/// Brings a bound claim's volume to the size it asks for. Its failures,
/// API errors included, are retried here, apart from provisioning's.
pub(super) async fn reconcile<P: Provisioner>(facts: &ClaimFacts<'_>, ctx: &Context<P>) -> Action {
    match resize(facts, ctx).await {
        Ok(action) => action,
        Err(e) => {
            let version = resize_version(facts, ctx);
            retry_later(facts, ctx, &version, Duration::ZERO, &e.to_string())
        }
    }
}

/// What an expansion's failures and backoff are counted under: apart from
/// the claim's provisioning.
fn backoff_key(facts: &ClaimFacts) -> String {
    format!("{}/resize", facts.uid)
}

/// The version of what an expansion depends on, for its backoff: the
/// claim's spec and the annotations others set, its class, and the plugin
/// versions loaded. Not the claim's resourceVersion: each attempt writes
/// the claim's status twice, and the watch events of those writes must not
/// start the next attempt before the backoff is over (as external-resizer
/// only looks again when the requested size changes).
fn resize_version<P: Provisioner>(facts: &ClaimFacts, ctx: &Context<P>) -> String {
    let class = ctx
        .classes
        .get(&ObjectRef::new(facts.class))
        .and_then(|c| c.resource_version())
        .unwrap_or_default();
    let plugins = ctx
        .provisioner
        .plugins_changed()
        .map(|rx| *rx.borrow())
        .unwrap_or_default();
    format!("{}/{class}/{plugins}", spec_version(facts.claim))
}

/// A hash of the claim's spec and of its annotations but the ones this
/// host writes while resizing.
fn spec_version(claim: &PersistentVolumeClaim) -> String {
    use std::hash::{Hash, Hasher};
    let mut annotations = claim.metadata.annotations.clone().unwrap_or_default();
    annotations.remove(keys::STORAGE_RESIZER);
    annotations.remove(keys::NODE_EXPANSION_NOT_REQUIRED);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&(&claim.spec, &annotations))
        .unwrap_or_default()
        .hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// An expansion to make: the claim's volume, its class, the plugin that
/// made the volume and the size to grow it to.
struct Growth<'a> {
    facts: &'a ClaimFacts<'a>,
    pv: Arc<PersistentVolume>,
    class: Option<Arc<StorageClass>>,
    plugin: String,
    bytes: u64,
    /// The [`resize_version`] it is made for.
    version: String,
}

/// Plans what the claim needs and does it, or says why it cannot be.
async fn resize<P: Provisioner>(facts: &ClaimFacts<'_>, ctx: &Context<P>) -> Result<Action, Error> {
    let claim = facts.claim;
    let pv = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .and_then(|name| ctx.volumes.get(&ObjectRef::new(name)));
    if pv
        .as_deref()
        .is_some_and(|pv| !nodes::volume_is_here(pv, ctx.config.node.as_ref()))
    {
        return Ok(Action::await_change());
    }
    let class = ctx.classes.get(&ObjectRef::new(facts.class));
    let key = backoff_key(facts);
    let final_error = lock(&ctx.resize_final_errors).contains(&key);
    let plan = plan(
        claim,
        pv.as_deref(),
        class.as_deref(),
        &ctx.config.names,
        final_error,
    );
    let (pv, plugin, bytes) = match plan {
        ResizePlan::Nothing => return Ok(Action::await_change()),
        // Only the cache is read meanwhile: no request.
        ResizePlan::WaitForVolume => return Ok(Action::requeue(WAIT_FOR_VOLUME)),
        ResizePlan::Refuse(message) => {
            ctx.events
                .warning(&facts.reference, VOLUME_RESIZE_FAILED, "Resizing", message);
            return Ok(Action::requeue(INFEASIBLE_RETRY));
        }
        ResizePlan::Finish {
            capacity,
            node_expansion,
        } => {
            finish(claim, ctx, capacity, node_expansion).await?;
            lock(&ctx.resize_final_errors).remove(&key);
            return Ok(Action::await_change());
        }
        ResizePlan::Grow { plugin, bytes } => (pv.expect("planned with a volume"), plugin, bytes),
    };
    let version = resize_version(facts, ctx);
    if let Some(left) = ctx.backing_off(&key, &version) {
        return Ok(Action::requeue(left));
    }
    let growth = Growth {
        facts,
        pv,
        class,
        plugin,
        bytes,
        version,
    };
    grow(&growth, ctx).await
}

/// Marks the claim in progress, asks the plugin (after the node's room, in
/// node mode), then saves the new size and marks the claim done; or records
/// why not, and backs off.
async fn grow<P: Provisioner>(growth: &Growth<'_>, ctx: &Context<P>) -> Result<Action, Error> {
    let Growth {
        facts,
        pv,
        plugin,
        bytes,
        version,
        ..
    } = growth;
    let (bytes, key, pv_name) = (*bytes, backoff_key(facts), pv.name_any());
    let info = match ctx.provisioner.plugin(plugin) {
        Ok(info) if info.resize => info,
        refused => {
            let message = match refused {
                Err(message) => message,
                Ok(_) => format!(
                    "plugin {plugin} cannot grow volumes (it has no resize hook); serve a version of it that can, or set allowVolumeExpansion: false on StorageClass {}",
                    facts.class
                ),
            };
            // A new plugin version wakes every claim; until then, slowly.
            ctx.events.warning(
                &facts.reference,
                VOLUME_RESIZE_FAILED,
                "Resizing",
                message.clone(),
            );
            mark_error(facts.claim, ctx, &message, true).await?;
            return Ok(retry_later(facts, ctx, version, INFEASIBLE_RETRY, &message));
        }
    };
    let claim = mark_in_progress(facts.claim, ctx, bytes).await?;
    ctx.events.starting(
        &facts.reference,
        RESIZING,
        "Resizing",
        format!(
            "Growing volume {pv_name} to {} with plugin {plugin}",
            Bytes(bytes)
        ),
    );
    let options = ResizeOptions {
        requested_bytes: bytes,
        limit_bytes: claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get("storage"))
            .and_then(|q| quantity::parse_bytes(&q.0).ok()),
    };
    let started = Instant::now();
    let with_class = crate::provisioner::with_class_parameters(pv, growth.class.as_deref());
    // Node mode: the new size must fit on the node before the plugin is
    // asked; what does not is infeasible there.
    let grown = match capacity::promise_growth(&pv_name, bytes, plugin, &info, ctx) {
        Ok(promise) => ctx
            .provisioner
            .resize(plugin, &with_class, &options)
            .await
            .map(|resized| (resized, promise)),
        Err(refused) => Err(refused),
    };
    let class_label = Metrics::class(facts.class);
    let e = match grown {
        Ok((resized, promise)) => {
            if let Some(promise) = promise {
                promise.keep();
            }
            let capacity = Quantity(Bytes(resized.capacity_bytes).to_string());
            save_capacity(pv, ctx, &capacity, &claim, resized.node_expansion_required).await?;
            finish(&claim, ctx, capacity, resized.node_expansion_required).await?;
            ctx.succeed(&key);
            lock(&ctx.resize_final_errors).remove(&key);
            ctx.metrics.resize_total.get_or_create(&class_label).inc();
            ctx.metrics
                .resize_duration
                .get_or_create(&class_label)
                .observe(started.elapsed().as_secs_f64());
            tracing::info!(claim = %facts.key, volume = %pv_name, plugin, bytes = resized.capacity_bytes, "grew volume");
            return Ok(Action::await_change());
        }
        Err(e) => e,
    };
    ctx.metrics
        .resize_failed_total
        .get_or_create(&class_label)
        .inc();
    // The backend may still be working on this size unless it failed for
    // sure.
    let certain = matches!(e.state, ResizeState::Failed | ResizeState::Infeasible);
    if certain {
        lock(&ctx.resize_final_errors).insert(key);
    } else {
        lock(&ctx.resize_final_errors).remove(&key);
    }
    let min_delay = match e.state {
        ResizeState::NoChange => Duration::ZERO,
        ResizeState::InBackground => {
            tracing::info!(claim = %facts.key, volume = %pv_name, "still growing: {}", e.message);
            Duration::ZERO
        }
        ResizeState::Failed | ResizeState::Infeasible => {
            ctx.events.warning(
                &facts.reference,
                VOLUME_RESIZE_FAILED,
                "Resizing",
                e.message.clone(),
            );
            let infeasible = e.state == ResizeState::Infeasible;
            mark_error(&claim, ctx, &e.message, infeasible).await?;
            if infeasible {
                INFEASIBLE_RETRY
            } else {
                Duration::ZERO
            }
        }
    };
    Ok(retry_later(facts, ctx, version, min_delay, &e.message))
}

/// Backs off from this `version` of the expansion: a reconcile of the same
/// version (the watch event of the host's own status patch) waits out the
/// backoff; a change by anyone else, such as a new request, is tried at once.
fn retry_later<P>(
    facts: &ClaimFacts,
    ctx: &Context<P>,
    version: &str,
    min_delay: Duration,
    error: &str,
) -> Action {
    let failure = ctx.fail_at_least(&backoff_key(facts), 0, version, min_delay);
    if let AfterFailure::Retry { failures, after } = failure {
        tracing::warn!(claim = %facts.key, failures, retry_in = ?after, error, "resize failed; retrying");
    }
    ctx.after(failure)
}

#[cfg(test)]
mod tests {
    use super::fixtures::claim;
    use super::status::condition;
    use super::*;

    #[test]
    fn the_backoff_version_ignores_the_hosts_own_writes_and_follows_the_request() {
        let before = claim("2Gi", "1Gi", None, None);
        let v = spec_version(&before);
        // What the host's status patches change.
        let mut written = claim(
            "2Gi",
            "1Gi",
            Some(keys::CONTROLLER_RESIZE_IN_PROGRESS),
            Some("2Gi"),
        );
        written.metadata.resource_version = Some("9".into());
        written.metadata.annotations = Some(
            [
                (keys::STORAGE_RESIZER.to_owned(), "x".to_owned()),
                (
                    keys::NODE_EXPANSION_NOT_REQUIRED.to_owned(),
                    "true".to_owned(),
                ),
            ]
            .into(),
        );
        written.status.as_mut().unwrap().conditions =
            Some(vec![condition(keys::CONTROLLER_RESIZE_ERROR, None)]);
        assert_eq!(spec_version(&written), v);
        // What a user changes.
        assert_ne!(spec_version(&claim("3Gi", "1Gi", None, None)), v);
        let mut annotated = before.clone();
        annotated.metadata.annotations =
            Some([("wasmprov.io/retry".to_owned(), "1".to_owned())].into());
        assert_ne!(spec_version(&annotated), v);
    }
}
