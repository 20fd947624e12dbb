//! The output policy's checks, through [`check`].

use std::path::Path;

use super::node_affinity::HOSTNAME_LABEL;
use super::*;
use crate::policy::output::{CsiGrant, NfsExport};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;

const PV: &str = "pvc-0b7c1a52-7f1e-4e8e-9d52-3f0b7c1a5200";
const OTHER: &str = "pvc-11111111-2222-3333-4444-555555555555";

fn opts() -> ProvisionOptions {
    ProvisionOptions {
        pv_name: PV.to_owned(),
        claim: PersistentVolumeClaim::default(),
        class: StorageClass::default(),
        selected_node: None,
    }
}

fn volume(source: Value) -> (wit::Volume, Value) {
    (
        wit::Volume {
            capacity_bytes: 1,
            source: source.to_string(),
            node_affinity: None,
            mount_options: Vec::new(),
            labels: Vec::new(),
            annotations: Vec::new(),
        },
        source,
    )
}

fn hostpath_policy(root: &Path) -> OutputPolicy {
    OutputPolicy {
        sources: ["hostPath".to_owned()].into(),
        paths: vec![root.to_owned()],
        ..OutputPolicy::default()
    }
}

fn refusals(policy: &OutputPolicy, source: Value) -> Vec<String> {
    let (v, s) = volume(source);
    check(policy, &[], &opts(), &v, &s)
}

fn host_path(path: impl AsRef<Path>) -> Value {
    serde_json::json!({"hostPath": {"path": path.as_ref().display().to_string()}})
}

/// A class naming one node directory and a policy preopening another: the
/// refusal says so, not only that the path is missing or not granted.
#[test]
fn a_path_outside_the_plugins_directories_names_the_mismatch() {
    let granted = tempfile::tempdir().unwrap();
    let preopened = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(preopened.path().join(PV)).unwrap();
    let policy = hostpath_policy(granted.path());
    let preopens = [Preopen {
        host: preopened.path().to_owned(),
        guest: "/data".into(),
        mode: crate::policy::DirMode::ReadWrite,
    }];
    let in_grant = host_path(granted.path().join(PV));
    let (v, s) = volume(in_grant);
    let got = check(&policy, &preopens, &opts(), &v, &s).join("; ");
    assert!(got.contains("cannot be checked"), "{got}");
    assert!(
        got.contains("outside every directory the plugin was given"),
        "{got}"
    );
    assert!(
        got.contains(&format!("{} as /data", preopened.path().display())),
        "{got}"
    );
    assert!(got.contains("hostRoot"), "{got}");
    let (v, s) = volume(host_path(granted.path().join(PV)));
    let got = check(&policy, &[], &opts(), &v, &s).join("; ");
    assert!(got.contains("no preopens"), "{got}");
    // Inside a preopen: the usual refusal only.
    let (v, s) = volume(host_path(preopened.path().join(PV)));
    let got = check(&policy, &preopens, &opts(), &v, &s).join("; ");
    assert!(got.contains("not in a granted directory"), "{got}");
    assert!(!got.contains("outside every directory"), "{got}");
}

#[test]
fn paths_stay_in_their_grant_and_belong_to_their_volume() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    std::fs::create_dir_all(r.join(PV)).unwrap();
    std::fs::create_dir_all(r.join("fast").join(format!("default-data-{PV}"))).unwrap();
    std::fs::create_dir_all(r.join(OTHER).join(PV)).unwrap();
    std::fs::create_dir_all(r.join("shared")).unwrap();
    let policy = hostpath_policy(r);
    let rs = r.display().to_string();
    for ok in [
        r.join(PV).display().to_string(),
        format!("{rs}//./{PV}/"),
        r.join("fast")
            .join(format!("default-data-{PV}"))
            .display()
            .to_string(),
    ] {
        let got = refusals(&policy, host_path(&ok));
        assert!(got.is_empty(), "{ok}: {got:?}");
    }
    for (bad, why) in [
        ("/".to_owned(), "not in a granted directory"),
        ("/etc".to_owned(), "not in a granted directory"),
        (format!("{rs}/../etc"), "contains \"..\""),
        (format!("{rs}-evil/{PV}"), "not in a granted directory"),
        ("relative".to_owned(), "not an absolute path"),
        (
            rs.clone(),
            "itself; a volume must be a directory of its own",
        ),
        (format!("{rs}/shared"), "does not name the volume"),
        (format!("{rs}/{OTHER}/{PV}"), "another volume's directory"),
        (format!("{rs}/{PV}-new"), "cannot be checked"),
        (format!("{rs}/later/{PV}"), "cannot be checked"),
    ] {
        let got = refusals(&policy, host_path(&bad));
        assert!(got.len() == 1 && got[0].contains(why), "{bad}: {got:?}");
    }
    // A pool of existing directories: the name is not required, but the
    // grant itself and another volume's directory still are refused.
    let pool = OutputPolicy {
        require_volume_name: false,
        ..policy.clone()
    };
    assert!(refusals(&pool, host_path(r.join("shared"))).is_empty());
    assert_eq!(refusals(&pool, host_path(r)).len(), 1);
    assert_eq!(refusals(&pool, host_path(r.join(OTHER).join(PV))).len(), 1);
}

