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
//!       csiDrivers:                          # a name, or a name with limits
//!         - name: disk.csi.example.com
//!           volumeHandlePrefixes: [pool-a/]  # default: any handle naming the volume
//!           volumeAttributes: ["fsType=*", "pool=fast"]  # default: none
//!       uncheckedSources: [iscsi]            # kinds whose location cannot be checked
//!       secretNamespaces: [storage-secrets]  # where secret references may point
//!       mountOptions: [hard, "nfsvers=*"]    # exact options, or `key=*` for any value
//!       labelPrefixes: [example.com/]
//!       annotationPrefixes: [example.com/]
//!       maxCapacity: 64Ti                    # default 1Ei
//!       requireVolumeName: true              # false only for pools of existing storage
//!       anyNodeAffinity: false               # true: may pin volumes of Immediate classes
//! ```
//!
//! A granted directory must exist and be its own canonical path (no link in
//! it or its parents): checked when the policy loads (a mistake there is the
//! operator's, and refuses the policy) and again at every check. A granted
//! directory holding a link where volumes live is found when the policy
//! loads too, but that is the state of the node (a pod's link in a pool
//! volume, say), not a mistake in the file: that grant alone is marked
//! unusable ([`OutputPolicy::unusable_paths`]) and refuses new volumes,
//! while the policy and every other grant keep working. Every located kind
//! (`hostPath`, `local`, `nfs`, `csi`) has its location checked; any other
//! kind says nothing the host could check, so it is granted only under
//! `uncheckedSources`, never under `sources`.
//!
//! The checks themselves run on each returned volume, in
//! [`wasm_provisioner`](crate::wasm_provisioner); this module holds the
//! grants and refuses a policy that could not mean what it says.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod paths;

pub use paths::{check_grant, names_a_volume, normalize, volume_named};
use paths::{scan_for_links, LINK_SCAN_DEPTH};

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

/// The source kinds whose location the host checks; every other kind is
/// granted only under `uncheckedSources`.
pub const LOCATED_KINDS: &[&str] = &["hostPath", "local", "nfs", "csi"];

/// Source fields that name a file on the node as credentials: no policy can
/// grant them, as the plugin would choose which node file a pod's mount
/// reads.
pub const NODE_FILE_FIELDS: &[(&str, &str)] = &[("cephfs", "secretFile"), ("rbd", "keyring")];

/// CSI volume attributes under this prefix are set by Kubernetes itself
/// (pod information, ephemeral volumes, service account tokens).
pub const CSI_RESERVED_ATTRIBUTE_PREFIX: &str = "csi.storage.k8s.io/";

/// The largest volume a plugin may return unless its policy says otherwise:
/// far above any real volume, and far below the 16 EiB where sizes wrap.
pub const DEFAULT_MAX_CAPACITY: u64 = 1 << 60;

/// What a CSI driver grant allows beyond the driver's name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CsiGrant {
    /// A volume handle must start with one of these (any, when empty).
    pub volume_handle_prefixes: Vec<String>,
    /// `volumeAttributes` entries: `key=value` exactly, or `key=*`.
    pub volume_attributes: Vec<String>,
}

/// An NFS server and the exported path prefix a plugin may hand out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfsExport {
    /// Host name (lowercase) or IP address, as written in the volume.
    pub server: String,
    pub path: PathBuf,
}

/// What one plugin may return. The default grants nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPolicy {
    /// Volume source kinds (`hostPath`, `nfs`, `csi`, …), including those
    /// granted under `uncheckedSources`.
    pub sources: BTreeSet<String>,
    /// Canonical absolute directories that `hostPath` and `local` paths must
    /// be below.
    pub paths: Vec<PathBuf>,
    /// Granted directories found holding a link where volumes live when the
    /// policy loaded, with what was found: no new volume is made in them
    /// until the link is gone and the policy is loaded again.
    pub unusable_paths: BTreeMap<PathBuf, String>,
    pub nfs_exports: Vec<NfsExport>,
    /// Granted CSI drivers by name.
    pub csi_drivers: BTreeMap<String, CsiGrant>,
    /// Namespaces that secret references in a source may name.
    pub secret_namespaces: BTreeSet<String>,
    /// Mount options: exact, or `key=*` for `key=<any value>`.
    pub mount_options: Vec<String>,
    pub label_prefixes: Vec<String>,
    pub annotation_prefixes: Vec<String>,
    /// Class parameters given to `provision` but never written on the
    /// volume (the plugin entry's `secretParameters`), so that whoever may
    /// read PersistentVolumes cannot read them; `delete` and `resize` do not
    /// get them.
    pub secret_parameters: BTreeSet<String>,
    /// Class parameters written on each volume (the plugin entry's
    /// `recordParameters`; `*`: all but the secrets). None by default, as in
    /// the Go library: `delete` and `resize` get the rest from the volume's
    /// StorageClass while it exists.
    pub record_parameters: BTreeSet<String>,
    /// The largest capacity the plugin may return, on provision and resize.
    pub max_capacity_bytes: u64,
    /// A volume's location (its directory, NFS path or CSI handle) must name
    /// the volume (`pvc-<uid>`), so one claim is never handed another's
    /// storage. Off only for plugins handing out existing storage (pools).
    pub require_volume_name: bool,
    /// The plugin may pin a volume to nodes of its choice when neither the
    /// scheduler (a selected node) nor the class (`allowedTopologies`)
    /// says where it may be: a plugin that knows where its storage is.
    pub any_node_affinity: bool,
    /// The granted paths are one filesystem that every node mounts at the
    /// same place (NFS, CephFS): a `hostPath` there is the same storage
    /// from any node, so a central host may make it on a cluster of several
    /// nodes.
    pub shared_filesystem: bool,
    /// Claims may choose the mode and owner of their volume's directory
    /// (the `wasmprov.io/mode`, `wasmprov.io/uid` and `wasmprov.io/gid`
    /// annotations), over their class's parameters of the same names.
    pub claim_access: bool,
}

