//! What no node host can do for a claim of node-local classes, done by the
//! one node host elected janitor (`Config::janitor`): a claim whose
//! selected node is gone waits for the scheduler until someone clears that
//! node (the scheduler never looks elsewhere while it is set), and a claim
//! of a class that binds Immediately has no selected node, so no node host
//! takes it. Every other node host leaves other nodes' claims alone.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::claims::unselect_node;
use super::decide::{self, keys};
use super::reasons::PROVISIONING_FAILED;
use super::{lock, Context, Error};

/// How often a pending claim selected for another node is looked at
/// again, to notice that node going away (Node objects are not watched:
/// they change all the time, and only pending claims care).
const NODE_RECHECK: Duration = Duration::from_secs(30);

/// Looks after a claim handed to the node hosts that no node host takes.
pub(super) async fn claim<P>(
    claim: &PersistentVolumeClaim,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let bound = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty());
    if bound || claim.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let reference = claim.object_ref(&());
    let Some(node) = decide::selected_node(claim) else {
        let class_name = decide::claim_class(claim);
        let Some(class) = ctx.classes.get(&ObjectRef::new(class_name)) else {
            return Ok(Action::await_change());
        };
        let immediate = class.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer");
        let uid = claim.uid().unwrap_or_default();
        if immediate && lock(&ctx.janitor_warned).insert(uid) {
            let message = format!(
                "StorageClass {class_name} binds Immediately (no volumeBindingMode: \
                 WaitForFirstConsumer), but it is served by node hosts ({}), which make storage \
                 on the node a claim's pod is scheduled to: no node is chosen for this claim, so \
                 none makes its volume. Give the class volumeBindingMode: WaitForFirstConsumer \
                 (recreate it), then recreate the claim",
                ctx.config.names.primary
            );
            ctx.events
                .warning(&reference, PROVISIONING_FAILED, "Provisioning", message);
        }
        return Ok(Action::await_change());
    };
    if Api::<Node>::all(ctx.client.clone())
        .get_opt(node)
        .await?
        .is_some()
    {
        return Ok(Action::requeue(NODE_RECHECK));
    }
    let message = format!(
        "the selected node {node} does not exist (any more); asking the scheduler for another \
         one (annotation {} removed)",
        keys::SELECTED_NODE
    );
    ctx.events
        .warning(&reference, PROVISIONING_FAILED, "Provisioning", message);
    unselect_node(claim, ctx).await?;
    Ok(Action::await_change())
}
