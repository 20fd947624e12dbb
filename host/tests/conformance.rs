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

use k8s_openapi::api::core::v1::PersistentVolume;
use support::*;
use wasmprov::policy::PolicySet;
use wasmprov::provisioner::{
    with_class_parameters, ProvisionError, ProvisionState, ResizeError, ResizeOptions, ResizeState,
    Resized,
};
use wasmprov::wasm_provisioner::WasmProvisioner;

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

// Each backend on the bad input its own design has to get right, through
// `wasmprov plugin invoke` / `plugin delete` as a user runs them.

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        Scratch {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Writes `text` (with `@@` replaced by the scratch directory) to `rel`.
    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            text.replace("@@", &self.dir.path().display().to_string()),
        )
        .unwrap();
        path
    }

    fn class(&self, name: &str, plugin: &str, params: &str) -> PathBuf {
        self.write(
            &format!("{name}.sc.yaml"),
            &format!(
                "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {name}}}\n\
                 provisioner: wasmprov.io/host\nparameters: {{plugin: {plugin}, {params}}}\n"
            ),
        )
    }

    fn claim(&self, name: &str, size: &str, annotations: &str) -> PathBuf {
        self.write(
            &format!("{name}.pvc.yaml"),
            &format!(
                "apiVersion: v1\nkind: PersistentVolumeClaim\n\
                 metadata: {{name: {name}, namespace: apps, annotations: {{{annotations}}}}}\n\
                 spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: {size}}}}}}}\n"
            ),
        )
    }
}

fn cli(args: &[&std::ffi::OsStr]) -> Output {
    wasmprov_command()
        .args(args)
        .output()
        .expect("run wasmprov")
}

