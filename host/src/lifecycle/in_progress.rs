//! Claims whose storage the backend may still be creating (`in-background`).
//!
//! If such a claim is deleted, its controller never sees it again, yet the
//! backend may finish creating the storage. Like the Go library's
//! claims-in-progress, the host keeps asking the plugin for that claim until
//! it gets a final answer, then removes what was made (or, for a Retain
//! class, saves the volume so an administrator finds it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::PostParams;
use kube::{Api, ResourceExt};

use super::Context;
use crate::provisioner::{ProvisionOptions, ProvisionState, Provisioner};

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
) -> Result<(), kube::Error> {
    let namespace = opts.claim.namespace().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    let current = claims.get_opt(&opts.claim.name_any()).await?;
    if current.is_some_and(|c| c.uid().as_deref() == Some(uid)) {
        return Ok(()); // still there: its controller retries it
    }
    match ctx.provisioner.provision(plugin, opts).await {
        Ok(pv) => {
            ctx.in_progress.forget(uid);
            let retain = opts.class.reclaim_policy.as_deref() == Some("Retain");
            if retain {
                let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
                match volumes.create(&PostParams::default(), &pv).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(e),
                }
                tracing::info!(volume = %opts.pv_name, "claim deleted while provisioning; saved the volume (Retain)");
            } else if let Err(e) = ctx.provisioner.delete(plugin, &pv).await {
                tracing::error!(volume = %opts.pv_name, error = %e, "claim deleted while provisioning; removing the storage it got failed, it may have leaked");
            } else {
                tracing::info!(volume = %opts.pv_name, "claim deleted while provisioning; removed the storage it got");
            }
        }
        Err(e)
            if matches!(
                e.state,
                ProvisionState::InBackground | ProvisionState::NoChange
            ) => {}
        Err(e) => {
            // A final answer: nothing was created.
            ctx.in_progress.forget(uid);
            tracing::info!(volume = %opts.pv_name, "claim deleted while provisioning; the backend gave up: {}", e.message);
        }
    }
    Ok(())
}
