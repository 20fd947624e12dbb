//! What a plugin may return: the `output` part of a plugin's policy entry.
//!
//! A plugin's answer becomes a PersistentVolume that user pods mount, so the
//! operator decides which kinds of storage each plugin may hand out, and
//! where. Nothing is granted by default: a plugin without an `output` entry
//! can return no volume at all.
//!
//! ```yaml
//! plugins:
//!   hostpath:
//!     output:
//!       sources: [hostPath]                  # volume source kinds, as in a PV spec
//!       paths: [/var/lib/wasmprov/hostpath]  # hostPath and local paths stay under these
//!       nfsExports: ["10.0.0.5:/exports"]    # nfs server and the path prefix it may use
//!       csiDrivers: [disk.csi.example.com]
//!       secretNamespaces: [storage-secrets]  # where secret references may point
//!       mountOptions: [hard, "nfsvers=*"]    # exact options, or `key=*` for any value
//!       labelPrefixes: [example.com/]
//!       annotationPrefixes: [example.com/]
//! ```
//!
//! The checks themselves run on each returned volume, in
//! [`wasm_provisioner`](crate::wasm_provisioner); this module holds the
//! grants and refuses a policy that could not mean what it says.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

/// The volume source kinds of a PersistentVolumeSpec, in their JSON spelling.
pub const SOURCE_KINDS: &[&str] = &[
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "csi",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "glusterfs",
    "hostPath",
    "iscsi",
    "local",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
];

/// Label and annotation domains that belong to Kubernetes or to the host: no
/// policy can grant keys under them (or their subdomains).
pub const RESERVED_DOMAINS: &[&str] = &["kubernetes.io", "k8s.io", "wasmprov.io"];

/// The source kinds whose location the policy must also grant.
const PATH_KINDS: &[&str] = &["hostPath", "local"];

/// An NFS server and the exported path prefix a plugin may hand out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfsExport {
    /// Host name (lowercase) or IP address, as written in the volume.
    pub server: String,
    pub path: PathBuf,
}

/// What one plugin may return. The default grants nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputPolicy {
    /// Volume source kinds (`hostPath`, `nfs`, `csi`, …).
    pub sources: BTreeSet<String>,
    /// Normalised absolute directories that `hostPath` and `local` paths must
    /// be in (or equal).
    pub paths: Vec<PathBuf>,
    pub nfs_exports: Vec<NfsExport>,
    pub csi_drivers: BTreeSet<String>,
    /// Namespaces that secret references in a source may name.
    pub secret_namespaces: BTreeSet<String>,
    /// Mount options: exact, or `key=*` for `key=<any value>`.
    pub mount_options: Vec<String>,
    pub label_prefixes: Vec<String>,
    pub annotation_prefixes: Vec<String>,
    /// Class parameters given to `provision` but never written on the
    /// volume (the plugin entry's `secretParameters`), so that whoever may
    /// read PersistentVolumes cannot read them; `delete` does not get them.
    pub secret_parameters: BTreeSet<String>,
}

/// The `output` entry as written in the policy file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct OutputSpec {
    #[serde(default)]
    sources: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    nfs_exports: Vec<String>,
    #[serde(default)]
    csi_drivers: Vec<String>,
    #[serde(default)]
    secret_namespaces: Vec<String>,
    #[serde(default)]
    mount_options: Vec<String>,
    #[serde(default)]
    label_prefixes: Vec<String>,
    #[serde(default)]
    annotation_prefixes: Vec<String>,
}

type FieldError = (String, String);

