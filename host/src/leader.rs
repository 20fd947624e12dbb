//! Leader election through a coordination.k8s.io Lease, so several replicas
//! can run and exactly one provisions. The leader renews the lease; a
//! candidate takes it over once it has not seen the lease change for its
//! duration, by its own clock (client-go's rule: the holder's `renewTime` is
//! another machine's clock, so comparing it with ours would let skewed clocks
//! make two leaders, or none). Losing the lease stops the work at once (its
//! future is dropped). Every renewal is bounded by the renew deadline,
//! in-flight request included, so a leader that cannot reach the API server
//! stops before its lease could be taken.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
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
    /// Stop waiting, with [`LeaseError::HeldElsewhere`], once another
    /// replica has kept the lease (renewing it) this long: for a lease
    /// only one replica should ever want, such as a node host's. `None`:
    /// wait as a standby for ever.
    pub standby_limit: Option<Duration>,
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
            standby_limit: None,
        }
    }
}

/// The lease's name for a provisioner name: `example.com/x` → `example.com-x`
/// (as the Go library names it).
pub fn lease_name(provisioner: &str) -> String {
    provisioner.replace('/', "-")
}

/// The Lease a node host of `provisioner` holds for its node: one per node,
/// so a second host started for the same node waits instead of serving
/// beside the first. A name too long for an object name (253 characters)
/// ends in a digest of the node's name instead.
pub fn node_lease_name(provisioner: &str, node: &str) -> String {
    use sha2::{Digest, Sha256};
    let name = format!("{}.{node}", lease_name(provisioner));
    if name.len() <= 253 {
        return name;
    }
    let digest = Sha256::digest(node.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{}.node-{hex}", lease_name(provisioner))
}

/// Why [`run_as_leader`] stopped without its work finishing.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lost the leader lease {namespace}/{name}: not renewed within {deadline:?}")]
    Lost {
        namespace: String,
        name: String,
        deadline: Duration,
    },
    #[error(
        "the lease {namespace}/{name} is held by {holder}, which kept renewing it for {waited:?}: \
         another replica does this work"
    )]
    HeldElsewhere {
        namespace: String,
        name: String,
        holder: String,
        waited: Duration,
    },
}

/// Waits until this replica holds the lease, then runs `work` while renewing
/// it. Returns `work`'s output, or [`LeaseError::Lost`] if the lease was
/// lost (the work is then stopped), or [`LeaseError::HeldElsewhere`] past
/// the standby limit. `on_leader` is told when leadership starts and ends.
pub async fn run_as_leader<T>(
    client: Client,
    config: LeaseConfig,
    on_leader: impl Fn(bool),
    work: impl Future<Output = T>,
) -> Result<T, LeaseError> {
    let leases: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut observed = Observed::default();
    let waiting = Instant::now();
    loop {
        // Bounded, so a request that never returns cannot stall a candidate.
        let attempt = tokio::time::timeout(
            config.lease_duration,
            try_acquire_or_renew(&leases, &config, &mut observed),
        )
        .await;
        match attempt {
            Ok(Ok(Attempt::Held)) => break,
            Ok(Ok(Attempt::HeldByOther)) => {
                if let Some(limit) = config.standby_limit {
                    if waiting.elapsed() >= limit {
                        let holder = observed
                            .record
                            .as_ref()
                            .and_then(|r| r.holder_identity.clone())
                            .unwrap_or_default();
                        return Err(LeaseError::HeldElsewhere {
                            namespace: config.namespace.clone(),
                            name: config.name.clone(),
                            holder,
                            waited: waiting.elapsed(),
                        });
                    }
                }
            }
            Ok(Ok(Attempt::Conflict)) => {}
            Ok(Err(e)) => {
                tracing::warn!(lease = %config.name, error = %e, "cannot read or write the leader lease")
            }
            Err(_) => {
                tracing::warn!(lease = %config.name, "no answer from the API server about the leader lease")
            }
        }
        tokio::time::sleep(config.retry_period).await;
    }
    tracing::info!(lease = %config.name, identity = %config.identity, "became the leader");
    on_leader(true);
    let renew = async {
        let mut last_renewal = Instant::now();
        let mut pause = config.retry_period;
        loop {
            // Stop leading at the deadline even if the API server never
            // answers (client-go cancels the request the same way): a
            // standby may take the lease once it is lease_duration old.
            let deadline = last_renewal + config.renew_deadline;
            tokio::time::sleep_until((Instant::now() + pause).min(deadline)).await;
            pause = config.retry_period;
            let attempt = tokio::time::timeout_at(
                deadline,
                try_acquire_or_renew(&leases, &config, &mut observed),
            )
            .await;
            match attempt {
                Ok(Ok(Attempt::Held)) => last_renewal = Instant::now(),
                Ok(Ok(Attempt::HeldByOther)) => break,
                // Someone wrote the lease between our read and our write
                // (often an admin's label, or a candidate's failed take):
                // read it again at once rather than give up leadership.
                Ok(Ok(Attempt::Conflict)) => pause = Duration::ZERO,
                Ok(Err(e)) => {
                    tracing::warn!(lease = %config.name, error = %e, "cannot renew the leader lease")
                }
                Err(_) => {
                    tracing::warn!(lease = %config.name, "no answer from the API server before the renew deadline");
                    break;
                }
            }
            if last_renewal.elapsed() >= config.renew_deadline {
                break;
            }
        }
    };
    let outcome = tokio::select! {
        out = work => Ok(out),
        () = renew => Err(LeaseError::Lost {
            namespace: config.namespace.clone(),
            name: config.name.clone(),
            deadline: config.renew_deadline,
        }),
    };
    on_leader(false);
    if outcome.is_ok() {
        // A stop must not hang on an unreachable API server; the lease
        // then simply expires.
        if tokio::time::timeout(config.renew_deadline, release(&leases, &config))
            .await
            .is_err()
        {
            tracing::warn!(lease = %config.name, "no answer from the API server; the leader lease is left to expire");
        }
    }
    outcome
}

