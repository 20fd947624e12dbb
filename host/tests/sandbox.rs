//! A broken or hostile plugin fails only its own call, with a clear message;
//! the same host then serves a healthy call. Each case uses the `misbehave`
//! test guest (tests/guests/misbehave), which really does the bad thing.

mod support;

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use support::*;
use wasmprov::policy::{DirMode, Preopen};
use wasmprov::policy::{PolicySet, SandboxPolicy};
use wasmprov::provisioner::{with_class_parameters, DeleteState, ProvisionError, ProvisionState};
use wasmprov::runtime::FILESYSTEM_TYPES;
use wasmprov::wasm_provisioner::WasmProvisioner;

/// Generous upper bound for any single test step, so a broken protection
/// fails the test instead of hanging it.
const STEP: Duration = Duration::from_secs(60);

fn policy() -> SandboxPolicy {
    SandboxPolicy {
        memory_limit: 32 << 20,
        timeout: Duration::from_millis(500),
        ..SandboxPolicy::default()
    }
}

async fn misbehave(policy: SandboxPolicy) -> WasmProvisioner {
    load(
        "misbehave",
        &guest_path("misbehave"),
        policy,
        misbehave_output(),
    )
    .await
}

async fn provision_with(
    p: &WasmProvisioner,
    params: &[(&str, &str)],
) -> Result<k8s_openapi::api::core::v1::PersistentVolume, ProvisionError> {
    let opts = options("pvc-test", class("test", params), claim("data", "1Mi"));
    tokio::time::timeout(STEP, p.provision(&opts))
        .await
        .expect("the host must end the call by itself")
}

async fn provision(
    p: &WasmProvisioner,
    behavior: &str,
) -> Result<k8s_openapi::api::core::v1::PersistentVolume, ProvisionError> {
    provision_with(p, &[("behavior", behavior)]).await
}

/// The host is still healthy: the same plugin serves a good call.
async fn assert_still_serves(p: &WasmProvisioner) {
    let pv = provision(p, "ok")
        .await
        .expect("a healthy call after the bad one");
    assert_eq!(pv.metadata.name.as_deref(), Some("pvc-test"));
}

