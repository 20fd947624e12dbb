//! A directory of plugin files, kept in step with the registry.
//!
//! Files are compared by what `stat` says (size, mtime, inode), following
//! symlinks: kubelet updates a mounted ConfigMap by pointing `..data` at a
//! new directory, so every file behind a symlink gets a new inode at once.
//! A file that changes while it is read is left for the next pass, so a
//! half-written file is never loaded.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::encoding::{self, Encoding};
use super::package;
use crate::registry::{Origin, PluginRegistry, Reload};

/// How long a plugin must be missing from the directory before it is removed.
pub const REMOVAL_GRACE: Duration = Duration::from_secs(1);

/// What `stat` says of a file; any change means new content may be there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    len: u64,
    mtime_ns: i128,
    ino: u64,
    dev: u64,
}

impl Fingerprint {
    fn of(path: &Path) -> std::io::Result<Self> {
        let m = std::fs::metadata(path)?;
        Ok(Self {
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ino: m.ino(),
            dev: m.dev(),
        })
    }
}

/// The plugins directory and what was last seen in it.
#[derive(Debug)]
pub struct PluginDir {
    dir: PathBuf,
    seen: HashMap<String, (PathBuf, Fingerprint)>,
    /// Plugins with several files, as last reported.
    ambiguous: HashMap<String, String>,
    /// Files already reported as not plugins although they look like one.
    hinted: HashSet<String>,
    /// Plugins missing from the directory, since when.
    missing: HashMap<String, Instant>,
}

/// The outcome of one [`PluginDir::sync`].
#[derive(Debug, Default)]
pub struct Synced {
    /// Each plugin file read in this pass, with what the registry made of it.
    pub applied: Vec<(String, Reload)>,
    pub removed: Vec<String>,
    /// A file changed while being read: sync again shortly.
    pub unsettled: bool,
    /// A plugin is missing but not yet removed: sync again after this long.
    pub recheck_in: Option<Duration>,
}

impl PluginDir {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            seen: HashMap::new(),
            ambiguous: HashMap::new(),
            hinted: HashSet::new(),
            missing: HashMap::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Where users should put plugins, for error messages.
    pub fn describe(&self) -> String {
        format!(
            "<name>.wasm, <name>.wasm.gz or <name>.wasm.zst files in {}",
            self.dir.display()
        )
    }

    /// This directory as a plugin source ([`Origin::source`]).
    fn source(&self) -> String {
        format!("directory {}", self.dir.display())
    }

    /// Reads every file again on the next sync (e.g. after a policy change,
    /// when a version rejected before may now load).
    pub fn forget(&mut self) {
        self.seen.clear();
    }

