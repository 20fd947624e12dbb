//! `wasmprov plugin test`: a conformance suite for a plugin component, run
//! with no cluster. It drives the plugin through the same code the host uses
//! in a cluster ([`WasmProvisioner`], which validates every volume) and prints
//! one row per check.
//!
//! The checks, in order (each uses claims in namespace `conformance` whose
//! names and uids are fresh for every run):
//!
//! 1. **load**: the file is a component of our world and answers `capabilities`.
//! 2. **provision**: a 1Gi ReadWriteOnce claim gets a volume that validates.
//! 3. **provision is idempotent**: the same request again gives the same
//!    PersistentVolume.
//! 4. **claims get separate volumes**: a second claim's volume has another source.
//! 5. **resize** (plugins exporting `resizer`): the first volume grows from
//!    1Gi to 2Gi; the answer is at least 2Gi.
//! 6. **resize is idempotent**: the same request again gives the same size.
//! 7. **delete**: the first volume is deleted.
//! 8. **delete is idempotent**: deleting it again succeeds (already gone).
//! 9. **delete of an unknown volume**: a volume the plugin never made (the first
//!    volume with another name) succeeds, or is `ignored`.
//! 10. **resize of a deleted volume**: growing the first volume now that its
//!     storage is gone is refused (any error state): reporting it grown
//!     would be a lie.
//! 11. **zero-size claim**: answered with `invalid-argument`.
//! 12. **without parameter X** (one row per class parameter): the class minus
//!     that parameter is answered with `invalid-argument` (a required parameter)
//!     or gives a volume that validates (an optional one, deleted again). Any
//!     other answer fails: a missing parameter is a request that can never
//!     succeed, which is what `invalid-argument` means.
//! 13. **error answers**: every error the plugin gave carried a message, and
//!     the host's handling of each variant is listed.
//! 14. **no timeout, memory or crash**: no call ran out of time or memory, or
//!     crashed (trapped), in the sandbox the policy gives the plugin.
//! 15. **output within policy**: the output policy (`plugins.<name>.output`)
//!     refused none of the volumes the plugin returned; each refusal says
//!     what to grant, if the plugin is right to return it.
//!
//! The plugin runs in the sandbox the policy gives it (`--policy`, entry
//! `--name`); a plugin that works on files needs its directories preopened
//! there, exactly as in a cluster.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};

use super::{load, read_object, stable_uid, state_name, warn_about_class, PluginFile};
use crate::cli::DEFAULT_PROVISIONER_NAME;
use crate::provisioner::{
    DeleteError, DeleteState, ProvisionError, ProvisionOptions, ProvisionState, ResizeError,
    ResizeOptions, ResizeState, Resized,
};
use crate::wasm_provisioner::{WasmProvisioner, REFUSED_BY_POLICY};

/// The namespace of the claims the suite invents.
const NAMESPACE: &str = "conformance";
/// The size of the claims the suite invents.
const CLAIM_SIZE: &str = "1Gi";

#[derive(Debug, Args)]
pub struct TestArgs {
    #[command(flatten)]
    pub plugin: PluginFile,
    /// The StorageClass to test with (YAML or JSON); its parameters are the
    /// plugin's configuration. Default: a class `conformance` without
    /// parameters, `reclaimPolicy: Delete`, `volumeBindingMode: Immediate`.
    #[arg(long, value_name = "FILE")]
    pub class: Option<PathBuf>,
    /// The node the scheduler "selected", for WaitForFirstConsumer classes.
    /// Default for such classes: a node `conformance-node` with the label
    /// `kubernetes.io/hostname: conformance-node`.
    #[arg(long, value_name = "FILE")]
    pub node: Option<PathBuf>,
}

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail,
    Skip,
}

struct Row {
    verdict: Verdict,
    check: String,
    details: String,
}

/// What the suite saw of the plugin across all checks.
#[derive(Default)]
struct Observed {
    calls: usize,
    slowest: Duration,
    /// Calls that ran out of time or memory, or crashed: (check, message).
    sandbox_failures: Vec<(String, String)>,
    /// Error answers: variant → (count, empty messages).
    errors: BTreeMap<&'static str, (usize, usize)>,
    /// Volumes the output policy refused: (check, message).
    refused: Vec<(String, String)>,
}

struct Suite {
    provisioner: WasmProvisioner,
    class: StorageClass,
    node: Option<Node>,
    run_id: String,
    rows: Vec<Row>,
    observed: Observed,
}

