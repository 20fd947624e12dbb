//! A returned volume checked against what the operator lets its plugin
//! return ([`OutputPolicy`]): the source kind and where it points, secret
//! references, mount options, label and annotation keys.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::policy::output::{normalize, reserved_domain};
use crate::policy::OutputPolicy;
use crate::runtime::bindings::types as wit;

/// Every reason `policy` refuses `volume`, each with the grant that would
/// allow it. `source` is the volume's source, already parsed and known to
/// name exactly one kind.
pub fn check(policy: &OutputPolicy, volume: &wit::Volume, source: &Value) -> Vec<String> {
    let mut refusals = Vec::new();
    let Some((kind, fields)) = source.as_object().and_then(|o| o.iter().next()) else {
        // The volume was validated first; refuse rather than wave through.
        refusals.push("its source names no volume type".to_owned());
        return refusals;
    };
    if !policy.sources.contains(kind) {
        refusals.push(format!(
            "it returned a {kind} source, and the policy grants {} (grant: output.sources: [{kind}])",
            listed(policy.sources.iter())
        ));
    } else {
        match kind.as_str() {
            "hostPath" | "local" => {
                let path = fields["path"].as_str().unwrap_or_default();
                if let Err(e) = check_path(path, &policy.paths) {
                    refusals.push(format!("{kind}.path {e}"));
                }
            }
            "nfs" => {
                let server = fields["server"].as_str().unwrap_or_default();
                let path = fields["path"].as_str().unwrap_or_default();
                if let Err(e) = check_export(server, path, policy) {
                    refusals.push(e);
                }
            }
            "csi" => {
                let driver = fields["driver"].as_str().unwrap_or_default();
                if !policy.csi_drivers.contains(driver) {
                    refusals.push(format!(
                        "csi.driver {driver:?} is not one of the granted drivers ({}) (grant: output.csiDrivers)",
                        listed(policy.csi_drivers.iter())
                    ));
                }
            }
            _ => {}
        }
    }
    let mut secrets = Vec::new();
    secret_references(kind, fields, &mut kind.clone(), &mut secrets);
    for (at, namespace) in secrets {
        match namespace {
            Some(ns) if policy.secret_namespaces.contains(&ns) => {}
            Some(ns) => refusals.push(format!(
                "{at} refers to a Secret in namespace {ns:?}, and the policy lets secret references name {} (grant: output.secretNamespaces)",
                listed(policy.secret_namespaces.iter())
            )),
            None => refusals.push(format!(
                "{at} refers to a Secret without naming its namespace; a volume's secret reference must name a granted namespace"
            )),
        }
    }
    for option in &volume.mount_options {
        if !mount_option_granted(option, &policy.mount_options) {
            refusals.push(format!(
                "mount option {option:?} is not granted ({}) (grant: output.mountOptions)",
                listed(policy.mount_options.iter())
            ));
        }
    }
    for (what, pairs, prefixes, grant) in [
        (
            "label",
            &volume.labels,
            &policy.label_prefixes,
            "labelPrefixes",
        ),
        (
            "annotation",
            &volume.annotations,
            &policy.annotation_prefixes,
            "annotationPrefixes",
        ),
    ] {
        for (key, _) in pairs {
            if let Some(domain) = reserved_domain(key) {
                refusals.push(format!(
                    "{what} {key:?} is under {domain}, which belongs to Kubernetes or to wasmprov; no plugin may set it"
                ));
            } else if !prefixes.iter().any(|p| key.starts_with(p.as_str())) {
                refusals.push(format!(
                    "{what} {key:?} is not under a granted prefix ({}) (grant: output.{grant})",
                    listed(prefixes.iter())
                ));
            }
        }
    }
    refusals
}

/// `path` is absolute, has no `..`, is in one of `grants`, and goes through
/// no symbolic link below the grant that the host can see. A link is refused
/// even if it points back inside: the plugin may change it after the check.
fn check_path(path: &str, grants: &[PathBuf]) -> Result<(), String> {
    let normal = normalize(path)?;
    let Some(grant) = grants.iter().find(|g| normal.starts_with(g)) else {
        return Err(format!(
            "{path:?} is not in a granted directory ({}) (grant: output.paths)",
            listed(grants.iter().map(|g| g.display()))
        ));
    };
    let mut at = grant.clone();
    for component in normal.strip_prefix(grant).unwrap_or(Path::new("")) {
        at.push(component);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!(
                    "{path:?} goes through the symbolic link {}; a volume path may not, as a link can lead out of {}",
                    at.display(),
                    grant.display()
                ))
            }
            Ok(_) => {}
            // Not there (yet): nothing below it can be a link either.
            Err(_) => break,
        }
    }
    Ok(())
}

fn check_export(server: &str, path: &str, policy: &OutputPolicy) -> Result<(), String> {
    let normal = normalize(path).map_err(|e| format!("nfs.path {e}"))?;
    let server = server.to_ascii_lowercase();
    let granted = policy
        .nfs_exports
        .iter()
        .any(|e| e.server == server && normal.starts_with(&e.path));
    if granted {
        return Ok(());
    }
    Err(format!(
        "nfs {server}:{path} is not in a granted export ({}) (grant: output.nfsExports)",
        listed(
            policy
                .nfs_exports
                .iter()
                .map(|e| format!("{}:{}", e.server, e.path.display()))
        )
    ))
}

