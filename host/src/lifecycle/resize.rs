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

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimCondition,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::capacity;
use super::decide::{claim_class, provisioned_by, Names};
use super::nodes;
use super::reasons::*;
use super::{lock, AfterFailure, Context, Error};
use crate::metrics::Metrics;
use crate::provisioner::{annotations, Provisioner, ResizeOptions, ResizeState};
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

/// The conditions an expansion sets; each step replaces them.
const RESIZE_CONDITIONS: &[&str] = &[
    keys::RESIZING,
    keys::CONTROLLER_RESIZE_ERROR,
    keys::FILE_SYSTEM_RESIZE_PENDING,
    keys::NODE_RESIZE_ERROR,
];

/// How long to wait before looking again at an expansion that cannot
/// happen as asked (the user must change something).
const INFEASIBLE_RETRY: Duration = Duration::from_secs(300);

/// How soon to look again at an expansion whose volume is not yet in the
/// cache (a restart or failover: the claims can be seen before the volumes).
const WAIT_FOR_VOLUME: Duration = Duration::from_secs(1);

/// What a bound claim needs from its volume.
#[derive(Debug, Clone, PartialEq)]
pub enum ResizePlan {
    /// Nothing: it holds what it asks, or the node's part is pending, or
    /// the volume is not ours.
    Nothing,
    /// Grow the volume to `bytes` with `plugin`.
    Grow { plugin: String, bytes: u64 },
    /// The volume already holds what the claim asks (a recovery to a size
    /// it has, or a restart after the volume was saved): record its size,
    /// or, when the volume says its filesystem must still grow, leave the
    /// claim to the kubelet.
    Finish {
        capacity: Quantity,
        node_expansion: bool,
    },
    /// An expansion is wanted but the claim's volume is not in the cache
    /// yet (the host just started): look again shortly.
    WaitForVolume,
    /// It cannot be grown here, and why (for a Warning on the claim).
    Refuse(String),
}

/// Decides what a claim needs. `pv` and `class` are the claim's volume and
/// StorageClass if known. The target is the claim's request, except while
/// an expansion is in progress: then the size being made
/// (`allocatedResources`), which the backend may be working on, unless its
/// last attempt failed for sure (`final_error`), when a smaller request may
/// replace it (as external-resizer allows).
pub fn plan(
    claim: &PersistentVolumeClaim,
    pv: Option<&PersistentVolume>,
    class: Option<&StorageClass>,
    names: &Names,
    final_error: bool,
) -> ResizePlan {
    let (Some(spec), Some(status)) = (claim.spec.as_ref(), claim.status.as_ref()) else {
        return ResizePlan::Nothing;
    };
    if status.phase.as_deref() != Some("Bound") || spec.volume_name.is_none() {
        return ResizePlan::Nothing;
    }
    let storage = quantity::storage_of;
    let Some(request) = storage(spec.resources.as_ref().and_then(|r| r.requests.as_ref())) else {
        return ResizePlan::Nothing;
    };
    let capacity = storage(status.capacity.as_ref()).unwrap_or(0);
    let state = status
        .allocated_resource_statuses
        .as_ref()
        .and_then(|s| s.get("storage"))
        .map(String::as_str);
    let in_progress = state == Some(keys::CONTROLLER_RESIZE_IN_PROGRESS);
    let infeasible = state == Some(keys::CONTROLLER_RESIZE_INFEASIBLE);
    let allocated = storage(status.allocated_resources.as_ref());
    // Less than an expansion made: a real API server refuses such a request
    // (below status.capacity); one that does not gets told, not obeyed.
    let shrink = state.is_none() && request < capacity && allocated.is_some_and(|a| request < a);
    // The node's part (the kubelet's) or nothing asked.
    if !(in_progress || infeasible || shrink) && (state.is_some() || request <= capacity) {
        return ResizePlan::Nothing;
    }
    let Some(pv) = pv else {
        return ResizePlan::WaitForVolume;
    };
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    if provisioned_by(pv, names).is_none()
        || claim_ref.and_then(|r| r.uid.as_deref()) != claim.metadata.uid.as_deref()
    {
        return ResizePlan::Nothing;
    }
    let pv_name = pv.name_any();
    if shrink {
        return ResizePlan::Refuse(format!(
            "the claim asks for {} but its volume {pv_name} holds {}: volumes cannot shrink, so nothing changed; ask for at least {}",
            Bytes(request),
            Bytes(capacity),
            Bytes(capacity)
        ));
    }
    let pv_capacity = pv.spec.as_ref().and_then(|s| s.capacity.as_ref());
    let pv_size = storage(pv_capacity).unwrap_or(0);
    let target = match allocated {
        Some(allocated) if in_progress && !final_error => allocated,
        _ => request,
    };
    if pv_size >= target {
        // Saved with the node step still to do (the claim was not marked
        // before a restart or a conflict): the kubelet must still grow the
        // filesystem, so the claim must not be marked done.
        let node_expansion = pv
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(keys::PRE_RESIZE_CAPACITY))
            && capacity < pv_size;
        let capacity = pv_capacity
            .and_then(|c| c.get("storage"))
            .cloned()
            .unwrap_or_else(|| Quantity(Bytes(target).to_string()));
        return ResizePlan::Finish {
            capacity,
            node_expansion,
        };
    }
    let class_name = claim_class(claim);
    if class.and_then(|c| c.allow_volume_expansion) != Some(true) {
        return ResizePlan::Refuse(format!(
            "StorageClass {class_name} does not allow volume expansion: set allowVolumeExpansion: true on it to grow volume {pv_name}"
        ));
    }
    let plugin = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::PLUGIN));
    match plugin {
        Some(plugin) => ResizePlan::Grow {
            plugin: plugin.clone(),
            bytes: target,
        },
        None => ResizePlan::Refuse(format!(
            "volume {pv_name} was made by a provisioner this host replaced, not by a wasmprov plugin, so no plugin can grow it"
        )),
    }
}

