//! What a plugin returns becomes a PersistentVolume that pods mount: the
//! operator's output policy decides what it may be. Each case has the
//! `misbehave` guest really return the hostile volume (and record the
//! storage it "made"), and checks that the host refuses it, says what to
//! grant, and has the plugin delete what it made.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;
use support::*;
use wasmprov::policy::{DirMode, PolicySet, Preopen, SandboxPolicy};
use wasmprov::provisioner::{ProvisionError, ProvisionState};
use wasmprov::wasm_provisioner::{WasmProvisioner, MAX_MESSAGE_BYTES, REFUSED_BY_POLICY};

const STEP: Duration = Duration::from_secs(60);

/// The misbehave guest with `dir` preopened at /data, under the policy entry
/// `entry` (policy-file YAML, e.g. `output: {...}`; empty: nothing granted).
async fn plugin(dir: &Path, entry: &str) -> WasmProvisioner {
    plugin_allowing_links(dir, entry, false).await
}

/// [`plugin`], with links in its preopen allowed or not.
async fn plugin_allowing_links(dir: &Path, entry: &str, allow_links: bool) -> WasmProvisioner {
    let yaml = format!("plugins: {{misbehave: {{{entry}}}}}");
    let output = PolicySet::parse(&yaml, Path::new("policy.yaml"))
        .unwrap_or_else(|e| panic!("{yaml}: {e}"))
        .output_for("misbehave");
    let sandbox = SandboxPolicy {
        preopens: vec![Preopen {
            host: dir.to_owned(),
            guest: "/data".into(),
            mode: DirMode::ReadWrite,
        }],
        allow_links,
        ..SandboxPolicy::default()
    };
    load("misbehave", &guest_path("misbehave"), sandbox, output).await
}

/// Has the plugin return a volume as `params` say (behavior `return`).
async fn returning(
    p: &WasmProvisioner,
    params: &[(&str, &str)],
) -> Result<PersistentVolume, ProvisionError> {
    let mut all = vec![("behavior", "return"), ("dir", "/data")];
    all.extend_from_slice(params);
    let opts = options("pvc-out", class("out", &all), claim("data", "1Mi"));
    tokio::time::timeout(STEP, p.provision(&opts))
        .await
        .expect("the host must end the call by itself")
}

/// The storage the plugin recorded making for pvc-out.
fn made(dir: &Path) -> PathBuf {
    dir.join("pvc-out.made")
}

/// Refused, with `want` in the message; the storage was deleted again.
fn assert_refused(result: Result<PersistentVolume, ProvisionError>, dir: &Path, want: &str) {
    let err = result.expect_err("the policy must refuse this volume");
    assert!(err.message.contains(REFUSED_BY_POLICY), "{}", err.message);
    assert!(
        err.message.contains(want),
        "wants {want:?}: {}",
        err.message
    );
    assert_eq!(err.state, ProvisionState::Failed, "{}", err.message);
    assert!(
        err.message
            .contains("the storage it made was deleted again"),
        "{}",
        err.message
    );
    assert!(!made(dir).exists(), "the cleanup delete removed it");
}

/// The entry that grants hostPath volumes in `root`.
fn hostpath_in(root: &str) -> String {
    format!("output: {{sources: [hostPath], paths: [{root}]}}")
}

fn json(value: serde_json::Value) -> String {
    value.to_string()
}

#[tokio::test]
async fn host_paths_stay_in_the_granted_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let p = plugin(dir.path(), &hostpath_in(&root)).await;

    // Inside: saved as returned.
    let inside = json(serde_json::json!({"hostPath": {"path": format!("{root}/pvc-out")}}));
    let pv = returning(&p, &[("source", &inside)]).await.unwrap();
    assert_eq!(
        pv.spec.unwrap().host_path.unwrap().path,
        format!("{root}/pvc-out")
    );
    assert!(made(dir.path()).exists());
    std::fs::remove_file(made(dir.path())).unwrap();

    for (path, want) in [
        (
            "/".to_owned(),
            "hostPath.path \"/\" is not in a granted directory",
        ),
        ("/etc".to_owned(), "\"/etc\" is not in a granted directory"),
        (format!("{root}-other/x"), "is not in a granted directory"),
    ] {
        let source = json(serde_json::json!({"hostPath": {"path": path}}));
        assert_refused(
            returning(&p, &[("source", &source)]).await,
            dir.path(),
            want,
        );
    }
    // `..` is not even a valid volume: rejected, and cleaned up the same way.
    let up = json(serde_json::json!({"hostPath": {"path": format!("{root}/../../etc")}}));
    let err = returning(&p, &[("source", &up)]).await.unwrap_err();
    assert!(
        err.message.contains("must not contain \"..\""),
        "{}",
        err.message
    );
    assert!(err
        .message
        .contains("the storage it made was deleted again"));
    assert!(!made(dir.path()).exists());
    // Another kind pointing at the node's root is refused by kind first.
    let local = json(serde_json::json!({"local": {"path": "/"}}));
    assert_refused(
        returning(&p, &[("source", &local)]).await,
        dir.path(),
        "it returned a local source, and the policy grants hostPath (grant: output.sources: [local])",
    );
}

