//! Claims whose storage the backend may still be creating (`in-background`).
//!
//! If such a claim is deleted, its controller never sees it again, yet the
//! backend may finish creating the storage. Like the Go library's
//! claims-in-progress, the host keeps asking the plugin for that claim until
//! it gets a final answer, then removes what was made (or, for a Retain
//! class, saves the volume so an administrator finds it). If removing it
//! fails, the volume is saved as well, and reclaimed from then on like any
//! released volume.
//!
//! This memory dies with the process; `--claim-finalizer` records the same
//! on the claim itself, and [`finish`] serves both.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::PostParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::reasons::VOLUME_FAILED_DELETE;
use super::{Context, Error};
use crate::provisioner::{DeleteState, ProvisionOptions, ProvisionState, Provisioner};

/// The requests to repeat, by claim uid.
#[derive(Default)]
pub struct InProgress(Mutex<HashMap<String, Entry>>);

/// One claim whose storage may still be being created.
struct Entry {
    plugin: String,
    opts: ProvisionOptions,
    /// The API server said this claim is gone (a uid never comes back), so
    /// it need not be asked again.
    gone: bool,
    /// Looks since the claim went that did not finish it: its backoff.
    misses: u32,
    /// When the sweep may spend a request or a plugin call on it again.
    next: Instant,
}

impl InProgress {
    /// Remembers (or refreshes) a claim answered `in-background`; the
    /// backoff of an entry already there is kept.
    pub fn track(&self, uid: &str, plugin: &str, opts: &ProvisionOptions) {
        let mut all = self.lock();
        match all.get_mut(uid) {
            Some(entry) => {
                entry.plugin = plugin.to_owned();
                entry.opts = opts.clone();
            }
            None => {
                all.insert(
                    uid.to_owned(),
                    Entry {
                        plugin: plugin.to_owned(),
                        opts: opts.clone(),
                        gone: false,
                        misses: 0,
                        next: Instant::now(),
                    },
                );
            }
        }
    }

    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Whether `uid` is tracked.
    #[cfg(test)]
    pub fn tracks(&self, uid: &str) -> bool {
        self.lock().contains_key(uid)
    }

    /// The entries whose backoff is over at `now`: (uid, plugin, request,
    /// known to be gone).
    fn due(&self, now: Instant) -> Vec<(String, String, ProvisionOptions, bool)> {
        self.lock()
            .iter()
            .filter(|(_, e)| e.next <= now)
            .map(|(uid, e)| (uid.clone(), e.plugin.clone(), e.opts.clone(), e.gone))
            .collect()
    }

    fn mark_gone(&self, uid: &str) {
        if let Some(e) = self.lock().get_mut(uid) {
            e.gone = true;
        }
    }

