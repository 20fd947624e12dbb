//! The sandbox's guarantees hold for plugins built with the standard Go
//! toolchain, whose runtime brings its own scheduler, goroutines and GC: a
//! fresh instance per call, the memory limit and the time budget. Uses the
//! `go-misbehave` test guest (tests/guests/go-misbehave) and the `hostpath-go`
//! plugin.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolume;
use support::*;
use wasmprov::policy::{DirMode, PolicySet, Preopen, SandboxPolicy};
use wasmprov::provisioner::{ProvisionError, ProvisionState};
use wasmprov::wasm_provisioner::WasmProvisioner;

const STEP: Duration = Duration::from_secs(60);

async fn guest(policy: SandboxPolicy) -> WasmProvisioner {
    ok_preopen();
    let output = PolicySet::parse(
        "plugins: {go-misbehave: {output: {sources: [hostPath], paths: [/tmp/ok], \
         annotationPrefixes: [go-misbehave.test/]}}}",
        Path::new("test"),
    )
    .unwrap()
    .output_for("go-misbehave");
    load("go-misbehave", &guest_path("go-misbehave"), policy, output).await
}

async fn provision(
    p: &WasmProvisioner,
    behavior: &str,
) -> Result<PersistentVolume, ProvisionError> {
    let opts = options(
        "pvc-test",
        class("test", &[("behavior", behavior)]),
        claim("data", "1Mi"),
    );
    tokio::time::timeout(STEP, p.provision(&opts))
        .await
        .expect("the host must end the call by itself")
}

fn annotation(pv: &PersistentVolume, key: &str) -> String {
    pv.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
        .unwrap_or_else(|| panic!("no annotation {key}: {pv:?}"))
}

#[tokio::test]
async fn every_call_gets_a_fresh_go_runtime() {
    let p = guest(SandboxPolicy::default()).await;
    for round in 0..20 {
        // A goroutine left running and garbage left behind by the previous
        // call must not be seen by the next one.
        let behavior = ["goroutine", "garbage", "ok"][round % 3];
        provision(&p, behavior)
            .await
            .unwrap_or_else(|e| panic!("{behavior}: {}", e.message));
        let pv = provision(&p, "count").await.expect("count");
        assert_eq!(
            annotation(&pv, "go-misbehave.test/calls"),
            "1",
            "round {round}: the instance had served another call before"
        );
        let heap: u64 = annotation(&pv, "go-misbehave.test/heap-bytes")
            .parse()
            .unwrap();
        assert!(heap < 4 << 20, "a fresh runtime's heap is small: {heap}");
    }
}

#[tokio::test]
async fn the_go_gc_keeps_a_call_under_the_default_memory_limit() {
    // 256 MiB allocated in 1 MiB pieces, each dropped at once, under the
    // default 64 MiB limit.
    let policy = SandboxPolicy::default();
    assert_eq!(policy.memory_limit, 64 << 20);
    let p = guest(policy).await;
    provision(&p, "garbage")
        .await
        .unwrap_or_else(|e| panic!("{}", e.message));
}

#[tokio::test]
async fn a_go_plugin_that_exhausts_memory_fails_with_a_memory_limit_error() {
    let p = guest(SandboxPolicy {
        memory_limit: 32 << 20,
        ..SandboxPolicy::default()
    })
    .await;
    let err = provision(&p, "oom")
        .await
        .expect_err("unbounded allocation");
    assert!(err.message.contains("ran out of memory"), "{}", err.message);
    assert!(
        err.message.contains(&(32u64 << 20).to_string()),
        "names the limit: {}",
        err.message
    );
    assert_eq!(err.state, ProvisionState::Failed);
    provision(&p, "ok").await.expect("the next call is served");
}

#[tokio::test]
async fn a_go_plugin_that_loops_forever_is_stopped_at_its_time_budget() {
    let p = guest(SandboxPolicy {
        timeout: Duration::from_millis(500),
        ..SandboxPolicy::default()
    })
    .await;
    let started = Instant::now();
    let err = provision(&p, "loop").await.expect_err("an endless loop");
    assert!(err.message.contains("ran out of time"), "{}", err.message);
    assert!(started.elapsed() < Duration::from_secs(10));
    provision(&p, "ok").await.expect("the next call is served");
}

#[tokio::test]
async fn a_go_panic_is_a_crash_of_its_call_only() {
    let p = guest(SandboxPolicy::default()).await;
    let err = provision(&p, "panic").await.expect_err("a panic");
    assert!(
        err.message.contains("go-misbehave: deliberate panic"),
        "the panic message reaches the error: {}",
        err.message
    );
    provision(&p, "ok").await.expect("the next call is served");
}

#[tokio::test]
async fn hostpath_go_serves_calls_in_a_row_within_the_default_limits() {
    let root = tempfile::tempdir().unwrap();
    let host_root = root.path().display().to_string();
    let policy = SandboxPolicy {
        preopens: vec![Preopen {
            host: root.path().to_owned(),
            guest: "/volumes".to_owned(),
            mode: DirMode::ReadWrite,
        }],
        ..SandboxPolicy::default()
    };
    let output = PolicySet::parse(
        &format!(
            "plugins: {{hostpath-go: {{output: {{sources: [hostPath], paths: [{host_root}]}}}}}}"
        ),
        Path::new("test"),
    )
    .unwrap()
    .output_for("hostpath-go");
    let p = load("hostpath-go", &plugin_path("hostpath-go"), policy, output).await;
    for i in 0..10 {
        let opts = options(
            &format!("pvc-{i}"),
            class("hostpath-go", &[("hostRoot", &host_root)]),
            claim("data", "1Gi"),
        );
        let pv = p.provision(&opts).await.expect("provision");
        let path = pv.spec.unwrap().host_path.unwrap().path;
        assert_eq!(path, format!("{host_root}/pvc-{i}"));
        assert!(root.path().join(format!("pvc-{i}")).is_dir());
    }
}

/// The Go plugin's pure logic (`plugins/hostpath-go/hostpath/plan_test.go`,
/// the cases of the Rust plugin's `plan.rs`) runs natively with `go test`
/// in the tree `plugins/build.sh` assembled, so CI runs it too.
#[test]
fn hostpath_go_unit_tests_pass() {
    let _ = plugin_path("hostpath-go");
    let go = ["go", "/usr/local/go/bin/go"]
        .into_iter()
        .find(|go| {
            std::process::Command::new(go)
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("Go is needed for the Go plugins (plugins/build.sh found it)");
    let out = std::process::Command::new(go)
        .args(["test", "./hostpath/"])
        .current_dir(workspace_root().join("target/wasm-build/go/hostpath-go/src"))
        .env("GOWORK", "off")
        .env("GOTOOLCHAIN", "local")
        .output()
        .expect("run go test");
    assert!(
        out.status.success(),
        "go test ./hostpath/ failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
