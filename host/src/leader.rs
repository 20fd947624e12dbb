//! Leader election through a coordination.k8s.io Lease, so several replicas
//! can run and exactly one provisions. The leader renews the lease; a
//! candidate takes it over once it has not been renewed for its duration.
//! Losing the lease stops the work at once (its future is dropped).

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use kube::{Api, Client};

/// How the lease is held.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// Who we are: unique per replica (the pod name).
    pub identity: String,
    /// How long a lease stays valid without renewal.
    pub lease_duration: Duration,
    /// How often the leader renews, and a candidate retries.
    pub retry_period: Duration,
    /// The leader gives up if it could not renew for this long.
    pub renew_deadline: Duration,
}

impl LeaseConfig {
    /// The defaults of client-go's leader election (15 s / 10 s / 2 s).
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// The lease's name for a provisioner name: `example.com/x` → `example.com-x`
/// (as the Go library names it).
pub fn lease_name(provisioner: &str) -> String {
    provisioner.replace('/', "-")
}

#[derive(Debug, thiserror::Error)]
#[error("lost the leader lease {namespace}/{name}: not renewed within {deadline:?}")]
pub struct LostLease {
    namespace: String,
    name: String,
    deadline: Duration,
}

/// Waits until this replica holds the lease, then runs `work` while renewing
/// it. Returns `work`'s output, or [`LostLease`] if the lease was lost (the
/// work is then stopped). `on_leader` is told when leadership starts and ends.
pub async fn run_as_leader<T>(
    client: Client,
    config: LeaseConfig,
    on_leader: impl Fn(bool),
    work: impl Future<Output = T>,
) -> Result<T, LostLease> {
    let leases: Api<Lease> = Api::namespaced(client, &config.namespace);
    loop {
        match try_acquire_or_renew(&leases, &config).await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(lease = %config.name, error = %e, "cannot read or write the leader lease")
            }
        }
        tokio::time::sleep(config.retry_period).await;
    }
    tracing::info!(lease = %config.name, identity = %config.identity, "became the leader");
    on_leader(true);
    let renew = async {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(config.retry_period).await;
            match try_acquire_or_renew(&leases, &config).await {
                Ok(true) => last_renewal = tokio::time::Instant::now(),
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!(lease = %config.name, error = %e, "cannot renew the leader lease")
                }
            }
            if last_renewal.elapsed() > config.renew_deadline {
                break;
            }
        }
    };
    let outcome = tokio::select! {
        out = work => Ok(out),
        () = renew => Err(LostLease {
            namespace: config.namespace.clone(),
            name: config.name.clone(),
            deadline: config.renew_deadline,
        }),
    };
    on_leader(false);
    if outcome.is_ok() {
        release(&leases, &config).await;
    }
    outcome
}

/// One attempt: true if we hold the lease afterwards.
async fn try_acquire_or_renew(
    leases: &Api<Lease>,
    config: &LeaseConfig,
) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    let Some(mut lease) = leases.get_opt(&config.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                namespace: Some(config.namespace.clone()),
                ..Default::default()
            },
            spec: Some(held_by(
                &config.identity,
                config.lease_duration,
                now,
                None,
                0,
            )),
        };
        return match leases.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    if !may_take(&spec, &config.identity, now) {
        return Ok(false);
    }
    let ours = spec.holder_identity.as_deref() == Some(config.identity.as_str());
    let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
    let acquired = if ours {
        spec.acquire_time.clone()
    } else {
        None
    };
    lease.spec = Some(held_by(
        &config.identity,
        config.lease_duration,
        now,
        acquired,
        transitions,
    ));
    // The resourceVersion from the read makes a concurrent taker a conflict.
    match leases
        .replace(&config.name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives the lease up on a clean stop so a standby takes over at once.
async fn release(leases: &Api<Lease>, config: &LeaseConfig) {
    let Ok(Some(mut lease)) = leases.get_opt(&config.name).await else {
        return;
    };
    let Some(spec) = lease.spec.as_mut() else {
        return;
    };
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return;
    }
    spec.holder_identity = None;
    spec.renew_time = None;
    if let Err(e) = leases
        .replace(&config.name, &PostParams::default(), &lease)
        .await
    {
        tracing::warn!(lease = %config.name, error = %e, "cannot release the leader lease");
    }
}

fn held_by(
    identity: &str,
    duration: Duration,
    now: Timestamp,
    acquired: Option<MicroTime>,
    transitions: i32,
) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(duration.as_secs().max(1) as i32),
        acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}

/// Whether `me` may hold the lease now: it is ours, free, or expired.
fn may_take(spec: &LeaseSpec, me: &str, now: Timestamp) -> bool {
    match spec.holder_identity.as_deref() {
        None | Some("") => true,
        Some(holder) if holder == me => true,
        Some(_) => {
            let Some(renewed) = spec.renew_time.as_ref() else {
                return true;
            };
            let duration =
                SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
            match renewed.0.checked_add(duration) {
                Ok(expiry) => expiry < now,
                Err(_) => false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, renewed_secs_ago: i64, duration: i32) -> LeaseSpec {
        let now = Timestamp::now();
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: Some(MicroTime(now - SignedDuration::from_secs(renewed_secs_ago))),
            lease_duration_seconds: Some(duration),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_can_be_taken_when_free_ours_or_expired() {
        let now = Timestamp::now();
        let cases = [
            ("free lease", spec(None, 0, 15), true),
            ("our own lease (renewal)", spec(Some("me"), 1, 15), true),
            (
                "another holder's live lease",
                spec(Some("other"), 5, 15),
                false,
            ),
            (
                "another holder's expired lease",
                spec(Some("other"), 20, 15),
                true,
            ),
        ];
        for (case, s, want) in cases {
            assert_eq!(may_take(&s, "me", now), want, "{case}");
        }
        assert_eq!(lease_name("wasmprov.io/host"), "wasmprov.io-host");
    }
}
