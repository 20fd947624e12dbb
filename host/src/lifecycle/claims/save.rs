//! Saving the volume a backend made, with retries; and when it cannot be
//! saved (or may not be), removing its storage again so that it does not
//! leak (the Go library's backoffStore).

use std::time::{Duration, Instant};

use backon::{ConstantBuilder, Retryable};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::super::decide::ClaimFacts;
use super::super::reasons::*;
use super::super::{lock, Context, Error};
use super::{failures, release_or_log};
use crate::provisioner::{DeleteError, DeleteState, ProvisionOptions, Provisioner};

/// A provision under way: the claim, the plugin asked and what it was
/// asked for, and the claim as the host last wrote it (carrying the claim
/// finalizer with `--claim-finalizer`).
pub(super) struct Attempt<'a> {
    pub facts: &'a ClaimFacts<'a>,
    pub claim_now: PersistentVolumeClaim,
    pub plugin: &'a str,
    pub opts: ProvisionOptions,
    pub started: Instant,
}

/// The storage of a volume that will not be saved (it could not be, or it
/// was refused) would never be found again: remove it, with the retries of
/// the save (the Go library's backoffStore), and report why it went.
pub(super) async fn discard<P: Provisioner>(
    attempt: &Attempt<'_>,
    pv: &PersistentVolume,
    what_happened: &str,
    message: String,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let reference = &attempt.facts.reference;
    failures::count_metric(attempt.facts, ctx);
    let with_class = crate::provisioner::with_class_parameters(pv, Some(&attempt.opts.class));
    match clean_up(attempt.plugin, &with_class, ctx).await {
        Ok(()) => release_or_log(&attempt.claim_now, ctx).await,
        Err(e) => {
            let tries = if e.state == DeleteState::Failed {
                let n = ctx.config.save_attempts.max(1);
                let s = if n == 1 { "" } else { "s" };
                format!(" (tried {n} time{s}, --save-attempts)")
            } else {
                String::new()
            };
            let cleanup_failed = format!(
                "Volume {} {what_happened} and deleting its storage failed too{tries}; \
                 it may have leaked: {e}",
                attempt.opts.pv_name
            );
            ctx.events.warning(
                reference,
                PROVISIONING_CLEANUP_FAILED,
                "Provisioning",
                cleanup_failed,
            );
        }
    }
    ctx.events.warning(
        reference,
        PROVISIONING_FAILED,
        "Provisioning",
        message.clone(),
    );
    Err(Error::Provision(message))
}

/// The uid of the claim a volume is bound to.
pub(super) fn claim_uid(pv: &PersistentVolume) -> Option<String> {
    pv.spec.as_ref()?.claim_ref.as_ref()?.uid.clone()
}

/// The retries of saving a volume and of deleting its storage when it
/// cannot be saved: `--save-attempts` tries, `--save-retry-interval` apart
/// (the Go library's `CreateProvisionedPVRetryCount` and
/// `CreateProvisionedPVInterval`, a linear backoff).
fn save_retries(config: &super::super::Config) -> ConstantBuilder {
    ConstantBuilder::default()
        .with_delay(config.save_retry_interval)
        .with_max_times(config.save_attempts.saturating_sub(1))
}

/// Deletes the storage of a volume that could not be saved, retrying
/// failures as [`save_retries`] says. `ignored` is a final answer.
async fn clean_up<P: Provisioner>(
    plugin: &str,
    pv: &PersistentVolume,
    ctx: &Context<P>,
) -> Result<(), DeleteError> {
    let delete = || ctx.provisioner.delete(plugin, pv);
    delete
        .retry(save_retries(&ctx.config))
        .when(|e| e.state == DeleteState::Failed)
        .notify(|e, after| {
            tracing::warn!(volume = %pv.name_any(), error = %e, retry_in = ?after, "deleting the storage of an unsaved volume failed; retrying");
        })
        .await
}

/// How long a saved volume is trusted to be on its way through the volume
/// watch: a few seconds at most on a loaded API server.
const SAVED_MEMORY: Duration = Duration::from_secs(30);

pub(super) fn remember_saved<P>(uid: &str, ctx: &Context<P>) {
    let mut saved = lock(&ctx.recently_saved);
    saved.retain(|_, at| at.elapsed() < SAVED_MEMORY);
    saved.insert(uid.to_owned(), Instant::now());
}

/// Whether this host saved the claim's volume within [`SAVED_MEMORY`]:
/// how much of it is left.
pub(super) fn saved_moments_ago<P>(uid: &str, ctx: &Context<P>) -> Option<Duration> {
    let at = *lock(&ctx.recently_saved).get(uid)?;
    SAVED_MEMORY.checked_sub(at.elapsed())
}

/// Creates the volume, retrying transient API errors as [`save_retries`]
/// says. AlreadyExists is success when the existing volume is this claim's
/// (a previous attempt whose answer was lost) and is not being deleted.
pub(super) async fn save(
    volumes: &Api<PersistentVolume>,
    pv: &PersistentVolume,
    claim_uid_want: &str,
    config: &super::super::Config,
) -> Result<(), kube::Error> {
    let create = || async {
        match volumes.create(&PostParams::default(), pv).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(mut s)) if s.code == 409 => {
                match volumes.get_opt(&pv.name_any()).await? {
                    Some(existing) if claim_uid(&existing).as_deref() == Some(claim_uid_want) => {
                        if existing.metadata.deletion_timestamp.is_none() {
                            return Ok(());
                        }
                        // Reclaimed already, the object not yet gone: a stale
                        // view of the claim provisioned it again. Counting
                        // that as saved would leak the storage just made
                        // (kubernetes-csi/external-provisioner#1469); failing
                        // the save has it removed.
                        s.message = format!(
                            "{} and is being deleted (its storage was reclaimed)",
                            s.message
                        );
                        Err(kube::Error::Api(s))
                    }
                    _ => Err(kube::Error::Api(s)),
                }
            }
            Err(e) => Err(e),
        }
    };
    create
        .retry(save_retries(config))
        .when(is_transient)
        .notify(|e, after| {
            tracing::warn!(volume = %pv.name_any(), error = %e, retry_in = ?after, "saving the volume failed; retrying");
        })
        .await
}

fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}
