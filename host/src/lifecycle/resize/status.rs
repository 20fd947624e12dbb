//! What the claim and its volume say of an expansion: the conditions,
//! `allocatedResources` and its state, the volume's capacity, and the
//! events that go with each step.

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimCondition,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::super::reasons::*;
use super::super::{Context, Error};
use super::keys;
use crate::quantity::Bytes;

/// The conditions an expansion sets; each step replaces them.
const RESIZE_CONDITIONS: &[&str] = &[
    keys::RESIZING,
    keys::CONTROLLER_RESIZE_ERROR,
    keys::FILE_SYSTEM_RESIZE_PENDING,
    keys::NODE_RESIZE_ERROR,
];

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

pub(super) fn condition(type_: &str, message: Option<String>) -> PersistentVolumeClaimCondition {
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
pub(super) async fn mark_in_progress<P>(
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
pub(super) async fn mark_error<P>(
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
pub(super) async fn save_capacity<P>(
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
pub(super) async fn finish<P>(
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
    use super::super::fixtures::claim;
    use super::*;

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