pub async fn test(args: TestArgs) -> anyhow::Result<ExitCode> {
    let class = match &args.class {
        Some(path) => {
            let class = read_object(path, "--class")?;
            warn_about_class(&class, path, &args.plugin);
            class
        }
        None => default_class(),
    };
    let waits_for_consumer = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
    let node = match &args.node {
        Some(path) => Some(read_object::<Node>(path, "--node")?),
        None if waits_for_consumer => Some(default_node()),
        None => None,
    };

    println!("wasmprov plugin test {}", args.plugin.file.display());
    let started = Instant::now();
    let loaded = match load(&args.plugin).await {
        Ok(loaded) => loaded,
        Err(e) => {
            print_table(&[Row {
                verdict: Verdict::Fail,
                check: "load".into(),
                details: format!("{e:#}"),
            }]);
            println!("\nFAILED: the plugin could not be loaded, nothing else was tested");
            return Ok(ExitCode::FAILURE);
        }
    };
    let plugin = loaded.provisioner.plugin();
    let policy = plugin.policy();
    let compiled = plugin.compiled();
    println!(
        "plugin {} ({}, {} KiB), class {} with parameters {}",
        plugin.name(),
        compiled.digest,
        compiled.size.div_ceil(1024),
        class.metadata.name.as_deref().unwrap_or("(unnamed)"),
        describe_parameters(&class),
    );
    println!(
        "sandbox: timeout {:?}, memory limit {} MiB, {} preopened director{}{}",
        policy.timeout,
        policy.memory_limit >> 20,
        policy.preopens.len(),
        if policy.preopens.len() == 1 {
            "y"
        } else {
            "ies"
        },
        if args.plugin.runtime.policy.is_none() {
            " (no --policy: the plugin sees no files)"
        } else {
            ""
        }
    );
    let mut suite = Suite {
        rows: vec![Row {
            verdict: Verdict::Pass,
            check: "load".into(),
            details: format!(
                "component of wasmprov:provisioner@{} in {:.1?}; capabilities: block-volumes={} resize={}",
                compiled.contract_version,
                compiled.compile_time,
                plugin.capabilities().block_volumes,
                plugin.can_resize()
            ),
        }],
        provisioner: loaded.provisioner.clone(),
        class,
        node,
        run_id: run_id(),
        observed: Observed::default(),
    };
    suite.run().await;
    let Suite { rows, .. } = suite;
    print_table(&rows);

    let failed = rows.iter().filter(|r| r.verdict == Verdict::Fail).count();
    let passed = rows.iter().filter(|r| r.verdict == Verdict::Pass).count();
    let skipped = rows.len() - failed - passed;
    println!(
        "\n{}: {passed} passed, {failed} failed, {skipped} skipped in {:.1?}",
        if failed == 0 { "PASSED" } else { "FAILED" },
        started.elapsed()
    );
    drop(loaded);
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

impl Suite {
    async fn run(&mut self) {
        // 2. provision
        let claim_a = self.claim("a", CLAIM_SIZE);
        let opts_a = self.options(&claim_a, self.class.clone());
        let first = self.provision("provision", &opts_a).await;
        let pv_a = match first {
            Ok(pv) => {
                let details = format!("{} -> {}", opts_a.pv_name, describe_pv(&pv));
                self.pass("provision", details);
                Some(pv)
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
                None
            }
        };

        // 3. idempotent provision
        let check = "provision is idempotent";
        match &pv_a {
            None => self.skip(check, "needs a provisioned volume"),
            Some(pv_a) => match self.provision(check, &opts_a).await {
                Ok(again) => match first_difference(pv_a, &again) {
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
            },
        }

        // 4. a second claim gets its own volume
        let check = "claims get separate volumes";
        let claim_b = self.claim("b", CLAIM_SIZE);
        let opts_b = self.options(&claim_b, self.class.clone());
        let mut cleanup = Vec::new();
        match &pv_a {
            None => self.skip(check, "needs a provisioned volume"),
            Some(pv_a) => match self.provision(check, &opts_b).await {
                Ok(pv_b) => {
                    if source_json(pv_a) == source_json(&pv_b) {
                        self.fail(
                            check,
                            format!(
                                "{} and {} got the same source {}: two claims would share storage; derive the backend object from pv-name",
                                opts_a.pv_name,
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
            },
        }

        // 5.-6. resize
        let grown = self.resize_checks(pv_a.as_ref()).await;

        // 7.-9. delete
        match &pv_a {
            None => {
                for check in [
                    "delete",
                    "delete is idempotent",
                    "delete of an unknown volume",
                ] {
                    self.skip(check, "needs a provisioned volume");
                }
            }
            Some(pv_a) => {
                let check = "delete";
                match self.delete(check, pv_a).await {
                    Ok(()) => self.pass(check, format!("deleted {}", opts_a.pv_name)),
                    Err(m) => self.fail(check, m),
                }
                let check = "delete is idempotent";
                match self.delete(check, pv_a).await {
                    Ok(()) => self.pass(check, "deleting it again succeeded (already gone)"),
                    Err(m) => self.fail(
                        check,
                        format!("{m}; deleting a volume that is already gone must succeed (the host retries deletes)"),
                    ),
                }
                let check = "delete of an unknown volume";
                let unknown = renamed(
                    pv_a,
                    &format!("pvc-{}", stable_uid(&format!("{}-unknown", self.run_id))),
                );
                match unknown {
                    Err(m) => self.fail(check, m),
                    Ok(unknown) => {
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
                }
            }
        }

        // 10. resize of a deleted volume
        if let Some(grown) = grown {
            self.resize_of_a_deleted_volume(&grown).await;
        }

        // 11.-12. bad requests: only meaningful once the plugin accepts the class
        // (a plugin that refuses everything must not pass them).
        if pv_a.is_none() {
            self.skip("zero-size claim", "needs a class the plugin accepts");
            self.skip("missing parameters", "needs a class the plugin accepts");
        } else {
            self.bad_requests(&mut cleanup).await;
        }

        // Clean up what the checks made.
        for pv in cleanup {
            let name = pv.metadata.name.clone().unwrap_or_default();
            if let Err(m) = self.delete("cleanup", &pv).await {
                self.fail(format!("cleanup of {name}"), m);
            }
        }

        // 13. error answers
        let check = "error answers";
        let errors = std::mem::take(&mut self.observed.errors);
        if errors.is_empty() {
            self.pass(check, "the plugin gave no error answers");
        } else {
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

        // 14. sandbox budget
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

        // 15. output policy
        let check = "output within policy";
        match self.observed.refused.first() {
            None => {
                let name = self.provisioner.plugin().name().to_owned();
                self.pass(check, format!("no volume refused by plugins.{name}.output"));
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

    /// Checks 11 and 12: requests that must be answered with invalid-argument.
    async fn bad_requests(&mut self, cleanup: &mut Vec<PersistentVolume>) {
        // 11. zero-size claim
        let check = "zero-size claim";
        let zero = self.claim("zero", "0");
        let opts = self.options(&zero, self.class.clone());
        self.expect_invalid(check, &opts, "a claim of 0 bytes", cleanup)
            .await;

        // 12. missing parameters, one at a time
        let params: Vec<String> = crate::wasm_provisioner::plugin_parameters(&self.class)
            .into_keys()
            .collect();
        if params.is_empty() {
            self.skip(
                "missing parameters",
                "the class has no parameters (pass --class to test a configured plugin)",
            );
        }
        for (i, key) in params.iter().enumerate() {
            let check = format!("without parameter {key:?}");
            let mut class = self.class.clone();
            if let Some(p) = class.parameters.as_mut() {
                p.remove(key);
            }
            let claim = self.claim(&format!("param-{i}"), CLAIM_SIZE);
            let opts = self.options(&claim, class);
            match self.provision(&check, &opts).await {
                Err(e) if e.state == ProvisionState::InvalidArgument => {
                    self.pass(&check, format!("required: invalid-argument: {}", e.message))
                }
                Ok(pv) => {
                    self.pass(&check, format!("optional: the default works ({})", describe_pv(&pv)));
                    cleanup.push(pv);
                }
                Err(e) => self.fail(
                    &check,
                    format!(
                        "answered {}: {}; a missing required parameter must be answered with invalid-argument (naming it), and an optional one must have a working default",
                        state_name(e.state),
                        e.message
                    ),
                ),
            }
        }
    }

    /// A provision that must be answered with invalid-argument.
    async fn expect_invalid(
        &mut self,
        check: &str,
        opts: &ProvisionOptions,
        what: &str,
        cleanup: &mut Vec<PersistentVolume>,
    ) {
        match self.provision(check, opts).await {
            Err(e) if e.state == ProvisionState::InvalidArgument => {
                self.pass(check, format!("invalid-argument: {}", e.message))
            }
            Ok(pv) => {
                self.fail(
                    check,
                    format!(
                        "{what} got a volume ({}); it must be answered with invalid-argument",
                        describe_pv(&pv)
                    ),
                );
                cleanup.push(pv);
            }
            Err(e) => self.fail(
                check,
                format!(
                    "{what} was answered {}: {}; it must be answered with invalid-argument (the request can never succeed)",
                    state_name(e.state),
                    e.message
                ),
            ),
        }
    }

    /// Checks 5 and 6: growing the first volume, and again. Returns it
    /// grown, for check 10; skips check 10 too when it cannot.
    async fn resize_checks(&mut self, pv_a: Option<&PersistentVolume>) -> Option<PersistentVolume> {
        const CHECKS: [&str; 3] = [
            "resize",
            "resize is idempotent",
            "resize of a deleted volume",
        ];
        let plugin = self.provisioner.plugin();
        if !plugin.can_resize() {
            let why = format!(
                "the plugin does not export resizer (a wasmprov:provisioner@{} plugin built for the provisioner world): its volumes cannot grow",
                plugin.compiled().contract_version
            );
            for check in CHECKS {
                self.skip(check, why.clone());
            }
            return None;
        }
        let Some(pv_a) = pv_a else {
            for check in CHECKS {
                self.skip(check, "needs a provisioned volume");
            }
            return None;
        };
        let name = pv_a.metadata.name.clone().unwrap_or_default();
        let grow = ResizeOptions {
            requested_bytes: RESIZED_BYTES,
            limit_bytes: None,
        };
        let check = "resize";
        let grown = match self.resize(check, pv_a, &grow).await {
            Ok(r) => {
                self.pass(
                    check,
                    format!(
                        "{name} grew to {} bytes (asked {RESIZED_BYTES})",
                        r.capacity_bytes
                    ),
                );
                Some(with_capacity(pv_a, r.capacity_bytes))
            }
            Err(e) => {
                self.fail(
                    check,
                    format!(
                        "growing {name} to 2Gi answered {}: {}",
                        resize_state_name(e.state),
                        e.message
                    ),
                );
                None
            }
        };
        let check = "resize is idempotent";
        match &grown {
            None => self.skip(check, "needs a grown volume"),
            Some(grown) => {
                let first = capacity_of(grown).unwrap_or_default();
                match self.resize(check, grown, &grow).await {
                    Ok(r) if r.capacity_bytes == first => self.pass(
                        check,
                        format!("growing it to 2Gi again kept {} bytes", r.capacity_bytes),
                    ),
                    Ok(r) => self.fail(
                        check,
                        format!(
                            "growing {name} to 2Gi again gave {} bytes, not the {first} it answered first; the host asks again after a restart and must get the same size",
                            r.capacity_bytes
                        ),
                    ),
                    Err(e) => self.fail(
                        check,
                        format!(
                            "growing {name} to 2Gi again answered {}: {}; a volume already that large is a success",
                            resize_state_name(e.state),
                            e.message
                        ),
                    ),
                }
            }
        }
        if grown.is_none() {
            self.skip(CHECKS[2], "needs a grown volume");
        }
        grown
    }

    /// Check 10: the grown first volume, deleted by check 7, cannot grow.
    async fn resize_of_a_deleted_volume(&mut self, grown: &PersistentVolume) {
        let check = "resize of a deleted volume";
        let name = grown.metadata.name.clone().unwrap_or_default();
        let options = ResizeOptions {
            requested_bytes: 2 * RESIZED_BYTES,
            limit_bytes: None,
        };
        match self.resize(check, grown, &options).await {
            Err(e) => self.pass(
                check,
                format!(
                    "{name} (deleted) was refused: {}: {}",
                    resize_state_name(e.state),
                    e.message
                ),
            ),
            Ok(r) => self.fail(
                check,
                format!(
                    "{name} was deleted, yet resize said it grew to {} bytes; check that the volume's storage exists before reporting it grown",
                    r.capacity_bytes
                ),
            ),
        }
    }

    /// One resize through the host's own code, recording what was seen.
    async fn resize(
        &mut self,
        check: &str,
        pv: &PersistentVolume,
        options: &ResizeOptions,
    ) -> Result<Resized, ResizeError> {
        // As the host does: what the volume does not record comes from its class.
        let pv = crate::provisioner::with_class_parameters(pv, Some(&self.class));
        let started = Instant::now();
        let result = self.provisioner.resize(&pv, options).await;
        self.record_call(started.elapsed());
        if let Err(e) = &result {
            self.record_sandbox_failure(check, &e.message);
        }
        result
    }

    /// One provision through the host's own code, recording what was seen.
    async fn provision(
        &mut self,
        check: &str,
        opts: &ProvisionOptions,
    ) -> Result<PersistentVolume, ProvisionError> {
        let started = Instant::now();
        let result = self.provisioner.provision(opts).await;
        self.record_call(started.elapsed());
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
    async fn delete(&mut self, check: &str, pv: &PersistentVolume) -> Result<(), String> {
        self.delete_call(check, pv)
            .await
            .map_err(|e| match e.state {
                DeleteState::Ignored => format!("ignored: {}", e.message),
                DeleteState::Failed => e.message,
            })
    }

    fn record_call(&mut self, elapsed: Duration) {
        self.observed.calls += 1;
        self.observed.slowest = self.observed.slowest.max(elapsed);
    }

    /// Notes a call that ended without an answer (the runtime's messages).
    fn record_sandbox_failure(&mut self, check: &str, message: &str) {
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

    fn claim(&self, suffix: &str, size: &str) -> PersistentVolumeClaim {
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

    fn options(&self, claim: &PersistentVolumeClaim, class: StorageClass) -> ProvisionOptions {
        ProvisionOptions {
            pv_name: ProvisionOptions::pv_name_for(claim).unwrap_or_default(),
            claim: claim.clone(),
            class,
            selected_node: self.node.clone(),
        }
    }

    fn push(&mut self, verdict: Verdict, check: impl Into<String>, details: impl Into<String>) {
        self.rows.push(Row {
            verdict,
            check: check.into(),
            details: details.into(),
        });
    }

    fn pass(&mut self, check: impl Into<String>, details: impl Into<String>) {
        self.push(Verdict::Pass, check, details);
    }

    fn fail(&mut self, check: impl Into<String>, details: impl Into<String>) {
        self.push(Verdict::Fail, check, details);
    }

    fn skip(&mut self, check: impl Into<String>, details: impl Into<String>) {
        self.push(Verdict::Skip, check, details);
    }
}

/// The size the resize checks grow the first volume to: 2Gi.
const RESIZED_BYTES: u64 = 2 << 30;

fn resize_state_name(state: ResizeState) -> &'static str {
    match state {
        ResizeState::Failed => "failed",
        ResizeState::InBackground => "in-background",
        ResizeState::NoChange => "no-change",
        ResizeState::Infeasible => "infeasible",
    }
}

fn capacity_of(pv: &PersistentVolume) -> Option<u64> {
    let q = pv.spec.as_ref()?.capacity.as_ref()?.get("storage")?;
    crate::quantity::parse_bytes(&q.0).ok()
}

/// `pv` as the host saves it after a resize: its new capacity.
fn with_capacity(pv: &PersistentVolume, bytes: u64) -> PersistentVolume {
    let mut pv = pv.clone();
    if let Some(spec) = pv.spec.as_mut() {
        spec.capacity = Some(BTreeMap::from([(
            "storage".to_owned(),
            Quantity(crate::quantity::Bytes(bytes).to_string()),
        )]));
    }
    pv
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

fn default_class() -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some("conformance".to_owned()),
            ..Default::default()
        },
        provisioner: DEFAULT_PROVISIONER_NAME.to_owned(),
        reclaim_policy: Some("Delete".to_owned()),
        volume_binding_mode: Some("Immediate".to_owned()),
        ..Default::default()
    }
}

fn default_node() -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some("conformance-node".to_owned()),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/hostname".to_owned(),
                "conformance-node".to_owned(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A short id that differs between runs, so a run never trips over the
/// volumes of an earlier one.
fn run_id() -> String {
    let seed = format!("{:?}-{}", std::time::SystemTime::now(), std::process::id());
    format!("ct-{}", &hex::encode(Sha256::digest(seed))[..8])
}

fn describe_parameters(class: &StorageClass) -> String {
    let params = crate::wasm_provisioner::plugin_parameters(class);
    if params.is_empty() {
        return "(none)".to_owned();
    }
    params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The PV's source as the plugin returned it (`spec` minus the host's fields).
fn source_json(pv: &PersistentVolume) -> String {
    let mut spec = serde_json::to_value(pv.spec.clone().unwrap_or_default()).unwrap_or_default();
    if let Some(map) = spec.as_object_mut() {
        for key in [
            "accessModes",
            "capacity",
            "claimRef",
            "mountOptions",
            "nodeAffinity",
            "persistentVolumeReclaimPolicy",
            "storageClassName",
            "volumeMode",
            "volumeAttributesClassName",
        ] {
            map.remove(key);
        }
    }
    spec.to_string()
}

fn describe_pv(pv: &PersistentVolume) -> String {
    let capacity = pv
        .spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default();
    format!("capacity {capacity}, source {}", source_json(pv))
}

/// The first field (JSON path) where two volumes differ.
fn first_difference(a: &PersistentVolume, b: &PersistentVolume) -> Option<String> {
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value) -> Option<String> {
        use serde_json::Value;
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for key in x.keys().chain(y.keys()) {
                    let null = Value::Null;
                    let (va, vb) = (x.get(key).unwrap_or(&null), y.get(key).unwrap_or(&null));
                    if let Some(d) = walk(&format!("{path}.{key}"), va, vb) {
                        return Some(d);
                    }
                }
                None
            }
            _ if a == b => None,
            _ => Some(format!("{path}: {a} then {b}")),
        }
    }
    let a = serde_json::to_value(a).ok()?;
    let b = serde_json::to_value(b).ok()?;
    walk("", &a, &b)
}

/// `pv` as if it were another volume `name`: every occurrence of its name
/// (in metadata, source, claim reference) replaced.
fn renamed(pv: &PersistentVolume, name: &str) -> Result<PersistentVolume, String> {
    let old = pv.metadata.name.clone().unwrap_or_default();
    let text = serde_json::to_string(pv).map_err(|e| e.to_string())?;
    let text = if old.is_empty() {
        text
    } else {
        text.replace(&old, name)
    };
    let mut pv: PersistentVolume = serde_json::from_str(&text)
        .map_err(|e| format!("cannot derive an unknown volume from the provisioned one: {e}"))?;
    pv.metadata.name = Some(name.to_owned());
    Ok(pv)
}

fn print_table(rows: &[Row]) {
    let width = rows
        .iter()
        .map(|r| r.check.chars().count())
        .max()
        .unwrap_or(5)
        .max(5);
    println!();
    println!("{:<6} {:<width$}  DETAILS", "RESULT", "CHECK");
    for row in rows {
        let verdict = match row.verdict {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        };
        // One line per check, whatever the plugin's messages contain.
        let details = row.details.trim().replace('\n', " | ");
        println!("{verdict:<6} {:<width$}  {details}", row.check);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provisioner::PLUGIN_PARAMETER;

    #[test]
    fn unknown_volumes_are_renamed_everywhere() {
        let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pvc-1"},
            "spec": {"hostPath": {"path": "/v/pvc-1"}}
        }))
        .unwrap();
        let other = renamed(&pv, "pvc-2").unwrap();
        assert_eq!(other.metadata.name.as_deref(), Some("pvc-2"));
        assert_eq!(
            other.spec.unwrap().host_path.unwrap().path,
            "/v/pvc-2".to_string()
        );
    }

    #[test]
    fn differences_name_the_field() {
        let a: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pvc-1"},
            "spec": {"hostPath": {"path": "/v/a"}}
        }))
        .unwrap();
        let mut b = a.clone();
        assert_eq!(first_difference(&a, &b), None);
        b.spec.as_mut().unwrap().host_path.as_mut().unwrap().path = "/v/b".into();
        let d = first_difference(&a, &b).unwrap();
        assert!(d.starts_with(".spec.hostPath.path"), "{d}");
    }

    #[test]
    fn plugin_parameter_is_not_a_plugin_parameter() {
        let mut class = default_class();
        class.parameters = Some(BTreeMap::from([
            (PLUGIN_PARAMETER.to_owned(), "x".to_owned()),
            ("a".to_owned(), "1".to_owned()),
        ]));
        assert_eq!(describe_parameters(&class), "a=1");
    }
}