#[tokio::test]
async fn a_link_in_the_granted_directory_cannot_lead_out_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    // A policy file refuses links here (next test); allowed, the guest
    // stands in for a link that got there another way.
    let p = plugin_allowing_links(dir.path(), &hostpath_in(&root), true).await;
    let opts = options(
        "pvc-link",
        class(
            "link",
            &[
                ("behavior", "link-out"),
                ("dir", "/data"),
                ("host-dir", &root),
            ],
        ),
        claim("data", "1Mi"),
    );
    let err = p.provision(&opts).await.expect_err("a path through a link");
    // The guest really made the link, inside the preopen, pointing out.
    let link = dir.path().join("pvc-link");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(
        err.message.contains(&format!(
            "goes through the symbolic link {}",
            link.display()
        )),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn the_clean_up_delete_of_a_refused_volume_cannot_swap_in_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    // As an operator writes it: the preopen is the granted directory.
    let yaml = format!(
        "plugins:\n  misbehave:\n    preopens: [{{host: '{root}', guest: /data, mode: read-write}}]\n    \
         {}\n",
        hostpath_in(&root)
    );
    let set = PolicySet::parse(&yaml, Path::new("policy.yaml")).unwrap();
    let p = load(
        "misbehave",
        &guest_path("misbehave"),
        set.sandbox_for("misbehave"),
        set.output_for("misbehave"),
    )
    .await;
    // A real directory in the granted path, but an annotation that is not
    // granted: refused, and the host has the plugin delete it, when the
    // plugin swaps it for a link to `/` instead.
    let opts = options(
        "pvc-swap",
        class(
            "swap",
            &[
                ("behavior", "swap-link"),
                ("dir", "/data"),
                ("host-dir", &root),
                ("annotations", "evil.example.com/x=1"),
            ],
        ),
        claim("data", "1Mi"),
    );
    let err = tokio::time::timeout(STEP, p.provision(&opts))
        .await
        .expect("the host must end the call by itself")
        .expect_err("the annotation is not granted");
    assert!(err.message.contains(REFUSED_BY_POLICY), "{}", err.message);
    assert!(
        err.message.contains(
            "deleting the storage it made failed, and is retried: symlink /data/pvc-swap: Operation not permitted"
        ),
        "{}",
        err.message
    );
    assert_eq!(err.state, ProvisionState::InBackground, "{}", err.message);
    let path = dir.path().join("pvc-swap");
    assert!(
        std::fs::symlink_metadata(&path).is_err(),
        "{} must be gone, not a link",
        path.display()
    );
}

#[tokio::test]
async fn nfs_servers_csi_drivers_and_secret_namespaces_need_grants() {
    let dir = tempfile::tempdir().unwrap();
    let p = plugin(
        dir.path(),
        "output: {sources: [nfs, csi], nfsExports: ['10.0.0.5:/exports'], csiDrivers: [disk.example.com], secretNamespaces: [storage]}",
    )
    .await;
    let granted = [
        json(serde_json::json!({"nfs": {"server": "10.0.0.5", "path": "/exports/a"}})),
        json(
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "v",
            "nodePublishSecretRef": {"name": "creds", "namespace": "storage"}}}),
        ),
    ];
    for source in granted {
        returning(&p, &[("source", &source)])
            .await
            .unwrap_or_else(|e| panic!("{source}: {}", e.message));
        std::fs::remove_file(made(dir.path())).unwrap();
    }
    let refused = [
        (
            json(serde_json::json!({"nfs": {"server": "10.9.9.9", "path": "/exports/a"}})),
            "nfs 10.9.9.9:/exports/a is not in a granted export (10.0.0.5:/exports)",
        ),
        (
            json(serde_json::json!({"csi": {"driver": "evil.example.com", "volumeHandle": "v"}})),
            "csi.driver \"evil.example.com\" is not one of the granted drivers",
        ),
        (
            json(
                serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "v",
                "nodePublishSecretRef": {"name": "admin-token", "namespace": "kube-system"}}}),
            ),
            "csi.nodePublishSecretRef refers to a Secret in namespace \"kube-system\"",
        ),
    ];
    for (source, want) in refused {
        assert_refused(
            returning(&p, &[("source", &source)]).await,
            dir.path(),
            want,
        );
    }
}