impl OutputSpec {
    /// Validates the grants; `field` is where the entry is (`plugins.x.output`).
    pub(super) fn resolve(self, field: &str) -> Result<OutputPolicy, FieldError> {
        let at = |sub: &str, i: usize| format!("{field}.{sub}[{i}]");
        let mut policy = OutputPolicy::default();
        for (i, kind) in self.sources.into_iter().enumerate() {
            if !SOURCE_KINDS.contains(&kind.as_str()) {
                let hint = SOURCE_KINDS
                    .iter()
                    .find(|k| k.eq_ignore_ascii_case(&kind))
                    .map(|k| format!("did you mean {k}? "))
                    .unwrap_or_default();
                return Err((
                    at("sources", i),
                    format!(
                        "{kind:?} is not a volume source kind; {hint}kinds are spelt as in a PersistentVolume spec: {}",
                        SOURCE_KINDS.join(", ")
                    ),
                ));
            }
            policy.sources.insert(kind);
        }
        for (i, path) in self.paths.iter().enumerate() {
            let normal = normalize(path).map_err(|e| (at("paths", i), e))?;
            if normal == Path::new("/") {
                return Err((
                    at("paths", i),
                    "\"/\" would let the plugin hand out any directory of the node; name the directory it manages".into(),
                ));
            }
            policy.paths.push(normal);
        }
        for (i, export) in self.nfs_exports.iter().enumerate() {
            policy
                .nfs_exports
                .push(parse_export(export).map_err(|e| (at("nfsExports", i), e))?);
        }
        for (i, driver) in self.csi_drivers.into_iter().enumerate() {
            if !is_dns_subdomain(&driver) {
                return Err((
                    at("csiDrivers", i),
                    format!("{driver:?} is not a CSI driver name (a DNS subdomain such as disk.csi.example.com)"),
                ));
            }
            policy.csi_drivers.insert(driver);
        }
        for (i, ns) in self.secret_namespaces.into_iter().enumerate() {
            if ns.is_empty() || ns.len() > 63 || !is_dns_label(&ns) {
                return Err((
                    at("secretNamespaces", i),
                    format!("{ns:?} is not a namespace name"),
                ));
            }
            policy.secret_namespaces.insert(ns);
        }
        for (i, option) in self.mount_options.into_iter().enumerate() {
            if option.is_empty() || option.contains(',') || option.chars().any(char::is_whitespace)
            {
                return Err((
                    at("mountOptions", i),
                    format!("{option:?} must be one mount option (no commas or spaces), e.g. hard or nfsvers=*"),
                ));
            }
            policy.mount_options.push(option);
        }
        for (sub, prefixes, out) in [
            (
                "labelPrefixes",
                self.label_prefixes,
                &mut policy.label_prefixes,
            ),
            (
                "annotationPrefixes",
                self.annotation_prefixes,
                &mut policy.annotation_prefixes,
            ),
        ] {
            for (i, prefix) in prefixes.into_iter().enumerate() {
                if prefix.is_empty() {
                    return Err((
                        at(sub, i),
                        "an empty prefix would grant every key; name a domain such as example.com/"
                            .into(),
                    ));
                }
                if let Some(domain) = reserved_domain(&prefix) {
                    return Err((
                        at(sub, i),
                        format!("{prefix:?} is under {domain}, which belongs to Kubernetes or to wasmprov and cannot be granted to a plugin"),
                    ));
                }
                out.push(prefix);
            }
        }
        // Each grant of a location needs its kind, and each kind with a
        // location needs one: a grant that cannot take effect is a mistake.
        let kinds = &policy.sources;
        let needs = [
            ("paths", PATH_KINDS, !policy.paths.is_empty()),
            ("nfsExports", &["nfs"][..], !policy.nfs_exports.is_empty()),
            ("csiDrivers", &["csi"][..], !policy.csi_drivers.is_empty()),
        ];
        for (sub, for_kinds, granted) in needs {
            let listed: Vec<&str> = for_kinds
                .iter()
                .copied()
                .filter(|k| kinds.contains(*k))
                .collect();
            if granted && listed.is_empty() {
                return Err((
                    format!("{field}.{sub}"),
                    format!(
                        "applies to {} sources, which {field}.sources does not grant; add the kind or remove {sub}",
                        for_kinds.join(" and ")
                    ),
                ));
            }
            if !granted {
                if let Some(kind) = listed.first() {
                    return Err((
                        format!("{field}.{sub}"),
                        format!("{field}.sources grants {kind}, so {sub} must say which ones the plugin may use"),
                    ));
                }
            }
        }
        Ok(policy)
    }
}

