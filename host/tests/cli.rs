//! `wasmprov plugin check|invoke|delete` as a user runs them: files in,
//! YAML and messages out, exit codes.

mod support;

use std::path::Path;
use std::process::Output;

use k8s_openapi::api::core::v1::PersistentVolume;
use support::*;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// A sample setup like deploy/examples, rooted in a temporary directory.
struct Sample {
    dir: tempfile::TempDir,
    class: String,
    pvc: String,
    policy: String,
}

fn sample(size: &str) -> Sample {
    let dir = tempfile::tempdir().unwrap();
    let volumes = dir.path().join("volumes");
    std::fs::create_dir(&volumes).unwrap();
    let class = write(
        dir.path(),
        "sc.yaml",
        &format!(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: hostpath}}\n\
             provisioner: wasmprov.io/host\nparameters: {{plugin: hostpath, hostRoot: {}}}\n",
            volumes.display()
        ),
    );
    let pvc = write(
        dir.path(),
        "pvc.yaml",
        &format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data, namespace: apps}}\n\
             spec: {{storageClassName: hostpath, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: {size}}}}}}}\n"
        ),
    );
    let policy = write(
        dir.path(),
        "policy.yaml",
        &format!(
            "plugins:\n  hostpath:\n    preopens: [{{host: {dir}, guest: /volumes, mode: read-write}}]\n    \
             output: {{sources: [hostPath], paths: [{dir}]}}\n",
            dir = volumes.display()
        ),
    );
    Sample {
        dir,
        class,
        pvc,
        policy,
    }
}

impl Sample {
    /// A copy of the sample class with `from` replaced by `to`, in `file`.
    fn class_with(&self, file: &str, from: &str, to: &str) -> String {
        let text = std::fs::read_to_string(&self.class).unwrap();
        assert!(text.contains(from), "{from:?} not in the sample class");
        write(self.dir.path(), file, &text.replace(from, to))
    }
}

/// `plugin invoke` of the hostpath plugin for the sample claim, with `class`
/// and any further arguments.
fn invoke(s: &Sample, class: &str, more: &[&str]) -> Output {
    let hostpath = plugin_path("hostpath");
    let mut args = vec![
        "plugin",
        "invoke",
        hostpath.to_str().unwrap(),
        "--class",
        class,
        "--pvc",
        &s.pvc,
    ];
    args.extend_from_slice(more);
    wasmprov(&args)
}

#[test]
fn invoke_prints_the_persistent_volume_and_is_idempotent_then_delete_removes_it() {
    let hostpath = plugin_path("hostpath");
    let s = sample("2Gi");
    let args = [
        "plugin",
        "invoke",
        hostpath.to_str().unwrap(),
        "--class",
        &s.class,
        "--pvc",
        &s.pvc,
        "--policy",
        &s.policy,
    ];
    let first = wasmprov(&args);
    assert!(first.status.success(), "{}", stderr(&first));
    let pv: PersistentVolume = serde_yaml::from_str(&stdout(&first)).expect("stdout is a PV");
    let name = pv.metadata.name.clone().unwrap();
    assert!(name.starts_with("pvc-"), "{name}");
    let spec = pv.spec.as_ref().unwrap();
    let dir = s.dir.path().join("volumes").join(&name);
    assert_eq!(
        spec.host_path.as_ref().unwrap().path,
        dir.to_string_lossy(),
        "hostPath points at the directory it created"
    );
    assert!(dir.is_dir());
    assert_eq!(spec.capacity.as_ref().unwrap()["storage"].0, "2Gi");
    assert_eq!(spec.storage_class_name.as_deref(), Some("hostpath"));
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    let claim_ref = spec.claim_ref.as_ref().unwrap();
    assert_eq!(
        (claim_ref.namespace.as_deref(), claim_ref.name.as_deref()),
        (Some("apps"), Some("data"))
    );
    let ann = pv.metadata.annotations.as_ref().unwrap();
    assert_eq!(ann["wasmprov.io/plugin"], "hostpath");
    assert!(ann["wasmprov.io/plugin-digest"].starts_with("sha256:"));
    assert_eq!(ann["pv.kubernetes.io/provisioned-by"], "wasmprov.io/host");

    let again = wasmprov(&args);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        stdout(&again),
        stdout(&first),
        "the same claim gives the same volume"
    );

    let pv_file = write(s.dir.path(), "pv.yaml", &stdout(&first));
    let del = [
        "plugin",
        "delete",
        hostpath.to_str().unwrap(),
        "--pv",
        &pv_file,
        "--class",
        &s.class,
        "--policy",
        &s.policy,
    ];
    let deleted = wasmprov(&del);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    assert!(!dir.exists(), "delete removed the directory");
    let again = wasmprov(&del);
    assert!(
        again.status.success(),
        "deleting what is gone succeeds: {}",
        stderr(&again)
    );
}

