//! What a plugin returns becomes a PersistentVolume that pods mount: the
//! operator's output policy decides what it may be. Each case has the
//! `misbehave` guest really return the hostile volume (and record the
//! storage it "made"), and checks that the host refuses it, says what to
//! grant, and has the plugin delete what it made.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use support::*;
use wasmprov::policy::{DirMode, PolicySet, Preopen, SandboxPolicy};
use wasmprov::provisioner::{
    with_class_parameters, ProvisionError, ProvisionState, ResizeOptions, ResizeState,
};
use wasmprov::wasm_provisioner::{WasmProvisioner, MAX_MESSAGE_BYTES, REFUSED_BY_POLICY};

const STEP: Duration = Duration::from_secs(60);

/// The misbehave guest with `dir` preopened at /data, under the policy entry
/// `entry` (policy-file YAML, e.g. `output: {...}`; empty: nothing granted).
async fn plugin(dir: &Path, entry: &str) -> WasmProvisioner {
    plugin_guarded(dir, entry, true).await
}

/// [`plugin`], with its preopen guarded (links and moves refused) or not.
async fn plugin_guarded(dir: &Path, entry: &str, guard_volumes: bool) -> WasmProvisioner {
    let yaml = format!("plugins: {{misbehave: {{{entry}}}}}");
    ok_preopen();
    let output = PolicySet::parse(&yaml, Path::new("policy.yaml"))
        .unwrap_or_else(|e| panic!("{yaml}: {e}"))
        .output_for("misbehave");
    let sandbox = SandboxPolicy {
        preopens: vec![Preopen {
            host: dir.to_owned(),
            guest: "/data".into(),
            mode: DirMode::ReadWrite,
        }],
        guard_volumes,
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

    // Inside, made by the plugin: saved as returned.
    let inside = json(serde_json::json!({"hostPath": {"path": format!("{root}/pvc-out")}}));
    let pv = returning(&p, &[("source", &inside), ("mkdir", "/data/pvc-out")])
        .await
        .unwrap();
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
        (
            format!("{root}/pvc-out\u{1b}[2J"),
            "holds the character U+001B, which shows as something else or nothing",
        ),
        (
            format!("{root}/pvc-out\u{200b}"),
            "holds the character U+200B",
        ),
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
    let p = plugin_guarded(dir.path(), &hostpath_in(&root), false).await;
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
        json(serde_json::json!({"nfs": {"server": "10.0.0.5", "path": "/exports/pvc-out"}})),
        json(
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "vol-pvc-out",
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
            json(serde_json::json!({"nfs": {"server": "10.9.9.9", "path": "/exports/pvc-out"}})),
            "nfs 10.9.9.9:/exports/pvc-out is not in a granted export (10.0.0.5:/exports)",
        ),
        (
            // Read back as mount options by some tools, shown as two lines.
            json(
                serde_json::json!({"nfs": {"server": "10.0.0.5", "path": "/exports/pvc-out\n,exec"}}),
            ),
            "nfs.path \"/exports/pvc-out\\n,exec\" holds the character U+000A",
        ),
        (
            json(serde_json::json!({"csi": {"driver": "evil.example.com", "volumeHandle": "v"}})),
            "csi.driver \"evil.example.com\" is not one of the granted drivers",
        ),
        (
            json(
                serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "vol-pvc-out",
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
            "mount option \"noatime,exec\" is not one mount option: it holds ','",
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
    // 10,000 labels: refused before any is copied into a PersistentVolume.
    let err = returning(&p, &[("label-count", "10000")])
        .await
        .expect_err("too many labels");
    assert!(
        err.message
            .contains("it returned 10000 labels; at most 64 are allowed"),
        "{}",
        err.message
    );
    assert!(!made(dir.path()).exists(), "cleaned up");
    // 100,000: more than the host copies out of a plugin in one call.
    let err = returning(&p, &[("label-count", "100000")])
        .await
        .expect_err("far too many labels");
    assert!(
        err.message
            .contains("it passed or returned more than 4 MiB at once"),
        "{}",
        err.message
    );

    // A 3 MiB error message reaches the claim's events and logs cut.
    let opts = options(
        "pvc-huge",
        class(
            "huge",
            &[("behavior", "huge-message"), ("message-bytes", "3145728")],
        ),
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
            (3 << 20) - MAX_MESSAGE_BYTES
        )),
        "{}",
        &err.message[err.message.len() - 60..]
    );
    // 30 MiB fails the call as too much, its text never copied.
    let opts = options(
        "pvc-huge",
        class("huge", &[("behavior", "huge-message")]),
        claim("data", "1Mi"),
    );
    let err = p.provision(&opts).await.expect_err("huge-message fails");
    assert!(
        err.message.contains("more than 4 MiB at once") && err.message.len() < 1024,
        "{}",
        err.message
    );
}

#[tokio::test]
async fn a_refused_volume_whose_storage_cannot_be_deleted_stays_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let p = plugin(
        dir.path(),
        &format!(
            "output: {{sources: [hostPath], paths: [{}]}}",
            elsewhere.path().display()
        ),
    )
    .await;
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

/// The class of the parameter tests: one plain parameter, one secret. Each
/// test names its own volume: the guest's default delete removes its
/// directory, which a test running beside it would still be checking.
fn echo_options(pv: &str) -> wasmprov::provisioner::ProvisionOptions {
    options(
        pv,
        class(
            "secret",
            &[
                ("behavior", "echo-parameters"),
                ("server", "10.0.0.5"),
                ("password", "hunter2"),
            ],
        ),
        claim("data", "1Mi"),
    )
}

/// The parameters recorded on `pv`.
fn recorded(pv: &PersistentVolume) -> serde_json::Value {
    let annotations = pv.metadata.annotations.as_ref().unwrap();
    serde_json::from_str(&annotations["wasmprov.io/parameters"]).unwrap()
}

#[tokio::test]
async fn secret_parameters_reach_provision_but_are_never_written_on_the_volume() {
    let dir = tempfile::tempdir().unwrap();
    let p = plugin(
        dir.path(),
        &format!("secretParameters: [password], output: {MISBEHAVE_OUTPUT}"),
    )
    .await;
    let opts = echo_options("pvc-secret");
    let pv = p.provision(&opts).await.unwrap();
    let annotations = pv.metadata.annotations.clone().unwrap();
    assert_eq!(
        annotations["misbehave.test/parameters"], "behavior,password,server",
        "provision gets every parameter"
    );
    // Nothing of the class is written unless granted (recordParameters).
    assert_eq!(recorded(&pv), serde_json::json!({}));
    let json = serde_json::to_string(&pv).unwrap();
    assert!(
        !json.contains("hunter2") && !json.contains("10.0.0.5"),
        "nowhere on the volume: {json}"
    );
    // The lifecycle completes the volume from its class for delete; the
    // secret still never reaches delete.
    let err = p
        .delete(&with_class_parameters(&pv, Some(&opts.class)))
        .await
        .unwrap_err();
    assert!(
        err.message.ends_with("parameters: behavior,server"),
        "{}",
        err.message
    );
    // Without its class, delete gets what the volume records: nothing, not
    // even `behavior`, so misbehave deletes as its default does (success).
    p.delete(&pv).await.unwrap();
}

#[tokio::test]
async fn record_parameters_writes_only_the_granted_keys_on_the_volume() {
    let dir = tempfile::tempdir().unwrap();
    let opts = echo_options("pvc-recorded");
    for (entry, want) in [
        (
            "recordParameters: [server]",
            serde_json::json!({"server": "10.0.0.5"}),
        ),
        (
            "recordParameters: [\"*\"], secretParameters: [password]",
            serde_json::json!({"behavior": "echo-parameters", "server": "10.0.0.5"}),
        ),
        // All, the secret too: what the operator asked for.
        (
            "recordParameters: [\"*\"]",
            serde_json::json!({"behavior": "echo-parameters", "server": "10.0.0.5", "password": "hunter2"}),
        ),
    ] {
        let p = plugin(dir.path(), &format!("{entry}, output: {MISBEHAVE_OUTPUT}")).await;
        let pv = p.provision(&opts).await.unwrap();
        assert_eq!(recorded(&pv), want, "{entry}");
        assert_eq!(
            pv.metadata.annotations.as_ref().unwrap()["misbehave.test/parameters"],
            "behavior,password,server",
            "{entry}: provision gets every parameter"
        );
    }
}

/// A volume named like the host names them (`pvc-<uid>`), for the claim-bound
/// checks that look for another volume's directory.
const OTHER_VOLUME: &str = "pvc-0b7c1a52-7f1e-4e8e-9d52-3f0b7c1a5200";

#[tokio::test]
async fn a_volume_is_its_claims_own_never_another_claims() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    std::fs::create_dir_all(dir.path().join(OTHER_VOLUME).join("pvc-out")).unwrap();
    std::fs::create_dir_all(dir.path().join("shared")).unwrap();
    let p = plugin(dir.path(), &hostpath_in(&root)).await;
    for (path, want) in [
        (
            root.clone(),
            "itself; a volume must be a directory of its own below it",
        ),
        (
            format!("{root}/shared"),
            "does not name the volume pvc-out in its last part \"shared\"",
        ),
        (
            format!("{root}/{OTHER_VOLUME}"),
            "does not name the volume pvc-out",
        ),
        (
            format!("{root}/{OTHER_VOLUME}/pvc-out"),
            "is inside \"pvc-0b7c1a52-7f1e-4e8e-9d52-3f0b7c1a5200\", another volume's directory",
        ),
    ] {
        let source = json(serde_json::json!({"hostPath": {"path": path}}));
        assert_refused(
            returning(&p, &[("source", &source)]).await,
            dir.path(),
            want,
        );
    }

    let p = plugin(
        dir.path(),
        "output: {sources: [nfs, csi], nfsExports: ['10.0.0.5:/exports'], csiDrivers: [disk.example.com]}",
    )
    .await;
    for (source, want) in [
        (
            serde_json::json!({"nfs": {"server": "10.0.0.5", "path": "/exports/"}}),
            "nfs.path \"/exports/\" is 10.0.0.5:/exports itself",
        ),
        (
            serde_json::json!({"nfs": {"server": "10.0.0.5", "path": "/exports/pvc-out/data"}}),
            "does not name the volume pvc-out in its last part \"data\"",
        ),
        (
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "vol-7"}}),
            "csi.volumeHandle \"vol-7\" does not name the volume pvc-out",
        ),
    ] {
        assert_refused(
            returning(&p, &[("source", &json(source))]).await,
            dir.path(),
            want,
        );
    }

    // A pool of existing storage (static-pool) opts out of the name, not of
    // the rest.
    let p = plugin(
        dir.path(),
        "output: {sources: [nfs], nfsExports: ['10.0.0.5:/exports'], requireVolumeName: false}",
    )
    .await;
    let pooled = json(serde_json::json!({"nfs": {"server": "10.0.0.5", "path": "/exports/vol-1"}}));
    returning(&p, &[("source", &pooled)]).await.unwrap();
    std::fs::remove_file(made(dir.path())).unwrap();
    let root_export = json(serde_json::json!({"nfs": {"server": "10.0.0.5", "path": "/exports"}}));
    assert_refused(
        returning(&p, &[("source", &root_export)]).await,
        dir.path(),
        "itself",
    );
}

