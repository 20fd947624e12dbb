//! The directories a policy grants: written as the host compares them,
//! checked to exist with no link on the way, and scanned for links where
//! volumes live.

use std::path::{Component, Path, PathBuf};

/// How deep the scan of a granted directory for links goes, and how many
/// entries it looks at: the layouts plugins use are a level or two deep.
pub(super) const LINK_SCAN_DEPTH: usize = 4;
const LINK_SCAN_ENTRIES: usize = 100_000;

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
/// A granted directory exists and is its own canonical path: no link in it
/// or in any of its parents, which could be changed to lead elsewhere.
pub fn check_grant(grant: &Path) -> Result<(), String> {
    match std::fs::canonicalize(grant) {
        Ok(canonical) if canonical == grant => {}
        Ok(canonical) => {
            return Err(format!(
                "{} goes through a symbolic link (it is {}); grant the real directory, {}, so no link can redirect it",
                grant.display(),
                canonical.display(),
                canonical.display()
            ))
        }
        Err(e) => {
            return Err(format!(
                "{} cannot be checked ({e}); the granted directory must exist: create it, or fix the path",
                grant.display()
            ))
        }
    }
    if !grant.is_dir() {
        return Err(format!(
            "{} is not a directory; grant the directory the plugin's volumes are in",
            grant.display()
        ));
    }
    Ok(())
}

/// Whether a path component names a volume the host made: `pvc-` and a
/// UID (8-4-4-4-12 hexadecimal digits).
pub fn names_a_volume(component: &str) -> bool {
    volume_named(component).is_some()
}

/// The first volume name (`pvc-` and a UID) in a path component, if any.
pub fn volume_named(component: &str) -> Option<&str> {
    let bytes = component.as_bytes();
    (0..bytes.len()).find_map(|start| {
        let rest = bytes[start..].strip_prefix(b"pvc-")?;
        let uid = rest.get(..36)?;
        uid.iter()
            .enumerate()
            .all(|(i, b)| match i {
                8 | 13 | 18 | 23 => *b == b'-',
                _ => b.is_ascii_hexdigit(),
            })
            .then(|| &component[start..start + 4 + 36])
    })
}

/// Looks for symbolic links where volumes live in a granted directory: the
/// directories a plugin lays out, down to the volumes themselves (whose
/// contents belong to their pods and are not looked at). A link there is a
/// volume swapped for a link, or a mistake: either way nothing may be
/// handed out from this directory until someone looks.
pub(super) fn scan_for_links(grant: &Path, max_depth: usize) -> Result<(), String> {
    let mut todo = vec![(grant.to_owned(), 0)];
    let mut seen = 0usize;
    while let Some((dir, depth)) = todo.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            // A directory this host's user may neither read nor enter (an
            // ext4 disk's lost+found, owned by root, 0700): no path through
            // it resolves for the host or its plugins, so nothing in it can
            // be handed out.
            Err(e) if depth > 0 && !searchable(&dir) => {
                tracing::debug!(directory = %dir.display(), error = %e, "not looked into: this host cannot enter it");
                continue;
            }
            Err(e) => {
                return Err(format!(
                    "cannot read {} to check it for links: {e}",
                    dir.display()
                ))
            }
        };
        for entry in entries {
            let entry = entry
                .map_err(|e| format!("cannot read {} to check it for links: {e}", dir.display()))?;
            seen += 1;
            if seen > LINK_SCAN_ENTRIES {
                return Ok(());
            }
            let path = entry.path();
            let kind = entry
                .file_type()
                .map_err(|e| format!("cannot check {}: {e}", path.display()))?;
            if kind.is_symlink() {
                let target = std::fs::read_link(&path)
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|e| format!("unreadable: {e}"));
                return Err(format!(
                    "{} is a symbolic link (to {target}); no volume may be a link, as it can lead out of {}: find the PersistentVolume using it, remove the link, then reload the policy (or restart the host)",
                    path.display(),
                    grant.display()
                ));
            }
            let volume = entry.file_name().to_str().is_some_and(names_a_volume);
            if kind.is_dir() && !volume && depth + 1 < max_depth {
                todo.push((path, depth + 1));
            }
        }
    }
    Ok(())
}

/// Whether this process may resolve paths through `dir` (search
/// permission): looking up a name in it fails with "permission denied"
/// only if it may not.
fn searchable(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(".wasmprov-search-check")).map_or_else(
        |e| e.kind() != std::io::ErrorKind::PermissionDenied,
        |_| true,
    )
}
