//! What no node host can do, done by the one node host elected janitor
//! (`Config::janitor`): a claim whose selected node is gone waits for the
//! scheduler until someone clears that node (the scheduler never looks
//! elsewhere while it is set); a claim whose selected node has no live
//! host waits for ever without a word; a claim of a class that binds
//! Immediately has no selected node, so no node host takes it; a Released
//! volume whose node is gone can be deleted by nobody (its storage went
//! with the node). Every other node host leaves other nodes' claims and
//! volumes alone.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::claims::{release, reschedule};
use super::decide::{self, keys, ClaimFacts, VolumeDecision};
use super::finalizers;
use super::nodes;
use super::reasons::{PROVISIONING, PROVISIONING_FAILED, VOLUME_NODE_GONE};
use super::{lock, Context, Error};
use crate::metrics::Metrics;

/// How often a pending claim selected for another node is looked at
/// again, to notice that node going away (Node objects are not watched:
/// they change all the time, and only pending claims care).
const NODE_RECHECK: Duration = Duration::from_secs(30);

/// The annotation that has the janitor forget a Released volume whose node
/// is gone (delete its object) rather than keep it, whatever
/// `--forget-gone-node-volumes` says.
pub const FORGET_ANNOTATION: &str = "wasmprov.io/forget-when-node-gone";

/// Looks after a claim handed to the node hosts that no node host takes.
pub(super) async fn claim<P>(facts: &ClaimFacts<'_>, ctx: &Context<P>) -> Result<Action, Error> {
    let claim = facts.claim;
    let bound = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty());
    let deleting = claim.metadata.deletion_timestamp.is_some();
    if deleting && held(claim) {
        return deleted_and_held(facts, bound, ctx).await;
    }
    if bound || deleting {
        return Ok(Action::await_change());
    }
    let reference = &facts.reference;
    let Some(node) = facts.selected_node else {
        let class_name = facts.class;
        let Some(class) = ctx.classes.get(&ObjectRef::new(class_name)) else {
            return Ok(Action::await_change());
        };
        let immediate = class.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer");
        if immediate && lock(&ctx.janitor_warned).insert(facts.uid.clone()) {
            let message = format!(
                "StorageClass {class_name} binds Immediately (no volumeBindingMode: \
                 WaitForFirstConsumer), but it is served by node hosts ({}), which make storage \
                 on the node a claim's pod is scheduled to: no node is chosen for this claim, so \
                 none makes its volume. Give the class volumeBindingMode: WaitForFirstConsumer \
                 (recreate it), then recreate the claim",
                ctx.config.names.primary
            );
            ctx.events
                .warning(reference, PROVISIONING_FAILED, "Provisioning", message);
        }
        return Ok(Action::await_change());
    };
    if Api::<Node>::all(ctx.client.clone())
        .get_opt(node)
        .await?
        .is_some()
    {
        if host_missing(node, ctx).await?
            && lock(&ctx.janitor_warned).insert(format!("host/{}", facts.uid))
        {
            let lease = crate::leader::node_lease_name(&ctx.config.names.primary, node);
            let message = format!(
                "no wasmprov node host is running on node {node}: its Lease {}/{lease} has not \
                 been renewed for {} (or does not exist), so nothing makes this claim's volume \
                 there. Check that the node hosts' DaemonSet has a ready pod on {node} (kubectl \
                 -n {} get pods -o wide): its tolerations and nodeSelector must allow the node",
                ctx.config.node_lease_namespace,
                humantime::format_duration(ctx.config.missing_host_grace),
                ctx.config.node_lease_namespace,
            );
            ctx.events
                .warning(reference, PROVISIONING_FAILED, "Provisioning", message);
            tracing::warn!(claim = %facts.key, node, "no node host runs on the claim's selected node");
        }
        return Ok(Action::requeue(
            NODE_RECHECK.min(ctx.config.missing_host_grace),
        ));
    }
    let message = format!(
        "the selected node {node} does not exist (any more); asking the scheduler for another \
         one (annotation {} removed)",
        keys::SELECTED_NODE
    );
    reschedule(facts, ctx, message).await?;
    // What that node's host may have begun for it went with the node: the
    // host of the node chosen next holds the claim again while it works.
    if held(claim) {
        release(claim, ctx).await?;
    }
    Ok(Action::await_change())
}

