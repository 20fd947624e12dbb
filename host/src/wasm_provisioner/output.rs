//! A returned volume checked against what the operator lets its plugin
//! return ([`OutputPolicy`]): the source kind and where it points, that the
//! location is this claim's own, secret references, node files, mount
//! options, node affinity, size, label and annotation keys.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use k8s_openapi::api::core::v1::Node;
use serde_json::Value;

use crate::policy::output::{
    check_grant, names_a_volume, normalize, one_option, reserved_domain, CsiGrant,
    CSI_RESERVED_ATTRIBUTE_PREFIX, NODE_FILE_FIELDS,
};
use crate::policy::OutputPolicy;
use crate::provisioner::ProvisionOptions;
use crate::quantity::Bytes;
use crate::runtime::bindings::types as wit;
use crate::text::escape_control;

/// The node label the scheduler's hostname topology uses; a node without it
/// is taken to carry its own name there, as kubelets label it.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Every reason `policy` refuses `volume`, made for the request `opts`, each
/// with the grant that would allow it. `source` is the volume's source,
/// already parsed and known to name exactly one kind.
pub fn check(
    policy: &OutputPolicy,
    opts: &ProvisionOptions,
    volume: &wit::Volume,
    source: &Value,
) -> Vec<String> {
    let mut refusals = Vec::new();
    let Some((kind, fields)) = source.as_object().and_then(|o| o.iter().next()) else {
        // The volume was validated first; refuse rather than wave through.
        refusals.push("its source names no volume type".to_owned());
        return refusals;
    };
    let owner = Owner {
        volume_name: &opts.pv_name,
        required: policy.require_volume_name,
    };
    if !policy.sources.contains(kind) {
        refusals.push(format!(
            "it returned a {kind} source, and the policy grants {} (grant: output.sources: [{kind}])",
            listed(policy.sources.iter())
        ));
    } else {
        let location = match kind.as_str() {
            "hostPath" | "local" => {
                let path = fields["path"].as_str().unwrap_or_default();
                shown_as_is(path)
                    .and_then(|()| check_path(path, policy, &owner))
                    .map_err(|e| format!("{kind}.path {e}"))
            }
            "nfs" => {
                let server = fields["server"].as_str().unwrap_or_default();
                let path = fields["path"].as_str().unwrap_or_default();
                shown_as_is(server)
                    .map_err(|e| format!("nfs.server {e}"))
                    .and_then(|()| shown_as_is(path).map_err(|e| format!("nfs.path {e}")))
                    .and_then(|()| check_export(server, path, policy, &owner))
            }
            "csi" => check_csi(fields, policy, &owner),
            // Granted under uncheckedSources: nothing the host can check.
            _ => Ok(()),
        };
        if let Err(e) = location {
            refusals.push(e);
        }
    }
    for (source_kind, field) in NODE_FILE_FIELDS {
        if kind == source_kind && fields.get(*field).is_some_and(|v| !v.is_null()) {
            refusals.push(format!(
                "{kind}.{field} names a file on the node as credentials; no plugin may choose which node file a pod's mount reads: use a secretRef"
            ));
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
        if let Err(e) = one_option(option) {
            refusals.push(format!("mount option {e}"));
        } else if !pair_granted(option, &policy.mount_options) {
            refusals.push(format!(
                "mount option {option:?} is not granted ({}) (grant: output.mountOptions)",
                listed(policy.mount_options.iter())
            ));
        }
    }
    if let Some(affinity) = &volume.node_affinity {
        if let Err(e) = check_node_affinity(affinity, opts, policy.any_node_affinity) {
            refusals.push(e);
        }
    }
    if volume.capacity_bytes > policy.max_capacity_bytes {
        refusals.push(too_large(volume.capacity_bytes, policy.max_capacity_bytes));
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

/// A location holds no control or invisible character: `nfs.path` ending
/// in `\n,exec` or a directory name with an escape sequence reads as
/// something else in `kubectl`, logs and mount tables.
fn shown_as_is(value: &str) -> Result<(), String> {
    match value.chars().find(|c| crate::text::needs_escape(*c)) {
        Some(c) => Err(format!(
            "\"{}\" holds the character U+{:04X}, which shows as something else or nothing; a location may hold none",
            escape_control(value),
            c as u32
        )),
        None => Ok(()),
    }
}

/// Why a capacity is refused: above the plugin's `maxCapacity`.
pub fn too_large(bytes: u64, max: u64) -> String {
    format!(
        "a capacity of {} ({bytes} bytes) is above the largest volume the policy lets this plugin make, {} (grant: output.maxCapacity)",
        Bytes(bytes),
        Bytes(max)
    )
}

/// The volume a location must belong to.
struct Owner<'a> {
    volume_name: &'a str,
    /// The policy's `requireVolumeName`.
    required: bool,
}

impl Owner<'_> {
    /// A location below its grant (`relative`) is this volume's own: not
    /// the grant itself, not inside another volume's directory (whose pods
    /// could swap what is below it), and, unless the policy says the plugin
    /// hands out existing storage, named for this volume in its last part.
    fn check_relative(&self, relative: &Path, grant: &str) -> Result<(), String> {
        let parts: Vec<&str> = relative.iter().filter_map(|c| c.to_str()).collect();
        let Some((last, parents)) = parts.split_last() else {
            return Err(format!(
                "is {grant} itself; a volume must be a directory of its own below it, named for the volume (e.g. {grant}/{})",
                self.volume_name
            ));
        };
        if let Some(inside) = parents.iter().find(|p| names_a_volume(p)) {
            return Err(format!(
                "is inside {inside:?}, another volume's directory; a volume may not be inside another, whose pods could change what is below it"
            ));
        }
        if self.required && !last.contains(self.volume_name) {
            return Err(format!(
                "does not name the volume {} in its last part {last:?}, so it could be another claim's storage; name each volume's directory for the volume (e.g. {grant}/{}), or set output.requireVolumeName: false for a plugin that hands out existing storage",
                self.volume_name, self.volume_name
            ));
        }
        Ok(())
    }
}

/// `path` is absolute, has no `..`, is below one of `grants` (each still
/// its own canonical path), exists, is this volume's own (see [`Owner`]),
/// and goes through no symbolic link below the grant. A link is refused
/// even if it points back inside: it could be changed after the check. A
/// part that does not exist is refused too: what the host cannot see, it
/// cannot check.
fn check_path(path: &str, policy: &OutputPolicy, owner: &Owner<'_>) -> Result<(), String> {
    let grants = &policy.paths;
    let shown = escape_control(path);
    let normal = normalize(path)?;
    // The most specific grant: nested grants check against the inner one.
    let Some(grant) = grants
        .iter()
        .filter(|g| normal.starts_with(g))
        .max_by_key(|g| g.as_os_str().len())
    else {
        return Err(format!(
            "{shown:?} is not in a granted directory ({}) (grant: output.paths)",
            listed(grants.iter().map(|g| g.display()))
        ));
    };
    check_grant(grant).map_err(|e| format!("{shown:?}: the granted directory {e}"))?;
    if let Some(found) = policy.unusable_paths.get(grant) {
        return Err(format!(
            "{shown:?}: no new volume is made in the granted directory {} until someone looks: {found}",
            grant.display()
        ));
    }
    let relative = normal.strip_prefix(grant).unwrap_or(Path::new(""));
    let mut at = grant.clone();
    let mut parts = relative.iter().peekable();
    while let Some(component) = parts.next() {
        at.push(component);
        let last = parts.peek().is_none();
        let meta = std::fs::symlink_metadata(&at).map_err(|e| {
            format!(
                "{shown:?}: {} cannot be checked ({e}); the plugin must create the volume's directory before returning it",
                at.display()
            )
        })?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            return Err(format!(
                "{shown:?} goes through the symbolic link {}; a volume path may not, as a link can lead out of {}",
                at.display(),
                grant.display()
            ));
        }
        if !last && !kind.is_dir() {
            return Err(format!("{shown:?}: {} is not a directory", at.display()));
        }
        // A device node, FIFO or socket is something a pod made: the kubelet
        // would mount a device as a filesystem or hand it to a Block claim.
        if last && !kind.is_dir() && !kind.is_file() {
            return Err(format!(
                "{shown:?} is a {}, not a directory or a regular file; such files are made by pods, and a volume may not be one",
                crate::runtime::file_kind_name(kind)
            ));
        }
        // A second name for a file can be a node file's (a hard link).
        if last && !kind.is_dir() && meta.nlink() > 1 {
            return Err(format!(
                "{shown:?} is a file with {} names (hard links), so it may be a file of the node's; a volume file must have one name",
                meta.nlink()
            ));
        }
    }
    owner
        .check_relative(relative, &grant.display().to_string())
        .map_err(|e| format!("{shown:?} {e}"))
}