/// A plugin's log line, stdout and error reach the terminal with their
/// control characters escaped: no screen clearing, no forged lines.
#[test]
fn invoke_shows_plugin_text_without_its_control_characters() {
    let s = sample("1Mi");
    let class = write(
        s.dir.path(),
        "control.yaml",
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: control}\n\
         provisioner: wasmprov.io/host\nparameters: {behavior: control-text}\n",
    );
    let misbehave = guest_path("misbehave");
    let out = wasmprov_command()
        .args(["plugin", "invoke", misbehave.to_str().unwrap(), "--class"])
        .args([&class, "--pvc", &s.pvc])
        .env("WASMPROV_LOG", "debug")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let all = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
    for raw in [&b"\x1b"[..], b"\r", b"\0", "\u{202e}".as_bytes()] {
        assert!(
            !all.windows(raw.len()).any(|w| w == raw),
            "{raw:?} reached the terminal: {}",
            String::from_utf8_lossy(&all)
        );
    }
    let err = stderr(&out);
    for line in ["log \\u{1b}[2J", "stdout \\u{1b}[2J", "failed \\u{1b}[2J"] {
        assert!(err.contains(line), "{line}: {err}");
    }
    assert!(!err.contains("\nlevel=INFO msg"), "a forged line: {err}");
}

#[test]
fn invoke_reports_an_invalid_claim_with_a_non_zero_exit() {
    let hostpath = plugin_path("hostpath");
    let s = sample("0");
    let out = wasmprov(&[
        "plugin",
        "invoke",
        hostpath.to_str().unwrap(),
        "--class",
        &s.class,
        "--pvc",
        &s.pvc,
        "--policy",
        &s.policy,
    ]);
    assert!(!out.status.success());
    assert!(stdout(&out).is_empty(), "no PV printed");
    let err = stderr(&out);
    assert!(
        err.contains("invalid-argument") && err.contains("apps/data"),
        "{err}"
    );
}

/// Every manifest flag, given a file of another kind, names the flag, the
/// file, the kind it holds and the kind it expects.
#[test]
fn every_manifest_flag_names_the_file_and_the_kinds_found_and_expected() {
    let hostpath = plugin_path("hostpath");
    let hostpath = hostpath.to_str().unwrap();
    let s = sample("1Gi");
    let (class, pvc) = (s.class.as_str(), s.pvc.as_str());
    let cases: [(Vec<&str>, &str, &str, &str, &str); 4] = [
        (
            vec!["invoke", "--class", pvc, "--pvc", pvc],
            "--class",
            pvc,
            "PersistentVolumeClaim",
            "StorageClass",
        ),
        (
            vec!["invoke", "--class", class, "--pvc", class],
            "--pvc",
            class,
            "StorageClass",
            "PersistentVolumeClaim",
        ),
        (
            vec!["invoke", "--class", class, "--pvc", pvc, "--node", class],
            "--node",
            class,
            "StorageClass",
            "Node",
        ),
        (
            vec!["delete", "--pv", pvc],
            "--pv",
            pvc,
            "PersistentVolumeClaim",
            "PersistentVolume",
        ),
    ];
    for (args, flag, file, found, expected) in cases {
        let mut argv = vec!["plugin", args[0], hostpath];
        argv.extend_from_slice(&args[1..]);
        let out = wasmprov(&argv);
        assert!(!out.status.success(), "{flag}: accepted");
        assert!(stdout(&out).is_empty(), "{flag}: printed something");
        let err = stderr(&out);
        let want = format!(
            "{file} (given to {flag}) holds a {found}, but {flag} expects a {expected} (apiVersion: "
        );
        assert!(err.contains(&want), "{flag}: want {want:?} in:\n{err}");
    }
}