    /// Brings the registry in line with the directory: new and changed files
    /// are loaded, files gone for [`REMOVAL_GRACE`] are removed. An
    /// unreadable directory changes nothing (a mount being replaced must not
    /// unload every plugin).
    pub async fn sync(&mut self, registry: &PluginRegistry) -> std::io::Result<Synced> {
        let files = self.list()?;
        let mut synced = Synced::default();
        for (name, found) in &files {
            let (path, encoding) = match found.as_slice() {
                [one] => one,
                several => {
                    let paths: Vec<String> = several
                        .iter()
                        .map(|(p, _)| p.display().to_string())
                        .collect();
                    let reason = format!(
                        "plugin {name}: several files for one plugin: {}; keep one (none of them is loaded until then)",
                        paths.join(", ")
                    );
                    // Reported once per set of files, not on every pass.
                    let state: Vec<_> = several
                        .iter()
                        .map(|(p, _)| Fingerprint::of(p).ok())
                        .collect();
                    let key = format!("{reason}{state:?}");
                    if self.ambiguous.get(name) != Some(&key) {
                        registry.reject(name, &reason);
                        self.ambiguous.insert(name.clone(), key);
                    }
                    continue;
                }
            };
            self.ambiguous.remove(name);
            let Ok(before) = Fingerprint::of(path) else {
                synced.unsettled = true; // vanished between listing and reading
                continue;
            };
            if self.seen.get(name) == Some(&(path.clone(), before)) {
                continue;
            }
            let bytes = match tokio::fs::read(path).await {
                Ok(bytes) => bytes,
                Err(e) => {
                    tracing::warn!(plugin = %name, file = %path.display(), "cannot read plugin file, will retry: {e}");
                    synced.unsettled = true;
                    continue;
                }
            };
            if Fingerprint::of(path).ok() != Some(before) || bytes.len() as u64 != before.len {
                synced.unsettled = true;
                continue;
            }
            self.seen.insert(name.clone(), (path.clone(), before));
            let origin = Origin::new(self.source(), path.display().to_string());
            let encoding = *encoding;
            let outcome =
                match tokio::task::spawn_blocking(move || encoding::decode(encoding, bytes))
                    .await
                    .expect("decode task panicked")
                {
                    Ok(wasm) => registry.apply(name, wasm, &origin).await,
                    Err(e) => {
                        let reason = format!("plugin {name}: {origin}: {e}");
                        registry.reject(name, &reason);
                        Reload::Rejected { reason }
                    }
                };
            synced.applied.push((name.clone(), outcome));
        }
        let gone: Vec<String> = self
            .seen
            .keys()
            .filter(|name| !files.contains_key(*name))
            .cloned()
            .collect();
        // A plugin is removed only once it has been missing for
        // REMOVAL_GRACE: kubelet swaps `..data` first and fixes the visible
        // symlinks after, so a renamed file (x.wasm → x.wasm.zst) is briefly
        // in neither place, and removing a plugin stops its provisioning.
        let now = Instant::now();
        let mut missing = HashMap::new();
        for name in gone {
            let since = self.missing.get(&name).copied().unwrap_or(now);
            let left = REMOVAL_GRACE.saturating_sub(now - since);
            if !left.is_zero() {
                synced.recheck_in = Some(synced.recheck_in.map_or(left, |r| r.min(left)));
                missing.insert(name, since);
                continue;
            }
            let (path, _) = self.seen.remove(&name).expect("listed above");
            let origin = Origin::new(self.source(), path.display().to_string());
            if registry.remove(&name, &origin).await {
                synced.removed.push(name);
            }
        }
        self.missing = missing;
        Ok(synced)
    }

    /// Says once why a file that looks meant as a plugin is not loaded.
    fn hint(&mut self, file_name: &str) {
        let why = if file_name == package::MANIFEST_KEY {
            "a chunked plugin's manifest: parts are only assembled by the API source (--plugin-configmaps); a mounted directory needs one <name>.wasm.zst file"
        } else if !file_name.starts_with('.')
            && [".wasm", ".wasm.gz", ".wasm.zst"]
                .iter()
                .any(|ext| file_name.ends_with(ext))
        {
            "not a valid plugin name: use lowercase letters, digits, '-' and '_' (at most 63), e.g. my-backend.wasm"
        } else {
            return;
        };
        if self.hinted.insert(file_name.to_owned()) {
            tracing::warn!(dir = %self.dir.display(), file = file_name, "ignoring {why}");
        }
    }

    /// Plugin files by plugin name (several if a name is ambiguous).
    fn list(&mut self) -> std::io::Result<BTreeMap<String, Vec<(PathBuf, Encoding)>>> {
        let mut files: BTreeMap<String, Vec<(PathBuf, Encoding)>> = BTreeMap::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let file_name = entry.file_name();
            let Some((name, encoding)) = file_name.to_str().and_then(encoding::plugin_file) else {
                self.hint(&file_name.to_string_lossy());
                continue;
            };
            let path = entry.path();
            // Symlinks are followed (kubelet's layout); directories are not plugins.
            if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                continue;
            }
            files
                .entry(name.to_owned())
                .or_default()
                .push((path, encoding));
        }
        Ok(files)
    }
}
