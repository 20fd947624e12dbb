//! `wasmprov dev` as a new user runs it: the built binary and its console.

mod support;

use std::process::Command;

use support::*;

fn wasmprov() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wasmprov"));
    command
        .env(
            "WASMPROV_CACHE_DIR",
            workspace_root().join("target/test-compile-cache"),
        )
        .env("WASMPROV_LOG", "warn");
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The README's main command: the whole system on the simulated cluster.
#[test]
fn dev_binds_the_sample_claims_on_the_simulated_cluster() {
    plugin_path("hostpath"); // built by the test harness like everything else
    let data = tempfile::tempdir().unwrap();
    let out = wasmprov()
        .args(["dev", "--exit-when-bound", "--data-dir"])
        .arg(data.path())
        .output()
        .expect("run wasmprov");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for want in [
        "simulated API server at http://127.0.0.1:",
        "kubectl --server http://127.0.0.1:",
        "claim default/data: Bound to pvc-",
        "claim default/cache: Bound to pvc-",
        "all sample claims are Bound",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
    let volumes = std::fs::read_dir(data.path().join("hostpath"))
        .unwrap()
        .count();
    assert_eq!(volumes, 2, "one directory per sample claim");
}