#[test]
fn a_path_through_a_link_is_refused_even_inside_the_grant() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("real")).unwrap();
    std::os::unix::fs::symlink("/", root.path().join(PV)).unwrap();
    std::os::unix::fs::symlink("real", root.path().join("inside")).unwrap();
    let policy = hostpath_policy(root.path());
    for through in [PV.to_owned(), format!("inside/{PV}")] {
        let path = root.path().join(through);
        let got = refusals(&policy, serde_json::json!({"local": {"path": path}}));
        assert!(got[0].contains("local source"), "kind first: {got:?}");
        let mut local = policy.clone();
        local.sources.insert("local".into());
        let got = refusals(&local, serde_json::json!({"local": {"path": path}}));
        assert!(
            got.len() == 1 && got[0].contains("symbolic link"),
            "{got:?}"
        );
    }
}

#[test]
fn a_grant_that_became_a_link_or_a_hard_linked_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let grant = dir.path().join("grant");
    std::fs::create_dir_all(grant.join(PV)).unwrap();
    let policy = hostpath_policy(&grant);
    assert!(refusals(&policy, host_path(grant.join(PV))).is_empty());
    // Someone moved the granted directory and left a link in its place.
    std::fs::rename(&grant, dir.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("moved"), &grant).unwrap();
    let got = refusals(&policy, host_path(grant.join(PV)));
    assert!(
        got.len() == 1 && got[0].contains("goes through a symbolic link"),
        "{got:?}"
    );

    let files = tempfile::tempdir().unwrap();
    let file = files.path().join(PV);
    std::fs::write(&file, "x").unwrap();
    let policy = hostpath_policy(files.path());
    assert!(refusals(&policy, host_path(&file)).is_empty());
    std::fs::hard_link(&file, files.path().join("second-name")).unwrap();
    let got = refusals(&policy, host_path(&file));
    assert!(got.len() == 1 && got[0].contains("hard links"), "{got:?}");
}

fn nfs_csi_policy() -> OutputPolicy {
    OutputPolicy {
        sources: ["nfs".to_owned(), "csi".to_owned()].into(),
        nfs_exports: vec![NfsExport {
            server: "10.0.0.5".into(),
            path: "/exports".into(),
        }],
        csi_drivers: [
            ("disk.example.com".to_owned(), CsiGrant::default()),
            (
                "pool.example.com".to_owned(),
                CsiGrant {
                    volume_handle_prefixes: vec!["pool-a/".into()],
                    volume_attributes: vec!["fsType=*".into(), "tier=fast".into()],
                },
            ),
        ]
        .into(),
        secret_namespaces: ["storage".to_owned()].into(),
        ..OutputPolicy::default()
    }
}

