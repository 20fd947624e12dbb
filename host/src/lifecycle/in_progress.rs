//! Claims whose storage the backend may still be creating (`in-background`).
//!
//! If such a claim is deleted, its controller never sees it again, yet the
//! backend may finish creating the storage. Like the Go library's
//! claims-in-progress, the host keeps asking the plugin for that claim until
//! it gets a final answer, then removes what was made (or, for a Retain
//! class, saves the volume so an administrator finds it).
//!
//! This memory dies with the process; `--claim-finalizer` records the same
//! on the claim itself, and [`finish`] serves both.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::PostParams;
use kube::{Api, ResourceExt};

use super::{Context, Error};
use crate::provisioner::{DeleteState, ProvisionOptions, ProvisionState, Provisioner};

/// The requests to repeat, by claim uid.
#[derive(Default)]
pub struct InProgress(Mutex<HashMap<String, (String, ProvisionOptions)>>);

impl InProgress {
    pub fn track(&self, uid: &str, plugin: &str, opts: &ProvisionOptions) {
        self.lock()
            .insert(uid.to_owned(), (plugin.to_owned(), opts.clone()));
    }

    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn snapshot(&self) -> Vec<(String, String, ProvisionOptions)> {
        self.lock()
            .iter()
            .map(|(uid, (plugin, opts))| (uid.clone(), plugin.clone(), opts.clone()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, ProvisionOptions)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Every `interval`, finishes the in-progress work of deleted claims.
pub async fn sweep<P: Provisioner>(ctx: Arc<Context<P>>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        for (uid, plugin, opts) in ctx.in_progress.snapshot() {
            if let Err(e) = sweep_one(&ctx, &uid, &plugin, &opts).await {
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
) -> Result<(), Error> {
    let namespace = opts.claim.namespace().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    let current = claims.get_opt(&opts.claim.name_any()).await?;
    if current.is_some_and(|c| c.uid().as_deref() == Some(uid)) {
        return Ok(()); // still there: its controller retries it
    }
    match finish(ctx, plugin, opts).await {
        Ok(Finish::Done) => ctx.in_progress.forget(uid),
        Ok(Finish::Pending(_)) => {}
        Err(Error::Delete(message)) => {
            // Nothing records this storage any more: say so loudly, once.
            ctx.in_progress.forget(uid);
            tracing::error!(volume = %opts.pv_name, "{message}; it may have leaked");
        }
        Err(e) => return Err(e),
    }
    Ok(())
}

/// What finishing the provisioning of a deleted claim came to.
#[derive(Debug)]
pub(super) enum Finish {
    /// Nothing is left to do: the storage was removed, never made, or (for a
    /// Retain class) saved as a volume for an administrator to find.
    Done,
    /// The backend is still creating the storage (its message): ask again.
    Pending(String),
}

/// Asks the plugin again for the storage of a claim that was deleted while
/// it was being provisioned, then removes what it made (Delete) or saves it
/// as a released volume (Retain).
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
        let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
        match volumes.create(&PostParams::default(), &pv).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(volume = %opts.pv_name, "claim deleted while provisioning; saved the volume (Retain)");
        return Ok(Finish::Done);
    }
    match ctx.provisioner.delete(plugin, &pv).await {
        Ok(()) => {}
        Err(e) if e.state == DeleteState::Ignored => {}
        Err(e) => {
            return Err(Error::Delete(format!(
                "claim {}/{} was deleted while provisioning; removing the storage made for it (volume {}) failed: {}",
                opts.claim.namespace().unwrap_or_default(),
                opts.claim.name_any(),
                opts.pv_name,
                e.message
            )))
        }
    }
    tracing::info!(volume = %opts.pv_name, "claim deleted while provisioning; removed the storage it got");
    Ok(Finish::Done)
}