#[tokio::test]
async fn a_path_the_host_cannot_see_or_under_a_grant_swapped_for_a_link_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let p = plugin(dir.path(), &hostpath_in(&root)).await;
    for path in [format!("{root}/pvc-out"), format!("{root}/later/pvc-out")] {
        let source = json(serde_json::json!({"hostPath": {"path": path}}));
        assert_refused(
            returning(&p, &[("source", &source)]).await,
            dir.path(),
            "cannot be checked (No such file or directory (os error 2)); the plugin must create the volume's directory before returning it",
        );
    }

    // The granted directory is moved away after the policy loaded and a
    // link to the moved copy (or anywhere) put in its place.
    let base = tempfile::tempdir().unwrap();
    let grant = base.path().join("grant");
    std::fs::create_dir(&grant).unwrap();
    let p = plugin(&grant, &hostpath_in(&grant.display().to_string())).await;
    std::fs::rename(&grant, base.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(base.path().join("moved"), &grant).unwrap();
    let source = json(serde_json::json!({"hostPath": {"path": grant.join("pvc-out")}}));
    let err = returning(&p, &[("source", &source), ("mkdir", "/data/pvc-out")])
        .await
        .expect_err("a grant that is now a link");
    assert!(
        err.message.contains("the granted directory")
            && err.message.contains("goes through a symbolic link"),
        "{}",
        err.message
    );
    assert!(
        !base.path().join("moved/pvc-out.made").exists(),
        "cleaned up"
    );
}