fn check_export(
    server: &str,
    path: &str,
    policy: &OutputPolicy,
    owner: &Owner<'_>,
) -> Result<(), String> {
    let normal = normalize(path).map_err(|e| format!("nfs.path {e}"))?;
    let server = server.to_ascii_lowercase();
    let export = policy
        .nfs_exports
        .iter()
        .filter(|e| e.server == server && normal.starts_with(&e.path))
        .max_by_key(|e| e.path.as_os_str().len());
    let Some(export) = export else {
        return Err(format!(
            "nfs {}:{} is not in a granted export ({}) (grant: output.nfsExports)",
            escape_control(&server),
            escape_control(path),
            listed(
                policy
                    .nfs_exports
                    .iter()
                    .map(|e| format!("{}:{}", e.server, e.path.display()))
            )
        ));
    };
    let relative = normal.strip_prefix(&export.path).unwrap_or(Path::new(""));
    let root = format!("{}:{}", export.server, export.path.display());
    owner
        .check_relative(relative, &root)
        .map_err(|e| format!("nfs.path {:?} {e}", escape_control(path)))
}

fn check_csi(fields: &Value, policy: &OutputPolicy, owner: &Owner<'_>) -> Result<(), String> {
    let driver = fields["driver"].as_str().unwrap_or_default();
    let Some(grant) = policy.csi_drivers.get(driver) else {
        return Err(format!(
            "csi.driver {:?} is not one of the granted drivers ({}) (grant: output.csiDrivers)",
            escape_control(driver),
            listed(policy.csi_drivers.keys())
        ));
    };
    let handle = fields["volumeHandle"].as_str().unwrap_or_default();
    check_handle(handle, driver, grant, owner)?;
    let attributes: BTreeMap<String, String> = fields
        .get("volumeAttributes")
        .cloned()
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| format!("csi.volumeAttributes is not a map of strings: {e}"))?
        .unwrap_or_default();
    for (key, value) in attributes {
        if key.starts_with(CSI_RESERVED_ATTRIBUTE_PREFIX) {
            return Err(format!(
                "csi.volumeAttributes key {key:?} is under {CSI_RESERVED_ATTRIBUTE_PREFIX}, which Kubernetes sets itself; no plugin may set it"
            ));
        }
        let pair = format!("{key}={value}");
        // csi-driver-nfs mounts `server:share/subdir`: a value granted by
        // `key=*` may be anything but a climb out of where the driver puts it.
        let climbs = value.split(['/', '\\']).any(|part| part == "..");
        if climbs && !grant.volume_attributes.contains(&pair) {
            return Err(format!(
                "csi.volumeAttributes {:?} climbs with \"..\"; a key=* grant takes any value but that (grant the exact key=value if it is meant)",
                escape_control(&pair)
            ));
        }
        if pair.chars().any(char::is_control) || !pair_granted(&pair, &grant.volume_attributes) {
            return Err(format!(
                "csi.volumeAttributes {:?} is not granted for driver {driver} ({}) (grant: output.csiDrivers[].volumeAttributes, key=value or key=*)",
                escape_control(&pair),
                listed(grant.volume_attributes.iter())
            ));
        }
    }
    Ok(())
}