impl OutputPolicy {
    /// Whether the plugin may return storage on one node's filesystem
    /// (`hostPath`, `local`, unless the grants are a filesystem every node
    /// shares): made on the node its host runs on.
    pub fn makes_node_local_volumes(&self) -> bool {
        PATH_KINDS.iter().any(|k| self.sources.contains(*k)) && !self.shared_filesystem
    }

    /// Whether the class parameter `key` is written on the volumes made.
    pub fn records(&self, key: &str) -> bool {
        !self.secret_parameters.contains(key)
            && (self.record_parameters.contains("*") || self.record_parameters.contains(key))
    }
}

impl Default for OutputPolicy {
    fn default() -> Self {
        Self {
            sources: BTreeSet::new(),
            paths: Vec::new(),
            unusable_paths: BTreeMap::new(),
            nfs_exports: Vec::new(),
            csi_drivers: BTreeMap::new(),
            secret_namespaces: BTreeSet::new(),
            mount_options: Vec::new(),
            label_prefixes: Vec::new(),
            annotation_prefixes: Vec::new(),
            secret_parameters: BTreeSet::new(),
            record_parameters: BTreeSet::new(),
            max_capacity_bytes: DEFAULT_MAX_CAPACITY,
            require_volume_name: true,
            any_node_affinity: false,
            shared_filesystem: false,
            claim_access: false,
        }
    }
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
    /// Each a name, or a [`CsiDriverLimits`] mapping: read in `resolve`, so
    /// a mistake in one is reported with its field.
    #[serde(default)]
    csi_drivers: Vec<serde_yaml::Value>,
    #[serde(default)]
    unchecked_sources: Vec<String>,
    #[serde(default)]
    secret_namespaces: Vec<String>,
    #[serde(default)]
    mount_options: Vec<String>,
    #[serde(default)]
    label_prefixes: Vec<String>,
    #[serde(default)]
    annotation_prefixes: Vec<String>,
    max_capacity: Option<String>,
    require_volume_name: Option<bool>,
    #[serde(default)]
    any_node_affinity: bool,
    #[serde(default)]
    shared_filesystem: bool,
    #[serde(default)]
    claim_access: bool,
}