#[test]
fn a_policy_that_could_let_a_plugin_replace_a_grant_is_refused_at_load() {
    let base = tempfile::tempdir().unwrap();
    let grant = base.path().join("volumes");
    std::fs::create_dir(&grant).unwrap();
    let parse = |yaml: String| PolicySet::parse(&yaml, Path::new("policy.yaml")).map(|_| ());
    // Another plugin may write in the directory holding the grant.
    let err = parse(format!(
        "plugins:\n  a:\n    output: {{sources: [hostPath], paths: [{g}]}}\n  \
         b:\n    preopens: [{{host: {base}, guest: /x, mode: read-write}}]\n",
        g = grant.display(),
        base = base.path().display()
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("plugins.b.preopens[0].host")
            && err.contains("which plugins.a.output.paths grants"),
        "{err}"
    );
    // Read-only, or the grant itself: fine.
    parse(format!(
        "plugins:\n  a:\n    preopens: [{{host: {g}, guest: /v, mode: read-write}}, {{host: {base}, guest: /x}}]\n    \
         output: {{sources: [hostPath], paths: [{g}]}}\n",
        g = grant.display(),
        base = base.path().display()
    ))
    .unwrap();
    // A grant that does not exist. (One holding a volume swapped for a link
    // loads, that grant refusing new volumes: tests/fs_guard.rs.)
    let err = parse(format!(
        "plugins: {{a: {{output: {{sources: [hostPath], paths: [{}]}}}}}}",
        base.path().join("missing").display()
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("the granted directory must exist"), "{err}");
}

#[tokio::test]
async fn a_mount_option_cannot_smuggle_others_past_a_key_grant() {
    let dir = tempfile::tempdir().unwrap();
    let p = plugin(
        dir.path(),
        &format!(
            "output: {{sources: [hostPath], paths: [{OK_ROOT}], mountOptions: [\"nfsvers=*\"]}}"
        ),
    )
    .await;
    returning(&p, &[("mount-options", "nfsvers=4.1")])
        .await
        .unwrap();
    std::fs::remove_file(made(dir.path())).unwrap();
    for (option, holds) in [
        ("nfsvers=4.1,exec,suid,dev", "','"),
        ("nfsvers=4.1 exec", "' '"),
        ("nfsvers=4.1\texec", "'\\t'"),
        ("nfsvers=4.1\u{1b}", "'\\u{1b}'"),
    ] {
        assert_refused(
            returning(&p, &[("mount-options", option)]).await,
            dir.path(),
            &format!("is not one mount option: it holds {holds}"),
        );
    }
}

#[tokio::test]
async fn every_granted_kind_has_its_location_checked() {
    let dir = tempfile::tempdir().unwrap();
    let p = plugin(
        dir.path(),
        "output: {sources: [csi], uncheckedSources: [iscsi, cephfs], csiDrivers: [{name: disk.example.com, volumeHandlePrefixes: [pool-a/], volumeAttributes: ['tier=fast', 'subdir=*']}]}",
    )
    .await;
    for granted in [
        serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "pool-a/pvc-out",
            "volumeAttributes": {"tier": "fast", "subdir": "team/pvc-out..v2"}}}),
        serde_json::json!({"iscsi": {"targetPortal": "10.0.0.9:3260", "iqn": "iqn.2001-04.com.example:a", "lun": 0}}),
    ] {
        returning(&p, &[("source", &json(granted.clone()))])
            .await
            .unwrap_or_else(|e| panic!("{granted}: {}", e.message));
        std::fs::remove_file(made(dir.path())).unwrap();
    }
    for (source, want) in [
        (
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "pool-b/pvc-out"}}),
            "does not start with a granted prefix for driver disk.example.com (pool-a/)",
        ),
        (
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "pool-a/pvc-out",
                "volumeAttributes": {"tier": "fast", "path": "/"}}}),
            "csi.volumeAttributes \"path=/\" is not granted for driver disk.example.com (tier=fast, subdir=*)",
        ),
        (
            // csi-driver-nfs mounts server:share/subdir.
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "pool-a/pvc-out",
                "volumeAttributes": {"subdir": "../../.."}}}),
            "csi.volumeAttributes \"subdir=../../..\" climbs with \"..\"",
        ),
        (
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "pool-a/pvc-out",
                "volumeAttributes": {"csi.storage.k8s.io/ephemeral": "true"}}}),
            "is under csi.storage.k8s.io/, which Kubernetes sets itself",
        ),
        (
            serde_json::json!({"cephfs": {"monitors": ["10.0.0.9:6789"], "secretFile": "/etc/ceph/admin.secret"}}),
            "cephfs.secretFile names a file on the node as credentials",
        ),
        (
            serde_json::json!({"rbd": {"monitors": ["10.0.0.9:6789"], "image": "i", "keyring": "/etc/ceph/keyring"}}),
            "it returned a rbd source",
        ),
    ] {
        assert_refused(
            returning(&p, &[("source", &json(source))]).await,
            dir.path(),
            want,
        );
    }
    // A kind with no location check is not granted by `sources`.
    let err = PolicySet::parse(
        "plugins: {p: {output: {sources: [iscsi]}}}",
        Path::new("policy.yaml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("plugins.p.output.sources[0]") && err.contains("uncheckedSources"),
        "{err}"
    );
}

