use super::*;

fn resolve(yaml: &str) -> Result<OutputPolicy, String> {
    let spec: OutputSpec = serde_yaml::from_str(yaml).map_err(|e| e.to_string())?;
    spec.resolve("plugins.p.output")
        .map_err(|(f, m)| format!("{f}: {m}"))
}

#[test]
fn grants_are_normalised() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("x/y")).unwrap();
    let root = dir.path().display();
    let p = resolve(&format!(
        "{{sources: [hostPath, nfs], paths: [{root}//x/./y/], nfsExports: ['NFS.example:/exports/', '[fd00::5]:/e']}}",
    ))
    .unwrap();
    assert_eq!(p.paths, vec![dir.path().join("x/y")]);
    assert_eq!(p.nfs_exports[0].server, "nfs.example");
    assert_eq!(p.nfs_exports[0].path, PathBuf::from("/exports"));
    assert_eq!(p.nfs_exports[1].server, "[fd00::5]");
    assert!(p.require_volume_name);
    assert_eq!(p.max_capacity_bytes, DEFAULT_MAX_CAPACITY);
}

#[test]
fn a_grant_that_could_not_mean_what_it_says_is_refused() {
    let empty = tempfile::tempdir().unwrap();
    let paths_only = format!("{{paths: [{}]}}", empty.path().display());
    for (yaml, want) in [
        ("{sources: [hostpath]}", "did you mean hostPath?"),
        ("{sources: [hostPath]}", "paths must say which ones"),
        (
            "{sources: [local], paths: [/]}",
            "any directory of the node",
        ),
        ("{sources: [local], paths: [/a/../etc]}", "contains \"..\""),
        ("{sources: [local], paths: [data]}", "not an absolute path"),
        (
            "{sources: [local], paths: [/no/such/grant/anywhere]}",
            "the granted directory must exist",
        ),
        (paths_only.as_str(), "does not grant"),
        ("{sources: [nfs]}", "nfsExports must say"),
        ("{sources: [nfs], nfsExports: [10.0.0.5]}", "server:/path"),
        (
            "{sources: [nfs], nfsExports: ['10.0.0.5:exports']}",
            "absolute",
        ),
        (
            "{sources: [csi], csiDrivers: ['Disk CSI']}",
            "CSI driver name",
        ),
        ("{csiDrivers: [disk.example.com]}", "does not grant"),
        (
            "{sources: [csi], csiDrivers: [{name: d.example.com, volumeAttributes: [pool]}]}",
            "key=value, or key=*",
        ),
        (
            "{sources: [csi], csiDrivers: [{name: d.example.com, volumeAttributes: ['csi.storage.k8s.io/pod.name=*']}]}",
            "which Kubernetes sets itself",
        ),
        (
            "{sources: [csi], csiDrivers: [{name: d.example.com, volumeHandlePrefixes: ['']}]}",
            "non-empty prefix",
        ),
        (
            "{sources: [csi], csiDrivers: [{name: d.example.com, handles: [a]}]}",
            "csiDrivers[0]",
        ),
        (
            "{sources: [iscsi]}",
            "list it under plugins.p.output.uncheckedSources instead",
        ),
        ("{sources: [flexVolume]}", "cannot check where a flexVolume"),
        ("{uncheckedSources: [nfs]}", "grant it under plugins.p.output.sources"),
        ("{uncheckedSources: [iscsy]}", "not a volume source kind"),
        ("{secretNamespaces: [Kube_System]}", "namespace name"),
        ("{mountOptions: ['exec,suid']}", "not one mount option"),
        ("{mountOptions: [\"a\\x1b\"]}", "control characters"),
        ("{maxCapacity: 0}", "above 0"),
        ("{maxCapacity: 2Ei}", "at most 1Ei"),
        ("{maxCapacity: lots}", "plugins.p.output.maxCapacity"),
        ("{labelPrefixes: ['']}", "every key"),
        ("{labelPrefixes: [kubernetes.io/]}", "belongs to Kubernetes"),
        (
            "{annotationPrefixes: [pv.kubernetes.io/]}",
            "under kubernetes.io",
        ),
        ("{annotationPrefixes: [x.k8s.io/]}", "under k8s.io"),
        ("{annotationPrefixes: [wasmprov.io/]}", "under wasmprov.io"),
        ("{mountOption: [hard]}", "unknown field `mountOption`"),
    ] {
        let err = resolve(yaml).expect_err(yaml);
        assert!(err.contains(want), "{yaml}: {err}");
    }
}