/// A class a host would not serve with this plugin still works locally, but
/// each field that differs is warned about, with the class, the field and
/// the fix; a class that matches gets no warning.
#[test]
fn invoke_and_test_warn_about_a_class_a_host_would_not_serve_with_the_plugin() {
    let s = sample("1Gi");
    let good = invoke(&s, &s.class, &["--policy", &s.policy]);
    assert!(good.status.success(), "{}", stderr(&good));
    assert!(!stderr(&good).contains("warning"), "{}", stderr(&good));

    let cases = [
        (
            s.class_with("other-plugin.yaml", "plugin: hostpath", "plugin: other"),
            vec![
                "StorageClass hostpath (",
                "names plugin \"other\" in parameters.plugin, but this plugin is \"hostpath\" (from the file name hostpath.wasm)",
                "Set parameters.plugin to hostpath, or pass --name other",
            ],
        ),
        (
            s.class_with("no-plugin.yaml", "plugin: hostpath, ", ""),
            vec![
                "StorageClass hostpath (",
                "has no \"plugin\" parameter; set parameters.plugin to the plugin that serves it (`plugin: hostpath`)",
            ],
        ),
        (
            s.class_with(
                "other-provisioner.yaml",
                "provisioner: wasmprov.io/host",
                "provisioner: example.com/other",
            ),
            vec![
                "StorageClass hostpath (",
                "has provisioner \"example.com/other\", but the host serves wasmprov.io/host (node.wasmprov.io with --node-name) unless run with --provisioner-name",
                "Set provisioner: wasmprov.io/host, or run the host with --provisioner-name example.com/other",
            ],
        ),
    ];
    for (class, wants) in &cases {
        let out = invoke(&s, class, &["--policy", &s.policy]);
        assert!(out.status.success(), "{class}: {}", stderr(&out));
        let _: PersistentVolume = serde_yaml::from_str(&stdout(&out)).expect("stdout is a PV");
        let err = stderr(&out);
        assert_eq!(err.matches("warning: ").count(), 1, "{class}: {err}");
        for want in wants {
            assert!(err.contains(want), "{class}: want {want:?} in:\n{err}");
        }
        assert!(
            err.contains(class.as_str()),
            "{class}: names the file: {err}"
        );
    }

    // --name is the plugin's name: then it matches a class for "other".
    let named = invoke(&s, &cases[0].0, &["--policy", &s.policy, "--name", "other"]);
    assert!(!stderr(&named).contains("warning"), "{}", stderr(&named));

    // `plugin test --class` warns the same way.
    let hostpath = plugin_path("hostpath");
    let out = wasmprov(&[
        "plugin",
        "test",
        hostpath.to_str().unwrap(),
        "--class",
        &cases[0].0,
        "--policy",
        &s.policy,
    ]);
    let err = stderr(&out);
    assert!(
        err.contains("warning: StorageClass hostpath (")
            && err.contains("names plugin \"other\" in parameters.plugin"),
        "{err}"
    );
}

/// Without --policy a plugin sees no directories; its own hint ("does the
/// sandbox policy preopen ...?") cannot know that no policy was given, so the
/// command says so and how to give one.
#[test]
fn without_a_policy_invoke_and_delete_say_that_none_was_given() {
    let hostpath = plugin_path("hostpath");
    let s = sample("1Gi");
    let note =
        "note: no sandbox policy was given (--policy), so plugin hostpath ran with no directories";
    let example = "`--policy deploy/examples/policy.yaml`";

    let out = invoke(&s, &s.class, &[]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains(note) && err.contains(example), "{err}");

    let made = invoke(&s, &s.class, &["--policy", &s.policy]);
    assert!(made.status.success(), "{}", stderr(&made));
    let pv = write(s.dir.path(), "pv.yaml", &stdout(&made));
    let delete = |more: &[&str]| {
        let mut args = vec![
            "plugin",
            "delete",
            hostpath.to_str().unwrap(),
            "--pv",
            &pv,
            "--class",
            &s.class,
        ];
        args.extend_from_slice(more);
        wasmprov(&args)
    };
    let out = delete(&[]);
    assert!(
        !out.status.success(),
        "deleted without seeing the directory"
    );
    let err = stderr(&out);
    assert!(err.contains(note) && err.contains(example), "{err}");

    // A policy without an entry for the plugin: the same, naming the policy.
    let unrelated = write(s.dir.path(), "unrelated.yaml", "plugins:\n  other: {}\n");
    let out = delete(&["--policy", &unrelated]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "note: sandbox policy {unrelated} has no entry plugins.hostpath, so plugin hostpath ran with the defaults: no directories"
        )) && err.contains("(entries: other)"),
        "{err}"
    );

    // With the policy all is well and nothing is noted.
    let out = delete(&["--policy", &s.policy]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("note:"), "{}", stderr(&out));

    // An invalid request is not the sandbox's doing: no note.
    let zero = sample("0");
    let out = invoke(&zero, &zero.class, &[]);
    let err = stderr(&out);
    assert!(
        err.contains("invalid-argument") && !err.contains("note:"),
        "{err}"
    );
}

