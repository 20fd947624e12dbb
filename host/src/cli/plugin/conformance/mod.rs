//! `wasmprov plugin test`: a conformance suite for a plugin component, run
//! with no cluster. It drives the plugin through the same code the host uses
//! in a cluster ([`WasmProvisioner`], which validates every volume) and prints
//! one row per check.
//!
//! Load once (check 1), then for each class given (each check's name
//! prefixed with `[class]` when there are several), in order, with claims in
//! namespace `conformance` whose names and uids are fresh for every run:
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
//! 8. **delete removes the storage**: a `hostPath`/`local` volume made inside
//!    a preopened directory (its path names the volume) is gone from there
//!    afterwards (removed, or moved away to archive it). Skipped, saying
//!    why, for any other volume.
//! 9. **delete is idempotent**: deleting it again succeeds (already gone).
//! 10. **delete of an unknown volume**: a volume the plugin never made (the first
//!     volume with another name) succeeds, or is `ignored`.
//! 11. **resize of a deleted volume**: growing the first volume now that its
//!     storage is gone is refused (any error state): reporting it grown
//!     would be a lie.
//! 12. **zero-size claim**: answered with `invalid-argument`.
//! 13. **unknown parameter**: the class plus a parameter no plugin knows is
//!     answered with `invalid-argument` naming it (an operator's typo must
//!     not be ignored).
//! 14. **without parameter X** (one row per class parameter): the class minus
//!     that parameter is answered with `invalid-argument` (a required parameter)
//!     or gives a volume that validates (an optional one, deleted again). Any
//!     other answer fails: a missing parameter is a request that can never
//!     succeed, which is what `invalid-argument` means.
//! 15. **error answers**: every error the plugin gave carried a message, and
//!     the host's handling of each variant is listed.
//! 16. **no timeout, memory or crash**: no call ran out of time or memory, or
//!     crashed (trapped), in the sandbox the policy gives the plugin.
//! 17. **output within policy**: the output policy (`plugins.<name>.output`)
//!     refused none of the volumes the plugin returned; each refusal says
//!     what to grant, if the plugin is right to return it.
//! 18. **capacity** (plugins exporting `capacity`, asked before check 2):
//!     the plugin's figure for the class on a node makes sense (a largest
//!     volume within what is available) and fits the filesystem of its
//!     read-write directory, as a node host checks it; `none` passes.
//! 19. **capacity counts new volumes** (asked after check 4): with the
//!     volumes made, the figure is no larger than before.
//!
//! A check that had nothing to look at is SKIP, with the reason, never PASS.
//! The plugin runs in the sandbox the policy gives it (`--policy`, entry
//! `--name`); a plugin that works on files needs its directories preopened
//! there, exactly as in a cluster.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};

use super::{load, read_object, read_objects, warn_about_class, PluginFile};
use crate::cli::DEFAULT_PROVISIONER_NAME;

mod capacity;
mod requests;
mod resize;
mod suite;
mod volumes;

use suite::Suite;

#[derive(Debug, Args)]
pub struct TestArgs {
    #[command(flatten)]
    pub plugin: PluginFile,
    /// A StorageClass to test with (YAML or JSON); its parameters are the
    /// plugin's configuration. Repeat it, or give a file of several YAML
    /// documents, to test several classes in one run. Default: a class
    /// `conformance` without parameters, `reclaimPolicy: Delete`,
    /// `volumeBindingMode: Immediate`.
    #[arg(long, value_name = "FILE")]
    pub class: Vec<PathBuf>,
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

pub async fn test(args: TestArgs) -> anyhow::Result<ExitCode> {
    let mut classes = Vec::new();
    for path in &args.class {
        for class in read_objects::<StorageClass>(path, "--class")? {
            warn_about_class(&class, path, &args.plugin);
            classes.push(class);
        }
    }
    if classes.is_empty() {
        classes.push(default_class());
    }
    let given_node = match &args.node {
        Some(path) => Some(read_object::<Node>(path, "--node")?),
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
        "plugin {} ({}, {} KiB)",
        plugin.name(),
        compiled.digest,
        compiled.size.div_ceil(1024),
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
    let mut rows = vec![Row {
        verdict: Verdict::Pass,
        check: "load".into(),
        details: format!(
            "component of wasmprov:provisioner@{} in {:.1?}; capabilities: block-volumes={} resize={}",
            compiled.contract_version,
            compiled.compile_time,
            plugin.capabilities().block_volumes,
            plugin.can_resize()
        ),
    }];
    let several = classes.len() > 1;
    let run_id = run_id();
    for (i, class) in classes.into_iter().enumerate() {
        let name = class
            .metadata
            .name
            .clone()
            .unwrap_or_else(|| "(unnamed)".into());
        println!(
            "class {name} with parameters {}",
            describe_parameters(&class)
        );
        let waits_for_consumer =
            class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
        let node = given_node
            .clone()
            .or_else(|| waits_for_consumer.then(default_node));
        let (run_id, label) = if several {
            (format!("{run_id}-{i}"), Some(name))
        } else {
            (run_id.clone(), None)
        };
        let suite = Suite::new(loaded.provisioner.clone(), class, node, run_id, label);
        rows.extend(suite.run().await);
    }
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
    fn plugin_parameter_is_not_a_plugin_parameter() {
        let mut class = default_class();
        class.parameters = Some(BTreeMap::from([
            (PLUGIN_PARAMETER.to_owned(), "x".to_owned()),
            ("a".to_owned(), "1".to_owned()),
        ]));
        assert_eq!(describe_parameters(&class), "a=1");
    }
}