/// `/a/./b//c` → `/a/b/c`; a relative path or one with `..` is refused, not
/// resolved, because what `..` means depends on links the host cannot see.
pub fn normalize(path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(format!("{path:?} is not an absolute path"));
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => return Err(format!("{path:?} contains \"..\"")),
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Ok(out)
}

/// `server:/path`, the way `mount` writes an NFS export (`[v6]:/path` too).
fn parse_export(export: &str) -> Result<NfsExport, String> {
    let bad = || {
        format!(
            "{export:?} is not server:/path, e.g. \"10.0.0.5:/exports\" or \"[fd00::5]:/exports\""
        )
    };
    let split = if export.starts_with('[') {
        export.find("]:").map(|i| (&export[..=i], &export[i + 2..]))
    } else {
        export.split_once(':')
    };
    let (server, path) = split.ok_or_else(bad)?;
    if server.is_empty() || server.contains('/') {
        return Err(bad());
    }
    let path = normalize(path).map_err(|e| format!("{export:?}: the path {e}"))?;
    Ok(NfsExport {
        server: server.to_ascii_lowercase(),
        path,
    })
}

/// The reserved domain a key or key prefix is under, if any: `kubernetes.io`
/// for `pv.kubernetes.io/x`, `k8s.io` for `k8s.io/`.
pub fn reserved_domain(key: &str) -> Option<&'static str> {
    let domain = key.split_once('/').map_or(key, |(d, _)| d);
    let domain = domain.to_ascii_lowercase();
    RESERVED_DOMAINS
        .iter()
        .copied()
        .find(|r| domain == *r || domain.ends_with(&format!(".{r}")))
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(yaml: &str) -> Result<OutputPolicy, String> {
        let spec: OutputSpec = serde_yaml::from_str(yaml).map_err(|e| e.to_string())?;
        spec.resolve("plugins.p.output")
            .map_err(|(f, m)| format!("{f}: {m}"))
    }

    #[test]
    fn grants_are_normalised() {
        let p = resolve(
            "{sources: [hostPath, nfs], paths: [/var/lib//x/./y/], nfsExports: ['NFS.example:/exports/', '[fd00::5]:/e']}",
        )
        .unwrap();
        assert_eq!(p.paths, vec![PathBuf::from("/var/lib/x/y")]);
        assert_eq!(p.nfs_exports[0].server, "nfs.example");
        assert_eq!(p.nfs_exports[0].path, PathBuf::from("/exports"));
        assert_eq!(p.nfs_exports[1].server, "[fd00::5]");
    }

    #[test]
    fn a_grant_that_could_not_mean_what_it_says_is_refused() {
        for (yaml, want) in [
            ("{sources: [hostpath]}", "did you mean hostPath?"),
            ("{sources: [hostPath]}", "paths must say which ones"),
            (
                "{sources: [local], paths: [/]}",
                "any directory of the node",
            ),
            ("{sources: [local], paths: [/a/../etc]}", "contains \"..\""),
            ("{sources: [local], paths: [data]}", "not an absolute path"),
            ("{paths: [/data]}", "does not grant"),
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
            ("{secretNamespaces: [Kube_System]}", "namespace name"),
            ("{mountOptions: ['exec,suid']}", "one mount option"),
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
    fn reserved_domains_include_their_subdomains_only() {
        assert_eq!(reserved_domain("pv.kubernetes.io/x"), Some("kubernetes.io"));
        assert_eq!(reserved_domain("K8S.IO/x"), Some("k8s.io"));
        assert_eq!(reserved_domain("notkubernetes.io/x"), None);
        assert_eq!(reserved_domain("example.com/kubernetes.io"), None);
    }
}