    /// One more look at `uid` that did not finish it: the next waits
    /// `backoff(misses)`.
    fn missed(&self, uid: &str, backoff: impl FnOnce(u32) -> Duration) {
        if let Some(e) = self.lock().get_mut(uid) {
            e.misses = e.misses.saturating_add(1);
            e.next = Instant::now() + backoff(e.misses);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Every `interval`, finishes the in-progress work of deleted claims.
///
/// A claim that is still there costs nothing: the claims watch's cache says
/// so, and its own controller keeps asking the plugin. Once the cache no
/// longer has it, one GET confirms it is gone; from then on the plugin is
/// asked with a backoff of its own, the claims' (15 s, doubling, up to
/// 1000 s), so a backend that takes hours costs a call every 17 minutes.
pub async fn sweep<P: Provisioner>(ctx: Arc<Context<P>>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        for (uid, plugin, opts, gone) in ctx.in_progress.due(Instant::now()) {
            if let Err(e) = sweep_one(&ctx, &uid, &plugin, &opts, gone).await {
                ctx.in_progress.missed(&uid, |n| ctx.backoff(n));
                tracing::warn!(claim_uid = %uid, error = %e, "cannot finish in-progress provisioning");
            }
        }
    }
}

async fn sweep_one<P: Provisioner>(
    ctx: &Context<P>,
    uid: &str,
    plugin: &str,
    opts: &ProvisionOptions,
    gone: bool,
) -> Result<(), Error> {
    if !gone {
        let namespace = opts.claim.namespace().unwrap_or_default();
        let name = opts.claim.name_any();
        let is_it = |c: &PersistentVolumeClaim| c.uid().as_deref() == Some(uid);
        let cached = ctx.claims.get(&ObjectRef::new(&name).within(&namespace));
        if cached.is_some_and(|c| is_it(&c)) {
            return Ok(()); // still there: its controller retries it
        }
        // The watch saw it go; the cache may be behind a recreation or a
        // relist, so ask once before removing anything.
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
        if claims.get_opt(&name).await?.is_some_and(|c| is_it(&c)) {
            ctx.in_progress.missed(uid, |n| ctx.backoff(n));
            return Ok(());
        }
        ctx.in_progress.mark_gone(uid);
    }
    match finish(ctx, plugin, opts).await? {
        Finish::Done => ctx.in_progress.forget(uid),
        Finish::Pending(_) => ctx.in_progress.missed(uid, |n| ctx.backoff(n)),
    }
    Ok(())
}

/// What finishing the provisioning of a deleted claim came to.
#[derive(Debug)]
pub(super) enum Finish {
    /// Nothing is left to do here: the storage was removed or never made,
    /// or it was saved as a released volume (Retain, or its removal failed),
    /// which the volume controller reclaims or an administrator finds.
    Done,
    /// The backend is still creating the storage (its message): ask again.
    Pending(String),
}

/// Asks the plugin again for the storage of a claim that was deleted while
/// it was being provisioned, then removes what it made (Delete) or saves it
/// as a released volume (Retain). If removing it fails, it is saved too, as
/// the Go library does: the PV controller marks it Released and the volume
/// controller retries the delete like any other (backoff, threshold, events,
/// metrics, and across restarts, which this memory does not survive).
/// Only a failed save is an error: the caller keeps the claim and retries.
pub(super) async fn finish<P: Provisioner>(
    ctx: &Context<P>,
    plugin: &str,
    opts: &ProvisionOptions,
) -> Result<Finish, Error> {
    let pv = match ctx.provisioner.provision(plugin, opts).await {
        Ok(pv) => pv,
        Err(e)
            if matches!(
                e.state,
                ProvisionState::InBackground | ProvisionState::NoChange
            ) =>
        {
            return Ok(Finish::Pending(e.message));
        }
        Err(e) => {
            // A final answer: nothing was created.
            tracing::info!(volume = %opts.pv_name, "claim deleted while provisioning; the backend gave up: {}", e.message);
            return Ok(Finish::Done);
        }
    };
    if opts.class.reclaim_policy.as_deref() == Some("Retain") {
        save_released(ctx, &pv).await?;
        tracing::info!(volume = %opts.pv_name, "claim deleted while provisioning; saved the volume (Retain)");
        return Ok(Finish::Done);
    }
    let with_class = crate::provisioner::with_class_parameters(&pv, Some(&opts.class));
    match ctx.provisioner.delete(plugin, &with_class).await {
        Ok(()) => {}
        Err(e) if e.state == DeleteState::Ignored => {}
        Err(e) => {
            let saved = save_released(ctx, &pv).await?;
            let message = format!(
                "Claim {}/{} was deleted while its storage was being created, and removing that storage failed: {}. \
                 The volume was saved so that it is reclaimed like any released volume (retried with backoff)",
                opts.claim.namespace().unwrap_or_default(),
                opts.claim.name_any(),
                e.message
            );
            tracing::warn!(volume = %opts.pv_name, "{message}");
            ctx.events.warning(
                &saved.object_ref(&()),
                VOLUME_FAILED_DELETE,
                "Deleting",
                message,
            );
            return Ok(Finish::Done);
        }
    }
    tracing::info!(volume = %opts.pv_name, "claim deleted while provisioning; removed the storage it got");
    Ok(Finish::Done)
}

/// Saves the volume of a deleted claim; its claimRef names the gone claim,
/// so the PV controller marks it Released. AlreadyExists is a save by an
/// earlier try.
async fn save_released<P>(
    ctx: &Context<P>,
    pv: &PersistentVolume,
) -> Result<PersistentVolume, Error> {
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    match volumes.create(&PostParams::default(), pv).await {
        Ok(saved) => Ok(saved),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(pv.clone()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> ProvisionOptions {
        ProvisionOptions {
            pv_name: "pvc-u".into(),
            claim: Default::default(),
            class: Default::default(),
            selected_node: None,
        }
    }

    #[test]
    fn an_entry_waits_out_its_own_backoff_and_tracking_again_keeps_it() {
        let p = InProgress::default();
        p.track("u", "x", &opts());
        p.track("v", "x", &opts());
        let now = Instant::now();
        assert_eq!(p.due(now).len(), 2, "a new entry is due at once");
        p.missed("u", |n| Duration::from_secs(60 * u64::from(n)));
        let due: Vec<_> = p.due(now).into_iter().map(|d| d.0).collect();
        assert_eq!(due, ["v"], "u backs off, v does not");
        // Answered in-background again by its controller: same backoff.
        p.track("u", "y", &opts());
        assert!(p
            .due(now + Duration::from_secs(59))
            .iter()
            .all(|d| d.0 != "u"));
        let later = p.due(now + Duration::from_secs(61));
        assert!(later.iter().any(|d| d.0 == "u" && d.1 == "y"));
        // The backoff grows with each miss.
        p.missed("u", |n| Duration::from_secs(60 * u64::from(n)));
        assert!(p
            .due(now + Duration::from_secs(119))
            .iter()
            .all(|d| d.0 != "u"));
        p.forget("u");
        assert!(!p.tracks("u"));
    }
}