/// What one attempt to take or renew the lease came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// We hold it.
    Held,
    /// Another replica holds it, and it has not expired.
    HeldByOther,
    /// The lease changed between our read and our write: read again.
    Conflict,
}

/// The lease as this replica last saw it, and when (by our clock) it last
/// changed: client-go's observed record and observed time.
#[derive(Debug, Default)]
struct Observed {
    record: Option<LeaseSpec>,
    changed: Option<Instant>,
}

impl Observed {
    /// Notes `spec` as seen now; returns when it last changed.
    fn see(&mut self, spec: &LeaseSpec) -> Instant {
        let now = Instant::now();
        if self.record.as_ref() != Some(spec) {
            self.record = Some(spec.clone());
            self.changed = Some(now);
        }
        self.changed.unwrap_or(now)
    }
}

async fn try_acquire_or_renew(
    leases: &Api<Lease>,
    config: &LeaseConfig,
    observed: &mut Observed,
) -> Result<Attempt, kube::Error> {
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
            Ok(_) => Ok(Attempt::Held),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let unchanged_since = observed.see(&spec);
    if !may_take(&spec, &config.identity, unchanged_since.elapsed()) {
        return Ok(Attempt::HeldByOther);
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
        Ok(written) => {
            if let Some(spec) = &written.spec {
                observed.see(spec);
            }
            Ok(Attempt::Held)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Conflict),
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

/// Whether `me` may hold the lease now: it is ours, free, or another's that
/// has not changed for its duration (`unchanged_for`, by our clock).
fn may_take(spec: &LeaseSpec, me: &str, unchanged_for: Duration) -> bool {
    match spec.holder_identity.as_deref() {
        None | Some("") => true,
        Some(holder) if holder == me => true,
        Some(_) => {
            let seconds = spec.lease_duration_seconds.unwrap_or(15).max(1);
            unchanged_for > Duration::from_secs(seconds as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;

    fn spec(holder: Option<&str>, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            // Whatever the holder's clock says, it is not what counts.
            renew_time: Some(MicroTime(Timestamp::now() - SignedDuration::from_hours(24))),
            lease_duration_seconds: Some(duration),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_can_be_taken_when_free_ours_or_unchanged_for_its_duration() {
        let secs = Duration::from_secs;
        let cases = [
            ("free lease", spec(None, 15), secs(0), true),
            (
                "our own lease (renewal)",
                spec(Some("me"), 15),
                secs(0),
                true,
            ),
            (
                "another holder's lease, changed 5 s ago",
                spec(Some("other"), 15),
                secs(5),
                false,
            ),
            (
                "another holder's lease, unchanged for 20 s",
                spec(Some("other"), 15),
                secs(20),
                true,
            ),
        ];
        for (case, s, unchanged_for, want) in cases {
            assert_eq!(may_take(&s, "me", unchanged_for), want, "{case}");
        }
        assert_eq!(lease_name("wasmprov.io/host"), "wasmprov.io-host");
    }

    #[tokio::test]
    async fn a_lease_counts_as_changed_only_when_its_record_changes() {
        let mut observed = Observed::default();
        let lease = spec(Some("other"), 15);
        let first = observed.see(&lease);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(observed.see(&lease.clone()), first, "same record");
        let mut renewed = lease;
        renewed.renew_time = Some(MicroTime(Timestamp::now()));
        assert!(observed.see(&renewed) > first, "a renewal is a change");
    }
}