impl OutputSpec {
    /// A plugin served by node hosts (`runsOn: node`) makes storage on its
    /// node's filesystem only: `hostPath`/`local` volumes, in granted node
    /// directories. Checked on every host, whichever side it serves, so
    /// both refuse the same file.
    pub(super) fn check_node_local(&self, field: &str) -> Result<(), FieldError> {
        let runs_on = format!("{field}.runsOn");
        if let Some((i, kind)) = self
            .sources
            .iter()
            .chain(&self.unchecked_sources)
            .enumerate()
            .find(|(_, k)| !PATH_KINDS.contains(&k.as_str()))
        {
            let list = if i < self.sources.len() {
                "sources"
            } else {
                "uncheckedSources"
            };
            let i = if i < self.sources.len() {
                i
            } else {
                i - self.sources.len()
            };
            return Err((
                format!("{field}.output.{list}[{i}]"),
                format!(
                    "{kind} is not node-local storage, and {runs_on} is node: a node host makes \
                     only hostPath and local volumes, on its own node; serve this plugin centrally \
                     (remove runsOn) or grant only hostPath/local"
                ),
            ));
        }
        if self.shared_filesystem {
            return Err((
                format!("{field}.output.sharedFilesystem"),
                format!(
                    "{runs_on} is node, but the granted paths are a filesystem every node shares: \
                     a central host serves such a plugin; remove one of the two"
                ),
            ));
        }
        if self.sources.is_empty() || self.paths.is_empty() {
            return Err((
                format!("{field}.output.paths"),
                format!(
                    "{runs_on} is node, but the plugin is granted no node directory: list the \
                     node's directory its volumes live in under {field}.output.paths (and \
                     hostPath or local under {field}.output.sources), or serve it centrally"
                ),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CsiDriverLimits {
    name: String,
    #[serde(default)]
    volume_handle_prefixes: Vec<String>,
    #[serde(default)]
    volume_attributes: Vec<String>,
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
            if !LOCATED_KINDS.contains(&kind.as_str()) {
                return Err((
                    at("sources", i),
                    format!(
                        "wasmprov cannot check where a {kind} volume points, so sources grants only {}; if the plugin may hand out any {kind} volume, list it under {field}.uncheckedSources instead",
                        LOCATED_KINDS.join(", ")
                    ),
                ));
            }
            policy.sources.insert(kind);
        }
        for (i, kind) in self.unchecked_sources.into_iter().enumerate() {
            if LOCATED_KINDS.contains(&kind.as_str()) {
                return Err((
                    at("uncheckedSources", i),
                    format!("{kind} volumes have their location checked: grant it under {field}.sources"),
                ));
            }
            if !SOURCE_KINDS.contains(&kind.as_str()) {
                return Err((
                    at("uncheckedSources", i),
                    format!(
                        "{kind:?} is not a volume source kind; kinds are spelt as in a PersistentVolume spec: {}",
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
            check_grant(&normal).map_err(|e| (at("paths", i), e))?;
            policy.paths.push(normal);
        }
        for (i, export) in self.nfs_exports.iter().enumerate() {
            policy
                .nfs_exports
                .push(parse_export(export).map_err(|e| (at("nfsExports", i), e))?);
        }
        for (i, entry) in self.csi_drivers.into_iter().enumerate() {
            let (name, grant) = csi_driver(entry).map_err(|e| (at("csiDrivers", i), e))?;
            policy.csi_drivers.insert(name, grant);
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
            if let Err(e) = one_option(&option) {
                return Err((
                    at("mountOptions", i),
                    format!("{e}, e.g. hard or nfsvers=*"),
                ));
            }
            policy.mount_options.push(option);
        }
        if let Some(max) = self.max_capacity {
            let bytes = crate::quantity::parse_bytes(&max)
                .map_err(|e| (format!("{field}.maxCapacity"), e.to_string()))?;
            if bytes == 0 || bytes > DEFAULT_MAX_CAPACITY {
                return Err((
                    format!("{field}.maxCapacity"),
                    format!("{max} must be above 0 and at most 1Ei"),
                ));
            }
            policy.max_capacity_bytes = bytes;
        }
        policy.require_volume_name = self.require_volume_name.unwrap_or(true);
        policy.any_node_affinity = self.any_node_affinity;
        policy.shared_filesystem = self.shared_filesystem;
        policy.claim_access = self.claim_access;
        // In a pool, volumes have no recognisable name: each entry of the
        // grant may be one, so only the entries themselves are looked at.
        let depth = if policy.require_volume_name {
            LINK_SCAN_DEPTH
        } else {
            1
        };
        for grant in &policy.paths {
            if let Err(found) = scan_for_links(grant, depth) {
                policy.unusable_paths.insert(grant.clone(), found);
            }
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
/// A `csiDrivers` entry: the driver's name alone, or a mapping with limits.
fn csi_driver(entry: serde_yaml::Value) -> Result<(String, CsiGrant), String> {
    let (name, limits) = match entry {
        serde_yaml::Value::String(name) => (name, None),
        other => {
            let limits: CsiDriverLimits = serde_yaml::from_value(other).map_err(|e| {
                format!("{e}; an entry is a driver name, or {{name, volumeHandlePrefixes, volumeAttributes}}")
            })?;
            (limits.name.clone(), Some(limits))
        }
    };
    {
        if !is_dns_subdomain(&name) {
            return Err(format!(
                "{name:?} is not a CSI driver name (a DNS subdomain such as disk.csi.example.com)"
            ));
        }
        let mut grant = CsiGrant::default();
        if let Some(l) = limits {
            for prefix in l.volume_handle_prefixes {
                if prefix.is_empty() || prefix.chars().any(char::is_control) {
                    return Err(format!(
                        "volumeHandlePrefixes: {prefix:?} must be a non-empty prefix without control characters; omit the list to allow any handle"
                    ));
                }
                grant.volume_handle_prefixes.push(prefix);
            }
            for attribute in l.volume_attributes {
                let Some((key, _)) = attribute.split_once('=').filter(|(k, _)| !k.is_empty())
                else {
                    return Err(format!(
                        "volumeAttributes: {attribute:?} must be key=value, or key=* for any value"
                    ));
                };
                if key.starts_with(CSI_RESERVED_ATTRIBUTE_PREFIX) {
                    return Err(format!(
                        "volumeAttributes: {key:?} is under {CSI_RESERVED_ATTRIBUTE_PREFIX}, which Kubernetes sets itself; no plugin may set it"
                    ));
                }
                grant.volume_attributes.push(attribute);
            }
        }
        Ok((name, grant))
    }
}

/// Why `option` is not exactly one mount option: a comma, whitespace or
/// control character would let one "option" carry others past a `key=*`
/// grant (`nfsvers=4.1,exec,suid`).
pub fn one_option(option: &str) -> Result<(), String> {
    if option.is_empty() {
        return Err("an empty mount option".into());
    }
    if let Some(c) = option
        .chars()
        .find(|c| *c == ',' || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "{:?} is not one mount option: it holds {c:?} (a mount option has no commas, spaces or control characters)",
            crate::text::escape_control(option)
        ));
    }
    Ok(())
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
mod tests;