#[test]
fn nfs_csi_and_secrets_need_their_grants() {
    let policy = nfs_csi_policy();
    let ok = [
        serde_json::json!({"nfs": {"server": "10.0.0.5", "path": format!("/exports/ns/{PV}")}}),
        serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": format!("h-{PV}"),
            "nodePublishSecretRef": {"name": "s", "namespace": "storage"}}}),
        serde_json::json!({"csi": {"driver": "pool.example.com", "volumeHandle": format!("pool-a/{PV}"),
            "volumeAttributes": {"fsType": "xfs", "tier": "fast"}}}),
    ];
    for source in ok {
        let got = refusals(&policy, source.clone());
        assert!(got.is_empty(), "{source}: {got:?}");
    }
    let bad = [
        (
            serde_json::json!({"nfs": {"server": "10.0.0.6", "path": format!("/exports/{PV}")}}),
            "not in a granted export",
        ),
        (
            serde_json::json!({"nfs": {"server": "10.0.0.5", "path": "/etc"}}),
            "not in a granted export",
        ),
        (
            serde_json::json!({"nfs": {"server": "10.0.0.5", "path": "/exports"}}),
            "is 10.0.0.5:/exports itself",
        ),
        (
            serde_json::json!({"nfs": {"server": "10.0.0.5", "path": "/exports/ns/data"}}),
            "does not name the volume",
        ),
        (
            serde_json::json!({"csi": {"driver": "other.example.com", "volumeHandle": "h"}}),
            "not one of the granted drivers",
        ),
        (
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "someone-elses"}}),
            "csi.volumeHandle \"someone-elses\" does not name the volume",
        ),
        (
            serde_json::json!({"csi": {"driver": "pool.example.com", "volumeHandle": format!("pool-b/{PV}")}}),
            "does not start with a granted prefix for driver pool.example.com (pool-a/)",
        ),
        (
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": PV,
                "volumeAttributes": {"csi.storage.k8s.io/serviceAccount.tokens": "x"}}}),
            "which Kubernetes sets itself",
        ),
        (
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": PV,
                "volumeAttributes": {"path": "/"}}}),
            "csi.volumeAttributes \"path=/\" is not granted for driver disk.example.com (none)",
        ),
        (
            serde_json::json!({"csi": {"driver": "pool.example.com", "volumeHandle": format!("pool-a/{PV}"),
                "volumeAttributes": {"tier": "slow"}}}),
            "\"tier=slow\" is not granted",
        ),
        (
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": PV,
                "nodePublishSecretRef": {"name": "admin", "namespace": "kube-system"}}}),
            "csi.nodePublishSecretRef refers to a Secret in namespace \"kube-system\"",
        ),
        (
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": PV,
                "controllerExpandSecretRef": {"name": "admin"}}}),
            "without naming its namespace",
        ),
        (
            serde_json::json!({"rbd": {"monitors": ["m"], "image": "i"}}),
            "rbd source",
        ),
    ];
    for (source, want) in bad {
        let got = refusals(&policy, source.clone());
        assert!(got.iter().any(|r| r.contains(want)), "{source}: {got:?}");
    }
}

#[test]
fn unchecked_kinds_pass_but_node_files_as_credentials_never_do() {
    let policy = OutputPolicy {
        sources: ["iscsi".to_owned(), "cephfs".to_owned(), "rbd".to_owned()].into(),
        ..OutputPolicy::default()
    };
    let iscsi =
        serde_json::json!({"iscsi": {"targetPortal": "10.0.0.9:3260", "iqn": "iqn.x", "lun": 0}});
    assert!(refusals(&policy, iscsi).is_empty());
    for (source, want) in [
        (
            serde_json::json!({"cephfs": {"monitors": ["m"], "secretFile": "/etc/shadow"}}),
            "cephfs.secretFile names a file on the node",
        ),
        (
            serde_json::json!({"rbd": {"monitors": ["m"], "image": "i", "keyring": "/etc/ceph/admin"}}),
            "rbd.keyring names a file on the node",
        ),
    ] {
        let got = refusals(&policy, source.clone());
        assert!(got.len() == 1 && got[0].contains(want), "{source}: {got:?}");
    }
}