#[tokio::test]
async fn mount_options_labels_and_annotations_need_grants() {
    let dir = tempfile::tempdir().unwrap();
    let p = plugin(
        dir.path(),
        "output: {sources: [hostPath], paths: [/tmp/ok], mountOptions: [noatime], labelPrefixes: [team.example.com/], annotationPrefixes: [misbehave.test/]}",
    )
    .await;
    let pv = returning(
        &p,
        &[
            ("mount-options", "noatime"),
            ("labels", "team.example.com/name=blue"),
            ("annotations", "misbehave.test/note=hi"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(pv.spec.unwrap().mount_options.unwrap(), ["noatime"]);
    std::fs::remove_file(made(dir.path())).unwrap();

    for (params, want) in [
        (
            ("mount-options", "noatime;exec;suid;dev"),
            "mount option \"exec\" is not granted (noatime)",
        ),
        (
            ("mount-options", "noatime,exec"),
            "mount option \"noatime,exec\" is not granted",
        ),
        (
            ("labels", "team=blue"),
            "label \"team\" is not under a granted prefix",
        ),
        (
            ("annotations", "pv.kubernetes.io/bound-by-controller=yes"),
            "annotation \"pv.kubernetes.io/bound-by-controller\" is under kubernetes.io",
        ),
        (
            ("labels", "node.k8s.io/x=1"),
            "label \"node.k8s.io/x\" is under k8s.io",
        ),
    ] {
        assert_refused(returning(&p, &[params]).await, dir.path(), want);
    }
}

#[tokio::test]
async fn oversized_answers_are_refused_and_messages_cut() {
    let dir = tempfile::tempdir().unwrap();
    let p = plugin(
        dir.path(),
        "output: {sources: [hostPath], paths: [/tmp/ok], labelPrefixes: [misbehave.test/]}",
    )
    .await;
    // 100,000 labels: refused before any is copied into a PersistentVolume.
    let err = returning(&p, &[("label-count", "100000")])
        .await
        .expect_err("too many labels");
    assert!(
        err.message
            .contains("it returned 100000 labels; at most 64 are allowed"),
        "{}",
        err.message
    );
    assert!(!made(dir.path()).exists(), "cleaned up");

    // A 30 MiB error message reaches the claim's events and logs cut.
    let opts = options(
        "pvc-huge",
        class("huge", &[("behavior", "huge-message")]),
        claim("data", "1Mi"),
    );
    let err = p.provision(&opts).await.expect_err("huge-message fails");
    assert_eq!(err.state, ProvisionState::Failed);
    assert!(
        err.message.len() < MAX_MESSAGE_BYTES + 100,
        "{} bytes",
        err.message.len()
    );
    assert!(
        err.message.contains(&format!(
            "[{} bytes truncated]",
            (30 << 20) - MAX_MESSAGE_BYTES
        )),
        "{}",
        &err.message[err.message.len() - 60..]
    );
}

#[tokio::test]
async fn a_refused_volume_whose_storage_cannot_be_deleted_stays_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let p = plugin(dir.path(), "output: {sources: [hostPath], paths: [/srv]}").await;
    let err = returning(&p, &[("delete-fails", "true")])
        .await
        .expect_err("/tmp/ok is not granted");
    // In-background: the lifecycle keeps asking (and cleaning up) instead
    // of forgetting storage that exists.
    assert_eq!(err.state, ProvisionState::InBackground, "{}", err.message);
    assert!(
        err.message.contains(
            "deleting the storage it made failed, and is retried: misbehave: cannot delete"
        ),
        "{}",
        err.message
    );
    assert!(made(dir.path()).exists());
}

#[tokio::test]
async fn a_plugin_without_an_output_entry_may_return_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = plugin(dir.path(), "").await;
    assert_refused(
        returning(&p, &[]).await,
        dir.path(),
        "the policy grants none (grant: output.sources: [hostPath])",
    );
}

#[tokio::test]
async fn secret_parameters_reach_provision_but_are_never_written_on_the_volume() {
    let dir = tempfile::tempdir().unwrap();
    let p = plugin(
        dir.path(),
        &format!("secretParameters: [password], output: {MISBEHAVE_OUTPUT}"),
    )
    .await;
    let opts = options(
        "pvc-secret",
        class(
            "secret",
            &[
                ("behavior", "echo-parameters"),
                ("server", "10.0.0.5"),
                ("password", "hunter2"),
            ],
        ),
        claim("data", "1Mi"),
    );
    let pv = p.provision(&opts).await.unwrap();
    let annotations = pv.metadata.annotations.clone().unwrap();
    assert_eq!(
        annotations["misbehave.test/parameters"], "behavior,password,server",
        "provision gets every parameter"
    );
    let recorded = &annotations["wasmprov.io/parameters"];
    assert!(!recorded.contains("hunter2"), "{recorded}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(recorded).unwrap(),
        serde_json::json!({"behavior": "echo-parameters", "server": "10.0.0.5"})
    );
    assert!(
        !serde_json::to_string(&pv).unwrap().contains("hunter2"),
        "nowhere on the volume"
    );
    let err = p.delete(&pv).await.unwrap_err();
    assert!(
        err.message.ends_with("parameters: behavior,server"),
        "{}",
        err.message
    );

    // Without the grant the parameter is recorded, as before.
    let p = plugin(dir.path(), &format!("output: {MISBEHAVE_OUTPUT}")).await;
    let pv = p.provision(&opts).await.unwrap();
    assert!(pv.metadata.annotations.unwrap()["wasmprov.io/parameters"].contains("hunter2"));
}
