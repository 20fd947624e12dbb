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
use std::process::{Command, Output};

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

    /// The verdict and details of the row of `check`.
    fn row(&self, check: &str) -> Option<(String, String)> {
        self.stdout().lines().find_map(|line| {
            let (verdict, rest) = line.split_once(' ')?;
            if !matches!(verdict, "PASS" | "FAIL" | "SKIP") {
                return None;
            }
            let details = rest.trim_start().strip_prefix(check)?;
            details
                .starts_with("  ")
                .then(|| (verdict.to_owned(), details.trim().to_owned()))
        })
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
    let mut command = Command::new(env!("CARGO_BIN_EXE_wasmprov"));
    command
        .args(["plugin", "test"])
        .arg(wasm)
        .env(
            "WASMPROV_CACHE_DIR",
            workspace_root().join("target/test-compile-cache"),
        )
        .env("WASMPROV_LOG", "warn");
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
        for check in [
            "provision is idempotent",
            "delete of an unknown volume",
            "zero-size claim",
        ] {
            if run.row(check).is_none_or(|(v, _)| v != "PASS") {
                failures.push(format!("== {name}: {check} did not pass\n{}", run.report()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_broken_plugin_fails_with_a_table_that_says_what_is_wrong() {
    let dir = workspace_root().join("tests/guests/broken-plugin/conformance");
    let run = plugin_test(&guest_path("broken-plugin"), Some(&dir));
    assert_eq!(run.output.status.code(), Some(1), "{}", run.report());
    run.assert_row("load", "PASS", &["wasmprov:provisioner@0.1.0"]);
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
    assert!(
        run.stdout()
            .contains("FAILED: 5 passed, 6 failed, 0 skipped"),
        "{}",
        run.report()
    );
}

/// Runs the suite on the misbehave guest with `behavior` and a policy entry.
fn misbehave_test(behavior: &str, policy: &str) -> Run {
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
        format!("plugins:\n  misbehave:\n    {policy}\n"),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_wasmprov"))
        .args(["plugin", "test"])
        .arg(guest_path("misbehave"))
        .arg("--class")
        .arg(&class)
        .arg("--policy")
        .arg(&policy_file)
        .env(
            "WASMPROV_CACHE_DIR",
            workspace_root().join("target/test-compile-cache"),
        )
        .env("WASMPROV_LOG", "warn")
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
