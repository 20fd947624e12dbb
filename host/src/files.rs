//! Files written whole: a reader (a file watcher, a host restarting after a
//! crash) never sees half of one.

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file beside it and a rename.
pub fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