fn check_handle(
    handle: &str,
    driver: &str,
    grant: &CsiGrant,
    owner: &Owner<'_>,
) -> Result<(), String> {
    let shown = escape_control(handle);
    if handle.chars().any(char::is_control) {
        return Err(format!(
            "csi.volumeHandle {shown:?} holds control characters"
        ));
    }
    if !grant.volume_handle_prefixes.is_empty()
        && !grant
            .volume_handle_prefixes
            .iter()
            .any(|p| handle.starts_with(p.as_str()))
    {
        return Err(format!(
            "csi.volumeHandle {shown:?} does not start with a granted prefix for driver {driver} ({}) (grant: output.csiDrivers[].volumeHandlePrefixes)",
            listed(grant.volume_handle_prefixes.iter())
        ));
    }
    if owner.required && !handle.contains(owner.volume_name) {
        return Err(format!(
            "csi.volumeHandle {shown:?} does not name the volume {}, so it could be another claim's storage; have the plugin name each volume's handle for it, or set output.requireVolumeName: false (with volumeHandlePrefixes) for a plugin that hands out existing storage",
            owner.volume_name
        ));
    }
    Ok(())
}

/// The volume's node affinity may only keep it on nodes the request allows:
/// the node the scheduler selected (every term must select it), or, with
/// no selected node, the class's allowed topologies (every term must stay
/// within one of them). With neither, only a plugin granted
/// `anyNodeAffinity` may choose: otherwise it would choose which nodes the
/// claim's pods run on.
fn check_node_affinity(
    affinity: &wit::NodeAffinity,
    opts: &ProvisionOptions,
    any_granted: bool,
) -> Result<(), String> {
    if let Some(node) = &opts.selected_node {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let labels = node_labels(node);
        for (i, term) in affinity.terms.iter().enumerate() {
            if !term.match_expressions.iter().all(|r| selects(r, &labels)) {
                return Err(format!(
                    "node-affinity term {i} does not select node {name}, which the scheduler picked for the claim; a plugin may not pin a volume to another node"
                ));
            }
        }
        return Ok(());
    }
    let allowed = opts.class.allowed_topologies.as_deref().unwrap_or_default();
    if allowed.is_empty() {
        if any_granted || affinity.terms.is_empty() {
            return Ok(());
        }
        return Err(
            "it pins the volume to nodes, and neither the scheduler (no selected node) nor the class (no allowedTopologies) says where it may be, so the plugin would choose where the claim's pods run; use volumeBindingMode: WaitForFirstConsumer, list allowedTopologies on the class, or, for a plugin that knows where its storage is, grant output.anyNodeAffinity: true".to_owned(),
        );
    }
    for (i, term) in affinity.terms.iter().enumerate() {
        let within = allowed.iter().any(|topology| {
            topology
                .match_label_expressions
                .iter()
                .flatten()
                .all(|allowed| {
                    term.match_expressions.iter().any(|r| {
                        r.key == allowed.key
                            && r.operator == wit::NodeSelectorOperator::In
                            && r.values.iter().all(|v| allowed.values.contains(v))
                    })
                })
        });
        if !within {
            return Err(format!(
                "node-affinity term {i} reaches nodes outside the class's allowedTopologies; each term must keep the volume within them (an In requirement on each of their keys, with allowed values)"
            ));
        }
    }
    Ok(())
}