/// Whether a node host holds the claim with our finalizer (it adds it while
/// it provisions, with `--claim-finalizer`, and removes it once the volume
/// is saved or the storage is gone).
fn held(claim: &PersistentVolumeClaim) -> bool {
    claim
        .finalizers()
        .iter()
        .any(|f| f == keys::CLAIM_FINALIZER)
}

/// A deleted claim that another node's host still holds: its host lets it
/// go, unless the node is gone (a host frozen or switched off between
/// saving a volume and letting go, or part-way through a provision), where
/// the deletion would wait for ever. Then the janitor lets it go: a bound
/// claim's storage is its saved volume, which the volume's own path keeps
/// and reports; an unbound claim's storage, if a provision began it, was on
/// the node that is gone. A bound claim is also let go when its node's host
/// has been missing for the grace period (its volume is saved either way).
async fn deleted_and_held<P>(
    facts: &ClaimFacts<'_>,
    bound: bool,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let (claim, node) = (facts.claim, facts.selected_node);
    let recheck = Action::requeue(NODE_RECHECK.min(ctx.config.missing_host_grace));
    let gone = match node {
        Some(node) => Api::<Node>::all(ctx.client.clone())
            .get_opt(node)
            .await?
            .is_none(),
        // No node host provisions a claim with no node.
        None => true,
    };
    let let_go = gone || (bound && host_missing(node.unwrap_or_default(), ctx).await?);
    if !let_go {
        return Ok(recheck);
    }
    if !bound {
        let message = format!(
            "the claim is deleted, and its selected node {} does not exist (any more): whatever \
             a provision began for it there went with the node; finalizer {} removed",
            node.unwrap_or("(none)"),
            keys::CLAIM_FINALIZER
        );
        ctx.events
            .normal(&facts.reference, PROVISIONING, "Provisioning", message);
    }
    release(claim, ctx).await?;
    tracing::info!(claim = %facts.key, node, bound, "let go of a deleted claim its node's host could not");
    Ok(Action::await_change())
}

/// Whether `node` has had no live node host for `missing_host_grace`: its
/// Lease has not changed for that long as this janitor saw it (by its own
/// clock, as leader election judges a Lease), or there is none.
async fn host_missing<P>(node: &str, ctx: &Context<P>) -> Result<bool, Error> {
    let name = crate::leader::node_lease_name(&ctx.config.names.primary, node);
    let version = Api::<Lease>::namespaced(ctx.client.clone(), &ctx.config.node_lease_namespace)
        .get_opt(&name)
        .await?
        .and_then(|l| l.metadata.resource_version)
        .unwrap_or_default();
    let mut seen = lock(&ctx.node_hosts_seen);
    let entry = seen
        .entry(node.to_owned())
        .or_insert_with(|| (version.clone(), Instant::now()));
    if entry.0 != version {
        *entry = (version, Instant::now());
    }
    Ok(entry.1.elapsed() >= ctx.config.missing_host_grace)
}

/// A volume whose node the janitor found gone.
#[derive(Debug)]
pub(super) struct GoneNode {
    since: Instant,
    /// Its class, once reported (and counted).
    reported: Option<String>,
}