fn annotation(pv: &k8s_openapi::api::core::v1::PersistentVolume, key: &str) -> Option<String> {
    pv.metadata.annotations.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn a_plugin_that_loops_forever_is_stopped_at_its_time_budget() {
    let p = misbehave(policy()).await;
    let started = Instant::now();
    let err = provision(&p, "loop")
        .await
        .expect_err("an endless loop cannot succeed");
    assert!(err.message.contains("ran out of time"), "{}", err.message);
    assert!(
        err.message.contains("500ms"),
        "names the budget: {}",
        err.message
    );
    // Timed out work may have started something in the backend: retried.
    assert_eq!(err.state, ProvisionState::InBackground);
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert_still_serves(&p).await;
}

#[tokio::test]
async fn a_plugin_that_exhausts_memory_fails_with_a_memory_limit_error() {
    let p = misbehave(policy()).await;
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
    assert_still_serves(&p).await;
}

#[tokio::test]
async fn a_plugin_that_panics_reports_its_panic_message() {
    let p = misbehave(policy()).await;
    let err = provision(&p, "trap").await.expect_err("a panic");
    assert!(err.message.contains("crashed"), "{}", err.message);
    assert!(
        err.message.contains("misbehave: deliberate panic"),
        "the panic message from stderr: {}",
        err.message
    );
    assert_eq!(err.state, ProvisionState::Failed);
    assert_still_serves(&p).await;
}

/// No raw control character of a plugin's text reaches a person: each is
/// escaped, in a failed answer and in a crash's panic message and stderr.
#[tokio::test]
async fn control_characters_in_plugin_text_are_escaped() {
    let p = misbehave(policy()).await;
    for (behavior, says) in [
        ("control-text", "failed \\u{1b}[2J\\r\\nlevel=INFO"),
        ("control-trap", "stderr \\u{1b}[2J\\r\\nlevel=INFO"),
    ] {
        let err = provision(&p, behavior).await.expect_err(behavior);
        assert!(
            !err.message
                .chars()
                .any(|c| c.is_control() || c == '\u{202e}'),
            "{behavior}: {:?}",
            err.message
        );
        assert!(err.message.contains(says), "{behavior}: {}", err.message);
        assert!(err.message.contains("\\u{0}\\u{202e}"), "{}", err.message);
    }
    assert_still_serves(&p).await;
}

#[tokio::test]
async fn invalid_volumes_from_a_plugin_are_rejected_by_validation() {
    let p = misbehave(policy()).await;
    let cases = [
        ("invalid-source", "not valid JSON"),
        ("no-source", "names no volume type"),
        ("two-sources", "2 volume types"),
        ("zero-capacity", "capacity-bytes is 0"),
        ("relative-path", "must be an absolute path"),
        ("reserved-annotation", "reserved for the host"),
    ];
    for (behavior, reason) in cases {
        let err = provision(&p, behavior).await.expect_err(behavior);
        assert_eq!(err.state, ProvisionState::Failed, "{behavior}");
        assert!(
            err.message.contains("returned an invalid volume") && err.message.contains(reason),
            "{behavior}: {}",
            err.message
        );
    }
    assert_still_serves(&p).await;
}

#[tokio::test]
async fn a_plugin_cannot_read_host_files_it_was_not_given() {
    let p = misbehave(policy()).await;
    let err = provision(&p, "read-passwd")
        .await
        .expect_err("/etc/passwd must be unreadable");
    assert!(err.message.contains("read /etc/passwd"), "{}", err.message);
    assert_still_serves(&p).await;
}

#[tokio::test]
async fn a_plugin_cannot_write_outside_its_preopened_directory() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("granted");
    std::fs::create_dir(&dir).unwrap();
    let mut pol = policy();
    pol.preopens.push(Preopen {
        host: dir.clone(),
        guest: "/data".to_owned(),
        mode: DirMode::ReadWrite,
    });
    let p = misbehave(pol).await;
    let err = provision(&p, "write-outside")
        .await
        .expect_err("escape must fail");
    assert_eq!(err.state, ProvisionState::Failed, "{}", err.message);
    assert!(!root.path().join("escape.txt").exists());
    // The same plugin can write inside the directory it was granted.
    provision(&p, "write-inside")
        .await
        .expect("write inside the preopen");
    assert_eq!(
        std::fs::read_to_string(dir.join("inside.txt")).unwrap(),
        "hello"
    );
}

#[tokio::test]
async fn a_read_only_preopen_can_be_read_but_not_written() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("inside.txt"), "from the host").unwrap();
    let mut pol = policy();
    pol.preopens.push(Preopen {
        host: dir.path().to_owned(),
        guest: "/data".to_owned(),
        mode: DirMode::ReadOnly,
    });
    let p = misbehave(pol).await;
    let pv = provision(&p, "read-inside")
        .await
        .expect("reading is allowed");
    assert_eq!(
        annotation(&pv, "misbehave.test/content").as_deref(),
        Some("from the host")
    );
    provision(&p, "write-inside")
        .await
        .expect_err("writing is not");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("inside.txt")).unwrap(),
        "from the host"
    );
}

/// Accepts connections on a loopback port in the background; reports whether
/// anything connected.
fn listener() -> (String, std::sync::mpsc::Receiver<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    l.set_nonblocking(false).unwrap();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let _ = tx.send(());
            let mut buf = [0u8; 16];
            let _ = s.read(&mut buf);
        }
    });
    (addr, rx)
}

#[tokio::test]
async fn a_plugin_has_no_network_unless_the_policy_grants_it() {
    let (addr, connected) = listener();
    let p = misbehave(policy()).await;
    let err = provision_with(&p, &[("behavior", "socket"), ("addr", &addr)])
        .await
        .expect_err("no network by default");
    assert!(err.message.contains(&addr), "{}", err.message);
    assert!(
        connected.recv_timeout(Duration::from_millis(200)).is_err(),
        "nothing connected"
    );

    // Granting exactly that address lets the same plugin through: the denial
    // above is the policy's doing, not a broken guest.
    let mut granted = policy();
    granted.allowed_outbound.push(addr.parse().unwrap());
    let p = misbehave(granted).await;
    let pv = provision_with(&p, &[("behavior", "socket"), ("addr", &addr)])
        .await
        .expect("the granted address is reachable");
    assert!(annotation(&pv, "misbehave.test/escaped").is_some());
    connected
        .recv_timeout(STEP)
        .expect("the listener saw the connection");
}