/// Collects `(where, namespace)` of every secret reference in a source:
/// fields named `secretRef` or `…SecretRef`, and azureFile's `secretName`.
fn secret_references(
    key: &str,
    value: &Value,
    at: &mut String,
    out: &mut Vec<(String, Option<String>)>,
) {
    let Value::Object(fields) = value else {
        return;
    };
    if key == "secretRef" || key.ends_with("SecretRef") {
        let ns = fields.get("namespace").and_then(Value::as_str);
        out.push((at.clone(), ns.filter(|n| !n.is_empty()).map(str::to_owned)));
        return;
    }
    if fields.contains_key("secretName") && key == "azureFile" {
        let ns = fields.get("secretNamespace").and_then(Value::as_str);
        out.push((
            format!("{at}.secretName"),
            // Kubernetes reads azureFile's secret from "default" when unset.
            Some(ns.filter(|n| !n.is_empty()).unwrap_or("default").to_owned()),
        ));
    }
    for (k, v) in fields {
        let len = at.len();
        at.push('.');
        at.push_str(k);
        secret_references(k, v, at, out);
        at.truncate(len);
    }
}

fn mount_option_granted(option: &str, grants: &[String]) -> bool {
    grants.iter().any(|g| match g.strip_suffix('*') {
        Some(key) if key.ends_with('=') => option.starts_with(key),
        _ => g == option,
    })
}

fn listed<T: std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    let all: Vec<String> = items.map(|i| i.to_string()).collect();
    if all.is_empty() {
        "none".to_owned()
    } else {
        all.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::output::NfsExport;

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
        check(policy, &v, &s)
    }

    #[test]
    fn paths_stay_in_their_grant() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path().display().to_string();
        let policy = hostpath_policy(root.path());
        for ok in [format!("{r}/pvc-1"), format!("{r}//a/./b"), r.clone()] {
            assert!(
                refusals(&policy, serde_json::json!({"hostPath": {"path": ok}})).is_empty(),
                "{ok}"
            );
        }
        for (bad, why) in [
            ("/".to_owned(), "not in a granted directory"),
            ("/etc".to_owned(), "not in a granted directory"),
            (format!("{r}/../etc"), "contains \"..\""),
            (format!("{r}-evil/x"), "not in a granted directory"),
            ("relative".to_owned(), "not an absolute path"),
        ] {
            let got = refusals(&policy, serde_json::json!({"hostPath": {"path": bad}}));
            assert!(got.len() == 1 && got[0].contains(why), "{bad}: {got:?}");
        }
    }

    #[test]
    fn a_path_through_a_link_is_refused_even_inside_the_grant() {
        let root = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/", root.path().join("escape")).unwrap();
        std::fs::create_dir(root.path().join("real")).unwrap();
        std::os::unix::fs::symlink("real", root.path().join("inside")).unwrap();
        let policy = hostpath_policy(root.path());
        for through in ["escape/etc", "inside/x"] {
            let path = root.path().join(through).display().to_string();
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
    fn nfs_csi_and_secrets_need_their_grants() {
        let policy = OutputPolicy {
            sources: ["nfs".to_owned(), "csi".to_owned()].into(),
            nfs_exports: vec![NfsExport {
                server: "10.0.0.5".into(),
                path: "/exports".into(),
            }],
            csi_drivers: ["disk.example.com".to_owned()].into(),
            secret_namespaces: ["storage".to_owned()].into(),
            ..OutputPolicy::default()
        };
        let ok = [
            serde_json::json!({"nfs": {"server": "10.0.0.5", "path": "/exports/a"}}),
            serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "h",
                "nodePublishSecretRef": {"name": "s", "namespace": "storage"}}}),
        ];
        for source in ok {
            assert!(refusals(&policy, source.clone()).is_empty(), "{source}");
        }
        let bad = [
            (
                serde_json::json!({"nfs": {"server": "10.0.0.6", "path": "/exports/a"}}),
                "not in a granted export",
            ),
            (
                serde_json::json!({"nfs": {"server": "10.0.0.5", "path": "/etc"}}),
                "not in a granted export",
            ),
            (
                serde_json::json!({"csi": {"driver": "other.example.com", "volumeHandle": "h"}}),
                "not one of the granted drivers",
            ),
            (
                serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "h",
                    "nodePublishSecretRef": {"name": "admin", "namespace": "kube-system"}}}),
                "csi.nodePublishSecretRef refers to a Secret in namespace \"kube-system\"",
            ),
            (
                serde_json::json!({"csi": {"driver": "disk.example.com", "volumeHandle": "h",
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
    fn mount_options_labels_and_annotations_need_grants() {
        let root = tempfile::tempdir().unwrap();
        let mut policy = hostpath_policy(root.path());
        policy.mount_options = vec!["hard".into(), "nfsvers=*".into()];
        policy.label_prefixes = vec!["example.com/".into()];
        policy.annotation_prefixes = vec!["kubernetes.io.example.com/".into()];
        let (mut v, s) = volume(
            serde_json::json!({"hostPath": {"path": root.path().join("a").display().to_string()}}),
        );
        v.mount_options = vec!["hard".into(), "nfsvers=4.1".into()];
        v.labels = vec![("example.com/team".into(), "a".into())];
        v.annotations = vec![("kubernetes.io.example.com/x".into(), "a".into())];
        assert!(check(&policy, &v, &s).is_empty());

        v.mount_options = vec!["exec".into(), "suid,dev".into(), "nfsvers".into()];
        v.labels = vec![("team".into(), "a".into())];
        v.annotations = vec![
            ("pv.kubernetes.io/bound-by-controller".into(), "yes".into()),
            ("example.com/x".into(), "a".into()),
        ];
        let got = check(&policy, &v, &s);
        assert_eq!(got.len(), 6, "{got:#?}");
        assert!(got[0].contains("\"exec\"") && got[1].contains("\"suid,dev\""));
        assert!(got[3].contains("label \"team\""));
        assert!(got[4].contains("belongs to Kubernetes"));
    }
}
