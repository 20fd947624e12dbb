//! A plugin and a pod together must not reach the node. The pod's part
//! (a link, a FIFO, a device node or a socket inside its own volume) is
//! made here directly on the filesystem, as a pod's writes land there; the
//! plugin's part is the `misbehave` guest really renaming and opening.
//! What must hold whatever they do: every saved volume path still resolves
//! to itself and is a directory, no special file is opened or handed out,
//! and no call blocks a host thread.

mod support;

use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{HostPathVolumeSource, PersistentVolume, PersistentVolumeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use support::*;
use wasmprov::policy::{DirMode, PolicySet, Preopen, SandboxPolicy};
use wasmprov::provisioner::{with_class_parameters, ProvisionError, ProvisionOptions};
use wasmprov::wasm_provisioner::{WasmProvisioner, REFUSED_BY_POLICY};

const STEP: Duration = Duration::from_secs(60);
/// Volume names as the lifecycle makes them: `pvc-` and the claim's UID.
const A: &str = "pvc-0000000a-0000-4000-8000-00000000000a";
const B: &str = "pvc-0000000b-0000-4000-8000-00000000000b";
const C: &str = "pvc-0000000c-0000-4000-8000-00000000000c";

/// The misbehave guest with `root` preopened read-write at /data and
/// hostPath and local volumes granted there, guarded as the policy file
/// guards it (its preopen is where its volumes are).
async fn plugin(root: &Path) -> WasmProvisioner {
    let yaml = format!(
        "plugins: {{misbehave: {{preopens: [{{host: {r}, guest: /data, mode: read-write}}], output: {{sources: [hostPath, local], paths: [{r}]}}}}}}",
        r = root.display()
    );
    let set = PolicySet::parse(&yaml, Path::new("policy.yaml")).unwrap();
    let sandbox = set.sandbox_for("misbehave");
    assert!(sandbox.guard_volumes, "its preopen holds its volumes");
    load(
        "misbehave",
        &rust_guest_path("misbehave"),
        sandbox,
        set.output_for("misbehave"),
    )
    .await
}

/// A fresh granted directory, by its canonical path (as a grant must be).
fn grant_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

fn behaving(pv: &str, params: &[(&str, &str)]) -> ProvisionOptions {
    let mut all = vec![("dir", "/data")];
    all.extend_from_slice(params);
    options(pv, class("guarded", &all), claim("data", "1Mi"))
}

async fn provision(
    p: &WasmProvisioner,
    opts: &ProvisionOptions,
) -> Result<PersistentVolume, ProvisionError> {
    tokio::time::timeout(STEP, p.provision(opts))
        .await
        .expect("the host must end the call by itself")
}

/// `path` is still a real directory, and resolves to itself.
fn assert_real_directory(path: &Path) {
    let meta =
        std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(meta.is_dir(), "{} is no longer a directory", path.display());
    assert_eq!(
        std::fs::canonicalize(path).unwrap(),
        path,
        "{} resolves elsewhere",
        path.display()
    );
}

/// Volume B, accepted in a nested layout (`<root>/s/<B>`), and pod A's
/// volume `<root>/<A>` holding the pod's link `<B> -> /`: the setting of the
/// three-step directory swap.
async fn swap_setting(p: &WasmProvisioner, root: &Path) -> PathBuf {
    let saved = root.join("s").join(B);
    let source = serde_json::json!({"hostPath": {"path": saved}}).to_string();
    let mkdir = format!("/data/s/{B}");
    let pv = provision(
        p,
        &behaving(
            B,
            &[
                ("behavior", "return"),
                ("source", &source),
                ("mkdir", &mkdir),
            ],
        ),
    )
    .await
    .expect("an honest nested volume is accepted");
    assert_eq!(
        pv.spec.unwrap().host_path.unwrap().path,
        saved.display().to_string()
    );
    std::fs::create_dir(root.join(A)).unwrap();
    std::os::unix::fs::symlink("/", root.join(A).join(B)).unwrap();
    saved
}

/// The swap's two moves: the layout directory away, pod A's volume into
/// its place.
fn swap_renames() -> String {
    format!("/data/s>/data/t;/data/{A}>/data/s")
}

fn assert_swap_refused(message: &str) {
    for pair in ["/data/s>/data/t", &format!("/data/{A}>/data/s")] {
        assert!(
            message.contains(&format!("{pair}: Operation not permitted")),
            "{pair} must be refused: {message}"
        );
    }
}

#[tokio::test]
async fn a_directory_swap_with_a_pods_link_cannot_redirect_a_volume_through_provision() {
    let (_dir, root) = grant_dir();
    let p = plugin(&root).await;
    let saved = swap_setting(&p, &root).await;
    let err = provision(
        &p,
        &behaving(C, &[("behavior", "rename"), ("renames", &swap_renames())]),
    )
    .await
    .unwrap_err();
    assert_swap_refused(&err.message);
    assert_real_directory(&saved);
}

#[tokio::test]
async fn a_directory_swap_with_a_pods_link_cannot_redirect_a_volume_through_delete() {
    let (_dir, root) = grant_dir();
    let p = plugin(&root).await;
    let saved = swap_setting(&p, &root).await;
    // Any volume's delete (here A's own), with the plugin's class.
    let opts = behaving(A, &[("behavior", "rename"), ("renames", &swap_renames())]);
    let volume = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(A.to_owned()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            host_path: Some(HostPathVolumeSource {
                path: root.join(A).display().to_string(),
                type_: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = p
        .delete(&with_class_parameters(&volume, Some(&opts.class)))
        .await
        .unwrap_err();
    assert_swap_refused(&err.message);
    assert_real_directory(&saved);
}

#[tokio::test]
async fn a_directory_swap_with_a_pods_link_cannot_redirect_a_volume_through_the_cleanup_delete() {
    let (_dir, root) = grant_dir();
    let p = plugin(&root).await;
    let saved = swap_setting(&p, &root).await;
    // A volume the policy refuses (an annotation nobody granted): the host
    // has the plugin delete it again, and that delete tries the swap.
    let source = serde_json::json!({"hostPath": {"path": root.join(C)}}).to_string();
    let mkdir = format!("/data/{C}");
    let renames = swap_renames();
    let err = provision(
        &p,
        &behaving(
            C,
            &[
                ("behavior", "return"),
                ("source", &source),
                ("mkdir", &mkdir),
                ("annotations", "evil.example.com/x=1"),
                ("delete-renames", &renames),
            ],
        ),
    )
    .await
    .unwrap_err();
    assert!(err.message.contains(REFUSED_BY_POLICY), "{}", err.message);
    assert_real_directory(&saved);
    assert_real_directory(&root.join("s"));
    assert!(
        root.join(A).join(B).is_symlink(),
        "pod A's link stayed in its volume"
    );
}

#[tokio::test]
async fn a_plugin_may_archive_a_volume_and_move_files_but_not_hand_one_volume_to_another() {
    let (_dir, root) = grant_dir();
    let p = plugin(&root).await;
    std::fs::create_dir(root.join(A)).unwrap();
    std::fs::write(root.join(A).join("data"), "a's data").unwrap();
    std::fs::write(root.join("quota.tmp"), "1Gi").unwrap();
    let renames = format!(
        "/data/{A}>/data/{C};/data/{A}>/data/archived-{A};/data/quota.tmp>/data/quota;/data/archived-{A}/data>/data/{B}"
    );
    let err = provision(
        &p,
        &behaving(C, &[("behavior", "rename"), ("renames", &renames)]),
    )
    .await
    .unwrap_err();
    let m = &err.message;
    assert!(
        m.contains(&format!("/data/{A}>/data/{C}: Operation not permitted")),
        "another claim's live directory cannot become a new claim's: {m}"
    );
    assert!(
        m.contains(&format!("/data/{A}>/data/archived-{A}: ok")),
        "{m}"
    );
    assert!(m.contains("/data/quota.tmp>/data/quota: ok"), "{m}");
    assert!(
        m.contains(&format!("/data/archived-{A}/data>/data/{B}: ok")),
        "a regular file moves: {m}"
    );
    assert_real_directory(&root.join(format!("archived-{A}")));
}

/// A pod's special files: a FIFO, a socket and (as root, where a pod with
/// CAP_MKNOD could) a device node, in pod A's volume.
struct SpecialFiles {
    fifo: PathBuf,
    names: Vec<&'static str>,
    _socket: std::os::unix::net::UnixListener,
}

fn special_files(volume: &Path) -> SpecialFiles {
    std::fs::create_dir(volume).unwrap();
    let fifo = volume.join("fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let socket = std::os::unix::net::UnixListener::bind(volume.join("socket")).unwrap();
    let mut names = vec!["fifo", "socket"];
    // /dev/null's numbers: harmless if it were opened, and still a device.
    let device =
        std::ffi::CString::new(volume.join("device").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string; mknod only reads it.
    let made = unsafe { libc::mknod(device.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    if made == 0 {
        names.push("device");
    } else {
        eprintln!(
            "not root: no device node made ({})",
            std::io::Error::last_os_error()
        );
    }
    SpecialFiles {
        fifo,
        names,
        _socket: socket,
    }
}

/// Opens the FIFO's other end after a while, so that a plugin blocked in
/// `open(2)` returns and the test fails instead of hanging; says whether
/// it had to.
fn unblock_later(fifo: PathBuf) -> Arc<AtomicBool> {
    let fired = Arc::new(AtomicBool::new(false));
    let flag = fired.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(20));
        flag.store(true, Ordering::SeqCst);
        for _ in 0..10 {
            let _ = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo);
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    fired
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_files_a_pod_made_are_never_opened() {
    let (_dir, root) = grant_dir();
    let p = plugin(&root).await;
    let files = special_files(&root.join(A));
    let fired = unblock_later(files.fifo.clone());
    for name in &files.names {
        for write in [false, true] {
            let path = format!("/data/{A}/{name}");
            let mut params = vec![("behavior", "open"), ("path", path.as_str())];
            if write {
                params.push(("write", "yes"));
            }
            let err = provision(&p, &behaving(C, &params)).await.unwrap_err();
            assert!(
                !fired.load(Ordering::SeqCst),
                "opening {name} blocked the host until the FIFO was opened elsewhere"
            );
            assert!(
                !err.message.contains(": read "),
                "{name} (write {write}) must not be opened: {}",
                err.message
            );
        }
    }
    // Through a link the pod made, too.
    std::os::unix::fs::symlink("fifo", root.join(A).join("innocent")).unwrap();
    let path = format!("/data/{A}/innocent");
    let err = provision(&p, &behaving(C, &[("behavior", "open"), ("path", &path)]))
        .await
        .unwrap_err();
    assert!(
        err.message.contains("Operation not permitted"),
        "{}",
        err.message
    );
    // Regular files still open.
    std::fs::write(root.join(A).join("file"), "text").unwrap();
    let path = format!("/data/{A}/file");
    let err = provision(&p, &behaving(C, &[("behavior", "open"), ("path", &path)]))
        .await
        .unwrap_err();
    assert!(err.message.ends_with("read \"text\""), "{}", err.message);
}

#[tokio::test]
async fn special_files_a_pod_made_are_never_moved_nor_a_volume() {
    let (_dir, root) = grant_dir();
    let p = plugin(&root).await;
    let files = special_files(&root.join(A));
    for name in &files.names {
        let renames = format!("/data/{A}/{name}>/data/{B}");
        let err = provision(
            &p,
            &behaving(C, &[("behavior", "rename"), ("renames", &renames)]),
        )
        .await
        .unwrap_err();
        assert!(
            err.message
                .contains(&format!("{renames}: Operation not permitted")),
            "{}",
            err.message
        );
        assert!(!root.join(B).exists());
        // Returned where it is, as either node-local kind: refused.
        for kind in ["hostPath", "local"] {
            let path = root.join(A).join(name);
            let source = serde_json::json!({kind: {"path": path}}).to_string();
            let err = provision(
                &p,
                &behaving(A, &[("behavior", "return"), ("source", &source)]),
            )
            .await
            .unwrap_err();
            assert!(err.message.contains(REFUSED_BY_POLICY), "{}", err.message);
            let is = std::fs::symlink_metadata(&path).unwrap().file_type();
            let want = if is.is_fifo() {
                "is a FIFO"
            } else if is.is_socket() {
                "is a socket"
            } else {
                "is a character device"
            };
            assert!(err.message.contains(want), "{kind} {name}: {}", err.message);
        }
    }
}

/// Not guarded (its preopen is apart from every volume path), a plugin
/// keeps every move and link: the guard costs nothing elsewhere.
#[tokio::test]
async fn a_plugin_apart_from_the_volumes_moves_what_it_likes() {
    let scratch = tempfile::tempdir().unwrap();
    let sandbox = SandboxPolicy {
        preopens: vec![Preopen {
            host: scratch.path().to_owned(),
            guest: "/data".into(),
            mode: DirMode::ReadWrite,
        }],
        guard_volumes: false,
        ..SandboxPolicy::default()
    };
    let p = load(
        "misbehave",
        &rust_guest_path("misbehave"),
        sandbox,
        misbehave_output(),
    )
    .await;
    std::fs::create_dir(scratch.path().join("s")).unwrap();
    let err = provision(
        &p,
        &behaving(C, &[("behavior", "rename"), ("renames", "/data/s>/data/t")]),
    )
    .await
    .unwrap_err();
    assert!(
        err.message.contains("/data/s>/data/t: ok"),
        "{}",
        err.message
    );
}

/// A link found where volumes live (a volume swapped for a link, say) when
/// the policy loads makes that grant refuse new volumes, reported in the
/// log, a metric and `/readyz`'s notes; the policy still loads, so a
/// restarted host starts, and every other grant keeps serving.
#[tokio::test]
async fn a_link_where_volumes_live_refuses_that_grant_only_and_never_the_host() {
    let (_dir, root) = grant_dir();
    let (bad, good) = (root.join("bad"), root.join("good"));
    std::fs::create_dir_all(bad.join(A)).unwrap();
    std::fs::create_dir_all(&good).unwrap();
    std::os::unix::fs::symlink("/", bad.join(B)).unwrap();
    let entry = |dir: &Path| {
        format!(
            "{{preopens: [{{host: {d}, guest: /data, mode: read-write}}], output: {{sources: [hostPath], paths: [{d}]}}}}",
            d = dir.display()
        )
    };
    let yaml = format!(
        "plugins:\n  bad: {}\n  good: {}\n",
        entry(&bad),
        entry(&good)
    );
    let set = PolicySet::parse(&yaml, Path::new("policy.yaml")).expect("the policy loads");
    let unusable: Vec<_> = set
        .unusable_grants()
        .map(|(p, d, _)| (p.to_owned(), d.to_owned()))
        .collect();
    assert_eq!(unusable, vec![("bad".to_owned(), bad.clone())]);

    let metrics = Arc::new(wasmprov::metrics::Metrics::default());
    let runtime = Arc::new(wasmprov::runtime::Runtime::new(Default::default()).unwrap());
    let registry =
        wasmprov::registry::PluginRegistry::new(runtime, set.clone(), metrics.clone(), "test");
    let notes = registry.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains(&format!(
            "plugin bad makes no new volume in {}",
            bad.display()
        )) && notes[0].contains(&format!("{B} is a symbolic link (to /)")),
        "{notes:?}"
    );
    assert!(
        metrics
            .encode()
            .contains("wasmprov_unusable_grants{plugin=\"bad\"} 1"),
        "{}",
        metrics.encode()
    );

    for (name, dir, refused) in [("bad", &bad, true), ("good", &good, false)] {
        let p = load(
            name,
            &rust_guest_path("misbehave"),
            set.sandbox_for(name),
            set.output_for(name),
        )
        .await;
        let source = serde_json::json!({"hostPath": {"path": dir.join(C)}}).to_string();
        let mkdir = format!("/data/{C}");
        let result = provision(
            &p,
            &behaving(
                C,
                &[
                    ("behavior", "return"),
                    ("source", &source),
                    ("mkdir", &mkdir),
                ],
            ),
        )
        .await;
        if refused {
            let err = result.unwrap_err();
            assert!(
                err.message
                    .contains("no new volume is made in the granted directory"),
                "{}",
                err.message
            );
        } else {
            result.expect("the other grant serves");
        }
    }
}

/// A plugin that could write in the compile cache could plant compiled code
/// the host would load as its own: no read-write preopen may overlap it.
#[tokio::test]
async fn no_plugin_may_write_where_compiled_code_is_cached() {
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    let beside = root.path().join("volumes");
    std::fs::create_dir_all(&beside).unwrap();
    let runtime = wasmprov::runtime::Runtime::new(wasmprov::runtime::RuntimeConfig {
        cache_dir: Some(cache.clone()),
        ..Default::default()
    })
    .unwrap();
    let wasm = std::fs::read(rust_guest_path("misbehave")).unwrap();
    let with = |host: &Path, mode| SandboxPolicy {
        preopens: vec![Preopen {
            host: host.to_owned(),
            guest: "/data".into(),
            mode,
        }],
        ..SandboxPolicy::default()
    };
    for host in [root.path(), cache.as_path()] {
        let err = runtime
            .load("misbehave", &wasm, with(host, DirMode::ReadWrite))
            .await
            .expect_err("refused");
        assert!(
            err.to_string().contains("overlaps the compile cache"),
            "{}: {err}",
            host.display()
        );
    }
    runtime
        .load("misbehave", &wasm, with(root.path(), DirMode::ReadOnly))
        .await
        .expect("reading is harmless");
    runtime
        .load("misbehave", &wasm, with(&beside, DirMode::ReadWrite))
        .await
        .expect("a directory beside the cache");
}