#[tokio::test]
async fn a_plugin_sees_no_environment_variables_or_arguments() {
    std::env::set_var("WASMPROV_TEST_SECRET", "hunter2");
    let p = misbehave(policy()).await;
    let pv = provision(&p, "env").await.expect("env behaviour succeeds");
    let env = annotation(&pv, "misbehave.test/env").unwrap_or_default();
    assert!(
        env.is_empty(),
        "the plugin saw environment variables: {env}"
    );
    assert_eq!(
        annotation(&pv, "misbehave.test/args").unwrap_or_default(),
        ""
    );
}

#[tokio::test]
async fn a_plugin_that_floods_its_log_is_cut_off_and_the_call_still_completes() {
    let p = misbehave(SandboxPolicy {
        timeout: Duration::from_secs(10),
        ..policy()
    })
    .await;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let sink = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || LineSink(sink.clone()))
        .with_ansi(false)
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    let pv = provision(&p, "log-flood")
        .await
        .expect("log-flood completes");
    drop(guard);
    assert_eq!(pv.metadata.name.as_deref(), Some("pvc-test"));
    let text = String::from_utf8_lossy(&lines.lock().unwrap()).into_owned();
    let plugin_lines = text.lines().filter(|l| l.contains("plugin:")).count();
    assert!(
        plugin_lines <= wasmprov::runtime::MAX_LOG_LINES_PER_CALL as usize + 1,
        "{plugin_lines} plugin lines logged"
    );
    assert!(
        text.contains("exceeded its log budget"),
        "the drop is reported"
    );
    assert!(
        text.len() < 2 << 20,
        "{} bytes of host log for one call",
        text.len()
    );
    assert_still_serves(&p).await;
}

struct LineSink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LineSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn calls_beyond_max_concurrent_calls_wait_their_turn() {
    let p = misbehave(SandboxPolicy {
        max_concurrent_calls: 1,
        timeout: Duration::from_secs(10),
        ..policy()
    })
    .await;
    let params = [("behavior", "spin"), ("spin-ms", "150")];
    let started = Instant::now();
    let (a, b, c) = tokio::join!(
        provision_with(&p, &params),
        provision_with(&p, &params),
        provision_with(&p, &params)
    );
    a.unwrap();
    b.unwrap();
    c.unwrap();
    // One at a time: three calls cannot finish in less than three spins.
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn every_provision_error_variant_maps_to_its_provisioning_state() {
    let p = misbehave(policy()).await;
    let cases = [
        ("fail", ProvisionState::Failed),
        ("in-background", ProvisionState::InBackground),
        ("no-change", ProvisionState::NoChange),
        ("reschedule", ProvisionState::Reschedule),
        ("invalid-argument", ProvisionState::InvalidArgument),
    ];
    for (behavior, state) in cases {
        let err = provision(&p, behavior).await.expect_err(behavior);
        assert_eq!(err.state, state, "{behavior}: {}", err.message);
        assert!(
            err.message.starts_with("plugin misbehave: "),
            "{}",
            err.message
        );
    }
}

#[tokio::test]
async fn delete_errors_map_and_a_crashing_delete_fails_only_its_call() {
    let p = misbehave(policy()).await;
    let pv = provision(&p, "ok").await.unwrap();
    let with_behavior = |b: &str| {
        let mut pv = pv.clone();
        let ann = pv.metadata.annotations.get_or_insert_with(Default::default);
        ann.insert(
            "wasmprov.io/parameters".into(),
            format!(r#"{{"behavior":"{b}"}}"#),
        );
        pv
    };
    p.delete(&with_behavior("ok")).await.expect("ok deletes");
    let failed = p.delete(&with_behavior("fail")).await.unwrap_err();
    assert_eq!(failed.state, DeleteState::Failed);
    let ignored = p.delete(&with_behavior("ignored")).await.unwrap_err();
    assert_eq!(ignored.state, DeleteState::Ignored);
    let crashed = tokio::time::timeout(STEP, p.delete(&with_behavior("trap")))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        crashed.message.contains("deliberate panic in delete"),
        "{}",
        crashed.message
    );
    let looped = tokio::time::timeout(STEP, p.delete(&with_behavior("loop")))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        looped.message.contains("ran out of time"),
        "{}",
        looped.message
    );
    p.delete(&with_behavior("ok"))
        .await
        .expect("still serves deletes");
}