/// A plugin whose preopen is its volumes' directory cannot swap a volume it
/// returned for a link to `/`: not when invoked again, not in `plugin
/// delete`, not in the clean-up of a volume the policy refused.
#[test]
fn invoke_and_delete_refuse_a_link_swapped_in_after_the_check() {
    let misbehave = guest_path("misbehave");
    let misbehave = misbehave.to_str().unwrap();
    let s = sample("1Gi");
    let volumes = s.dir.path().join("volumes");
    let policy = write(
        s.dir.path(),
        "misbehave-policy.yaml",
        &format!(
            "plugins:\n  misbehave:\n    preopens: [{{host: {dir}, guest: /data, mode: read-write}}]\n    \
             output: {{sources: [hostPath], paths: [{dir}]}}\n",
            dir = volumes.display()
        ),
    );
    let class = |file: &str, more: &str| {
        write(
            s.dir.path(),
            file,
            &format!(
                "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: hostpath}}\n\
                 provisioner: wasmprov.io/host\nparameters: {{plugin: misbehave, behavior: swap-link, dir: /data, host-dir: {}{more}}}\n",
                volumes.display()
            ),
        )
    };
    let swap = class("swap.yaml", "");
    let invoke = |class: &str| {
        wasmprov(&[
            "plugin", "invoke", misbehave, "--class", class, "--pvc", &s.pvc, "--policy", &policy,
        ])
    };
    let refused = |out: &Output| {
        let err = stderr(out);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(": Operation not permitted")
                && err.contains("plugin tried to make a symbolic link; refused"),
            "{err}"
        );
    };
    let is_link = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());

    let first = invoke(&swap);
    assert!(first.status.success(), "{}", stderr(&first));
    let pv: PersistentVolume = serde_yaml::from_str(&stdout(&first)).expect("stdout is a PV");
    let name = pv.metadata.name.clone().unwrap();
    let path = volumes.join(&name);
    assert!(path.is_dir());
    let guest_path = format!("symlink /data/{name}");

    // Invoked again: the directory the host accepted is swapped for a link.
    let again = invoke(&swap);
    refused(&again);
    assert!(stderr(&again).contains(&guest_path), "{}", stderr(&again));
    assert!(!is_link(&path), "{} is a link", path.display());

    // Deleted: the same.
    std::fs::create_dir(&path).unwrap();
    let pv_file = write(s.dir.path(), "pv.yaml", &stdout(&first));
    let deleted = wasmprov(&[
        "plugin", "delete", misbehave, "--pv", &pv_file, "--class", &swap, "--policy", &policy,
    ]);
    refused(&deleted);
    assert!(
        stderr(&deleted).contains(&guest_path),
        "{}",
        stderr(&deleted)
    );
    assert!(!is_link(&path), "{} is a link", path.display());

    // Refused by the policy (an annotation it does not grant): the host's
    // clean-up delete is where the plugin tries it.
    let cleanup = invoke(&class(
        "refused.yaml",
        ", annotations: evil.example.com/x=1",
    ));
    let err = stderr(&cleanup);
    assert!(
        err.contains("annotation \"evil.example.com/x\" is not under a granted prefix")
            && err.contains(&format!("deleting the storage it made failed, and is retried: {guest_path}: Operation not permitted")),
        "{err}"
    );
    refused(&cleanup);
    assert!(!is_link(&path), "{} is a link", path.display());
}

/// Global options are listed under their own heading, after the command's own.
#[test]
fn help_lists_the_logging_options_after_the_command_s_own() {
    for (command, own) in [
        (&["run", "--help"][..], "--plugins-dir"),
        (&["plugin", "invoke", "--help"][..], "--class"),
    ] {
        let out = wasmprov(command);
        assert!(out.status.success(), "{}", stderr(&out));
        let help = stdout(&out);
        let at = |what: &str| {
            help.find(what)
                .unwrap_or_else(|| panic!("{command:?}: no {what:?} in:\n{help}"))
        };
        let logging = at("\nLogging:\n");
        assert!(at("\nOptions:\n") < logging, "{help}");
        assert!(
            at(own) < logging,
            "{command:?}: {own} after Logging:\n{help}"
        );
        assert!(at("--log-format <") > logging, "{command:?}:\n{help}");
        assert!(at("--log <") > logging, "{command:?}:\n{help}");
    }
}

