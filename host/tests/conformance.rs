//! `wasmprov plugin test`, the conformance suite, as an author runs it: every
//! plugin in `plugins/` passes it, and a deliberately broken plugin fails it
//! with a table that says what is wrong.
//!
//! Each plugin directory holds the class and sandbox policy it is tested with
//! in `conformance/sc.yaml` and `conformance/policy.yaml`. Their paths under
//! `/tmp/wasmprov/` are moved into a temporary directory here, and the files
//! in `conformance/fixtures/<dir>/` (if any) are copied to the directory that
//! stands for `/tmp/wasmprov/<dir>`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;

use support::*;

/// The prefix of host paths in the conformance files.
const SCRATCH_PREFIX: &str = "/tmp/wasmprov/";

struct Run {
    output: Output,
    _scratch: tempfile::TempDir,
}

impl Run {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    fn report(&self) -> String {
        format!(
            "exit: {:?}\nstdout:\n{}\nstderr:\n{}",
            self.output.status,
            self.stdout(),
            String::from_utf8_lossy(&self.output.stderr)
        )
    }

    /// The verdict and details of the first row of `check` (of any class).
    fn row(&self, check: &str) -> Option<(String, String)> {
        self.rows(check).into_iter().next()
    }

    /// The verdict and details of every row of `check`: one per class
    /// (`[class] check` when a run tests several).
    fn rows(&self, check: &str) -> Vec<(String, String)> {
        self.stdout()
            .lines()
            .filter_map(|line| {
                let (verdict, rest) = line.split_once(' ')?;
                if !matches!(verdict, "PASS" | "FAIL" | "SKIP") {
                    return None;
                }
                let rest = rest.trim_start();
                let rest = match rest.strip_prefix('[') {
                    Some(labelled) => labelled.split_once("] ")?.1,
                    None => rest,
                };
                let details = rest.strip_prefix(check)?;
                details
                    .starts_with("  ")
                    .then(|| (verdict.to_owned(), details.trim().to_owned()))
            })
            .collect()
    }

    fn assert_row(&self, check: &str, verdict: &str, details: &[&str]) {
        let (got, text) = self
            .row(check)
            .unwrap_or_else(|| panic!("no row {check:?}:\n{}", self.report()));
        assert_eq!(got, verdict, "row {check:?}:\n{}", self.report());
        for want in details {
            assert!(
                text.contains(want),
                "row {check:?} lacks {want:?}:\n{}",
                self.report()
            );
        }
    }
}

/// Runs `wasmprov plugin test` on `wasm` with the conformance files of
/// `dir` (none: the suite's defaults).
fn plugin_test(wasm: &Path, dir: Option<&Path>) -> Run {
    let scratch = tempfile::tempdir().unwrap();
    let mut command = wasmprov_command();
    command.args(["plugin", "test"]).arg(wasm);
    if let Some(dir) = dir {
        let base = format!("{}/", scratch.path().display());
        for (file, flag) in [("sc.yaml", "--class"), ("policy.yaml", "--policy")] {
            let text = std::fs::read_to_string(dir.join(file))
                .unwrap_or_else(|e| panic!("{}/{file}: {e}", dir.display()));
            let path = scratch.path().join(file);
            std::fs::write(&path, text.replace(SCRATCH_PREFIX, &base)).unwrap();
            command.arg(flag).arg(path);
            if file == "policy.yaml" {
                create_preopens(&text, &base);
            }
        }
        let fixtures = dir.join("fixtures");
        if fixtures.is_dir() {
            copy_tree(&fixtures, scratch.path());
        }
    }
    Run {
        output: command.output().expect("run wasmprov"),
        _scratch: scratch,
    }
}