#[tokio::test]
async fn network_filesystem_mode_still_serves_its_preopens() {
    let dir = tempfile::tempdir().unwrap();
    let mut pol = policy();
    pol.network_filesystem = true;
    pol.preopens.push(Preopen {
        host: dir.path().to_owned(),
        guest: "/data".to_owned(),
        mode: DirMode::ReadWrite,
    });
    let p = misbehave(pol).await;
    provision(&p, "write-inside")
        .await
        .expect("write through offloaded calls");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("inside.txt")).unwrap(),
        "hello"
    );
}

/// The misbehave guest under the policy file's entry for a plugin that
/// preopens `preopen` at /data and may return hostPath volumes in `granted`
/// (and /tmp/ok, where its healthy volumes are): whether it may make links
/// is the policy's decision.
async fn misbehave_under_policy(preopen: &Path, granted: &Path) -> WasmProvisioner {
    let yaml = format!(
        "plugins:\n  misbehave:\n    timeout: 5s\n    \
         preopens: [{{host: '{}', guest: /data, mode: read-write}}]\n    \
         output: {{sources: [hostPath], paths: ['{}', /tmp/ok], annotationPrefixes: [misbehave.test/]}}\n",
        preopen.display(),
        granted.display()
    );
    let set = PolicySet::parse(&yaml, Path::new("policy.yaml")).unwrap();
    load(
        "misbehave",
        &guest_path("misbehave"),
        set.sandbox_for("misbehave"),
        set.output_for("misbehave"),
    )
    .await
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// A guest's own I/O error, not a crash: the call failed the ordinary way.
fn assert_refused_link(message: &str, what: &str) {
    assert!(
        message.contains(what) && message.contains("Operation not permitted"),
        "wants {what:?} refused: {message}"
    );
    assert!(!message.contains("crashed"), "{message}");
}

#[tokio::test]
async fn an_accepted_directory_cannot_be_swapped_for_a_link_on_a_later_call() {
    let volumes = tempfile::tempdir().unwrap();
    let root = volumes.path().display().to_string();
    let p = misbehave_under_policy(volumes.path(), volumes.path()).await;
    // The guest imports an older wasi:filesystem than wasmtime-wasi defines;
    // the linker's semver matching gives it the wrapped functions all the same.
    let bytes = std::fs::read(guest_path("misbehave")).unwrap();
    let imports = runtime()
        .compile("misbehave", &bytes)
        .unwrap()
        .surface
        .imports;
    let fs = imports
        .iter()
        .find(|i| i.starts_with("wasi:filesystem/types@0.2."))
        .expect("the guest imports wasi:filesystem/types");
    assert_ne!(fs, FILESYSTEM_TYPES, "this test no longer shows that");
    let params = [
        ("behavior", "swap-link"),
        ("dir", "/data"),
        ("host-dir", root.as_str()),
    ];
    // Checked and accepted: a real directory in the granted path.
    let pv = provision_with(&p, &params).await.expect("a real directory");
    let path = volumes.path().join("pvc-test");
    assert_eq!(
        pv.spec.as_ref().unwrap().host_path.as_ref().unwrap().path,
        path.display().to_string()
    );
    assert!(path.is_dir());

    // A second provision of the same claim swaps it for a link to `/`.
    let err = provision_with(&p, &params)
        .await
        .expect_err("the swap must fail");
    assert_eq!(err.state, ProvisionState::Failed, "{}", err.message);
    assert_refused_link(&err.message, "symlink /data/pvc-test");
    assert!(!is_symlink(&path), "{} became a link", path.display());

    // So does its delete (a reclaim, or the host's clean-up).
    std::fs::create_dir(&path).unwrap();
    // As the lifecycle gives it: completed from its class.
    let pv = with_class_parameters(&pv, Some(&class("test", &params)));
    let err = tokio::time::timeout(STEP, p.delete(&pv))
        .await
        .unwrap()
        .expect_err("the swap must fail");
    assert_eq!(err.state, DeleteState::Failed, "{}", err.message);
    assert_refused_link(&err.message, "symlink /data/pvc-test");
    assert!(!is_symlink(&path), "{} became a link", path.display());
    assert_still_serves(&p).await;
}

#[tokio::test]
async fn a_hard_link_is_refused_too() {
    let volumes = tempfile::tempdir().unwrap();
    let p = misbehave_under_policy(volumes.path(), volumes.path()).await;
    let err = provision_with(&p, &[("behavior", "hard-link"), ("dir", "/data")])
        .await
        .expect_err("a hard link must fail");
    assert_refused_link(&err.message, "hard link /data/pvc-test.hard");
    assert!(volumes.path().join("pvc-test.target").exists());
    assert!(!volumes.path().join("pvc-test.hard").exists());
}

#[tokio::test]
async fn a_symlink_the_plugin_did_not_make_cannot_be_moved_into_place_but_files_can() {
    let volumes = tempfile::tempdir().unwrap();
    let p = misbehave_under_policy(volumes.path(), volumes.path()).await;
    // A link that got there another way (here: the host made it).
    let found = volumes.path().join("found");
    std::os::unix::fs::symlink("/", &found).unwrap();
    let moved = volumes.path().join("pvc-test");
    let move_from =
        |from: &'static str| [("behavior", "move-link"), ("dir", "/data"), ("from", from)];
    let err = provision_with(&p, &move_from("/data/found"))
        .await
        .expect_err("moving a link must fail");
    assert_refused_link(&err.message, "rename /data/found -> /data/pvc-test");
    assert!(!is_symlink(&moved) && is_symlink(&found));
    // A plain file still moves.
    std::fs::write(volumes.path().join("file"), "target").unwrap();
    let pv = provision_with(&p, &move_from("/data/file"))
        .await
        .expect("renaming a file is fine");
    assert!(annotation(&pv, "misbehave.test/escaped").is_some());
    assert_eq!(std::fs::read_to_string(&moved).unwrap(), "target");
}

#[tokio::test]
async fn a_plugin_whose_preopens_are_apart_from_its_volumes_may_still_make_links() {
    let scratch = tempfile::tempdir().unwrap();
    let volumes = tempfile::tempdir().unwrap();
    let p = misbehave_under_policy(scratch.path(), volumes.path()).await;
    let root = volumes.path().display().to_string();
    // The volume it reports is a real directory where it is granted; what
    // it does in its own scratch preopen is its business.
    std::fs::create_dir(volumes.path().join("pvc-test")).unwrap();
    let params = [
        ("behavior", "swap-link"),
        ("dir", "/data"),
        ("host-dir", root.as_str()),
    ];
    provision_with(&p, &params).await.expect("a real directory");
    let pv = provision_with(&p, &params)
        .await
        .expect("links are allowed here");
    assert!(annotation(&pv, "misbehave.test/escaped").is_some());
    assert!(is_symlink(&scratch.path().join("pvc-test")));
    provision_with(&p, &[("behavior", "hard-link"), ("dir", "/data")])
        .await
        .expect("hard links are allowed here");
    assert!(scratch.path().join("pvc-test.hard").exists());
}

/// A guest-to-host call copies at most 4 MiB out of the guest (wasmtime
/// would allow 128 MiB, uncounted by `memoryLimit`); honest calls stay far
/// below it, even writing a large file.
#[tokio::test]
async fn one_call_into_the_host_cannot_make_it_copy_more_than_a_few_mebibytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut pol = policy();
    pol.memory_limit = 128 << 20;
    pol.timeout = Duration::from_secs(20);
    pol.preopens = vec![Preopen {
        host: dir.path().to_owned(),
        guest: "/data".into(),
        mode: DirMode::ReadWrite,
    }];
    let p = misbehave(pol).await;
    let err = provision_with(&p, &[("behavior", "log-huge")])
        .await
        .expect_err("a 32 MiB log call is refused");
    assert_eq!(err.state, ProvisionState::Failed, "{}", err.message);
    assert_still_serves(&p).await;
    // 2 MiB in one log call is within the budget (and cut to 4 KiB).
    provision_with(
        &p,
        &[("behavior", "log-huge"), ("message-bytes", "2097152")],
    )
    .await
    .expect("a 2 MiB log call passes");
    // A 48 MiB file in one write of the guest: WASI streams chunk it.
    provision_with(&p, &[("behavior", "write-inside"), ("bytes", "50331648")])
        .await
        .expect("a large write is not one host call");
    assert_eq!(
        std::fs::metadata(dir.path().join("inside.txt"))
            .unwrap()
            .len(),
        48 << 20
    );
}
