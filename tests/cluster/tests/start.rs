//! What a person sees when the control plane cannot start: the component,
//! its log and what to do, never a hang; and a port taken meanwhile is
//! retried on another.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use test_cluster::{Cluster, Error, Options};

const COMPONENTS: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
];

/// A bin directory of links to the real binaries, with `fake` replaced by
/// a shell script.
fn bin_dir_with(fake: &str, script: &str) -> (tempfile::TempDir, PathBuf) {
    let real = test_cluster::binaries().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    for c in COMPONENTS.iter().filter(|c| **c != fake) {
        std::os::unix::fs::symlink(real.join(c), dir.path().join(c)).unwrap();
    }
    if !script.is_empty() {
        let path = dir.path().join(fake);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (dir, real)
}

fn options(bin: &Path) -> Options {
    Options {
        bin_dir: Some(bin.to_owned()),
        ready_timeout: Duration::from_secs(5),
        ..Options::default()
    }
}

#[test]
fn a_missing_binary_is_named_with_its_path() {
    let (bin, _) = bin_dir_with("kube-scheduler", "");
    let e = Cluster::start(options(bin.path()))
        .err()
        .expect("no scheduler");
    let message = e.to_string();
    assert!(
        matches!(
            e,
            Error::Spawn {
                component: "kube-scheduler",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        message.contains(&bin.path().join("kube-scheduler").display().to_string()),
        "{message}"
    );
}

#[test]
fn a_component_that_exits_is_reported_with_its_log() {
    let (bin, _) = bin_dir_with(
        "kube-apiserver",
        "echo 'Error: unknown flag: --secure-port' >&2; exit 3",
    );
    let e = Cluster::start(options(bin.path()))
        .err()
        .expect("no API server");
    let message = e.to_string();
    match &e {
        Error::Exited {
            component,
            log,
            tail,
            ..
        } => {
            assert_eq!(*component, "kube-apiserver");
            assert!(log.ends_with("logs/kube-apiserver.log"), "{log:?}");
            assert!(tail.contains("unknown flag: --secure-port"), "{tail}");
        }
        other => panic!("expected Exited, got {other:?}"),
    }
    assert!(message.contains("exit status: 3"), "{message}");
}

#[test]
fn a_component_that_never_becomes_ready_fails_in_bounded_time_saying_what_was_awaited() {
    let (bin, _) = bin_dir_with("kube-apiserver", "echo 'starting'; exec sleep 600");
    let t0 = Instant::now();
    let e = Cluster::start(options(bin.path()))
        .err()
        .expect("the API server never answers");
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "gave up after {:?}",
        t0.elapsed()
    );
    match &e {
        Error::NotReady {
            component, what, ..
        } => {
            assert_eq!(*component, "kube-apiserver");
            assert_eq!(what, "GET /readyz");
        }
        other => panic!("expected NotReady, got {other:?}"),
    }
    assert!(e.to_string().contains("not ready after 5s"), "{e}");
}

#[test]
fn a_port_taken_meanwhile_is_retried_on_another() {
    let marker = tempfile::tempdir().unwrap();
    let taken = marker.path().join("taken");
    // The first etcd finds its port taken (as when another process binds
    // it between our check and etcd's start); the second is the real one.
    let real = test_cluster::binaries().unwrap_or_else(|e| panic!("{e}"));
    let (bin, _) = bin_dir_with(
        "etcd",
        &format!(
            "if [ ! -e {taken} ]; then touch {taken}; echo '{{\"level\":\"fatal\",\"msg\":\"listen tcp 127.0.0.1:2379: bind: address already in use\"}}' >&2; exit 1; fi\nexec {etcd} \"$@\"",
            taken = taken.display(),
            etcd = real.join("etcd").display()
        ),
    );
    let cluster = Cluster::start(Options {
        ready_timeout: Duration::from_secs(120),
        ..options(bin.path())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(taken.exists(), "the first try met the taken port");
    let version = cluster
        .kubectl()
        .args(["get", "--raw", "/version"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&version.stdout).contains("\"gitVersion\": \"v1.37.2\""),
        "{}",
        String::from_utf8_lossy(&version.stdout)
    );
}

#[test]
fn no_process_outlives_a_stopped_cluster() {
    let cluster = Cluster::start(Options::default()).unwrap_or_else(|e| panic!("{e}"));
    let pids = cluster.pids();
    assert_eq!(pids.len(), 4, "{pids:?}");
    let dir = cluster.dir().to_owned();
    drop(cluster);
    for (name, pid) in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "{name} (pid {pid}) still runs"
        );
    }
    assert!(!dir.exists(), "{} was removed", dir.display());
}