fn node_labels(node: &Node) -> BTreeMap<String, String> {
    let mut labels = node.metadata.labels.clone().unwrap_or_default();
    if let Some(name) = &node.metadata.name {
        labels
            .entry(HOSTNAME_LABEL.to_owned())
            .or_insert_with(|| name.clone());
    }
    labels
}

/// Whether a node with `labels` meets one requirement, as the scheduler
/// reads it.
fn selects(r: &wit::NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    use wit::NodeSelectorOperator as Op;
    let value = labels.get(&r.key);
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator {
        Op::In => value.is_some_and(|v| r.values.contains(v)),
        Op::NotIn => value.is_none_or(|v| !r.values.contains(v)),
        Op::Exists => value.is_some(),
        Op::DoesNotExist => value.is_none(),
        Op::Gt | Op::Lt => {
            let (Some(have), Some(bound)) = (
                value.and_then(|v| number(v)),
                r.values.first().and_then(|v| number(v)),
            ) else {
                return false;
            };
            if r.operator == Op::Gt {
                have > bound
            } else {
                have < bound
            }
        }
    }
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

/// `option` is granted exactly, or by a `key=*` grant.
fn pair_granted(option: &str, grants: &[String]) -> bool {
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
        check(policy, &opts(), &v, &s)
    }

    fn host_path(path: impl AsRef<Path>) -> Value {
        serde_json::json!({"hostPath": {"path": path.as_ref().display().to_string()}})
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
        let iscsi = serde_json::json!({"iscsi": {"targetPortal": "10.0.0.9:3260", "iqn": "iqn.x", "lun": 0}});
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
        assert!(check(&policy, &opts(), &v, &s).is_empty());

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
        let got = check(&policy, &opts(), &v, &s);
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
            assert!(check(&policy, &request, &v, &s).is_empty(), "{ok:?}");
        }
        for bad in [
            pinned(HOSTNAME_LABEL, Op::In, &["node-b"]),
            pinned("topology.kubernetes.io/zone", Op::NotIn, &["z1"]),
            pinned("cores", Op::Lt, &["4"]),
        ] {
            v.node_affinity = Some(bad.clone());
            let got = check(&policy, &request, &v, &s);
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
        assert!(check(&policy, &request, &v, &s).is_empty());
        for bad in [
            pinned("topology.kubernetes.io/zone", Op::In, &["z3"]),
            pinned(HOSTNAME_LABEL, Op::In, &["anywhere"]),
        ] {
            v.node_affinity = Some(bad.clone());
            let got = check(&policy, &request, &v, &s);
            assert!(
                got.len() == 1 && got[0].contains("outside the class's allowedTopologies"),
                "{bad:?}: {got:?}"
            );
        }
    }
}
