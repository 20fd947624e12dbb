//! The figures of the filesystem a directory is on, as `df` shows them to
//! an unprivileged user: the host runs as one, so space the filesystem
//! keeps for root (ext4's reserved blocks) is not counted.

use std::path::Path;

/// A filesystem's size and free space, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disk {
    /// Which filesystem (`st_dev` of the directory measured).
    pub device: u64,
    /// What an unprivileged user could fill on an empty filesystem.
    pub size: u64,
    /// What an unprivileged user can still write now.
    pub free: u64,
}

/// Measures the filesystem holding `directory`.
pub fn measure(directory: &Path) -> std::io::Result<Disk> {
    let stat = rustix::fs::stat(directory)?;
    let vfs = rustix::fs::statvfs(directory)?;
    let block = vfs.f_frsize.max(1);
    // Blocks only root may use: free in all, less free for others.
    let root_only = vfs.f_bfree.saturating_sub(vfs.f_bavail);
    Ok(Disk {
        device: stat.st_dev,
        size: vfs.f_blocks.saturating_sub(root_only).saturating_mul(block),
        free: vfs.f_bavail.saturating_mul(block),
    })
}

/// The device of the filesystem `path` is on, if it can be seen.
pub fn device_of(path: &Path) -> Option<u64> {
    rustix::fs::stat(path).ok().map(|s| s.st_dev)
}

/// What the files under `path` take on its filesystem (`du -sx`): links
/// are not followed, other filesystems not entered, and what the host may
/// not read is not counted (so a volume may hold more than this says).
pub fn usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let device = top.dev();
    let mut bytes = top.blocks().saturating_mul(512);
    let mut directories = vec![path.to_owned()];
    while let Some(dir) = directories.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.dev() != device {
                continue;
            }
            bytes = bytes.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                directories.push(entry.path());
            }
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_measured_as_df_shows_it() {
        let dir = tempfile::tempdir().unwrap();
        let disk = measure(dir.path()).unwrap();
        assert!(disk.size > 0 && disk.free <= disk.size, "{disk:?}");
        assert_eq!(device_of(dir.path()), Some(disk.device));
        let error = measure(&dir.path().join("missing")).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn usage_counts_what_files_take_like_du() {
        let dir = tempfile::tempdir().unwrap();
        let empty = usage(dir.path());
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/data"), vec![1u8; 1 << 20]).unwrap();
        // A link to something big is not followed.
        std::os::unix::fs::symlink("/usr", dir.path().join("link")).unwrap();
        let used = usage(dir.path()) - empty;
        assert!((1 << 20..(1 << 20) + (64 << 10)).contains(&used), "{used}");
        assert_eq!(usage(&dir.path().join("missing")), 0);
    }
}