/// Brings a bound claim's volume to the size it asks for. Its failures,
/// API errors included, are retried here, apart from provisioning's.
pub(super) async fn reconcile<P: Provisioner>(
    claim: &PersistentVolumeClaim,
    ctx: &Context<P>,
) -> Action {
    match resize(claim, ctx).await {
        Ok(action) => action,
        Err(e) => {
            let uid = format!("{}/resize", claim.uid().unwrap_or_default());
            let version = resize_version(claim, ctx);
            retry_later(ctx, &uid, claim, &version, Duration::ZERO, &e.to_string())
        }
    }
}

/// The version of what an expansion depends on, for its backoff: the
/// claim's spec and the annotations others set, its class, and the plugin
/// versions loaded. Not the claim's resourceVersion: each attempt writes
/// the claim's status twice, and the watch events of those writes must not
/// start the next attempt before the backoff is over (as external-resizer
/// only looks again when the requested size changes).
fn resize_version<P: Provisioner>(claim: &PersistentVolumeClaim, ctx: &Context<P>) -> String {
    let class = ctx
        .classes
        .get(&ObjectRef::new(claim_class(claim)))
        .and_then(|c| c.resource_version())
        .unwrap_or_default();
    let plugins = ctx
        .provisioner
        .plugins_changed()
        .map(|rx| *rx.borrow())
        .unwrap_or_default();
    format!("{}/{class}/{plugins}", spec_version(claim))
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

async fn resize<P: Provisioner>(
    claim: &PersistentVolumeClaim,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let spec = claim.spec.as_ref();
    let pv = spec
        .and_then(|s| s.volume_name.as_deref())
        .and_then(|name| ctx.volumes.get(&ObjectRef::new(name)));
    if pv
        .as_deref()
        .is_some_and(|pv| !nodes::volume_is_here(pv, ctx.config.node.as_ref()))
    {
        return Ok(Action::await_change());
    }
    let class_name = claim_class(claim);
    let class = ctx.classes.get(&ObjectRef::new(class_name));
    let uid = format!("{}/resize", claim.uid().unwrap_or_default());
    let final_error = lock(&ctx.resize_final_errors).contains(&uid);
    let plan = plan(
        claim,
        pv.as_deref(),
        class.as_deref(),
        &ctx.config.names,
        final_error,
    );
    let reference = claim.object_ref(&());
    let (pv, plugin, bytes) = match plan {
        ResizePlan::Nothing => return Ok(Action::await_change()),
        // Only the cache is read meanwhile: no request.
        ResizePlan::WaitForVolume => return Ok(Action::requeue(WAIT_FOR_VOLUME)),
        ResizePlan::Refuse(message) => {
            ctx.events
                .warning(&reference, VOLUME_RESIZE_FAILED, "Resizing", message);
            return Ok(Action::requeue(INFEASIBLE_RETRY));
        }
        ResizePlan::Finish {
            capacity,
            node_expansion,
        } => {
            finish(claim, ctx, capacity, node_expansion).await?;
            lock(&ctx.resize_final_errors).remove(&uid);
            return Ok(Action::await_change());
        }
        ResizePlan::Grow { plugin, bytes } => (pv.expect("planned with a volume"), plugin, bytes),
    };
    // Failures of the resize are counted apart from the provision's.
    let version = resize_version(claim, ctx);
    if let Some(left) = ctx.backing_off(&uid, &version) {
        return Ok(Action::requeue(left));
    }
    let class_label = Metrics::class(class_name);
    let pv_name = pv.name_any();
    let info = match ctx.provisioner.plugin(&plugin) {
        Ok(info) if info.resize => Ok(info),
        Ok(_) => Err(format!(
            "plugin {plugin} cannot grow volumes (it has no resize hook); serve a version of it that can, or set allowVolumeExpansion: false on StorageClass {class_name}"
        )),
        Err(message) => Err(message),
    };
    let info = match info {
        Ok(info) => info,
        Err(message) => {
            // A new plugin version wakes every claim; until then, slowly.
            ctx.events.warning(
                &reference,
                VOLUME_RESIZE_FAILED,
                "Resizing",
                message.clone(),
            );
            mark_error(claim, ctx, &message, true).await?;
            return Ok(retry_later(
                ctx,
                &uid,
                claim,
                &version,
                INFEASIBLE_RETRY,
                &message,
            ));
        }
    };
    let claim = mark_in_progress(claim, ctx, bytes).await?;
    ctx.events.starting(
        &reference,
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
    let with_class = crate::provisioner::with_class_parameters(&pv, class.as_deref());
    // Node mode: the new size must fit on the node before the plugin is
    // asked; what does not is infeasible there.
    let grown = match capacity::promise_growth(&pv_name, bytes, &plugin, &info, ctx) {
        Ok(promise) => ctx
            .provisioner
            .resize(&plugin, &with_class, &options)
            .await
            .map(|resized| (resized, promise)),
        Err(refused) => Err(refused),
    };
    match grown {
        Ok((resized, promise)) => {
            if let Some(promise) = promise {
                promise.keep();
            }
            let capacity = Quantity(Bytes(resized.capacity_bytes).to_string());
            save_capacity(&pv, ctx, &capacity, &claim, resized.node_expansion_required).await?;
            finish(&claim, ctx, capacity, resized.node_expansion_required).await?;
            ctx.succeed(&uid);
            lock(&ctx.resize_final_errors).remove(&uid);
            ctx.metrics.resize_total.get_or_create(&class_label).inc();
            ctx.metrics
                .resize_duration
                .get_or_create(&class_label)
                .observe(started.elapsed().as_secs_f64());
            tracing::info!(claim = %key(&claim), volume = %pv_name, plugin, bytes = resized.capacity_bytes, "grew volume");
            Ok(Action::await_change())
        }
        Err(e) => {
            ctx.metrics
                .resize_failed_total
                .get_or_create(&class_label)
                .inc();
            // The backend may still be working on this size unless it
            // failed for sure.
            let certain = matches!(e.state, ResizeState::Failed | ResizeState::Infeasible);
            if certain {
                lock(&ctx.resize_final_errors).insert(uid.clone());
            } else {
                lock(&ctx.resize_final_errors).remove(&uid);
            }
            let min_delay = match e.state {
                ResizeState::NoChange => Duration::ZERO,
                ResizeState::InBackground => {
                    tracing::info!(claim = %key(&claim), volume = %pv_name, "still growing: {}", e.message);
                    Duration::ZERO
                }
                ResizeState::Failed | ResizeState::Infeasible => {
                    ctx.events.warning(
                        &reference,
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
            Ok(retry_later(
                ctx, &uid, &claim, &version, min_delay, &e.message,
            ))
        }
    }
}

/// Backs off from this `version` of the expansion: a reconcile of the same
/// version (the watch event of the host's own status patch) waits out the
/// backoff; a change by anyone else, such as a new request, is tried at once.
fn retry_later<P>(
    ctx: &Context<P>,
    uid: &str,
    claim: &PersistentVolumeClaim,
    version: &str,
    min_delay: Duration,
    error: &str,
) -> Action {
    let failure = ctx.fail_at_least(uid, 0, version, min_delay);
    if let AfterFailure::Retry { failures, after } = failure {
        tracing::warn!(claim = %key(claim), failures, retry_in = ?after, error, "resize failed; retrying");
    }
    ctx.after(failure)
}

fn key(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        claim.namespace().unwrap_or_default(),
        claim.name_any()
    )
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// The claim's conditions without the expansion ones, plus `add`.
fn conditions_with(
    claim: &PersistentVolumeClaim,
    keep_resize_conditions: bool,
    add: Option<PersistentVolumeClaimCondition>,
) -> Vec<PersistentVolumeClaimCondition> {
    let mut conditions: Vec<_> = claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| {
            let replaced = add.as_ref().is_some_and(|a| a.type_ == c.type_);
            !replaced && (keep_resize_conditions || !RESIZE_CONDITIONS.contains(&c.type_.as_str()))
        })
        .collect();
    conditions.extend(add);
    conditions
}

fn condition(type_: &str, message: Option<String>) -> PersistentVolumeClaimCondition {
    PersistentVolumeClaimCondition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        last_transition_time: Some(now()),
        message,
        ..Default::default()
    }
}

async fn patch_claim_status(
    claim: &PersistentVolumeClaim,
    ctx: &Context<impl Sized>,
    patch: serde_json::Value,
) -> Result<PersistentVolumeClaim, Error> {
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
    Ok(api
        .patch_status(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?)
}

/// Marks the claim as growing to `bytes` (the status the next step and a
/// restarted host read), and names this host as its resizer.
async fn mark_in_progress<P>(
    claim: &PersistentVolumeClaim,
    ctx: &Context<P>,
    bytes: u64,
) -> Result<PersistentVolumeClaim, Error> {
    let conditions = conditions_with(claim, false, Some(condition(keys::RESIZING, None)));
    patch_claim_status(
        claim,
        ctx,
        json!({
            "metadata": {
                "resourceVersion": claim.resource_version(),
                "annotations": {
                    keys::STORAGE_RESIZER: ctx.config.names.primary,
                    keys::NODE_EXPANSION_NOT_REQUIRED: null,
                },
            },
            "status": {
                "conditions": conditions,
                "allocatedResources": {"storage": Bytes(bytes).to_string()},
                "allocatedResourceStatuses": {"storage": keys::CONTROLLER_RESIZE_IN_PROGRESS},
            },
        }),
    )
    .await
}

/// Records a failed expansion on the claim: the error as a condition, and,
/// when it can never succeed as asked, the infeasible state the user
/// recovers from by asking for less.
async fn mark_error<P>(
    claim: &PersistentVolumeClaim,
    ctx: &Context<P>,
    message: &str,
    infeasible: bool,
) -> Result<(), Error> {
    let conditions = conditions_with(
        claim,
        true,
        Some(condition(
            keys::CONTROLLER_RESIZE_ERROR,
            Some(format!("failed to expand pvc with {message}")),
        )),
    );
    let mut status = json!({ "conditions": conditions });
    if infeasible {
        status["allocatedResourceStatuses"] =
            json!({"storage": keys::CONTROLLER_RESIZE_INFEASIBLE});
    }
    patch_claim_status(claim, ctx, json!({ "status": status })).await?;
    Ok(())
}

/// Saves the volume's new size and, when the node must still grow its
/// filesystem, its size before (for the kubelet; removed otherwise).
async fn save_capacity<P>(
    pv: &PersistentVolume,
    ctx: &Context<P>,
    capacity: &Quantity,
    claim: &PersistentVolumeClaim,
    node_expansion: bool,
) -> Result<(), Error> {
    // The annotation is the durable record that the node step is still to
    // do: a restart or a conflict before the claim is marked reads it
    // (ResizePlan::Finish), so it is set or removed with the capacity.
    let before = node_expansion
        .then(|| {
            claim
                .status
                .as_ref()
                .and_then(|s| s.capacity.as_ref())
                .and_then(|c| c.get("storage"))
        })
        .flatten();
    let patch = json!({
        "metadata": {"annotations": {keys::PRE_RESIZE_CAPACITY: before}},
        "spec": {"capacity": {"storage": capacity}},
    });
    Api::<PersistentVolume>::all(ctx.client.clone())
        .patch(
            &pv.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(())
}

/// Ends the controller's part: the claim's new capacity, or, when the node
/// must grow the filesystem, the kubelet's turn.
async fn finish<P>(
    claim: &PersistentVolumeClaim,
    ctx: &Context<P>,
    capacity: Quantity,
    node_expansion: bool,
) -> Result<(), Error> {
    let reference = claim.object_ref(&());
    if node_expansion {
        let pending = condition(
            keys::FILE_SYSTEM_RESIZE_PENDING,
            Some("Waiting for user to (re-)start a pod to finish file system resize of volume on node.".into()),
        );
        patch_claim_status(
            claim,
            ctx,
            json!({
                "metadata": {"resourceVersion": claim.resource_version()},
                "status": {
                    "conditions": conditions_with(claim, true, Some(pending)),
                    "allocatedResourceStatuses": {"storage": keys::NODE_RESIZE_PENDING},
                },
            }),
        )
        .await?;
        ctx.events.normal(
            &reference,
            FILE_SYSTEM_RESIZE_REQUIRED,
            "Resizing",
            "Require file system resize of volume on node".into(),
        );
        return Ok(());
    }
    patch_claim_status(
        claim,
        ctx,
        json!({
            "metadata": {
                "resourceVersion": claim.resource_version(),
                "annotations": {keys::NODE_EXPANSION_NOT_REQUIRED: "true"},
            },
            "status": {
                "capacity": {"storage": capacity},
                "conditions": conditions_with(claim, false, None),
                "allocatedResourceStatuses": {"storage": null},
            },
        }),
    )
    .await?;
    ctx.events.normal(
        &reference,
        VOLUME_RESIZE_SUCCESSFUL,
        "Resizing",
        format!("Resize volume succeeded: the volume holds {}", capacity.0),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names {
        Names {
            primary: "example.com/hostpath".into(),
            additional: Vec::new(),
        }
    }

    fn claim(
        request: &str,
        capacity: &str,
        state: Option<&str>,
        allocated: Option<&str>,
    ) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
            "spec": {"storageClassName": "fast", "volumeName": "pvc-u1",
                "resources": {"requests": {"storage": request}}},
            "status": {"phase": "Bound", "capacity": {"storage": capacity},
                "allocatedResourceStatuses": state.map(|s| json!({"storage": s})),
                "allocatedResources": allocated.map(|a| json!({"storage": a}))},
        }))
        .unwrap()
    }

    fn pv(capacity: &str, plugin: Option<&str>) -> PersistentVolume {
        let mut annotations = json!({"pv.kubernetes.io/provisioned-by": "example.com/hostpath"});
        if let Some(p) = plugin {
            annotations["wasmprov.io/plugin"] = json!(p);
        }
        serde_json::from_value(json!({
            "metadata": {"name": "pvc-u1", "annotations": annotations},
            "spec": {"capacity": {"storage": capacity},
                "claimRef": {"namespace": "ns", "name": "data", "uid": "u1"}},
        }))
        .unwrap()
    }

    fn class(allow: Option<bool>) -> StorageClass {
        serde_json::from_value(
            json!({"metadata": {"name": "fast"}, "provisioner": "example.com/hostpath",
            "allowVolumeExpansion": allow}),
        )
        .unwrap()
    }

    fn grow(bytes: u64) -> ResizePlan {
        ResizePlan::Grow {
            plugin: "hostpath".into(),
            bytes,
        }
    }

    const GI: u64 = 1 << 30;

    #[test]
    fn a_larger_request_grows_the_volume_with_the_plugin_that_made_it() {
        let plan = plan(
            &claim("2Gi", "1Gi", None, None),
            Some(&pv("1Gi", Some("hostpath"))),
            Some(&class(Some(true))),
            &names(),
            false,
        );
        assert_eq!(plan, grow(2 * GI));
    }

    #[test]
    fn nothing_is_done_for_a_claim_that_holds_what_it_asks_or_is_not_ours() {
        let pv1 = pv("1Gi", Some("hostpath"));
        let class = class(Some(true));
        let ours = names();
        assert_eq!(
            plan(
                &claim("1Gi", "1Gi", None, None),
                Some(&pv1),
                Some(&class),
                &ours,
                false
            ),
            ResizePlan::Nothing
        );
        let other = Names {
            primary: "other.example.com/x".into(),
            additional: Vec::new(),
        };
        assert_eq!(
            plan(
                &claim("2Gi", "1Gi", None, None),
                Some(&pv1),
                Some(&class),
                &other,
                false
            ),
            ResizePlan::Nothing
        );
        // The volume of another claim with the same name.
        let mut stolen = pv1.clone();
        stolen
            .spec
            .as_mut()
            .unwrap()
            .claim_ref
            .as_mut()
            .unwrap()
            .uid = Some("u2".into());
        assert_eq!(
            plan(
                &claim("2Gi", "1Gi", None, None),
                Some(&stolen),
                Some(&class),
                &ours,
                false
            ),
            ResizePlan::Nothing
        );
        // The kubelet's part.
        assert_eq!(
            plan(
                &claim("2Gi", "1Gi", Some(keys::NODE_RESIZE_PENDING), Some("2Gi")),
                Some(&pv("2Gi", Some("hostpath"))),
                Some(&class),
                &ours,
                false
            ),
            ResizePlan::Nothing
        );
        // Not in the cache yet: looked at again soon.
        assert_eq!(
            plan(
                &claim("2Gi", "1Gi", None, None),
                None,
                Some(&class),
                &ours,
                false
            ),
            ResizePlan::WaitForVolume
        );
    }

    #[test]
    fn a_class_without_allow_volume_expansion_or_an_adopted_volume_is_refused_with_the_fix() {
        let claim = claim("2Gi", "1Gi", None, None);
        let ResizePlan::Refuse(m) = plan(
            &claim,
            Some(&pv("1Gi", Some("hostpath"))),
            Some(&class(None)),
            &names(),
            false,
        ) else {
            panic!("refused")
        };
        assert!(
            m.contains("StorageClass fast") && m.contains("allowVolumeExpansion: true"),
            "{m}"
        );
        let ResizePlan::Refuse(m) = plan(
            &claim,
            Some(&pv("1Gi", None)),
            Some(&class(Some(true))),
            &names(),
            false,
        ) else {
            panic!("refused")
        };
        assert!(m.contains("pvc-u1"), "{m}");
    }

    #[test]
    fn an_expansion_in_progress_keeps_its_size_and_an_infeasible_one_takes_the_new_request() {
        let pv1 = pv("1Gi", Some("hostpath"));
        let class = class(Some(true));
        // Lowered while in progress: the backend may be growing to 10Gi.
        let lowered = claim(
            "3Gi",
            "1Gi",
            Some(keys::CONTROLLER_RESIZE_IN_PROGRESS),
            Some("10Gi"),
        );
        assert_eq!(
            plan(&lowered, Some(&pv1), Some(&class), &names(), false),
            grow(10 * GI)
        );
        // Recovery: after infeasible, the user asks for less.
        let recovered = claim(
            "3Gi",
            "1Gi",
            Some(keys::CONTROLLER_RESIZE_INFEASIBLE),
            Some("10Gi"),
        );
        assert_eq!(
            plan(&recovered, Some(&pv1), Some(&class), &names(), false),
            grow(3 * GI)
        );
    }

    #[test]
    fn asking_for_less_than_an_expansion_made_is_refused_and_a_rounded_up_volume_is_not() {
        let pv2 = pv("2Gi", Some("hostpath"));
        let class = class(Some(true));
        let shrunk = claim("1Gi", "2Gi", None, Some("2Gi"));
        let ResizePlan::Refuse(m) = plan(&shrunk, Some(&pv2), Some(&class), &names(), false) else {
            panic!("refused")
        };
        assert!(
            m.contains("cannot shrink") && m.contains("at least 2Gi"),
            "{m}"
        );
        // Provisioned larger than asked (rounded up), never expanded.
        let rounded = claim("1Gi", "2Gi", None, None);
        assert_eq!(
            plan(&rounded, Some(&pv2), Some(&class), &names(), false),
            ResizePlan::Nothing
        );
    }

    #[test]
    fn a_volume_already_large_enough_only_finishes_the_claim() {
        // Saved before a restart, the claim not yet marked done.
        let claim = claim(
            "2Gi",
            "1Gi",
            Some(keys::CONTROLLER_RESIZE_IN_PROGRESS),
            Some("2Gi"),
        );
        assert_eq!(
            plan(
                &claim,
                Some(&pv("2Gi", Some("hostpath"))),
                Some(&class(Some(true))),
                &names(),
                false
            ),
            ResizePlan::Finish {
                capacity: Quantity("2Gi".into()),
                node_expansion: false,
            }
        );
    }

    #[test]
    fn a_volume_saved_with_its_node_step_to_do_leaves_the_claim_to_the_kubelet() {
        let claim = claim(
            "2Gi",
            "1Gi",
            Some(keys::CONTROLLER_RESIZE_IN_PROGRESS),
            Some("2Gi"),
        );
        let mut saved = pv("2Gi", Some("hostpath"));
        saved
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(keys::PRE_RESIZE_CAPACITY.into(), "1Gi".into());
        let finish = |pv: &PersistentVolume| {
            plan(&claim, Some(pv), Some(&class(Some(true))), &names(), false)
        };
        assert_eq!(
            finish(&saved),
            ResizePlan::Finish {
                capacity: Quantity("2Gi".into()),
                node_expansion: true,
            }
        );
        // A stale record of an earlier expansion the claim already holds.
        let mut done = claim.clone();
        done.status.as_mut().unwrap().capacity =
            Some([("storage".to_owned(), Quantity("2Gi".into()))].into());
        assert_eq!(
            plan(
                &done,
                Some(&saved),
                Some(&class(Some(true))),
                &names(),
                false
            ),
            ResizePlan::Finish {
                capacity: Quantity("2Gi".into()),
                node_expansion: false,
            }
        );
    }

    #[test]
    fn a_failed_expansion_in_progress_may_be_replaced_by_a_smaller_request() {
        let lowered = claim(
            "3Gi",
            "1Gi",
            Some(keys::CONTROLLER_RESIZE_IN_PROGRESS),
            Some("10Gi"),
        );
        let pv1 = pv("1Gi", Some("hostpath"));
        let class = class(Some(true));
        assert_eq!(
            plan(&lowered, Some(&pv1), Some(&class), &names(), true),
            grow(3 * GI),
            "the backend failed for sure: the new request"
        );
        assert_eq!(
            plan(&lowered, Some(&pv1), Some(&class), &names(), false),
            grow(10 * GI),
            "the backend may still be growing to 10Gi"
        );
    }

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

    #[test]
    fn conditions_of_other_kinds_are_kept_and_expansion_ones_replaced() {
        let mut c = claim("2Gi", "1Gi", None, None);
        c.status.as_mut().unwrap().conditions = Some(vec![
            condition("ModifyingVolume", None),
            condition(keys::CONTROLLER_RESIZE_ERROR, Some("old".into())),
        ]);
        let types = |v: Vec<PersistentVolumeClaimCondition>| {
            v.into_iter().map(|c| c.type_).collect::<Vec<_>>()
        };
        assert_eq!(
            types(conditions_with(
                &c,
                false,
                Some(condition(keys::RESIZING, None))
            )),
            ["ModifyingVolume", keys::RESIZING]
        );
        let error = conditions_with(
            &c,
            true,
            Some(condition(keys::CONTROLLER_RESIZE_ERROR, Some("new".into()))),
        );
        assert_eq!(error.len(), 2);
        assert_eq!(error[1].message.as_deref(), Some("new"));
    }
}
