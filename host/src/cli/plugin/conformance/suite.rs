//! One class's run of the checks, and the calls they make through the
//! host's own code.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::super::{stable_uid, state_name};
use super::volumes::{describe_pv, first_difference, renamed, source_json, storage_on_disk};
use super::{Row, Verdict};
use crate::provisioner::{
    DeleteError, DeleteState, ProvisionError, ProvisionOptions, ProvisionState,
};
use crate::wasm_provisioner::{WasmProvisioner, REFUSED_BY_POLICY};

/// The namespace of the claims the suite invents.
const NAMESPACE: &str = "conformance";
/// The size of the claims the suite invents.
pub(super) const CLAIM_SIZE: &str = "1Gi";

/// What the suite saw of the plugin across all checks.
#[derive(Default)]
struct Observed {
    calls: usize,
    slowest: Duration,
    /// Volumes returned (whether the output policy accepted them or not).
    volumes: usize,
    /// Calls that ran out of time or memory, or crashed: (check, message).
    sandbox_failures: Vec<(String, String)>,
    /// Error answers: variant → (count, empty messages).
    errors: BTreeMap<&'static str, (usize, usize)>,
    /// Volumes the output policy refused: (check, message).
    refused: Vec<(String, String)>,
}

/// The checks of one class.
pub(super) struct Suite {
    pub(super) provisioner: WasmProvisioner,
    pub(super) class: StorageClass,
    pub(super) node: Option<Node>,
    /// Makes the claims' names (and so the volumes') new for every run.
    run_id: String,
    /// Prefixes each check when one run tests several classes.
    label: Option<String>,
    rows: Vec<Row>,
    observed: Observed,
}

impl Suite {
    pub(super) fn new(
        provisioner: WasmProvisioner,
        class: StorageClass,
        node: Option<Node>,
        run_id: String,
        label: Option<String>,
    ) -> Self {
        Suite {
            provisioner,
            class,
            node,
            run_id,
            label,
            rows: Vec::new(),
            observed: Observed::default(),
        }
    }

    /// Runs every check in order; their rows.
    pub(super) async fn run(mut self) -> Vec<Row> {
        let claim_a = self.claim("a", CLAIM_SIZE);
        let opts_a = self.options(&claim_a, self.class.clone());
        let capacity = self.capacity_check().await;
        let pv_a = self.provision_checks(&opts_a).await;
        let mut cleanup = Vec::new();
        self.separate_volumes(pv_a.as_ref(), &opts_a.pv_name, &mut cleanup)
            .await;
        let made = usize::from(pv_a.is_some()) + cleanup.len();
        self.capacity_follows(capacity, made).await;
        let grown = self.resize_checks(pv_a.as_ref()).await;
        self.delete_checks(pv_a.as_ref()).await;
        if let Some(grown) = grown {
            self.resize_of_a_deleted_volume(&grown).await;
        }
        // Only meaningful once the plugin accepts the class: a plugin that
        // refuses everything must not pass them.
        if pv_a.is_none() {
            for check in ["zero-size claim", "unknown parameter", "missing parameters"] {
                self.skip(check, "needs a class the plugin accepts");
            }
        } else {
            self.bad_requests(&mut cleanup).await;
        }
        for pv in cleanup {
            let name = pv.metadata.name.clone().unwrap_or_default();
            if let Err(m) = self.delete("cleanup", &pv).await {
                self.fail(format!("cleanup of {name}"), m);
            }
        }
        self.error_answers();
        self.sandbox_budget();
        self.output_policy();
        self.rows
    }