/// `plugin invoke`: the PersistentVolume, or the error message.
fn invoke(
    plugin: &str,
    class: &Path,
    pvc: &Path,
    policy: Option<&Path>,
) -> Result<k8s_openapi::api::core::v1::PersistentVolume, String> {
    let wasm = plugin_path(plugin);
    let mut args = vec![
        "plugin".as_ref(),
        "invoke".as_ref(),
        wasm.as_os_str(),
        "--class".as_ref(),
        class.as_os_str(),
        "--pvc".as_ref(),
        pvc.as_os_str(),
    ];
    if let Some(policy) = policy {
        args.extend(["--policy".as_ref(), policy.as_os_str()]);
    }
    let out = cli(&args);
    if out.status.success() {
        Ok(serde_yaml::from_slice(&out.stdout).expect("invoke prints a PersistentVolume"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `plugin delete` of a PersistentVolume `invoke` printed with `class`.
fn delete(
    plugin: &str,
    scratch: &Scratch,
    pv: &k8s_openapi::api::core::v1::PersistentVolume,
    class: &Path,
    policy: Option<&Path>,
) -> Result<(), String> {
    let wasm = plugin_path(plugin);
    let file = scratch.write("pv.yaml", &serde_yaml::to_string(pv).unwrap());
    let mut args = vec![
        "plugin".as_ref(),
        "delete".as_ref(),
        wasm.as_os_str(),
        "--pv".as_ref(),
        file.as_os_str(),
        "--class".as_ref(),
        class.as_os_str(),
    ];
    if let Some(policy) = policy {
        args.extend(["--policy".as_ref(), policy.as_os_str()]);
    }
    let out = cli(&args);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
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

#[test]
fn nfs_subdir_keeps_hostile_patterns_inside_the_share_and_archives_on_delete() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.path("share")).unwrap();
    let policy = s.write(
        "policy.yaml",
        "plugins:\n  nfs-subdir:\n    preopens: [{host: @@/share, guest: /share, mode: read-write}]\n    \
         output: {sources: [nfs], nfsExports: [\"10.0.0.5:/exports\"]}\n",
    );
    let class = s.class(
        "nfs",
        "nfs-subdir",
        "server: 10.0.0.5, share: /exports/k8s, pathPattern: '${.PVC.annotations.dir}/${.PV.name}'",
    );
    let pvc = s.claim("data", "1Gi", "dir: ../../escape/..");
    let pv = invoke("nfs-subdir", &class, &pvc, Some(&policy)).unwrap();
    let volume = pv.metadata.name.clone().unwrap();
    let nfs = pv.spec.clone().unwrap().nfs.unwrap();
    assert_eq!(
        (nfs.server.as_str(), nfs.path.as_str()),
        ("10.0.0.5", format!("/exports/k8s/escape/{volume}").as_str())
    );
    assert!(s.path(&format!("share/escape/{volume}")).is_dir());
    assert!(!s.path("escape").exists() && !s.path("../escape").exists());

    delete("nfs-subdir", &s, &pv, &class, Some(&policy)).unwrap();
    assert!(!s.path(&format!("share/escape/{volume}")).exists());
    assert!(
        s.path(&format!("share/escape/archived-{volume}")).is_dir(),
        "archiveOnDelete defaults to true"
    );

    let pvc = s.claim("other", "1Gi", "nope: x");
    let err = invoke("nfs-subdir", &class, &pvc, Some(&policy)).unwrap_err();
    assert!(
        err.contains("invalid-argument") && err.contains("no annotation \"dir\""),
        "{err}"
    );
}

/// The sandbox policy of the quota-dir tests (`@@`: the scratch directory):
/// `@@/volumes` is hostRoot, preopened at the plugin's default root.
const QUOTA_DIR_POLICY: &str =
    "plugins:\n  quota-dir:\n    preopens: [{host: @@/volumes, guest: /volumes, mode: read-write}]\n    \
     output: {sources: [hostPath], paths: [@@/volumes], annotationPrefixes: [quota-dir/]}\n";

#[test]
fn quota_dir_writes_the_quota_and_refuses_claims_over_max_bytes() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.path("volumes")).unwrap();
    let policy = s.write("policy.yaml", QUOTA_DIR_POLICY);
    let class = s.class(
        "quota",
        "quota-dir",
        "hostRoot: @@/volumes, maxBytes: '10737418240'",
    );
    let pv = invoke(
        "quota-dir",
        &class,
        &s.claim("data", "1500M", ""),
        Some(&policy),
    )
    .unwrap();
    let name = pv.metadata.name.clone().unwrap();
    let spec = pv.spec.clone().unwrap();
    // 1500M rounded up to whole MiB.
    assert_eq!(spec.capacity.unwrap()["storage"].0, "1431Mi");
    let quota = std::fs::read_to_string(s.path(&format!("volumes/{name}/.quota"))).unwrap();
    assert_eq!(quota, "1500512256\n");
    assert_eq!(
        spec.host_path.unwrap().path,
        s.path(&format!("volumes/{name}")).display().to_string()
    );
    std::fs::write(s.path(&format!("volumes/{name}/data")), "user data").unwrap();
    delete("quota-dir", &s, &pv, &class, Some(&policy)).unwrap();
    assert!(!s.path(&format!("volumes/{name}")).exists());

    let err = invoke(
        "quota-dir",
        &class,
        &s.claim("big", "20Gi", ""),
        Some(&policy),
    )
    .unwrap_err();
    assert!(
        err.contains("invalid-argument") && err.contains("maxBytes of 10737418240"),
        "{err}"
    );
}

// Resizing has no CLI command: these drive quota-dir through the host's
// `WasmProvisioner`, as the lifecycle does in a cluster.

const MI: u64 = 1024 * 1024;
const GI: u64 = 1024 * MI;

/// The quota-dir plugin under [`QUOTA_DIR_POLICY`], with `s/volumes` made.
async fn quota_dir(s: &Scratch) -> WasmProvisioner {
    std::fs::create_dir_all(s.path("volumes")).unwrap();
    let policy = PolicySet::load(&s.write("policy.yaml", QUOTA_DIR_POLICY)).unwrap();
    let p = load(
        "quota-dir",
        &plugin_path("quota-dir"),
        policy.sandbox_for("quota-dir"),
        policy.output_for("quota-dir"),
    )
    .await;
    assert!(p.can_resize(), "quota-dir exports the resizer");
    p
}

/// A quota-dir class with hostRoot `s/volumes` and `params` besides.
fn quota_class(
    s: &Scratch,
    params: &[(&str, &str)],
) -> k8s_openapi::api::storage::v1::StorageClass {
    let root = s.path("volumes").display().to_string();
    let mut all = vec![("plugin", "quota-dir"), ("hostRoot", root.as_str())];
    all.extend_from_slice(params);
    class("quota", &all)
}

async fn provision_quota(
    p: &WasmProvisioner,
    pv_name: &str,
    class: &k8s_openapi::api::storage::v1::StorageClass,
    size: &str,
) -> Result<PersistentVolume, ProvisionError> {
    // As the lifecycle hands it to resize and delete: completed from its class.
    p.provision(&options(pv_name, class.clone(), claim(pv_name, size)))
        .await
        .map(|pv| with_class_parameters(&pv, Some(class)))
}

async fn resize_to(
    p: &WasmProvisioner,
    pv: &PersistentVolume,
    bytes: u64,
) -> Result<Resized, ResizeError> {
    let options = ResizeOptions {
        requested_bytes: bytes,
        limit_bytes: None,
    };
    p.resize(pv, &options).await
}

fn quota_of(s: &Scratch, pv_name: &str) -> String {
    std::fs::read_to_string(s.path(&format!("volumes/{pv_name}/.quota"))).unwrap()
}

#[tokio::test]
async fn quota_dir_grows_the_quota_and_never_shrinks_it() {
    let s = Scratch::new();
    let p = quota_dir(&s).await;
    let class = quota_class(&s, &[("maxBytes", "10737418240")]);
    let pv = provision_quota(&p, "pvc-grow", &class, "1Gi")
        .await
        .unwrap();
    assert_eq!(quota_of(&s, "pvc-grow"), format!("{GI}\n"));

    // 1500M rounded up to whole MiB: 1431Mi.
    let grown = resize_to(&p, &pv, 1_500_000_000).await.unwrap();
    assert_eq!(
        grown,
        Resized {
            capacity_bytes: 1431 * MI,
            node_expansion_required: false
        }
    );
    assert_eq!(quota_of(&s, "pvc-grow"), "1500512256\n");
    let files: Vec<_> = std::fs::read_dir(s.path("volumes/pvc-grow"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        files,
        [".quota"],
        "the temporary file was renamed over .quota"
    );

    // Again (the host retries after a restart): the same answer, no change.
    assert_eq!(resize_to(&p, &pv, 1_500_000_000).await.unwrap(), grown);
    // Within the granularity, or less than the quota: it holds that already.
    assert_eq!(resize_to(&p, &pv, 1431 * MI - 1).await.unwrap(), grown);
    assert_eq!(resize_to(&p, &pv, GI + 1).await.unwrap(), grown);
    assert_eq!(quota_of(&s, "pvc-grow"), "1500512256\n");

    // The storage is gone: nothing to grow, and the message says so.
    std::fs::remove_dir_all(s.path("volumes/pvc-grow")).unwrap();
    let err = resize_to(&p, &pv, 2 * GI).await.unwrap_err();
    assert_eq!(err.state, ResizeState::Failed, "{}", err.message);
    let dir = s.path("volumes/pvc-grow").display().to_string();
    for want in ["pvc-grow", dir.as_str(), "is missing", "storage is gone"] {
        assert!(err.message.contains(want), "{want:?} in {}", err.message);
    }
}

#[tokio::test]
async fn quota_dir_refuses_to_grow_past_max_bytes() {
    let s = Scratch::new();
    let p = quota_dir(&s).await;
    let class = quota_class(&s, &[("maxBytes", "2147483648")]);
    let pv = provision_quota(&p, "pvc-max", &class, "1Gi").await.unwrap();

    let err = resize_to(&p, &pv, 3 * GI).await.unwrap_err();
    assert_eq!(err.state, ResizeState::Infeasible, "{}", err.message);
    for want in [
        "pvc-max",
        "3221225472 bytes",
        "maxBytes of 2147483648",
        "ask for at most 2147483648 bytes",
        "raise maxBytes",
    ] {
        assert!(err.message.contains(want), "{want:?} in {}", err.message);
    }
    assert_eq!(quota_of(&s, "pvc-max"), format!("{GI}\n"), "unchanged");
    // Up to maxBytes is fine.
    assert_eq!(
        resize_to(&p, &pv, 2 * GI).await.unwrap().capacity_bytes,
        2 * GI
    );
}

#[tokio::test]
async fn quota_dir_keeps_the_volumes_within_pool_bytes() {
    let s = Scratch::new();
    let p = quota_dir(&s).await;
    let class = quota_class(&s, &[("poolBytes", "3221225472")]);
    // Not volumes: no .quota in them, or not a directory.
    std::fs::create_dir_all(s.path("volumes/lost+found")).unwrap();
    std::fs::write(s.path("volumes/notes"), "5000000000\n").unwrap();

    let a = provision_quota(&p, "pvc-a", &class, "1Gi").await.unwrap();
    let b = provision_quota(&p, "pvc-b", &class, "1Gi").await.unwrap();
    // Provisioning again (idempotent) does not count the volume twice.
    provision_quota(&p, "pvc-b", &class, "1Gi").await.unwrap();

    // 2Gi + 2Gi > 3Gi: refused, and retried (the pool frees up).
    let err = provision_quota(&p, "pvc-c", &class, "2Gi")
        .await
        .unwrap_err();
    assert_eq!(err.state, ProvisionState::Failed, "{}", err.message);
    for want in [
        "pvc-c",
        "is full",
        "hold 2147483648 bytes of this class's poolBytes of 3221225472",
        "1073741824 bytes are free",
        "needs 2147483648",
        "request at most 1073741824 bytes",
    ] {
        assert!(err.message.contains(want), "{want:?} in {}", err.message);
    }
    assert!(!s.path("volumes/pvc-c").exists(), "nothing was created");
    // Bigger than the whole pool: can never succeed.
    let err = provision_quota(&p, "pvc-c", &class, "4Gi")
        .await
        .unwrap_err();
    assert_eq!(
        err.state,
        ProvisionState::InvalidArgument,
        "{}",
        err.message
    );
    assert!(
        err.message.contains("poolBytes of 3221225472"),
        "{}",
        err.message
    );
    // What fits is provisioned: the pool is now full.
    provision_quota(&p, "pvc-c", &class, "1Gi").await.unwrap();

    let err = resize_to(&p, &a, 2 * GI).await.unwrap_err();
    assert_eq!(err.state, ResizeState::Infeasible, "{}", err.message);
    for want in [
        "pvc-a",
        "2147483648 bytes",
        "would overflow",
        "other volumes hold 2147483648 bytes of poolBytes of 3221225472",
        "ask for at most 1073741824 bytes",
        "raise poolBytes",
    ] {
        assert!(err.message.contains(want), "{want:?} in {}", err.message);
    }
    assert_eq!(quota_of(&s, "pvc-a"), format!("{GI}\n"), "unchanged");

    // Deleting a volume frees its share of the pool.
    p.delete(&b).await.unwrap();
    let grown = resize_to(&p, &a, 2 * GI).await.unwrap();
    assert_eq!(grown.capacity_bytes, 2 * GI);
    assert_eq!(quota_of(&s, "pvc-a"), format!("{}\n", 2 * GI));
    let err = provision_quota(&p, "pvc-d", &class, "1Mi")
        .await
        .unwrap_err();
    assert_eq!(err.state, ProvisionState::Failed, "{}", err.message);
    assert!(
        err.message.contains("0 bytes are free") && !err.message.contains("request at most"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn quota_dir_claims_racing_for_the_pool_never_overfill_it() {
    let s = Scratch::new();
    let p = quota_dir(&s).await;
    let class = quota_class(&s, &[("poolBytes", "2147483648")]);
    provision_quota(&p, "pvc-first", &class, "1Gi")
        .await
        .unwrap();

    // Room for one more: of claims made at once, at most one gets it (a
    // loser of a race answers failed and is retried).
    let names = ["pvc-r0", "pvc-r1", "pvc-r2", "pvc-r3"];
    let results = futures::future::join_all(
        names
            .iter()
            .map(|name| provision_quota(&p, name, &class, "1Gi")),
    )
    .await;
    let won = results.iter().filter(|r| r.is_ok()).count();
    assert!(won <= 1, "{results:?}");
    for (name, result) in names.iter().zip(&results) {
        if let Err(e) = result {
            assert_eq!(e.state, ProvisionState::Failed, "{}", e.message);
            assert!(
                !s.path(&format!("volumes/{name}")).exists(),
                "{name} was removed"
            );
        }
    }
    let total: u64 = std::fs::read_dir(s.path("volumes"))
        .unwrap()
        .map(|e| {
            let quota = e.unwrap().path().join(".quota");
            std::fs::read_to_string(quota)
                .unwrap()
                .trim()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(total, (1 + won as u64) * GI);
}

#[test]
fn template_refuses_a_shared_path_and_renders_csi_sources() {
    let s = Scratch::new();
    let pvc = s.claim("data", "1Gi", "");
    let policy = s.write(
        "policy.yaml",
        "plugins:\n  template:\n    output: {sources: [csi], csiDrivers: [{name: disk.csi.example.com, volumeAttributes: [tier=fast]}]}\n",
    );
    let shared = s.class(
        "shared",
        "template",
        "kind: nfs, server: 10.0.0.5, path: /exports/shared",
    );
    let err = invoke("template", &shared, &pvc, Some(&policy)).unwrap_err();
    assert!(
        err.contains("invalid-argument") && err.contains("every claim the same directory"),
        "{err}"
    );
    let csi = s.class(
        "csi",
        "template",
        "kind: csi, driver: disk.csi.example.com, volumeHandle: 'vol-${namespace}-${name}-${pvName}', \
         fsType: ext4, attributes.tier: fast",
    );
    let pv = invoke("template", &csi, &pvc, Some(&policy)).unwrap();
    let csi = pv.spec.unwrap().csi.unwrap();
    assert_eq!(csi.driver, "disk.csi.example.com");
    assert!(
        csi.volume_handle.starts_with("vol-apps-data-pvc-"),
        "{}",
        csi.volume_handle
    );
    assert_eq!(csi.fs_type.as_deref(), Some("ext4"));
    assert_eq!(csi.volume_attributes.unwrap()["tier"], "fast");
    let typo = s.class(
        "typo",
        "template",
        "kind: csi, driver: d.example.com, fstype: ext4",
    );
    let err = invoke("template", &typo, &pvc, None).unwrap_err();
    assert!(err.contains("unknown class parameter \"fstype\""), "{err}");
}

#[test]
fn static_pool_hands_out_each_volume_once_and_takes_it_back_on_delete() {
    let s = Scratch::new();
    s.write(
        "pool/small.json",
        r#"{"volumes": [{"name": "vol-1", "capacity": "2Gi",
            "source": {"nfs": {"server": "10.0.0.5", "path": "/exports/vol-1"}}}]}"#,
    );
    let policy = s.write(
        "policy.yaml",
        "plugins:\n  static-pool:\n    preopens: [{host: @@/pool, guest: /pool, mode: read-write}]\n    \
         output: {sources: [nfs], nfsExports: [\"10.0.0.5:/exports\"], annotationPrefixes: [static-pool/], requireVolumeName: false}\n",
    );
    let class = s.class("small", "static-pool", "pool: small");
    let a = s.claim("a", "1Gi", "");
    let b = s.claim("b", "1Gi", "");
    let pv_a = invoke("static-pool", &class, &a, Some(&policy)).unwrap();
    let spec = pv_a.spec.clone().unwrap();
    assert_eq!(spec.nfs.unwrap().path, "/exports/vol-1");
    assert_eq!(spec.capacity.unwrap()["storage"].0, "2Gi");
    // Idempotent: a gets the same volume again; b finds the pool empty.
    let again = invoke("static-pool", &class, &a, Some(&policy)).unwrap();
    assert_eq!(again.spec, pv_a.spec);
    let err = invoke("static-pool", &class, &b, Some(&policy)).unwrap_err();
    assert!(
        err.contains("(failed)") && err.contains("no free volume in pool small"),
        "{err}"
    );
    delete("static-pool", &s, &pv_a, &class, Some(&policy)).unwrap();
    let pv_b = invoke("static-pool", &class, &b, Some(&policy)).unwrap();
    assert_eq!(pv_b.spec.unwrap().nfs.unwrap().path, "/exports/vol-1");

    s.write(
        "pool/broken.json",
        r#"{"volumes": [{"name": "x", "capacity": "lots"}]}"#,
    );
    let broken = s.class("broken", "static-pool", "pool: broken");
    let err = invoke("static-pool", &broken, &a, Some(&policy)).unwrap_err();
    assert!(err.contains("broken.json: volumes[0]"), "{err}");
}