fn node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([("kubernetes.io/hostname".to_owned(), name.to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

#[tokio::test]
async fn a_plugin_cannot_pin_a_volume_to_a_node_the_scheduler_did_not_pick() {
    let dir = tempfile::tempdir().unwrap();
    let p = plugin(dir.path(), &format!("output: {MISBEHAVE_OUTPUT}")).await;
    let on = |pin: &str| {
        let mut opts = options(
            "pvc-out",
            class(
                "pin",
                &[("behavior", "return"), ("dir", "/data"), ("pin-to", pin)],
            ),
            claim("data", "1Mi"),
        );
        opts.selected_node = Some(node("node-a"));
        opts
    };
    let pv = p.provision(&on("node-a")).await.unwrap();
    assert!(pv.spec.unwrap().node_affinity.is_some());
    std::fs::remove_file(made(dir.path())).unwrap();
    assert_refused(
        p.provision(&on("node-b")).await,
        dir.path(),
        "node-affinity term 0 does not select node node-a, which the scheduler picked",
    );
    // An Immediate class with no allowedTopologies: no node to check
    // against, so only a plugin granted anyNodeAffinity may pin.
    let mut immediate = on("node-b");
    immediate.selected_node = None;
    assert_refused(
        p.provision(&immediate).await,
        dir.path(),
        "neither the scheduler (no selected node) nor the class (no allowedTopologies) says where it may be",
    );
    let granted = plugin(
        dir.path(),
        "output: {sources: [hostPath], paths: [/tmp/ok], annotationPrefixes: [misbehave.test/], anyNodeAffinity: true}",
    )
    .await;
    granted.provision(&immediate).await.unwrap();
}

#[tokio::test]
async fn sizes_above_the_plugins_maximum_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = plugin(
        dir.path(),
        &format!("output: {{sources: [hostPath], paths: [{OK_ROOT}], maxCapacity: 1Gi}}"),
    )
    .await;
    // A plugin answering with more than the maximum (here 16 EiB - 1).
    assert_refused(
        returning(&p, &[("capacity-bytes", &u64::MAX.to_string())]).await,
        dir.path(),
        "above the largest volume the policy lets this plugin make, 1Gi (grant: output.maxCapacity)",
    );
    // A claim asking for more is refused before the plugin is called.
    let opts = options(
        "pvc-big",
        class("big", &[("behavior", "return"), ("dir", "/data")]),
        claim("data", "2Gi"),
    );
    let err = p.provision(&opts).await.unwrap_err();
    assert_eq!(
        err.state,
        ProvisionState::InvalidArgument,
        "{}",
        err.message
    );
    assert!(
        err.message.contains("may make volumes of at most 1Gi"),
        "{}",
        err.message
    );
    assert!(
        !dir.path().join("pvc-big.made").exists(),
        "the plugin was not called"
    );

    // Growing past it is infeasible, before the plugin is called.
    let volumes = tempfile::tempdir().unwrap();
    let entry = format!(
        "plugins: {{hostpath: {{output: {{sources: [hostPath], paths: [{0}], maxCapacity: 1Gi}}}}}}",
        volumes.path().display()
    );
    let output = PolicySet::parse(&entry, Path::new("policy.yaml"))
        .unwrap()
        .output_for("hostpath");
    let sandbox = SandboxPolicy {
        preopens: vec![Preopen {
            host: volumes.path().to_owned(),
            guest: "/volumes".into(),
            mode: DirMode::ReadWrite,
        }],
        ..SandboxPolicy::default()
    };
    let hostpath = load("hostpath", &plugin_path("hostpath"), sandbox, output).await;
    let root = volumes.path().display().to_string();
    let opts = options(
        "pvc-grow",
        class("grow", &[("hostRoot", &root)]),
        claim("data", "1Mi"),
    );
    let pv = hostpath.provision(&opts).await.unwrap();
    let err = hostpath
        .resize(
            &pv,
            &ResizeOptions {
                requested_bytes: 2 << 30,
                limit_bytes: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.state, ResizeState::Infeasible, "{}", err.message);
    assert!(
        err.message.contains("cannot grow to 2Gi"),
        "{}",
        err.message
    );
}

/// Has the plugin make and return `<dir>/pvc-out` for a class with `host`
/// parameters (the host's own) and a claim with `annotations`.
async fn made_with_access(
    p: &WasmProvisioner,
    dir: &Path,
    host: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Result<PersistentVolume, ProvisionError> {
    let source = json(serde_json::json!({"hostPath": {"path": dir.join("pvc-out")}}));
    let mut params = vec![
        ("behavior", "return"),
        ("dir", "/data"),
        ("mkdir", "/data/pvc-out"),
        ("source", &source),
    ];
    params.extend_from_slice(host);
    let mut c = claim("data", "1Mi");
    c.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    let opts = options("pvc-out", class("out", &params), c);
    tokio::time::timeout(STEP, p.provision(&opts))
        .await
        .expect("the host must end the call by itself")
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test]
async fn the_host_gives_a_volumes_directory_the_mode_and_owner_its_class_asks() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let volume = dir.path().join("pvc-out");
    let reset = || {
        let _ = std::fs::remove_dir(&volume);
        let _ = std::fs::remove_file(made(dir.path()));
    };

    // The class's mode, on the directory the plugin made; the plugin never
    // sees the host's parameters (echo-parameters lists what it got).
    let p = plugin(dir.path(), &hostpath_in(&root)).await;
    made_with_access(&p, dir.path(), &[("wasmprov.io/mode", "0777")], &[])
        .await
        .unwrap();
    assert_eq!(mode_of(&volume), 0o777);
    reset();
    let mut echo = echo_options("pvc-echo");
    echo.class
        .parameters
        .as_mut()
        .unwrap()
        .insert("wasmprov.io/mode".into(), "0777".into());
    let p_echo = plugin(dir.path(), &format!("output: {MISBEHAVE_OUTPUT}")).await;
    let pv = p_echo.provision(&echo).await.unwrap();
    assert_eq!(
        pv.metadata.annotations.unwrap()["misbehave.test/parameters"],
        "behavior,password,server",
        "the plugin never sees the host's parameters"
    );

    // A bad value is refused before the plugin makes anything.
    let err = made_with_access(&p, dir.path(), &[("wasmprov.io/mode", "rwx")], &[])
        .await
        .unwrap_err();
    assert!(
        err.message
            .starts_with("StorageClass out: parameter wasmprov.io/mode: \"rwx\" is not an octal"),
        "{}",
        err.message
    );
    assert!(!volume.exists() && !made(dir.path()).exists());

    // A claim's annotation: refused unless the policy lets claims choose.
    let err = made_with_access(&p, dir.path(), &[], &[("wasmprov.io/mode", "0700")])
        .await
        .unwrap_err();
    assert!(
        err.message
            .contains("plugins.misbehave.output.claimAccess: true"),
        "{}",
        err.message
    );
    assert!(!volume.exists());
    let p = plugin(
        dir.path(),
        &format!("output: {{sources: [hostPath], paths: [{root}], claimAccess: true}}"),
    )
    .await;
    made_with_access(
        &p,
        dir.path(),
        &[("wasmprov.io/mode", "0777")],
        &[("wasmprov.io/mode", "2770")],
    )
    .await
    .unwrap();
    assert_eq!(mode_of(&volume), 0o2770);
    reset();

    // An owner: set when the host may (root here in CI); otherwise the
    // volume is refused, its storage deleted, with the fix.
    let result = made_with_access(
        &p,
        dir.path(),
        &[("wasmprov.io/uid", "4321"), ("wasmprov.io/gid", "4321")],
        &[],
    )
    .await;
    if rustix::process::geteuid().is_root() {
        result.unwrap();
        let meta = std::fs::metadata(&volume).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (4321, 4321));
    } else {
        let err = result.unwrap_err();
        assert!(err.message.contains("CAP_CHOWN"), "{}", err.message);
        assert!(!made(dir.path()).exists(), "its storage was deleted");
    }
}