    /// Checks 2 and 3: a volume for the first claim, and the same again.
    async fn provision_checks(&mut self, opts_a: &ProvisionOptions) -> Option<PersistentVolume> {
        let pv_a = match self.provision("provision", opts_a).await {
            Ok(pv) => {
                let details = format!("{} -> {}", opts_a.pv_name, describe_pv(&pv));
                self.pass("provision", details);
                pv
            }
            Err(e) => {
                let hint = if e.state == ProvisionState::InvalidArgument {
                    "; pass --class with the parameters your plugin needs (and --policy with its preopened directories)"
                } else {
                    ""
                };
                self.fail(
                    "provision",
                    format!("{}: {}{hint}", state_name(e.state), e.message),
                );
                self.skip("provision is idempotent", "needs a provisioned volume");
                return None;
            }
        };
        let check = "provision is idempotent";
        match self.provision(check, opts_a).await {
            Ok(again) => match first_difference(&pv_a, &again) {
                None => self.pass(check, "the same request gave the same PersistentVolume"),
                Some(diff) => self.fail(
                    check,
                    format!(
                        "provisioning {} again gave another PersistentVolume ({diff}); the host calls provision again after a restart or a failed save, and must get the same volume",
                        opts_a.pv_name
                    ),
                ),
            },
            Err(e) => self.fail(
                check,
                format!(
                    "provisioning {} again answered {}: {}; an existing volume for the same pv-name must be returned again, not refused",
                    opts_a.pv_name,
                    state_name(e.state),
                    e.message
                ),
            ),
        }
        Some(pv_a)
    }

    /// Check 4: a second claim gets its own volume.
    async fn separate_volumes(
        &mut self,
        pv_a: Option<&PersistentVolume>,
        pv_a_name: &str,
        cleanup: &mut Vec<PersistentVolume>,
    ) {
        let check = "claims get separate volumes";
        let Some(pv_a) = pv_a else {
            self.skip(check, "needs a provisioned volume");
            return;
        };
        let claim_b = self.claim("b", CLAIM_SIZE);
        let opts_b = self.options(&claim_b, self.class.clone());
        match self.provision(check, &opts_b).await {
            Ok(pv_b) => {
                if source_json(pv_a) == source_json(&pv_b) {
                    self.fail(
                        check,
                        format!(
                            "{pv_a_name} and {} got the same source {}: two claims would share storage; derive the backend object from pv-name",
                            opts_b.pv_name,
                            source_json(&pv_b)
                        ),
                    );
                } else {
                    self.pass(
                        check,
                        format!("{} -> {}", opts_b.pv_name, describe_pv(&pv_b)),
                    );
                }
                cleanup.push(pv_b);
            }
            Err(e) => self.fail(
                check,
                format!(
                    "a second claim answered {}: {}",
                    state_name(e.state),
                    e.message
                ),
            ),
        }
    }

    /// Checks 7 to 9: deleting the first volume removes its storage, and
    /// deleting it again, or a volume never made, succeeds.
    async fn delete_checks(&mut self, pv_a: Option<&PersistentVolume>) {
        const CHECKS: [&str; 4] = [
            "delete",
            "delete removes the storage",
            "delete is idempotent",
            "delete of an unknown volume",
        ];
        let Some(pv_a) = pv_a else {
            for check in CHECKS {
                self.skip(check, "needs a provisioned volume");
            }
            return;
        };
        let name = pv_a.metadata.name.clone().unwrap_or_default();
        // Looked at before the delete, so that storage never made (or made
        // elsewhere) cannot pass for storage removed.
        let storage =
            storage_on_disk(pv_a, &self.provisioner.plugin().policy().preopens).and_then(|path| {
                match std::fs::symlink_metadata(&path) {
                    Ok(_) => Ok(path),
                    Err(e) => Err(format!(
                        "{} was not there before the delete: {e}",
                        path.display()
                    )),
                }
            });
        let check = CHECKS[0];
        match self.delete(check, pv_a).await {
            Ok(()) => {
                self.pass(check, format!("deleted {name}"));
                self.storage_removed(CHECKS[1], storage);
            }
            Err(m) => {
                self.fail(check, m);
                self.skip(CHECKS[1], "needs a successful delete");
            }
        }
        let check = CHECKS[2];
        match self.delete(check, pv_a).await {
            Ok(()) => self.pass(check, "deleting it again succeeded (already gone)"),
            Err(m) => self.fail(
                check,
                format!("{m}; deleting a volume that is already gone must succeed (the host retries deletes)"),
            ),
        }
        let check = CHECKS[3];
        let unknown = match renamed(
            pv_a,
            &format!("pvc-{}", stable_uid(&format!("{}-unknown", self.run_id))),
        ) {
            Ok(unknown) => unknown,
            Err(m) => return self.fail(check, m),
        };
        let name = unknown.metadata.name.clone().unwrap_or_default();
        match self.delete_call(check, &unknown).await {
            Ok(()) => self.pass(check, format!("{name} (never provisioned) succeeded")),
            Err(e) if e.state == DeleteState::Ignored => self.pass(
                check,
                format!("{name} (never provisioned) was ignored: {}", e.message),
            ),
            Err(e) => self.fail(
                check,
                format!(
                    "{}; deleting a volume that does not exist (never made, or already removed by hand) must succeed",
                    e.message
                ),
            ),
        }
    }