#[test]
fn check_describes_a_good_plugin() {
    let hostpath = plugin_path("hostpath");
    let out = wasmprov(&["plugin", "check", hostpath.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for want in [
        "contract:      wasmprov:provisioner@0.3.0 (supported by this host: 0.1.0, 0.2.0, 0.3.0)",
        "digest:        sha256:",
        "wasmprov:provisioner/plugin@0.3.0",
        "wasmprov:provisioner/resizer@0.3.0",
        "wasmprov:provisioner/logging@0.3.0",
        "block-volumes=false resize=true",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}

/// `resize` is an optional export: a plugin of the current contract without
/// it loads and says so.
#[test]
fn check_says_whether_a_plugin_grows_volumes() {
    let misbehave = guest_path("misbehave");
    let out = wasmprov(&["plugin", "check", misbehave.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("contract:      wasmprov:provisioner@0.3.0"),
        "{text}"
    );
    assert!(text.contains("resize=false"), "{text}");
    assert!(!text.contains("resizer@"), "{text}");
}

/// Files that are not plugins: each is refused before anything runs, with a
/// message naming the file and what was expected.
#[test]
fn check_refuses_what_is_not_a_plugin_of_our_world() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Vec<u8>, &str); 5] = [
        ("notes.wasm", b"these are not the bytes you are looking for".to_vec(), "not a WebAssembly file"),
        ("core.wasm", wat::parse_str("(module)").unwrap(), "core WebAssembly module, not a component"),
        ("empty.wasm", wat::parse_str("(component)").unwrap(), "a component of another world"),
        (
            "future.wasm",
            wat::parse_str(r#"(component (instance $i) (export "wasmprov:provisioner/plugin@1.0.0" (instance $i)))"#).unwrap(),
            "wasmprov:provisioner/plugin@1.0.0, which this host does not support",
        ),
        (
            "hollow.wasm",
            wat::parse_str(r#"(component (instance $i) (export "wasmprov:provisioner/plugin@0.1.0" (instance $i)))"#).unwrap(),
            "exports do not match the contract",
        ),
    ];
    for (name, bytes, want) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let out = wasmprov(&["plugin", "check", path.to_str().unwrap()]);
        assert!(!out.status.success(), "{name} was accepted");
        let err = stderr(&out);
        assert!(
            err.contains(path.to_str().unwrap()),
            "{name}: names the file: {err}"
        );
        assert!(err.contains(want), "{name}: {err}");
    }
}

/// The same refusals for real components built from source (tests/guests).
#[test]
fn check_refuses_built_components_of_another_world_or_contract_version() {
    let cases = [
        ("other-world", "a component of another world"),
        (
            "next-major",
            "wasmprov:provisioner/plugin@1.0.0, which this host does not support",
        ),
    ];
    for (guest, want) in cases {
        let path = guest_path(guest);
        let out = wasmprov(&["plugin", "check", path.to_str().unwrap()]);
        assert!(!out.status.success(), "{guest} was accepted");
        let err = stderr(&out);
        assert!(
            err.contains(path.to_str().unwrap()) && err.contains(want),
            "{guest}: {err}"
        );
    }
}

/// A mistake in the policy is reported once, with the file, the field's path
/// and (for a field the parser does not know) its line and column.
#[test]
fn a_bad_policy_file_is_reported_with_the_field_to_fix() {
    let hostpath = plugin_path("hostpath");
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "timeout: soon",
            "plugins.hostpath.timeout: \"soon\" is not a duration",
        ),
        (
            "memoryLimt: 1Gi",
            "plugins.hostpath: unknown field `memoryLimt`, expected one of `memoryLimit`",
        ),
    ];
    for (line, want) in cases {
        let policy = write(
            dir.path(),
            "policy.yaml",
            &format!("plugins:\n  hostpath:\n    {line}\n"),
        );
        let out = wasmprov(&[
            "plugin",
            "check",
            hostpath.to_str().unwrap(),
            "--policy",
            &policy,
        ]);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.contains(&policy), "{line}: names the file: {err}");
        assert_eq!(err.matches(want).count(), 1, "{line}: said once: {err}");
        if line.starts_with("memoryLimt") {
            assert_eq!(
                err.matches("at line 3 column 5").count(),
                1,
                "{line}: {err}"
            );
        }
    }
}

