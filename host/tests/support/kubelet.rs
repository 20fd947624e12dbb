//! kubelet's ConfigMap volume layout, for the reload tests and benchmark.

use std::os::unix::fs::symlink;
use std::path::Path;

use tempfile::TempDir;

/// A directory laid out as kubelet mounts a ConfigMap: the files
/// are symlinks into `..data`, which points at a timestamped directory and
/// is swapped by a rename on every update.
pub struct KubeletVolume {
    dir: TempDir,
    generation: u32,
}

impl KubeletVolume {
    pub fn new(files: &[(&str, &[u8])]) -> Self {
        let mut volume = Self {
            dir: TempDir::new().unwrap(),
            generation: 0,
        };
        volume.update(files);
        volume
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// What kubelet's AtomicWriter does: write a new timestamped directory,
    /// point `..data` at it by rename, fix the user-visible symlinks, then
    /// remove the old directory. Returns when the new files became visible
    /// (the rename).
    pub fn update(&mut self, files: &[(&str, &[u8])]) -> std::time::Instant {
        let root = self.dir.path();
        let old = std::fs::read_link(root.join("..data")).ok();
        self.generation += 1;
        let new = format!("..2026_12_02_15_00_00.{:04}", self.generation);
        std::fs::create_dir(root.join(&new)).unwrap();
        for (name, bytes) in files {
            std::fs::write(root.join(&new).join(name), bytes).unwrap();
        }
        symlink(&new, root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        let visible = std::time::Instant::now();
        for entry in std::fs::read_dir(root).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if !name.starts_with("..") && !files.iter().any(|(f, _)| *f == name) {
                std::fs::remove_file(root.join(&name)).unwrap();
            }
        }
        for (name, _) in files {
            let link = root.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(Path::new("..data").join(name), link).unwrap();
            }
        }
        if let Some(old) = old {
            std::fs::remove_dir_all(root.join(old)).unwrap();
        }
        visible
    }
}