    /// Check 8: after a successful delete, the volume's path (found before
    /// it by [`storage_on_disk`]) is gone.
    fn storage_removed(&mut self, check: &str, storage: Result<std::path::PathBuf, String>) {
        let path = match storage {
            Ok(path) => path,
            Err(why) => return self.skip(check, format!("not checked: {why}")),
        };
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.pass(check, format!("{} is gone", path.display()))
            }
            Ok(_) => self.fail(
                check,
                format!(
                    "delete answered success, but {} is still there: delete must remove the volume's storage, or move it out of the way to archive it (the host deletes the PersistentVolume after this answer, and nothing would ever find that storage again)",
                    path.display()
                ),
            ),
            Err(e) => self.skip(check, format!("cannot look at {}: {e}", path.display())),
        }
    }

    /// Check 14: what the plugin's error answers said.
    fn error_answers(&mut self) {
        let check = "error answers";
        let errors = std::mem::take(&mut self.observed.errors);
        if errors.is_empty() {
            return self.skip(check, "the plugin gave no error answers to look at");
        }
        let empty: usize = errors.values().map(|(_, e)| e).sum();
        let summary = errors
            .iter()
            .map(|(variant, (n, _))| format!("{variant} x{n} ({})", handling(variant)))
            .collect::<Vec<_>>()
            .join("; ");
        if empty > 0 {
            self.fail(
                check,
                format!(
                    "{empty} error answer(s) had an empty message; the message is shown in the claim's events, so say what failed and how to fix it. Seen: {summary}"
                ),
            );
        } else {
            self.pass(check, summary);
        }
    }

    /// Check 15: no call ran out of its budget or crashed.
    fn sandbox_budget(&mut self) {
        let check = "no timeout, memory or crash";
        let o = &self.observed;
        let details = format!(
            "{} calls, slowest {:.1?} (budget {:?} per call)",
            o.calls,
            o.slowest,
            self.provisioner.plugin().policy().timeout
        );
        if o.sandbox_failures.is_empty() {
            self.pass(check, details);
        } else {
            let failures = o
                .sandbox_failures
                .iter()
                .map(|(check, m)| format!("[{check}] {m}"))
                .collect::<Vec<_>>()
                .join("; ");
            self.fail(check, format!("{details}; {failures}"));
        }
    }

    /// Check 16: the output policy accepted every volume returned.
    fn output_policy(&mut self) {
        let check = "output within policy";
        let name = self.provisioner.plugin().name().to_owned();
        match self.observed.refused.first() {
            None if self.observed.volumes == 0 => self.skip(
                check,
                format!("the plugin returned no volume for plugins.{name}.output to judge"),
            ),
            None => {
                let n = self.observed.volumes;
                self.pass(
                    check,
                    format!("plugins.{name}.output accepted all {n} volume(s) returned"),
                );
            }
            Some((at, message)) => {
                let details = format!(
                    "{} volume(s) refused; first, in [{at}]: {message}",
                    self.observed.refused.len()
                );
                self.fail(check, details);
            }
        }
    }

    /// One provision through the host's own code, recording what was seen.
    pub(super) async fn provision(
        &mut self,
        check: &str,
        opts: &ProvisionOptions,
    ) -> Result<PersistentVolume, ProvisionError> {
        let started = Instant::now();
        let result = self.provisioner.provision(opts).await;
        self.record_call(started.elapsed());
        if result.is_ok() {
            self.observed.volumes += 1;
        }
        if let Err(e) = &result {
            if e.message.contains(REFUSED_BY_POLICY) {
                self.observed
                    .refused
                    .push((check.to_owned(), e.message.clone()));
            }
            let plugin_prefix = format!("plugin {}: ", self.provisioner.plugin().name());
            match e.message.strip_prefix(&plugin_prefix) {
                // An answer of the plugin (the host prefixes its name).
                Some(message) => {
                    let entry = self.observed.errors.entry(state_name(e.state)).or_default();
                    entry.0 += 1;
                    if message.trim().is_empty() {
                        entry.1 += 1;
                    }
                }
                None => self.record_sandbox_failure(check, &e.message),
            }
        }
        result
    }

    /// One delete through the host's own code, recording what was seen.
    async fn delete_call(&mut self, check: &str, pv: &PersistentVolume) -> Result<(), DeleteError> {
        let pv = crate::provisioner::with_class_parameters(pv, Some(&self.class));
        let started = Instant::now();
        let result = self.provisioner.delete(&pv).await;
        self.record_call(started.elapsed());
        if let Err(e) = &result {
            self.record_sandbox_failure(check, &e.message);
        }
        result
    }

    /// A delete that must succeed; the error message says what happened.
    pub(super) async fn delete(
        &mut self,
        check: &str,
        pv: &PersistentVolume,
    ) -> Result<(), String> {
        self.delete_call(check, pv)
            .await
            .map_err(|e| match e.state {
                DeleteState::Ignored => format!("ignored: {}", e.message),
                DeleteState::Failed => e.message,
            })
    }

    pub(super) fn record_call(&mut self, elapsed: Duration) {
        self.observed.calls += 1;
        self.observed.slowest = self.observed.slowest.max(elapsed);
    }

    /// Notes a call that ended without an answer (the runtime's messages).
    pub(super) fn record_sandbox_failure(&mut self, check: &str, message: &str) {
        let name = self.provisioner.plugin().name();
        let markers = [
            format!("plugin {name} ran out of time"),
            format!("plugin {name} ran out of memory"),
            format!("plugin {name} crashed"),
            format!("plugin {name}: cannot set up the sandbox"),
        ];
        if markers.iter().any(|m| message.contains(m.as_str())) {
            self.observed
                .sandbox_failures
                .push((check.to_owned(), message.to_owned()));
        }
    }

    pub(super) fn claim(&self, suffix: &str, size: &str) -> PersistentVolumeClaim {
        let name = format!("{}-{suffix}", self.run_id);
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(NAMESPACE.to_owned()),
                uid: Some(stable_uid(&name)),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
                storage_class_name: self.class.metadata.name.clone(),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_owned(),
                        Quantity(size.to_owned()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    pub(super) fn options(
        &self,
        claim: &PersistentVolumeClaim,
        class: StorageClass,
    ) -> ProvisionOptions {
        ProvisionOptions {
            pv_name: ProvisionOptions::pv_name_for(claim).unwrap_or_default(),
            claim: claim.clone(),
            class,
            selected_node: self.node.clone(),
        }
    }

    fn push(&mut self, verdict: Verdict, check: impl Into<String>, details: impl Into<String>) {
        let check = check.into();
        self.rows.push(Row {
            verdict,
            check: match &self.label {
                Some(class) => format!("[{class}] {check}"),
                None => check,
            },
            details: details.into(),
        });
    }

    pub(super) fn pass(&mut self, check: impl Into<String>, details: impl Into<String>) {
        self.push(Verdict::Pass, check, details);
    }

    pub(super) fn fail(&mut self, check: impl Into<String>, details: impl Into<String>) {
        self.push(Verdict::Fail, check, details);
    }

    pub(super) fn skip(&mut self, check: impl Into<String>, details: impl Into<String>) {
        self.push(Verdict::Skip, check, details);
    }
}

/// How the host treats each provision error variant (see wit/provisioner.wit).
fn handling(variant: &str) -> &'static str {
    match variant {
        "failed" => "event, retried with backoff",
        "in-background" => "provision called again until a final answer",
        "no-change" => "retried quietly",
        "reschedule" => "the scheduler picks another node",
        "invalid-argument" => "event, retried slowly",
        _ => "unknown",
    }
}