#[test]
fn mount_options_labels_annotations_and_sizes_need_grants() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join(PV)).unwrap();
    let mut policy = hostpath_policy(root.path());
    policy.mount_options = vec!["hard".into(), "nfsvers=*".into()];
    policy.label_prefixes = vec!["example.com/".into()];
    policy.annotation_prefixes = vec!["kubernetes.io.example.com/".into()];
    policy.max_capacity_bytes = 1 << 30;
    let (mut v, s) = volume(host_path(root.path().join(PV)));
    v.mount_options = vec!["hard".into(), "nfsvers=4.1".into()];
    v.labels = vec![("example.com/team".into(), "a".into())];
    v.annotations = vec![("kubernetes.io.example.com/x".into(), "a".into())];
    v.capacity_bytes = 1 << 30;
    assert!(check(&policy, &[], &opts(), &v, &s).is_empty());

    v.mount_options = vec![
        "exec".into(),
        "suid,dev".into(),
        "nfsvers".into(),
        "nfsvers=4.1,exec,suid,dev".into(),
        "nfsvers=4 exec".into(),
        "nfsvers=4\nexec".into(),
    ];
    v.labels = vec![("team".into(), "a".into())];
    v.annotations = vec![
        ("pv.kubernetes.io/bound-by-controller".into(), "yes".into()),
        ("example.com/x".into(), "a".into()),
    ];
    v.capacity_bytes = (1 << 30) + 1;
    let got = check(&policy, &[], &opts(), &v, &s);
    assert_eq!(got.len(), 10, "{got:#?}");
    assert!(got[0].contains("\"exec\" is not granted"), "{got:#?}");
    assert!(got[1].contains("\"suid,dev\" is not one mount option"));
    assert!(got[2].contains("\"nfsvers\" is not granted"));
    assert!(got[3].contains("\"nfsvers=4.1,exec,suid,dev\" is not one mount option"));
    assert!(got[4].contains("is not one mount option: it holds ' '"));
    assert!(
        got[5].contains("\"nfsvers=4\\\\nexec\" is not one mount option"),
        "{}",
        got[5]
    );
    assert!(got[6].contains("above the largest volume"), "{}", got[6]);
    assert!(got[7].contains("label \"team\""));
    assert!(got[8].contains("belongs to Kubernetes"));
}

fn pinned(key: &str, op: wit::NodeSelectorOperator, values: &[&str]) -> wit::NodeAffinity {
    wit::NodeAffinity {
        terms: vec![wit::NodeSelectorTerm {
            match_expressions: vec![wit::NodeSelectorRequirement {
                key: key.into(),
                operator: op,
                values: values.iter().map(|v| v.to_string()).collect(),
            }],
        }],
    }
}

#[test]
fn node_affinity_keeps_the_volume_where_the_request_allows() {
    use wit::NodeSelectorOperator as Op;
    let policy = OutputPolicy {
        sources: ["csi".to_owned()].into(),
        csi_drivers: [("d.example.com".to_owned(), CsiGrant::default())].into(),
        ..OutputPolicy::default()
    };
    let source = serde_json::json!({"csi": {"driver": "d.example.com", "volumeHandle": PV}});
    let (mut v, s) = volume(source);
    let mut request = opts();
    request.selected_node = Some(
        serde_json::from_value(serde_json::json!({"metadata": {"name": "node-a",
            "labels": {"topology.kubernetes.io/zone": "z1", "cores": "8"}}}))
        .unwrap(),
    );
    for ok in [
        pinned(HOSTNAME_LABEL, Op::In, &["node-a"]),
        pinned("topology.kubernetes.io/zone", Op::In, &["z1", "z2"]),
        pinned("cores", Op::Gt, &["4"]),
        pinned("gpu", Op::DoesNotExist, &[]),
    ] {
        v.node_affinity = Some(ok.clone());
        assert!(check(&policy, &[], &request, &v, &s).is_empty(), "{ok:?}");
    }
    for bad in [
        pinned(HOSTNAME_LABEL, Op::In, &["node-b"]),
        pinned("topology.kubernetes.io/zone", Op::NotIn, &["z1"]),
        pinned("cores", Op::Lt, &["4"]),
    ] {
        v.node_affinity = Some(bad.clone());
        let got = check(&policy, &[], &request, &v, &s);
        assert!(
            got.len() == 1 && got[0].contains("does not select node node-a"),
            "{bad:?}: {got:?}"
        );
    }
    // Without a selected node: within the class's allowed topologies.
    let mut request = opts();
    request.class = serde_json::from_value(serde_json::json!({"metadata": {"name": "c"},
        "provisioner": "p", "allowedTopologies": [{"matchLabelExpressions":
        [{"key": "topology.kubernetes.io/zone", "values": ["z1", "z2"]}]}]}))
    .unwrap();
    v.node_affinity = Some(pinned("topology.kubernetes.io/zone", Op::In, &["z2"]));
    assert!(check(&policy, &[], &request, &v, &s).is_empty());
    for bad in [
        pinned("topology.kubernetes.io/zone", Op::In, &["z3"]),
        pinned(HOSTNAME_LABEL, Op::In, &["anywhere"]),
    ] {
        v.node_affinity = Some(bad.clone());
        let got = check(&policy, &[], &request, &v, &s);
        assert!(
            got.len() == 1 && got[0].contains("outside the class's allowedTopologies"),
            "{bad:?}: {got:?}"
        );
    }
}
