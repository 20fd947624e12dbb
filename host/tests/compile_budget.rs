//! A component that costs gigabytes to compile is refused without taking
//! the host down: it compiles in a child process under a memory limit, and
//! the previous version keeps serving.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use support::*;
use wasmprov::metrics::Metrics;
use wasmprov::policy::PolicySet;
use wasmprov::registry::{Origin, PluginRegistry, Reload};
use wasmprov::runtime::compile::CompileBudget;
use wasmprov::runtime::{LoadError, Runtime, RuntimeConfig};

fn budgeted(memory_limit: u64) -> Runtime {
    Runtime::new(RuntimeConfig {
        compile_budget: Some(CompileBudget {
            compiler: PathBuf::from(env!("CARGO_BIN_EXE_wasmprov")),
            memory_limit,
            timeout: Duration::from_secs(120),
        }),
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// Peak resident memory of this process so far, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb << 10
}

#[test]
fn a_compile_bomb_is_stopped_in_its_child_and_the_host_stays_small() {
    let bomb = compile_bomb(600, 600);
    assert!(bomb.len() < 8 << 10, "{} bytes", bomb.len());
    let runtime = budgeted(256 << 20);
    let err = runtime.compile("bomb", &bomb).err().expect("over budget");
    assert!(matches!(err, LoadError::CompileBudget { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("plugin bomb: compiling it needed more than the 256 MiB compile budget (--compile-memory-limit)"),
        "{message}"
    );
    assert!(
        peak_rss() < 512 << 20,
        "the host process itself grew to {} MiB",
        peak_rss() >> 20
    );
    // A real plugin compiles in the child and loads here.
    let hostpath = std::fs::read(rust_plugin_path("hostpath")).unwrap();
    runtime
        .compile("hostpath", &hostpath)
        .expect("hostpath compiles within budget");
    // An invalid component says why, as an in-process compile would.
    let err = runtime
        .compile(
            "garbage",
            &wat::parse_str("(component (core module (func (result i32))))").unwrap(),
        )
        .err()
        .unwrap();
    assert!(matches!(err, LoadError::Invalid { .. }), "{err}");
    assert!(err.to_string().contains("type mismatch"), "{err}");
}

#[test]
fn a_component_declaring_huge_numbers_of_locals_is_refused_before_compiling() {
    let locals = " (local i64)".repeat(20_000);
    let wasm = wat::parse_str(format!("(component (core module (func{locals})))")).unwrap();
    let err = budgeted(256 << 20).compile("locals", &wasm).err().unwrap();
    assert!(matches!(err, LoadError::Shape { .. }), "{err}");
    assert!(err.to_string().contains("declares 20000 locals"), "{err}");
}

/// Delivered as a new version (from a ConfigMap or a directory alike), the
/// bomb is rejected and the version before it keeps serving.
#[tokio::test]
async fn the_previous_version_keeps_serving_when_a_new_one_is_over_budget() {
    let registry = PluginRegistry::new(
        Arc::new(budgeted(256 << 20)),
        PolicySet::default(),
        Arc::new(Metrics::default()),
        "test",
    );
    let origin = Origin::new("test", "hostpath.wasm");
    let good = std::fs::read(rust_plugin_path("hostpath")).unwrap();
    let Reload::Loaded { digest } = registry.apply("hostpath", good, &origin).await else {
        panic!("the good version loads");
    };
    match registry
        .apply("hostpath", compile_bomb(600, 600), &origin)
        .await
    {
        Reload::Rejected { reason } => assert!(reason.contains("compile budget"), "{reason}"),
        other => panic!("the bomb must be rejected: {other:?}"),
    }
    assert_eq!(registry.serving(), vec![("hostpath".to_owned(), digest)]);
}