/// Creates every preopened host directory of a policy (moved to `base`).
fn create_preopens(policy: &str, base: &str) {
    let policy: serde_yaml::Value = serde_yaml::from_str(policy).unwrap();
    let plugins = policy["plugins"].as_mapping().cloned().unwrap_or_default();
    for (_, spec) in plugins {
        for preopen in spec["preopens"].as_sequence().cloned().unwrap_or_default() {
            let host = preopen["host"]
                .as_str()
                .unwrap()
                .replace(SCRATCH_PREFIX, base);
            std::fs::create_dir_all(host).unwrap();
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Every plugin directory (`plugins/<name>/` with a `conformance/` folder).
fn plugin_dirs() -> Vec<(String, PathBuf)> {
    let mut dirs: Vec<(String, PathBuf)> = std::fs::read_dir(workspace_root().join("plugins"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("conformance").is_dir())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn every_plugin_passes_the_conformance_suite() {
    // Building first: the list of outputs must be complete.
    let _ = plugin_path("hostpath");
    let dirs = plugin_dirs();
    // Every built plugin is tested: a new plugin without conformance files
    // fails here instead of going untested.
    for entry in std::fs::read_dir(workspace_root().join("target/plugins")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wasm") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            assert!(
                dirs.iter().any(|(n, _)| *n == name),
                "target/plugins/{name}.wasm has no plugins/{name}/conformance/ (sc.yaml, policy.yaml)"
            );
        }
    }
    assert!(!dirs.is_empty());
    let mut failures = Vec::new();
    for (name, dir) in &dirs {
        let run = plugin_test(&plugin_path(name), Some(&dir.join("conformance")));
        let stdout = run.stdout();
        if !run.output.status.success() || stdout.contains("\nFAIL ") || !stdout.contains("PASSED")
        {
            failures.push(format!("== {name}\n{}", run.report()));
        }
        // Every check ran: nothing skipped for a plugin with a working class.
        let mut must_pass = vec![
            "provision is idempotent",
            "delete of an unknown volume",
            "zero-size claim",
            "unknown parameter",
            "output within policy",
        ];
        // Their volumes are directories in a preopen: gone after delete.
        if ["hostpath", "hostpath-go", "quota-dir"].contains(&name.as_str()) {
            must_pass.push("delete removes the storage");
        }
        for check in must_pass {
            let rows = run.rows(check);
            if rows.is_empty() || rows.iter().any(|(v, _)| v != "PASS") {
                failures.push(format!("== {name}: {check} did not pass\n{}", run.report()));
            }
        }
        // The plugins that grow volumes pass the resize checks; those kept
        // on contract 0.1.0 (a `wit` link to wit/v0.1) still load and pass
        // everything else, their resize checks skipped.
        let contract = if dir.join("wit").exists() {
            "0.1.0"
        } else {
            "0.3.0"
        };
        let load = run.row("load").map(|(_, d)| d).unwrap_or_default();
        if !load.contains(&format!("wasmprov:provisioner@{contract}")) {
            failures.push(format!(
                "== {name}: not loaded as contract {contract}: {load}"
            ));
        }
        let resizes = ["hostpath", "nfs-subdir", "quota-dir"].contains(&name.as_str());
        let want = if resizes { "PASS" } else { "SKIP" };
        for check in [
            "resize",
            "resize is idempotent",
            "resize of a deleted volume",
        ] {
            let rows = run.rows(check);
            if rows.is_empty() || rows.iter().any(|(v, _)| v != want) {
                failures.push(format!(
                    "== {name}: {check} is not {want}\n{}",
                    run.report()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `capacity` (contract 0.3): the figure is checked as a node host checks
/// it, and must count the volumes the plugin makes; plugins without the
/// export skip both checks, saying why.
#[test]
fn a_plugin_reporting_capacity_is_checked_as_a_node_host_would() {
    let dir = workspace_root().join("tests/guests/capacity-pool/conformance");
    let run = plugin_test(&guest_path("capacity-pool"), Some(&dir));
    let capacity = run.rows("capacity");
    assert_eq!(capacity.len(), 2, "{}", run.report());
    assert_eq!(capacity[0].0, "PASS", "{}", run.report());
    assert!(
        capacity[0].1.contains("4Gi available, largest volume 4Gi"),
        "{}",
        run.report()
    );
    assert_eq!(capacity[1].0, "FAIL", "{}", run.report());
    assert!(
        capacity[1].1.contains("more than the whole filesystem of"),
        "{}",
        run.report()
    );
    let follows = run.rows("capacity counts new volumes");
    assert_eq!(follows[0].0, "PASS", "{}", run.report());
    assert!(
        follows[0]
            .1
            .contains("2Gi available after 2 volume(s), 4Gi before"),
        "{}",
        run.report()
    );
    assert_eq!(follows[1].0, "SKIP", "{}", run.report());

    let hostpath_dir = workspace_root().join("plugins/hostpath/conformance");
    let hostpath = plugin_test(&plugin_path("hostpath"), Some(&hostpath_dir));
    hostpath.assert_row("capacity", "SKIP", &["does not export capacity"]);
}

#[test]
fn a_broken_plugin_fails_with_a_table_that_says_what_is_wrong() {
    let dir = workspace_root().join("tests/guests/broken-plugin/conformance");
    let run = plugin_test(&guest_path("broken-plugin"), Some(&dir));
    assert_eq!(run.output.status.code(), Some(1), "{}", run.report());
    run.assert_row("load", "PASS", &["wasmprov:provisioner@0.3.0"]);
    run.assert_row("provision", "PASS", &["capacity 1Gi", "hostPath"]);
    run.assert_row(
        "provision is idempotent",
        "FAIL",
        &["answered failed", "File exists", "must be returned again"],
    );
    run.assert_row(
        "delete is idempotent",
        "FAIL",
        &["No such file or directory", "already gone must succeed"],
    );
    run.assert_row("delete of an unknown volume", "FAIL", &["must succeed"]);
    run.assert_row(
        "zero-size claim",
        "FAIL",
        &[
            "capacity-bytes is 0",
            "must be answered with invalid-argument",
        ],
    );
    run.assert_row(
        "without parameter \"root\"",
        "FAIL",
        &["crashed", "class parameter root", "invalid-argument"],
    );
    run.assert_row("no timeout, memory or crash", "FAIL", &["crashed"]);
    // Its delete does remove what it made; it takes any parameter.
    run.assert_row("delete removes the storage", "PASS", &["is gone"]);
    run.assert_row(
        "unknown parameter",
        "FAIL",
        &[
            "conformanceUnknownParameter",
            "got a volume",
            "invalid-argument",
        ],
    );
    assert!(
        run.stdout()
            .contains("FAILED: 7 passed, 7 failed, 5 skipped"),
        "{}",
        run.report()
    );
}

/// A delete that answers success and leaves the directory is caught; so is
/// a plugin that takes any parameter. Neither passes for something the
/// suite did not look at.
#[test]
fn a_plugin_whose_delete_leaves_the_storage_fails() {
    let run = misbehave_test("keep-on-delete", "");
    assert_eq!(run.output.status.code(), Some(1), "{}", run.report());
    run.assert_row("delete", "PASS", &["deleted"]);
    run.assert_row(
        "delete removes the storage",
        "FAIL",
        &["/tmp/ok/pvc-", "is still there", "archive"],
    );
    run.assert_row(
        "unknown parameter",
        "FAIL",
        &["conformanceUnknownParameter", "got a volume"],
    );
    run.assert_row("output within policy", "PASS", &["accepted all"]);
}

/// Runs the suite on the misbehave guest with `behavior` and a policy entry
/// (with [`MISBEHAVE_OUTPUT`] unless it has its own `output`).
fn misbehave_test(behavior: &str, policy: &str) -> Run {
    let output = if policy.contains("output:") {
        String::new()
    } else {
        format!("\n    output: {MISBEHAVE_OUTPUT}")
    };
    // Where the healthy volume's directory is made (see OK_PREOPEN).
    let preopens = if policy.contains("preopens:") {
        String::new()
    } else {
        ok_preopen();
        format!("\n    preopens: [{OK_PREOPEN}]")
    };
    let scratch = tempfile::tempdir().unwrap();
    let class = scratch.path().join("sc.yaml");
    std::fs::write(
        &class,
        format!(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: bad}}\n\
             provisioner: wasmprov.io/host\nparameters: {{behavior: {behavior}}}\n"
        ),
    )
    .unwrap();
    let policy_file = scratch.path().join("policy.yaml");
    std::fs::write(
        &policy_file,
        format!("plugins:\n  misbehave:\n    {policy}{output}{preopens}\n"),
    )
    .unwrap();
    let output = wasmprov_command()
        .args(["plugin", "test"])
        .arg(guest_path("misbehave"))
        .arg("--class")
        .arg(&class)
        .arg("--policy")
        .arg(&policy_file)
        .output()
        .unwrap();
    Run {
        output,
        _scratch: scratch,
    }
}

#[test]
fn a_plugin_that_times_out_fails_the_budget_check() {
    let run = misbehave_test("loop", "timeout: 200ms");
    assert_eq!(run.output.status.code(), Some(1), "{}", run.report());
    run.assert_row("provision", "FAIL", &["ran out of time", "200ms"]);
    run.assert_row(
        "no timeout, memory or crash",
        "FAIL",
        &["ran out of time", "raise `timeout`"],
    );
    // Nothing was returned, so nothing is said to be within policy.
    run.assert_row("output within policy", "SKIP", &["returned no volume"]);
}

#[test]
fn a_plugin_that_exhausts_its_memory_fails_the_budget_check() {
    let run = misbehave_test("oom", "memoryLimit: 16Mi");
    assert_eq!(run.output.status.code(), Some(1), "{}", run.report());
    run.assert_row("provision", "FAIL", &["ran out of memory"]);
    run.assert_row(
        "no timeout, memory or crash",
        "FAIL",
        &["ran out of memory", "raise `memoryLimit`"],
    );
}

#[test]
fn a_component_of_another_world_fails_to_load_and_nothing_else_runs() {
    let run = plugin_test(&guest_path("other-world"), None);
    assert_eq!(run.output.status.code(), Some(1), "{}", run.report());
    run.assert_row("load", "FAIL", &["a component of another world"]);
    assert!(
        run.stdout().contains("nothing else was tested") && run.row("provision").is_none(),
        "{}",
        run.report()
    );
}

#[test]
fn without_a_class_the_suite_says_what_to_pass() {
    let run = plugin_test(&plugin_path("hostpath"), None);
    assert_eq!(run.output.status.code(), Some(1), "{}", run.report());
    run.assert_row(
        "provision",
        "FAIL",
        &["missing class parameter \"hostRoot\"", "pass --class"],
    );
    run.assert_row("zero-size claim", "SKIP", &["a class the plugin accepts"]);
    assert!(
        run.stdout()
            .contains("no --policy: the plugin sees no files"),
        "{}",
        run.report()
    );
}

#[test]
fn plugin_test_reports_a_plugin_whose_output_the_policy_refuses() {
    // The healthy volume of misbehave is a hostPath under /tmp/ok.
    let elsewhere = tempfile::tempdir().unwrap();
    let run = misbehave_test(
        "ok",
        &format!(
            "output: {{sources: [hostPath], paths: [{}]}}",
            elsewhere.path().display()
        ),
    );
    run.assert_row(
        "provision",
        "FAIL",
        &["returned a volume that its output policy refuses"],
    );
    run.assert_row(
        "output within policy",
        "FAIL",
        &[
            "1 volume(s) refused",
            &format!(
                "is not in a granted directory ({}) (grant: output.paths)",
                elsewhere.path().display()
            ),
            "plugins.misbehave.output",
        ],
    );
    assert!(!run.output.status.success(), "{}", run.report());
}

#[path = "conformance/backends.rs"]
mod backends;
