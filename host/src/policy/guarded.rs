//! Which plugins' filesystem is guarded: [`SandboxPolicy::guard_volumes`].
//!
//! A volume path is checked once, when the plugin returns it. A plugin that
//! can create a link, or move a directory a pod wrote, where a volume path
//! leads can swap the checked directory for a link to `/` on any later call
//! (even the host's own clean-up `delete`), and the volume then mounts the
//! node's root. So links and moves are refused (`runtime::fs_guard`) in
//! every preopen of a plugin when any of its preopens
//! overlaps (is equal to, inside, or above) a path in any plugin's
//! `output.paths`; and, since a guarded plugin could still move a link in
//! from a directory it shares with another plugin, also when one of its
//! preopens overlaps a preopen of a guarded plugin (repeated until nothing
//! changes). Paths are compared both as
//! written (made normal: no `.`, `..` or repeated `/`) and with symbolic
//! links resolved, and overlap in either counts.
//!
//! [`SandboxPolicy::guard_volumes`]: super::SandboxPolicy::guard_volumes

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// The names of the guarded plugins, given each plugin's preopened host
/// directories and granted output paths.
pub(super) fn plugins<'a>(
    all: impl IntoIterator<Item = (&'a str, Vec<&'a Path>, Vec<&'a Path>)>,
) -> BTreeSet<String> {
    let mut preopens: BTreeMap<&str, Vec<PathBuf>> = BTreeMap::new();
    let mut granted: Vec<PathBuf> = Vec::new();
    for (name, dirs, paths) in all {
        preopens.insert(name, dirs.into_iter().flat_map(forms).collect());
        granted.extend(paths.into_iter().flat_map(forms));
    }
    let mut denied: BTreeSet<&str> = preopens
        .iter()
        .filter(|(_, dirs)| any_overlap(dirs, &granted))
        .map(|(name, _)| *name)
        .collect();
    loop {
        let reached: Vec<&str> = preopens
            .iter()
            .filter(|(name, dirs)| {
                !denied.contains(*name) && denied.iter().any(|d| any_overlap(dirs, &preopens[d]))
            })
            .map(|(name, _)| *name)
            .collect();
        if reached.is_empty() {
            return denied.into_iter().map(str::to_owned).collect();
        }
        denied.extend(reached);
    }
}

fn any_overlap(a: &[PathBuf], b: &[PathBuf]) -> bool {
    a.iter()
        .any(|x| b.iter().any(|y| x.starts_with(y) || y.starts_with(x)))
}

/// `path` made normal, and with its symbolic links resolved (as far as it
/// exists; the rest appended).
fn forms(path: &Path) -> Vec<PathBuf> {
    let normal = lexical(path);
    let mut forms = vec![normal.clone()];
    let mut existing = normal.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            forms.push(rest.iter().rev().fold(real, |p, c| p.join(c)));
            break;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => break,
        }
    }
    forms
}

/// Without `.`, `..` (above `/` stays `/`) and repeated separators.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(all: &[(&str, &[&Path], &[&Path])]) -> BTreeSet<String> {
        plugins(all.iter().map(|(n, d, p)| (*n, d.to_vec(), p.to_vec())))
    }

    #[test]
    fn links_are_refused_where_a_preopen_overlaps_a_granted_path() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let volumes = r.join("volumes");
        let inside = volumes.join("a");
        let other = r.join("other");
        let near = r.join("volumes2");
        for d in [&inside, &other, &near] {
            std::fs::create_dir_all(d).unwrap();
        }
        let grant: &[&Path] = &[&volumes];
        for (preopen, want_denied) in [
            (volumes.clone(), true),            // equal
            (inside.clone(), true),             // inside
            (r.to_owned(), true),               // above
            (other.clone(), false),             // beside
            (near.clone(), false),              // a longer name, not inside
            (r.join("other/../volumes"), true), // `..` written out
        ] {
            let got = denied(&[("p", &[preopen.as_path()], grant)]);
            assert_eq!(got.contains("p"), want_denied, "{}", preopen.display());
        }
        // Through a symbolic link to the granted directory.
        let alias = r.join("alias");
        std::os::unix::fs::symlink(&volumes, &alias).unwrap();
        assert!(denied(&[("p", &[alias.as_path()], grant)]).contains("p"));
        // A grant that does not exist yet, below a linked directory.
        let later = alias.join("later");
        assert!(denied(&[("p", &[volumes.as_path()], &[later.as_path()])]).contains("p"));
    }

    #[test]
    fn every_plugin_sharing_a_directory_with_the_volumes_or_a_refused_plugin_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let (volumes, shared, apart) = (r.join("v"), r.join("s"), r.join("x"));
        let (below_shared, t, below_t) = (shared.join("b"), r.join("t"), r.join("t/u"));
        for d in [&volumes, &below_shared, &apart, &below_t] {
            std::fs::create_dir_all(d).unwrap();
        }
        let got = denied(&[
            // Grants nothing itself, but its preopen holds maker's volumes.
            ("writer", &[&volumes, &shared], &[]),
            // Its volumes are elsewhere: it may make links where it writes.
            ("maker", &[&apart], &[&volumes]),
            // Shares a directory with writer: writer could move its links in.
            ("neighbour", &[&below_shared, &t], &[]),
            // Shares one with neighbour only.
            ("far", &[&below_t], &[]),
            ("alone", &[&apart], &[]),
        ]);
        assert_eq!(
            got,
            ["far", "neighbour", "writer"]
                .map(str::to_owned)
                .into_iter()
                .collect()
        );
    }

    #[test]
    fn the_policy_file_turns_links_on_only_apart_from_the_volumes() {
        let root = tempfile::tempdir().unwrap();
        let (volumes, scratch) = (root.path().join("volumes"), root.path().join("scratch"));
        for d in [&volumes, &scratch] {
            std::fs::create_dir(d).unwrap();
        }
        let (v, s) = (volumes.display(), scratch.display());
        let yaml = format!(
            "plugins:\n  \
               hostpath: {{preopens: [{{host: {v}, guest: /v, mode: read-write}}], output: {{sources: [hostPath], paths: ['{v}/./']}}}}\n  \
               builder: {{preopens: [{{host: {s}, guest: /s, mode: read-write}}], output: {{sources: [hostPath], paths: [{v}]}}}}\n  \
               nothing: {{timeout: 1s}}\n"
        );
        let set = super::super::PolicySet::parse(&yaml, Path::new("policy.yaml")).unwrap();
        assert!(set.sandbox_for("hostpath").guard_volumes);
        assert!(!set.sandbox_for("builder").guard_volumes);
        // No preopens: nothing to link in; the default stays on.
        assert!(set.sandbox_for("unknown").guard_volumes);
    }
}