#[test]
fn run_refuses_leader_election_timings_that_could_leave_two_leaders() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().display().to_string();
    let out = wasmprov(&[
        "run",
        "--plugins-dir",
        &plugins,
        "--leader-election-lease-duration",
        "5s",
        "--leader-election-renew-deadline",
        "10s",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("--leader-election-renew-deadline (10s) must be shorter than --leader-election-lease-duration (5s)"),
        "{err}"
    );
    let out = wasmprov(&[
        "run",
        "--plugins-dir",
        &plugins,
        "--leader-election-retry-period",
        "10s",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("--leader-election-retry-period (10s) must be above zero and well under --leader-election-renew-deadline (10s)"),
        "{err}"
    );
}

#[test]
fn run_refuses_save_retries_that_would_never_save_or_hammer_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().display().to_string();
    for (flag, value, want) in [
        ("--save-attempts", "0", "must be at least 1"),
        (
            "--save-attempts",
            "many",
            "\"many\" is not a whole number of attempts",
        ),
        ("--save-retry-interval", "0s", "must be above zero"),
        ("--save-retry-interval", "2h", "2h is more than an hour"),
    ] {
        let out = wasmprov(&["run", "--plugins-dir", &plugins, flag, value]);
        assert!(!out.status.success(), "{flag}={value} accepted");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("invalid value '{value}' for '{flag}")) && err.contains(want),
            "{flag}={value}: {err}"
        );
    }
}

#[test]
fn run_refuses_retry_intervals_that_make_no_sense() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().display().to_string();
    for (flag, value, want) in [
        ("--retry-interval-start", "0s", "must be above zero"),
        ("--retry-interval-max", "soon", "\"soon\" is not a duration"),
    ] {
        let out = wasmprov(&["run", "--plugins-dir", &plugins, flag, value]);
        assert!(!out.status.success(), "{flag}={value} accepted");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("invalid value '{value}' for '{flag}")) && err.contains(want),
            "{flag}={value}: {err}"
        );
    }
    let out = wasmprov(&[
        "run",
        "--plugins-dir",
        &plugins,
        "--retry-interval-start",
        "1m",
        "--retry-interval-max",
        "30s",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("--retry-interval-max (30s) is less than --retry-interval-start (1m)")
            && err.contains("raise --retry-interval-max"),
        "{err}"
    );
}

#[test]
fn run_refuses_a_kube_api_timeout_that_would_fail_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().display().to_string();
    for (value, want) in [
        ("100ms", "100ms is too short"),
        ("100ms", "use at least 1s (default 30s), or 0s for no limit"),
        (
            "soon",
            "\"soon\" is not a duration such as 30s, or 0s for none",
        ),
    ] {
        let out = wasmprov(&[
            "run",
            "--plugins-dir",
            &plugins,
            "--kube-api-timeout",
            value,
        ]);
        assert!(!out.status.success(), "{value} accepted");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("invalid value '{value}' for '--kube-api-timeout"))
                && err.contains(want),
            "{value}: {err}"
        );
    }
}

#[test]
fn run_refuses_an_adoption_of_volumes_it_would_never_own() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().display().to_string();
    let out = wasmprov(&[
        "run",
        "--plugins-dir",
        &plugins,
        "--adopt-volumes",
        "example.com/hostpath",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is not NAME=CLASS, e.g. example.com/hostpath=hostpath"),
        "{}",
        stderr(&out)
    );
    let out = wasmprov(&[
        "run",
        "--plugins-dir",
        &plugins,
        "--adopt-volumes",
        "example.com/hostpath=hostpath",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("example.com/hostpath is not a name this host serves")
            && err.contains("add it to --extra-provisioner-names"),
        "{err}"
    );
}

#[test]
fn run_in_node_mode_refuses_a_missing_node_name_or_policy() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().display().to_string();
    let policy = write(dir.path(), "policy.yaml", "plugins: {}\n");
    for (args, want) in [
        (
            vec!["--node-name", "", "--policy", &policy],
            "--node-name is empty: set it to the node this host runs on",
        ),
        (
            vec!["--node-name", "n1"],
            "--node-name without --policy: a node host serves the plugins the sandbox policy gives to nodes (runsOn: node)",
        ),
    ] {
        let mut all = vec!["run", "--plugins-dir", &plugins];
        all.extend(args);
        let out = wasmprov(&all);
        assert!(!out.status.success(), "{all:?} accepted");
        let err = stderr(&out);
        assert!(err.contains(want), "{all:?}: {err}");
    }
}