/// Looks after a volume pinned to another node: a Released volume to
/// delete whose node has been gone for the grace period is reported once
/// (a Warning on the volume, the `volumes_on_gone_nodes` gauge) and kept:
/// no plugin is called, as the storage was on that node.
pub(super) async fn volume<P>(pv: &PersistentVolume, ctx: &Context<P>) -> Result<Action, Error> {
    let uid = pv.uid().unwrap_or_default();
    let decision = decide::volume(pv, &ctx.config.names, ctx.config.add_finalizer);
    let hostname = nodes::pinned_hostname(pv);
    let (VolumeDecision::Delete { .. }, Some(hostname)) = (decision, hostname) else {
        forget(ctx, &uid);
        return Ok(Action::await_change());
    };
    if nodes::hostname_exists(&ctx.client, hostname).await? {
        // Its node's host deletes it; looked at again in case the node goes.
        forget(ctx, &uid);
        return Ok(Action::requeue(NODE_RECHECK));
    }
    let grace = ctx.config.gone_node_grace;
    let since = lock(&ctx.gone_nodes)
        .entry(uid.clone())
        .or_insert_with(|| GoneNode {
            since: Instant::now(),
            reported: None,
        })
        .since;
    if since.elapsed() < grace {
        return Ok(Action::requeue(grace - since.elapsed()));
    }
    let class = pv
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default();
    let first = {
        let mut gone = lock(&ctx.gone_nodes);
        let entry = gone.get_mut(&uid).expect("inserted above");
        entry.reported.replace(class.clone()).is_none()
    };
    let forget = ctx.config.forget_gone_node_volumes
        || pv.annotations().get(FORGET_ANNOTATION).map(String::as_str) == Some("true");
    if forget {
        return forget_volume(pv, hostname, ctx).await;
    }
    if first {
        let message = format!(
            "its storage is on node {hostname}, which no longer exists, so nothing can delete it \
             there; the volume is kept. If the node will not come back, delete this \
             PersistentVolume (kubectl delete pv {}; remove its finalizers if it has any), or \
             annotate it {FORGET_ANNOTATION}=true",
            pv.name_any()
        );
        ctx.events
            .warning(&pv.object_ref(&()), VOLUME_NODE_GONE, "Deleting", message);
        tracing::warn!(volume = %pv.name_any(), node = hostname, "kept a Released volume whose node is gone");
    }
    count_gone(ctx);
    Ok(Action::requeue(NODE_RECHECK))
}

/// Deletes the object of a Released volume whose node is gone, as asked
/// (its storage went with the node: no plugin is called), and our finalizer
/// from it.
async fn forget_volume<P>(
    pv: &PersistentVolume,
    hostname: &str,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let name = pv.name_any();
    let message = format!(
        "its storage was on node {hostname}, which no longer exists; the volume object is \
         deleted, as asked (--forget-gone-node-volumes or {FORGET_ANNOTATION}), and no storage \
         is touched"
    );
    ctx.events
        .normal(&pv.object_ref(&()), VOLUME_NODE_GONE, "Deleting", message);
    let volumes = Api::<PersistentVolume>::all(ctx.client.clone());
    match volumes.delete(&name, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    finalizers::remove(&volumes, pv, keys::PV_FINALIZER).await?;
    forget(ctx, &pv.uid().unwrap_or_default());
    tracing::warn!(volume = %name, node = hostname, "forgot a Released volume whose node is gone");
    Ok(Action::await_change())
}

/// Forgets a volume's gone node (it came back, or the volume changed).
fn forget<P>(ctx: &Context<P>, uid: &str) {
    if lock(&ctx.gone_nodes).remove(uid).is_some() {
        count_gone(ctx);
    }
}

/// Keeps the gauge right as volumes on gone nodes are deleted (a deleted
/// volume is reconciled no more).
pub(super) async fn recount_gone<P>(ctx: std::sync::Arc<Context<P>>) {
    loop {
        tokio::time::sleep(NODE_RECHECK).await;
        if !lock(&ctx.gone_nodes).is_empty() {
            count_gone(&ctx);
        }
    }
}

/// Sets the gauge from the volumes reported and still there.
fn count_gone<P>(ctx: &Context<P>) {
    let mut gone = lock(&ctx.gone_nodes);
    // Only the janitor of the moment reports: a host that lost the role
    // forgets what it counted, so two hosts never export the same volumes.
    if !ctx.is_janitor() {
        gone.clear();
    }
    let present: std::collections::HashSet<String> = ctx
        .volumes
        .state()
        .iter()
        .filter_map(|pv| pv.uid())
        .collect();
    gone.retain(|uid, _| present.contains(uid));
    ctx.metrics.volumes_on_gone_nodes.clear();
    for class in gone.values().filter_map(|g| g.reported.as_deref()) {
        ctx.metrics
            .volumes_on_gone_nodes
            .get_or_create(&Metrics::class(class))
            .inc();
    }
}
