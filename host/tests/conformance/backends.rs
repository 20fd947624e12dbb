//! Each backend on the bad input its own design has to get right, through
//! `wasmprov plugin invoke` / `plugin delete` as a user runs them.

#[path = "backends/quota_dir.rs"]
mod quota_dir;

use std::path::{Path, PathBuf};
use std::process::Output;

use k8s_openapi::api::core::v1::PersistentVolume;

use super::support::*;

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