#[test]
fn unchecked_kinds_and_limited_csi_drivers_are_granted_as_written() {
    let p = resolve(
        "{sources: [csi], uncheckedSources: [iscsi], maxCapacity: 10Ti, requireVolumeName: false, csiDrivers: [a.example.com, {name: b.example.com, volumeHandlePrefixes: [pool/], volumeAttributes: ['fsType=*']}]}",
    )
    .unwrap();
    assert!(p.sources.contains("iscsi") && p.sources.contains("csi"));
    assert_eq!(p.csi_drivers["a.example.com"], CsiGrant::default());
    assert_eq!(
        p.csi_drivers["b.example.com"].volume_handle_prefixes,
        vec!["pool/".to_owned()]
    );
    assert_eq!(p.max_capacity_bytes, 10 << 40);
    assert!(!p.require_volume_name);
}

#[test]
fn a_grant_through_a_link_or_holding_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("alias")).unwrap();
    let err = resolve(&format!(
        "{{sources: [hostPath], paths: [{}]}}",
        dir.path().join("alias/.").display()
    ))
    .unwrap_err();
    assert!(
        err.contains("goes through a symbolic link") && err.contains("grant the real directory"),
        "{err}"
    );

    // A volume swapped for a link, one level down in a plugin's layout.
    let volume = "pvc-0b7c1a52-7f1e-4e8e-9d52-3f0b7c1a5200";
    std::fs::create_dir_all(real.join("fast")).unwrap();
    std::os::unix::fs::symlink("/", real.join("fast").join(volume)).unwrap();
    let yaml = format!("{{sources: [hostPath], paths: [{}]}}", real.display());
    // The policy loads; that grant alone is unusable, saying why.
    let unusable = resolve(&yaml).unwrap().unusable_paths;
    let why = &unusable[&real];
    assert!(
        why.contains(&format!("fast/{volume} is a symbolic link (to /)")),
        "{why}"
    );
    std::fs::remove_file(real.join("fast").join(volume)).unwrap();
    // Links inside a volume are its pods' business.
    std::fs::create_dir(real.join("fast").join(volume)).unwrap();
    std::os::unix::fs::symlink("/", real.join("fast").join(volume).join("root")).unwrap();
    assert!(resolve(&yaml).unwrap().unusable_paths.is_empty());
    // In a pool, volumes have any name: a pod's ordinary link inside one
    // (`current -> releases/2`) is its own business too.
    std::fs::create_dir_all(real.join("disk1/releases/2")).unwrap();
    std::os::unix::fs::symlink("releases/2", real.join("disk1/current")).unwrap();
    let pool = format!(
        "{{sources: [hostPath], paths: [{}], requireVolumeName: false}}",
        real.display()
    );
    assert!(resolve(&pool).unwrap().unusable_paths.is_empty());
    std::os::unix::fs::symlink("/", real.join("disk2")).unwrap();
    assert!(resolve(&pool).unwrap().unusable_paths[&real].contains("disk2 is a symbolic link"));
}

#[test]
fn volume_names_are_recognised_inside_longer_names() {
    assert!(names_a_volume("pvc-0b7c1a52-7f1e-4e8e-9d52-3f0b7c1a5200"));
    assert!(names_a_volume(
        "default-data-pvc-0b7c1a52-7f1e-4e8e-9d52-3f0b7c1a5200"
    ));
    assert!(!names_a_volume("pvc-0b7c1a52"));
    assert!(!names_a_volume("fast"));
    assert!(!names_a_volume("pvc-0b7c1a52x7f1e-4e8e-9d52-3f0b7c1a5200"));
}

#[test]
fn reserved_domains_include_their_subdomains_only() {
    assert_eq!(reserved_domain("pv.kubernetes.io/x"), Some("kubernetes.io"));
    assert_eq!(reserved_domain("K8S.IO/x"), Some("k8s.io"));
    assert_eq!(reserved_domain("notkubernetes.io/x"), None);
    assert_eq!(reserved_domain("example.com/kubernetes.io"), None);
}
