//! Where a volume points: a path, an NFS export or a CSI handle that is
//! granted, and this volume's own.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::Value;

use super::{listed, pair_granted};
use crate::policy::output::{
    check_grant, names_a_volume, normalize, CsiGrant, CSI_RESERVED_ATTRIBUTE_PREFIX,
};
use crate::policy::{OutputPolicy, Preopen};
use crate::text::escape_control;

/// The volume a location must belong to.
pub(super) struct Owner<'a> {
    pub(super) volume_name: &'a str,
    /// The policy's `requireVolumeName`.
    pub(super) required: bool,
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
pub(super) fn check_path(
    path: &str,
    policy: &OutputPolicy,
    owner: &Owner<'_>,
) -> Result<(), String> {
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

pub(super) fn check_export(
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

pub(super) fn check_csi(
    fields: &Value,
    policy: &OutputPolicy,
    owner: &Owner<'_>,
) -> Result<(), String> {
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

/// Why a refused `path` is likely wrong where the plugin made it: it lies
/// outside every directory the plugin was given, so the plugin made its
/// directory elsewhere (or nowhere). The usual cause is a class and a
/// policy that disagree on where the plugin's directory is on the node.
pub(super) fn outside_preopens(path: &str, preopens: &[Preopen]) -> Option<String> {
    let normal = normalize(path).ok()?;
    if preopens.iter().any(|p| normal.starts_with(&p.host)) {
        return None;
    }
    if preopens.is_empty() {
        return Some(
            "the plugin was given no directory (no preopens in its policy entry), so it cannot have made or seen it: preopen the node directory it works in".to_owned(),
        );
    }
    Some(format!(
        "it is outside every directory the plugin was given ({}), so the plugin did not make it there: the node path it returns must be inside the `host` of the preopen it writes in (a class parameter naming the node directory, such as the hostpath plugin's hostRoot, must equal that preopen's host)",
        listed(preopens.iter().map(|p| format!("{} as {}", p.host.display(), p.guest)))
    ))
}
